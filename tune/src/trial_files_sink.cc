#include "trial_files_sink.h"

#include <filesystem>
#include <iostream>

namespace rayd::tune::internal {

TrialFiles& TrialFilesSink::FilesOf(const Trial& trial) {
  auto it = files_.find(trial.id);
  if (it == files_.end()) {
    it = files_.emplace(trial.id, (std::filesystem::path(dir_) / trial.dir_name).string()).first;
  }
  return it->second;
}

void TrialFilesSink::OnResult(const Trial& trial, const Metrics& result) {
  Status logged = FilesOf(trial).AppendProgress(result, trial.config);
  if (!logged.ok()) std::cerr << "rayd tune: " << logged.message() << "\n";
}

void TrialFilesSink::OnStatus(const Trial& trial) {
  if (trial.status != TrialStatus::kError) return;
  Status logged = FilesOf(trial).AppendError(trial.error);
  if (!logged.ok()) std::cerr << "rayd tune: " << logged.message() << "\n";
}

}  // namespace rayd::tune::internal
