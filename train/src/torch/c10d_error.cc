#include "c10d_error.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace rayd::train {

Status StatusFromC10dException(std::exception_ptr error, std::string_view what) {
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    // what_without_backtrace(): c10's full what() appends a C++ stack trace.
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  std::string lower = message;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto mentions = [&lower](const char* word) { return lower.find(word) != std::string::npos; };
  std::string text = std::string(what) + ": " + message;
  if (mentions("timeout") || mentions("timed out")) {
    return Status::DeadlineExceeded(std::move(text));
  }
  // Gloo's "Connection reset by peer" / "Connection closed by peer": a peer went away.
  if (mentions("connection")) return Status::Unavailable(std::move(text));
  return Status::Internal(std::move(text));
}

}  // namespace rayd::train
