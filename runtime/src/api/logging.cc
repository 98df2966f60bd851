// RAYDLOG's lines: written to the sinks of the process's default logger (its log file or
// stderr), at their own threshold rather than the logger's, which keeps the runtime's own
// chatter at warnings by default.

#include "rayd/api/logging.h"

#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace rayd::internal {
namespace {

spdlog::level::level_enum SpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kFatal:
      return spdlog::level::critical;
  }
  return spdlog::level::info;
}

// INFO, or what RAYD_LOG_LEVEL asks for when that is lower (debug, trace).
spdlog::level::level_enum Threshold() {
  static const spdlog::level::level_enum threshold = [] {
    const char* env = std::getenv("RAYD_LOG_LEVEL");
    const auto asked = env ? spdlog::level::from_str(env) : spdlog::level::info;
    return std::min(asked, spdlog::level::info);
  }();
  return threshold;
}

}  // namespace

bool LogEnabled(LogLevel level) { return SpdlogLevel(level) >= Threshold(); }

LogLine::~LogLine() {
  const spdlog::level::level_enum level = SpdlogLevel(level_);
  const std::string text = text_.str();
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  const spdlog::details::log_msg msg(spdlog::source_loc{file_, line_, ""}, logger->name(), level,
                                     text);
  for (const auto& sink : logger->sinks()) {
    if (!sink->should_log(level)) continue;
    try {
      sink->log(msg);
      sink->flush();
    } catch (const std::exception&) {
      // A log line that cannot be written (a full disk) must not end the program.
    }
  }
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace rayd::internal
