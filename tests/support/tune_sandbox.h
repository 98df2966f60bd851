#pragma once
// TuneSandbox: a RaydSandbox for `rayd tune` and `rayd train` end-to-end tests: YAML files
// written into the sandbox (STORAGE standing for its results directory), `rayd` run with its
// temp root, and readers of the results' JSON files. Header-only.

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rayd_sandbox.h"
#include "test_util.h"

namespace rayd::testing {

class TuneSandbox : public RaydSandbox {
 public:
  explicit TuneSandbox(std::string rayd_binary)
      : RaydSandbox(rayd_binary, std::chrono::seconds(300)), binary_(std::move(rayd_binary)) {}

  // Writes `text` (with STORAGE replaced by this sandbox's results directory) to root/name.
  std::string WriteYaml(const std::string& name, std::string text) const {
    const std::string marker = "STORAGE";
    for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker)) {
      text.replace(at, marker.size(), results());
    }
    std::string path = root() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string results() const { return root() + "/results"; }

  // `rayd <args>` with this sandbox's temp root; returns the exit code.
  int Run(const std::vector<std::string>& args, std::string* output,
          std::chrono::milliseconds timeout = std::chrono::seconds(300)) {
    std::vector<std::string> argv = {binary_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, output, Env(), timeout);
  }

 private:
  std::string binary_;
};

inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadFile(path));
}

// One JSON object per line (result.json).
inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Whether some trial of the experiment has at least `results` lines in its result.json.
inline bool SomeTrialReported(const std::string& experiment, size_t results) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(experiment, ec)) {
    std::string path = entry.path().string() + "/result.json";
    if (std::filesystem::exists(path) && ReadJsonLines(path).size() >= results) return true;
  }
  return false;
}

inline std::string TrialDir(const std::string& experiment, const nlohmann::json& trial) {
  return experiment + "/" + trial.at("dir_name").get<std::string>();
}

}  // namespace rayd::testing
