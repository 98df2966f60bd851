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
//
// A program that wants its lines in a file of its own, at a threshold of its own, says so once
// (Ray's RayLog::StartRayLog, renamed as RAYLOG is):
//
//   rayd::RaydLog::StartRaydLog("my_service", rayd::RaydLogLevel::DEBUG, "/var/log/my_service");
//
// From then on RAYDLOG's lines of that level and above go to <log_dir>/<app_name>_<pid>.log
// (the folder is made if missing), flushed line by line; an empty log_dir sends them to stderr.
// ShutDownRaydLog() returns to the process's log. The runtime's own lines stay where they were.
//
// RAYD_CHECK(condition) << "context";   logs a FATAL line naming the condition when it is false.

#include <iostream>  // Ray's ray/api/logging.h has it, and Ray programs use std::cout without it
#include <sstream>
#include <string>

namespace rayd {

enum class LogLevel { kDebug = -1, kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

// Ray's names for the levels (ray::RayLogLevel).
enum class RaydLogLevel { TRACE = -2, DEBUG = -1, INFO = 0, WARNING = 1, ERROR = 2, FATAL = 3 };

class RaydLog {
 public:
  // Sends RAYDLOG's lines of `threshold` and above to <log_dir>/<app_name>_<pid>.log, or to
  // stderr when log_dir is empty. Throws RaydError when the file cannot be opened.
  static void StartRaydLog(const std::string& app_name, RaydLogLevel threshold = RaydLogLevel::INFO,
                           const std::string& log_dir = "");
  // Back to the process's log, at the threshold RAYD_LOG_LEVEL gives.
  static void ShutDownRaydLog();
  // Whether lines of `level` are written now.
  static bool IsLevelEnabled(RaydLogLevel level);
};

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

#undef RAYD_CHECK  // rayd/base/logging.h's, in a file that includes both: this one streams
#define RAYD_CHECK(condition)                                                        \
  if (condition) {                                                                   \
  } else                                                                             \
    ::rayd::internal::LogLine(__FILE__, __LINE__, ::rayd::LogLevel::kFatal).stream() \
        << "Check failed: " #condition " "

#define RAYDLOG(level)                                                 \
  if (!::rayd::internal::LogEnabled(::rayd::internal::kLog##level)) { \
  } else                                                               \
    ::rayd::internal::LogLine(__FILE__, __LINE__, ::rayd::internal::kLog##level).stream()
