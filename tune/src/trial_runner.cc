#include "trial_runner.h"

#include <rayd/tune/tuner.h>

#include <condition_variable>
#include <optional>

namespace rayd::tune::internal {

// One run: its thread (blocked in Trainer::Fit) and the answer its latest report waits for.
struct TrainerRunner::Run {
  std::thread thread;
  std::shared_ptr<train::GangPool> pool;
  std::mutex mu;
  std::condition_variable answered;
  std::optional<bool> answer;  // guarded by mu
  bool closing = false;        // guarded by mu: every report from now on ends the run
};

TrainerRunner::TrainerRunner(const Trainable& trainable, const train::RunConfig& run)
    : trainable_(trainable), run_(run) {}

TrainerRunner::~TrainerRunner() {
  // The controller ends every run before it returns; a run still here (an exception unwound
  // the controller) is told to stop at its next report.
  for (auto& [trial, run] : runs_) {
    {
      std::lock_guard lock(run->mu);
      run->closing = true;
    }
    run->answered.notify_one();
    if (run->thread.joinable()) run->thread.join();
  }
}

void TrainerRunner::Start(const RunRequest& request) {
  auto& run = runs_[request.trial];
  run = std::make_unique<Run>();
  train::RunConfig config = run_;
  config.name = request.run_dir_name;
  config.storage_path = request.experiment_dir;
  // The sweep tracks its trials itself (one MLflow run per trial, over all of its Fits).
  config.mlflow_tracking_uri.clear();
  train::Trainer trainer(trainable_.train_loop, request.config, trainable_.scaling, config);
  train::FitOptions options;
  options.params = request.config;  // Ray Tune's params.json: the trial's config
  if (free_pools_.empty()) free_pools_.push_back(std::make_shared<train::GangPool>());
  run->pool = std::move(free_pools_.back());
  free_pools_.pop_back();
  options.reuse = run->pool;
  options.result_fields = {{"trial_id", request.trial_id}, {"config", request.config}};
  Run* state = run.get();
  const size_t trial = request.trial;
  options.on_report = [this, state, trial](const train::ReportedResult& result) {
    {
      std::lock_guard lock(state->mu);
      state->answer.reset();
    }
    post_({RunEvent::Kind::kResult, trial, result, {}});
    std::unique_lock lock(state->mu);
    state->answered.wait(lock, [state] { return state->answer.has_value() || state->closing; });
    return !state->closing && *state->answer;
  };
  run->thread = std::thread(
      [this, trial, trainer = std::move(trainer), options = std::move(options)]() mutable {
        train::TrainResult ended;
        try {
          ended = trainer.Fit(options);
        } catch (const std::exception& e) {
          ended.error = e.what();
        }
        post_({RunEvent::Kind::kDone, trial, {}, std::move(ended)});
      });
}

void TrainerRunner::Answer(size_t trial, bool go_on) {
  auto it = runs_.find(trial);
  if (it == runs_.end()) return;
  {
    std::lock_guard lock(it->second->mu);
    it->second->answer = go_on;
  }
  it->second->answered.notify_one();
}

void TrainerRunner::Finished(size_t trial) {
  auto it = runs_.find(trial);
  if (it == runs_.end()) return;
  it->second->thread.join();
  free_pools_.push_back(std::move(it->second->pool));
  runs_.erase(it);
}

}  // namespace rayd::tune::internal
