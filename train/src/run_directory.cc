#include "rayd/train/run_directory.h"

#include <rayd/base/files.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>

namespace rayd::train {
namespace {

constexpr char kCheckpointPrefix[] = "checkpoint_";

std::string IsoTimeNow() {
  std::time_t seconds = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

}  // namespace

std::string RunDirectory::CheckpointName(int index) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%06d", kCheckpointPrefix, index);
  return name;
}

int RunDirectory::CheckpointIndex(const std::string& name) {
  const size_t prefix = sizeof(kCheckpointPrefix) - 1;
  if (name.rfind(kCheckpointPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(prefix);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return -1;
  }
  return std::stoi(digits);
}

Status RunDirectory::WriteParams(const nlohmann::json& params) const {
  // Rewritten at every Fit and informational: whole for readers, not worth an fsync per trial.
  return WriteFileAtomically(ParamsFile(), params.dump(2) + "\n", /*durable=*/false);
}

Status RunDirectory::AppendResult(const nlohmann::json& line) const {
  return AppendToFile(ResultFile(), line.dump() + "\n");
}

Status RunDirectory::AppendError(const std::string& error) const {
  int failures = 0;
  {
    std::ifstream in(ErrorFile());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Failure # ", 0) == 0) ++failures;
    }
  }
  std::string block =
      "Failure # " + std::to_string(failures + 1) + " (occurred at " + IsoTimeNow() + ")\n" + error;
  if (block.back() != '\n') block += '\n';
  return AppendToFile(ErrorFile(), block + "\n");
}

}  // namespace rayd::train
