// TextFile indexing and number parsing.

#include "text_rows.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace rayd::data::internal {

std::string_view TextFile::Record(int64_t i) const {
  std::string_view all = bytes->view();
  size_t begin = starts[static_cast<size_t>(i)], end = ends[static_cast<size_t>(i)];
  std::string_view r = all.substr(begin, end - begin);
  while (!r.empty() && (r.back() == '\n' || r.back() == '\r')) r.remove_suffix(1);
  return r;
}

TextFile IndexRecords(std::shared_ptr<const FileBytes> file, size_t from, bool quotes) {
  TextFile out;
  const std::string_view text = file->view();
  int64_t line = 1;
  for (size_t i = 0; i < from && i < text.size(); ++i) line += text[i] == '\n';
  size_t at = from;
  while (at < text.size()) {
    const size_t begin = at;
    const int64_t begin_line = line;
    bool in_quotes = false;
    while (at < text.size()) {
      const char c = text[at++];
      if (c == '\n') {
        ++line;
        if (!in_quotes) break;
      } else if (quotes && c == '"') {
        in_quotes = !in_quotes;
      }
    }
    std::string_view record = text.substr(begin, at - begin);
    // A CSV line of spaces is a row (Python's csv module reads [' ']); JSON ignores them.
    bool blank = true;
    for (char c : record) {
      blank = blank && (c == '\n' || c == '\r' || (!quotes && (c == ' ' || c == '\t')));
    }
    if (blank) continue;
    out.starts.push_back(begin);
    out.ends.push_back(at);
    out.lines.push_back(begin_line);
  }
  out.bytes = std::move(file);
  return out;
}

bool ParseInt(std::string_view text, int64_t* out) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

bool ParseDouble(std::string_view text, double* out) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) {
    *out = std::nan("");  // an empty field is a missing number
    return true;
  }
  if (text.front() == '+') text.remove_prefix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec == std::errc() && end == text.data() + text.size()) return true;
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "nan" || lower == "inf" || lower == "-inf" || lower == "infinity" ||
      lower == "-infinity") {
    *out = std::strtod(lower.c_str(), nullptr);
    return true;
  }
  return false;
}

}  // namespace rayd::data::internal
