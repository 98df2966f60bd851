// libFuzzer target for the HTTP request-head parser that the head's dashboard and every
// daemon's /metrics put on the network (base/src/http_request.cc): arbitrary bytes up to the
// blank line, as HttpServer hands them over. A non-ok Status is the expected refusal; a crash, a
// sanitizer report or an exception is a bug. What it accepts must hold up: a GET or HEAD, a path
// that starts with '/', lower-case header names.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rayd/base/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string head(reinterpret_cast<const char*>(data), size);
  if (head.size() > rayd::http::HttpServer::kMaxRequestHead) return 0;  // the server cuts these
  auto request = rayd::http::ParseRequestHead(head);
  if (!request.ok()) return 0;
  const bool method_ok = request->method == "GET" || request->method == "HEAD";
  // A decoded path may hold anything (even "%2F" or NUL), but it came from one starting with '/'.
  const bool path_ok = !head.empty() && head.find(' ') != std::string::npos &&
                       head[head.find(' ') + 1] == '/';
  bool names_ok = true;
  for (const auto& [name, value] : request->headers) {
    for (char c : name) names_ok &= !(c >= 'A' && c <= 'Z');
  }
  if (!method_ok || !path_ok || !names_ok) {
    std::fprintf(stderr, "accepted a request it should not have: method '%s'\n",
                 request->method.c_str());
    std::abort();
  }
  (void)request->Cookie("rayd_token");
  (void)rayd::http::PercentDecode(request->path, true);
  return 0;
}
