#pragma once
// The sweep's experiment tracking (docs/tracking.md): with RunConfig::mlflow_tracking_uri set,
// each trial is one MLflow run in the experiment named after the sweep (or
// RunConfig::mlflow_experiment_name): params = the trial's config when it first starts,
// metrics = every result at step training_iteration, tags = trial_id, trial_name, scheduler and
// trial_status. The Tuner's driver writes it all from the results it receives, which are rank
// 0's (the Trainer keeps only rank 0's reports). Used on the controller thread only.

#include <rayd/train/mlflow.h>
#include <rayd/train/trainer.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "result_sink.h"
#include "trial.h"

namespace rayd::tune::internal {

class TrialTracking : public ResultSink {
 public:
  // Off when run.mlflow_tracking_uri is empty. Otherwise opens the store and finds or creates
  // the experiment now, so a bad URI fails (InvalidArgument / Internal) before any trial runs.
  static Result<TrialTracking> Open(const rayd::train::RunConfig& run, std::string scheduler,
                                    std::string experiment_dir);

  // The trial starts (or restarts): its run is created, or reopened after a resume.
  void OnTrialStart(const Trial& trial) override;
  void OnResult(const Trial& trial, const Metrics& result) override;
  // The trial's status changed: the tag follows; TERMINATED ends the run FINISHED (scheduler
  // stops and `stop` criteria included, as Ray's MLflowLoggerCallback does), ERROR ends it FAILED.
  void OnStatus(const Trial& trial) override;
  // At the sweep's end, runs still open (trials interrupted by Ctrl-C, resumable) end KILLED.
  void OnTick(const SweepView& view) override {
    if (view.finished) Close();
  }
  void Close();

 private:
  TrialTracking() = default;
  void Warn(const Trial& trial, const Status& status) const;

  bool enabled_ = false;
  std::string tracking_uri_;
  std::string experiment_name_;
  std::string scheduler_;
  std::string experiment_dir_;
  std::map<std::string, rayd::train::MlflowRun> open_;  // by trial id
};

}  // namespace rayd::tune::internal
