// CSV (RFC 4180: quoted fields may hold the delimiter, doubled quotes and line breaks), as
// Python's csv module writes it. The first row names the columns (`header: false`: c0, c1,
// ...); every file must have the same header. A column's type comes from the first file's
// first 1000 rows: int64 when every value is an integer, float64 when every value is a number
// (an empty field is NaN), else bytes (UTF-8 text). Options: delimiter (","), header (true).
// A row with the wrong number of fields, or a value that is not of its column's type, is an
// error naming the file, the row and its line (or skipped and counted, with on_error: skip).

#include <cstring>
#include <optional>

#include "../files.h"
#include "text_rows.h"
#include "indexed_reader.h"

namespace rayd::data::internal::csv_format {

// The fields of one record; false when its quotes do not close.
bool SplitFields(std::string_view record, char delimiter, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool in_quotes = false, quoted = false;
  for (size_t i = 0; i < record.size(); ++i) {
    const char c = record[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < record.size() && record[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        field += c;
      }
    } else if (c == '"' && (field.empty() && !quoted)) {
      in_quotes = quoted = true;
    } else if (c == delimiter) {
      fields.push_back(std::move(field));
      field.clear();
      quoted = false;
    } else if (c != '\r' || i + 1 != record.size()) {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return !in_quotes;
}

class CsvReader : public IndexedReader {
 public:
  static Result<std::unique_ptr<Reader>> Open(const DatasetSpec& spec,
                                              const std::vector<std::string>& files);
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  // Where row `row` of `file` is, for messages.
  std::string Where(size_t file, int64_t row) const {
    return At(files_[file].bytes->path(), "row " + std::to_string(row + 1) + " (line " +
                                              std::to_string(files_[file].lines[row]) + ")");
  }

  char delimiter_ = ',';
  bool skip_ = false;
  std::vector<TextFile> files_;
};

Result<std::unique_ptr<Reader>> CsvReader::Open(const DatasetSpec& spec,
                                                const std::vector<std::string>& files) {
  auto reader = std::make_unique<CsvReader>();
  const nlohmann::json delimiter = spec.options.value("delimiter", nlohmann::json(","));
  if (!delimiter.is_string() || delimiter.get<std::string>().size() != 1) {
    return Status::InvalidArgument("delimiter: expected one character, got " + delimiter.dump());
  }
  reader->delimiter_ = delimiter.get<std::string>()[0];
  reader->skip_ = spec.skip_errors();
  const nlohmann::json header_option = spec.options.value("header", nlohmann::json(true));
  if (!header_option.is_boolean()) {
    return Status::InvalidArgument("header: expected true or false, got " + header_option.dump());
  }
  const bool header = header_option.get<bool>();
  std::vector<std::string> names, fields;
  std::string names_from;
  for (const std::string& path : files) {
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
    TextFile text = IndexRecords(bytes, 0, /*quotes=*/true);
    std::vector<std::string> these;
    if (header) {
      if (text.records() == 0) return Status::InvalidArgument(path + ": empty (no header row)");
      if (!SplitFields(text.Record(0), reader->delimiter_, these)) {
        return Status::InvalidArgument(At(path, "line 1") + "a quote that does not close");
      }
      text.starts.erase(text.starts.begin());
      text.ends.erase(text.ends.begin());
      text.lines.erase(text.lines.begin());
    } else if (text.records() > 0) {
      SplitFields(text.Record(0), reader->delimiter_, fields);
      for (size_t i = 0; i < fields.size(); ++i) these.push_back("c" + std::to_string(i));
    }
    if (names_from.empty()) {
      names = these;
      names_from = path;
    } else if (these != names) {
      auto join = [](const std::vector<std::string>& v) {
        std::string out;
        for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
        return out;
      };
      return Status::InvalidArgument(path + ": its columns (" + join(these) + ") differ from " +
                                     names_from + "'s (" + join(names) + ")");
    }
    reader->index_.Add(text.records());
    reader->files_.push_back(std::move(text));
  }
  // Types from the first rows.
  enum Kind { kInt, kFloat, kText };
  std::vector<Kind> kinds(names.size(), kInt);
  int64_t seen = 0;
  for (const TextFile& text : reader->files_) {
    for (int64_t r = 0; r < text.records() && seen < 1000; ++r, ++seen) {
      if (!SplitFields(text.Record(r), reader->delimiter_, fields) ||
          fields.size() != names.size()) {
        continue;  // reported when read
      }
      for (size_t c = 0; c < names.size(); ++c) {
        int64_t i;
        double d;
        if (kinds[c] == kInt && !ParseInt(fields[c], &i)) kinds[c] = kFloat;
        if (kinds[c] == kFloat && !ParseDouble(fields[c], &d)) kinds[c] = kText;
      }
    }
  }
  for (size_t c = 0; c < names.size(); ++c) {
    reader->schema_.push_back({names[c],
                               kinds[c] == kInt     ? DType::kInt64
                               : kinds[c] == kFloat ? DType::kFloat64
                                                    : DType::kBytes,
                               {}});
  }
  return std::unique_ptr<Reader>(std::move(reader));
}

Result<Block> CsvReader::Read(std::span<const int64_t> rows) {
  const size_t width = schema_.size();
  std::vector<std::vector<int64_t>> ints(width);
  std::vector<std::vector<double>> floats(width);
  std::vector<std::vector<std::string>> texts(width);
  std::vector<std::string> fields;
  int64_t kept = 0;
  for (const int64_t row : rows) {
    if (row < 0 || row >= num_rows()) {
      return Status::InvalidArgument("row " + std::to_string(row) + " is outside the dataset's " +
                                     std::to_string(num_rows()));
    }
    const auto [file, local] = index_.Locate(row);
    std::string problem;
    if (!SplitFields(files_[file].Record(local), delimiter_, fields)) {
      problem = "a quote that does not close";
    } else if (fields.size() != width) {
      problem = std::to_string(fields.size()) + " fields where the header has " +
                std::to_string(width);
    }
    for (size_t c = 0; c < width && problem.empty(); ++c) {
      int64_t i = 0;
      double d = 0;
      switch (schema_[c].dtype) {
        case DType::kInt64:
          if (!ParseInt(fields[c], &i)) problem = "column '" + schema_[c].name + "': '" + fields[c] + "' is not an integer";
          break;
        case DType::kFloat64:
          if (!ParseDouble(fields[c], &d)) problem = "column '" + schema_[c].name + "': '" + fields[c] + "' is not a number";
          break;
        default: break;
      }
    }
    if (!problem.empty()) {
      if (skip_) {
        ++skipped_;
        continue;
      }
      return Status::InvalidArgument(Where(file, local) + problem);
    }
    for (size_t c = 0; c < width; ++c) {
      switch (schema_[c].dtype) {
        case DType::kInt64: ParseInt(fields[c], &ints[c].emplace_back()); break;
        case DType::kFloat64: ParseDouble(fields[c], &floats[c].emplace_back()); break;
        default: texts[c].push_back(std::move(fields[c]));
      }
    }
    ++kept;
  }
  BlockBuilder out(kept);
  for (size_t c = 0; c < width; ++c) {
    if (schema_[c].dtype == DType::kBytes) {
      out.AddBytes(schema_[c].name, texts[c]);
      continue;
    }
    uint8_t* to = out.AddFixed(schema_[c]);
    if (schema_[c].dtype == DType::kInt64) {
      std::memcpy(to, ints[c].data(), ints[c].size() * 8);
    } else {
      std::memcpy(to, floats[c].data(), floats[c].size() * 8);
    }
  }
  return std::move(out).Finish();
}

const bool registered = RegisterFormat("csv", CsvReader::Open);

}  // namespace rayd::data::internal::csv_format
