#pragma once
// A run's directory on the driver: storage_path/name/ with checkpoint_NNNNNN/ directories and
// result.json (one JSON object per report: rank 0's metrics, plus "checkpoint_dir_name" when
// the report carried a checkpoint).
//
// Opening a run directory that exists picks up where it ended: checkpoint numbering goes on
// after the highest one there, their scores come from result.json, and the last line's metrics
// are the run's latest. Used by the Fit thread only.

#include <rayd/base/files.h>
#include <rayd/base/status.h>
#include <rayd/train/trainer.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train_worker.h"

namespace rayd::train::internal {

class CheckpointStore {
 public:
  // Creates `run_dir` if needed and loads what an earlier Fit left there.
  static Result<CheckpointStore> Open(std::string run_dir, CheckpointConfig config);

  // Starts the clock of an attempt: time_this_iter_s of its first report counts from here.
  void StartAttempt();
  // Adds the auto-filled metrics (training_iteration, time_this_iter_s, time_total_s,
  // timestamp) to the report's, appends them with `extra` fields to result.json and, when it
  // has a checkpoint, writes it as the next checkpoint_NNNNNN and deletes the ones num_to_keep
  // no longer keeps. Returns what was persisted.
  // result.json's line is written by the next Flush (at once for a report with a checkpoint).
  Result<ReportedResult> Persist(const ReportMessage& report,
                                 const nlohmann::json& extra = nlohmann::json::object());
  // Writes the result.json lines persisted since the last Flush: the owner calls it when the
  // reports it has are all persisted.
  Status Flush() { return results_.Flush(); }

  // The newest checkpoint's directory, if any.
  std::optional<std::string> Latest() const;
  // The metrics of the last report persisted (empty when none).
  const std::map<std::string, double>& last_metrics() const { return last_metrics_; }

 private:
  struct Kept {
    int index = 0;
    std::optional<double> score;
  };
  CheckpointStore(std::string run_dir, CheckpointConfig config);

  std::string DirOf(int index) const;
  Status Prune();

  std::string run_dir_;
  CheckpointConfig config_;
  AppendFile results_;  // result.json, open while the store lives
  std::vector<Kept> kept_;  // in index order
  int next_index_ = 0;
  std::map<std::string, double> last_metrics_;
  int iterations_ = 0;        // reports persisted, this Fit and earlier ones
  double time_total_s_ = 0;   // training seconds up to the last report
  std::chrono::steady_clock::time_point last_report_;
};

}  // namespace rayd::train::internal
