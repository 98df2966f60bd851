#pragma once
// RAYDLOG: log lines from user code (Ray's RAYLOG, renamed as RayConfig is to RaydConfig).
//
//   RAYDLOG(INFO) << "served " << n << " requests";
//   RAYDLOG(WARNING) << "backup is slow";
//   RAYDLOG(FATAL) << "cannot go on";   // logs, then aborts the process
//
// Levels: DEBUG, INFO, WARNING, ERROR, FATAL. INFO and above are written, DEBUG too when
// RAYD_LOG_LEVEL=debug (or trace); the operands of a line that is not written are not
// evaluated. A line goes where the process's own log goes: in a worker (tasks and actors), the
// worker's log file in the session directory; in a driver, its log file in the session
// directory after rayd::Init, stderr before. Safe from any thread, before Init too.

#include <iostream>  // Ray's ray/api/logging.h has it, and Ray programs use std::cout without it
#include <sstream>

namespace rayd {

enum class LogLevel { kDebug = -1, kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

namespace internal {

// RAYDLOG(NAME) reads the level kLogNAME; pasted tokens are not macro-expanded, so a DEBUG or
// ERROR macro of the program's does not get in the way.
inline constexpr LogLevel kLogDEBUG = LogLevel::kDebug;
inline constexpr LogLevel kLogINFO = LogLevel::kInfo;
inline constexpr LogLevel kLogWARNING = LogLevel::kWarning;
inline constexpr LogLevel kLogERROR = LogLevel::kError;
inline constexpr LogLevel kLogFATAL = LogLevel::kFatal;

// Whether lines of `level` are written.
bool LogEnabled(LogLevel level);

// One line: collects what is streamed into it, writes it when destroyed (and then aborts for
// kFatal).
class LogLine {
 public:
  LogLine(const char* file, int line, LogLevel level) : file_(file), line_(line), level_(level) {}
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostream& stream() { return text_; }

 private:
  const char* file_;
  int line_;
  LogLevel level_;
  std::ostringstream text_;
};

}  // namespace internal
}  // namespace rayd

#define RAYDLOG(level)                                                 \
  if (!::rayd::internal::LogEnabled(::rayd::internal::kLog##level)) { \
  } else                                                               \
    ::rayd::internal::LogLine(__FILE__, __LINE__, ::rayd::internal::kLog##level).stream()
