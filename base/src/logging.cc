#include "rayd/base/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

namespace rayd {

void InitLogging(const std::string& name, const std::string& path, bool also_stderr) {
  std::vector<spdlog::sink_ptr> sinks;
  if (!path.empty()) {
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path));
    ::chmod(path.c_str(), 0600);  // logs name peers, jobs and paths: the owner's only
  }
  if (path.empty() || also_stderr)
    sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n %P] [%l] %v");
  logger->flush_on(spdlog::level::info);
  if (const char* level = std::getenv("RAYD_LOG_LEVEL"))
    logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

void CheckFailed(const char* expr, const char* file, int line, const std::string& msg) {
  spdlog::critical("check failed at {}:{}: {} {}", file, line, expr, msg);
  spdlog::default_logger()->flush();
  std::abort();
}

}  // namespace rayd
