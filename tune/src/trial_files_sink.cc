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
  unflushed_.insert(trial.id);
}

void TrialFilesSink::OnTick(const SweepView& view) {
  (void)view;
  for (const std::string& id : unflushed_) {
    auto it = files_.find(id);
    if (it == files_.end()) continue;
    if (Status flushed = it->second.Flush(); !flushed.ok()) {
      std::cerr << "rayd tune: " << flushed.message() << "\n";
    }
  }
  unflushed_.clear();
}

void TrialFilesSink::OnStatus(const Trial& trial) {
  if (trial.status != TrialStatus::kRunning) {
    // Thousands of trials end in a sweep: only running ones keep progress.csv open.
    if (auto it = files_.find(trial.id); it != files_.end()) {
      if (Status closed = it->second.Close(); !closed.ok()) {
        std::cerr << "rayd tune: " << closed.message() << "\n";
      }
    }
    unflushed_.erase(trial.id);
  }
  if (trial.status == TrialStatus::kError) OnFailure(trial, trial.error);
}

void TrialFilesSink::OnFailure(const Trial& trial, const std::string& error) {
  Status logged = FilesOf(trial).AppendError(error);
  if (!logged.ok()) std::cerr << "rayd tune: " << logged.message() << "\n";
}

}  // namespace rayd::tune::internal
