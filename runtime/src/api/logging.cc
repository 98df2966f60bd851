// RAYDLOG's lines: written to the sinks of the process's default logger (its log file or
// stderr), at their own threshold rather than the logger's, which keeps the runtime's own
// chatter at warnings by default; or, after RaydLog::StartRaydLog, to the program's own sink
// at the threshold it gave.

#include "rayd/api/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include "rayd/api/errors.h"

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
spdlog::level::level_enum EnvThreshold() {
  const char* env = std::getenv("RAYD_LOG_LEVEL");
  const auto asked = env ? spdlog::level::from_str(env) : spdlog::level::info;
  return std::min(asked, spdlog::level::info);
}

std::atomic<int>& Threshold() {
  static std::atomic<int> threshold{EnvThreshold()};
  return threshold;
}

// The program's own sink (StartRaydLog), or null for the process's log.
struct ProgramSink {
  std::mutex mu;
  std::shared_ptr<spdlog::sinks::sink> sink;
};

ProgramSink& Program() {
  static ProgramSink* program = new ProgramSink;  // never destroyed: lines may come at exit
  return *program;
}

void WriteTo(spdlog::sinks::sink& sink, const spdlog::details::log_msg& msg) {
  if (!sink.should_log(msg.level)) return;
  try {
    sink.log(msg);
    sink.flush();
  } catch (const std::exception&) {
    // A log line that cannot be written (a full disk) must not end the program.
  }
}

}  // namespace

bool LogEnabled(LogLevel level) {
  return SpdlogLevel(level) >= Threshold().load(std::memory_order_relaxed);
}

LogLine::~LogLine() {
  const spdlog::level::level_enum level = SpdlogLevel(level_);
  const std::string text = text_.str();
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  const spdlog::details::log_msg msg(spdlog::source_loc{file_, line_, ""}, logger->name(), level,
                                     text);
  std::shared_ptr<spdlog::sinks::sink> own;
  {
    std::lock_guard lock(Program().mu);
    own = Program().sink;
  }
  if (own) {
    WriteTo(*own, msg);
  } else {
    for (const auto& sink : logger->sinks()) WriteTo(*sink, msg);
  }
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace rayd::internal

namespace rayd {

void RaydLog::StartRaydLog(const std::string& app_name, RaydLogLevel threshold,
                           const std::string& log_dir) {
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (log_dir.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    const std::filesystem::path file =
        std::filesystem::path(log_dir) / (app_name + "_" + std::to_string(::getpid()) + ".log");
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string());
    } catch (const std::exception& e) {
      throw RaydError("StartRaydLog: cannot open " + file.string() + ": " + e.what());
    }
  }
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] [%s:%#] %v");
  // TRACE is below anything RAYDLOG writes; it means "everything", as DEBUG does.
  const auto level = static_cast<LogLevel>(std::max(static_cast<int>(threshold), -1));
  {
    std::lock_guard lock(internal::Program().mu);
    internal::Program().sink = std::move(sink);
  }
  internal::Threshold().store(internal::SpdlogLevel(level), std::memory_order_relaxed);
}

void RaydLog::ShutDownRaydLog() {
  {
    std::lock_guard lock(internal::Program().mu);
    internal::Program().sink.reset();
  }
  internal::Threshold().store(internal::EnvThreshold(), std::memory_order_relaxed);
}

bool RaydLog::IsLevelEnabled(RaydLogLevel level) {
  return internal::LogEnabled(static_cast<LogLevel>(std::max(static_cast<int>(level), -1)));
}

}  // namespace rayd
