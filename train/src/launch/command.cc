// Checks of a Command that need no cluster (the config file's parser runs them too, so a bad
// tune.yaml fails before anything starts). No LibTorch here: the fuzzer links this file.

#include <rayd/train/command.h>

#include <algorithm>
#include <filesystem>

namespace rayd::train {

const std::vector<std::string>& Launchers() {
  static const std::vector<std::string> launchers = {"torch", "deepspeed", "tensorflow",
                                                     "jax",   "horovod",   "none"};
  return launchers;
}

std::string CheckCommand(const Command& command) {
  if (command.argv.empty() || command.argv[0].empty()) return "command: no program to run";
  const auto& known = Launchers();
  if (std::find(known.begin(), known.end(), command.launcher) == known.end()) {
    return "launcher: unknown launcher '" + command.launcher +
           "' (torch, deepspeed, tensorflow, jax, horovod or none)";
  }
  if (!command.working_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::path(command.working_dir).is_absolute()) {
      return "working_dir: '" + command.working_dir + "' is not an absolute path";
    }
    if (!std::filesystem::is_directory(command.working_dir, ec)) {
      return "working_dir: no directory " + command.working_dir;
    }
  }
  if (command.report_timeout_s < 0) return "report_timeout_s: must not be negative";
  if (command.stop_grace_s < 0) return "stop_grace_s: must not be negative";
  return "";
}

std::string CommandLine(const Command& command) {
  std::string line;
  for (const std::string& arg : command.argv) {
    if (!line.empty()) line += ' ';
    const bool quote = arg.empty() || arg.find_first_of(" \t'\"") != std::string::npos;
    line += quote ? "'" + arg + "'" : arg;
  }
  return line;
}

}  // namespace rayd::train
