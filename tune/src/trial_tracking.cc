#include "trial_tracking.h"

#include <filesystem>
#include <iostream>
#include <utility>

namespace rayd::tune::internal {

using rayd::train::MlflowRunStatus;

Result<TrialTracking> TrialTracking::Open(const rayd::train::RunConfig& run, std::string scheduler,
                                          std::string experiment_dir) {
  TrialTracking tracking;
  if (run.mlflow_tracking_uri.empty()) return tracking;
  tracking.enabled_ = true;
  tracking.tracking_uri_ = run.mlflow_tracking_uri;
  tracking.experiment_name_ =
      run.mlflow_experiment_name.empty() ? run.name : run.mlflow_experiment_name;
  tracking.scheduler_ = std::move(scheduler);
  tracking.experiment_dir_ = std::move(experiment_dir);
  RAYD_ASSIGN_OR_RETURN(rayd::train::MlflowStore store,
                        rayd::train::MlflowStore::Open(tracking.tracking_uri_));
  RAYD_ASSIGN_OR_RETURN(std::string id, store.GetOrCreateExperiment(tracking.experiment_name_));
  (void)id;
  return tracking;
}

void TrialTracking::OnTrialStart(const Trial& trial) {
  if (!enabled_) return;
  if (open_.count(trial.id)) {
    OnStatus(trial);
    return;
  }
  const std::string run_dir = (std::filesystem::path(experiment_dir_) / trial.dir_name).string();
  Result<rayd::train::MlflowRun> run = rayd::train::StartMlflowRun(
      tracking_uri_, experiment_name_, trial.dir_name, run_dir,
      rayd::train::MlflowParams(trial.config),
      {{"trial_id", trial.id},
       {"trial_name", trial.dir_name},
       {"scheduler", scheduler_},
       {"trial_status", ToString(trial.status)}});
  if (!run.ok()) return Warn(trial, run.status());
  open_.emplace(trial.id, std::move(run).value());
}

void TrialTracking::OnResult(const Trial& trial, const Metrics& result) {
  auto run = open_.find(trial.id);
  if (run == open_.end()) return;
  Status logged = rayd::train::LogMlflowResult(run->second, result);
  if (!logged.ok()) Warn(trial, logged);
}

void TrialTracking::OnStatus(const Trial& trial) {
  auto run = open_.find(trial.id);
  if (run == open_.end()) return;
  Status tagged = run->second.SetTag("trial_status", ToString(trial.status));
  if (!tagged.ok()) Warn(trial, tagged);
  if (trial.status != TrialStatus::kTerminated && trial.status != TrialStatus::kError) return;
  Status ended = run->second.End(trial.status == TrialStatus::kError ? MlflowRunStatus::kFailed
                                                                     : MlflowRunStatus::kFinished);
  if (!ended.ok()) Warn(trial, ended);
  open_.erase(run);
}

void TrialTracking::Close() {
  for (auto& [id, run] : open_) {
    Status ended = run.End(MlflowRunStatus::kKilled);
    if (!ended.ok()) std::cerr << "rayd tune: MLflow run of " << id << ": " << ended.message() << "\n";
  }
  open_.clear();
}

void TrialTracking::Warn(const Trial& trial, const Status& status) const {
  // Tracking is a record of the sweep, not part of it: a write that fails costs the record only.
  std::cerr << "rayd tune: MLflow run of " << trial.id << ": " << status.message() << "\n";
}

}  // namespace rayd::tune::internal
