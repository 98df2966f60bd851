#pragma once
// Logging goes through spdlog. RAYD_CHECK is for broken invariants only: it logs and aborts.

#include <spdlog/spdlog.h>

#include <string>

namespace rayd {

// Sends the default logger to `path` (appending), or to stderr when path is empty.
// `name` appears in every line, e.g. "head" or "node".
void InitLogging(const std::string& name, const std::string& path, bool also_stderr = false);

[[noreturn]] void CheckFailed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace rayd

// rayd/api/logging.h (the public, Ray-compatible one) defines RAYD_CHECK too, streaming a
// message; a file that includes both gets that one, which aborts as this one does.
#ifndef RAYD_CHECK
#define RAYD_CHECK(cond)                                                   \
  do {                                                                     \
    if (!(cond)) ::rayd::CheckFailed(#cond, __FILE__, __LINE__, {});       \
  } while (0)
#endif
#define RAYD_CHECK_MSG(cond, msg)                                          \
  do {                                                                     \
    if (!(cond)) ::rayd::CheckFailed(#cond, __FILE__, __LINE__, (msg));    \
  } while (0)
