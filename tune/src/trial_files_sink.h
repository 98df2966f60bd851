#pragma once
// The Tuner's own files in each trial's directory (beside the Trainer's result.json,
// params.json and checkpoints): progress.csv, a row per result, and error.txt, a block per
// failure. A file that cannot be written is warned about on stderr.

#include <map>
#include <set>
#include <string>

#include "result_sink.h"

namespace rayd::tune::internal {

class TrialFilesSink : public ResultSink {
 public:
  explicit TrialFilesSink(std::string experiment_dir) : dir_(std::move(experiment_dir)) {}

  void OnResult(const Trial& trial, const Metrics& result) override;
  void OnStatus(const Trial& trial) override;
  // Each failure goes into error.txt: those restarted from, and the last.
  void OnFailure(const Trial& trial, const std::string& error) override;
  // Writes the rows of this tick's results, a write per trial.
  void OnTick(const SweepView& view) override;

 private:
  TrialFiles& FilesOf(const Trial& trial);

  std::string dir_;
  std::map<std::string, TrialFiles> files_;  // by trial id
  std::set<std::string> unflushed_;          // trial ids with rows appended since the last tick
};

}  // namespace rayd::tune::internal
