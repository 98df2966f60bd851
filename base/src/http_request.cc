// base/http's request parsing and value types, apart from the server so that the parser can be
// fuzzed on its own (fuzz/http_fuzzer.cc).

#include <algorithm>
#include <cctype>

#include "rayd/base/http.h"

namespace rayd::http {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexDigit(s[i + 1]);
      const int lo = HexDigit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
  }
  return out;
}

std::string Request::Header(const std::string& lower_case_name) const {
  auto it = headers.find(lower_case_name);
  return it == headers.end() ? "" : it->second;
}

std::string Request::Cookie(std::string_view name) const {
  const std::string header = Header("cookie");
  std::string_view rest = header;
  while (!rest.empty()) {
    const size_t end = std::min(rest.find(';'), rest.size());
    std::string_view pair = Trim(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return std::string(pair.substr(eq + 1));
    }
  }
  return "";
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

Result<Request> ParseRequestHead(std::string_view head, bool writes) {
  const size_t line_end = head.find("\r\n");
  if (line_end == std::string_view::npos) return Status::InvalidArgument("no request line");
  const std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    return Status::InvalidArgument("malformed request line");
  }
  Request request;
  request.method = std::string(line.substr(0, sp1));
  const bool read = request.method == "GET" || request.method == "HEAD";
  if (!read && !(writes && (request.method == "PUT" || request.method == "DELETE"))) {
    return Status::Unimplemented("method " + request.method + " is not served here");
  }
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target.front() != '/') {
    return Status::InvalidArgument("the request target must be a path");
  }
  const size_t q = target.find('?');
  request.path = PercentDecode(target.substr(0, q), /*plus_is_space=*/false);
  if (q != std::string_view::npos) {
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
      const size_t amp = std::min(query.find('&'), query.size());
      std::string_view pair = query.substr(0, amp);
      query.remove_prefix(std::min(amp + 1, query.size()));
      if (pair.empty()) continue;
      const size_t eq = pair.find('=');
      request.query[PercentDecode(pair.substr(0, eq), true)] =
          eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1), true);
    }
  }
  std::string_view rest = head.substr(line_end + 2);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    if (end == std::string_view::npos) return Status::InvalidArgument("unterminated header");
    const std::string_view header = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    if (header.empty()) break;
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Status::InvalidArgument("malformed header line");
    }
    request.headers[Lower(Trim(header.substr(0, colon)))] =
        std::string(Trim(header.substr(colon + 1)));
  }
  return request;
}

}  // namespace rayd::http
