#include "trial_runner.h"

#include <rayd/api.h>
#include <rayd/runtime/autoscaler_kv.h>
#include <rayd/tune/tuner.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace rayd::tune::internal {

TrainerRunner::TrainerRunner(EventLoop& loop, const Trainable& trainable,
                             const train::RunConfig& run)
    : loop_(loop), trainable_(trainable), run_(run) {}

// The controller ends every run before it returns; a run still here (an exception unwound the
// controller) ends with its gang torn down.
TrainerRunner::~TrainerRunner() { WantWorkers(0); }

void TrainerRunner::Start(const RunRequest& request) {
  train::RunConfig config = run_;
  config.name = request.run_dir_name;
  config.storage_path = request.experiment_dir;
  // The sweep tracks its trials itself (one MLflow run per trial, over all of its Fits).
  config.mlflow_tracking_uri.clear();
  train::FitOptions options;
  options.params = request.config;  // Ray Tune's params.json: the trial's config
  if (free_pools_.empty()) free_pools_.push_back(std::make_shared<train::GangPool>());
  Run& run = runs_[request.trial];
  run.pool = std::move(free_pools_.back());
  free_pools_.pop_back();
  options.reuse = run.pool;
  // Elastic trials shrink after a lost node, but do not grow by themselves: which trial gets
  // freed workers is the scheduler's call, which the Tuner does not make yet.
  options.grow = false;
  options.result_fields = {{"trial_id", request.trial_id}, {"config", request.config}};
  const size_t trial = request.trial;
  try {
    run.run = std::make_unique<train::TrainingRun>(
        loop_,
        trainable_.command ? train::TrainingRun::Target(*trainable_.command)
                           : train::TrainingRun::Target(trainable_.train_loop),
        request.config, trainable_.scaling, std::move(config),
        options,
        train::TrainingRun::Callbacks{
            .on_result =
                [this, trial](const train::ReportedResult& result) {
                  post_({RunEvent::Kind::kResult, trial, result, {}});
                },
            .on_done =
                [this, trial](train::TrainResult ended) {
                  post_({RunEvent::Kind::kDone, trial, {}, std::move(ended)});
                }});
  } catch (const std::exception& e) {
    train::TrainResult ended;
    ended.error = e.what();
    post_({RunEvent::Kind::kDone, trial, {}, std::move(ended)});
  }
}

int TrainerRunner::FreeWorkers() {
  try {
    return train::WorkersThatFit(trainable_.scaling, rayd::AvailableResources());
  } catch (const RaydError& e) {
    spdlog::warn("free workers: {}", e.what());
    return 0;
  }
}

void TrainerRunner::WantWorkers(int workers) {
  const double now = std::chrono::duration<double>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
  // Republished well before it expires (the head ignores it 120 s after), else only on change.
  if (workers == wanted_ && (workers == 0 || now - wanted_since_ < 30)) return;
  const std::string key = AutoscalerSweepKey(run_.name);
  try {
    if (workers == 0) {
      rayd::KvDel(kAutoscalerKvNamespace, key);
    } else {
      nlohmann::json bundle = nlohmann::json::object();
      for (const auto& [name, amount] : train::WorkerBundle(trainable_.scaling)) {
        bundle[name] = amount;
      }
      const nlohmann::json demand = {
          {"source", "sweep " + run_.name + ": elastic trials could grow by " +
                         std::to_string(workers) + " worker(s)"},
          {"expires_ms", NowUnixMs() + 120'000},
          {"gangs", {{{"bundles", {bundle}}, {"strategy", "PACK"}, {"count", workers}}}}};
      rayd::KvPut(kAutoscalerKvNamespace, key, demand.dump());
    }
    wanted_ = workers;
    wanted_since_ = now;
  } catch (const RaydError& e) {
    spdlog::warn("elastic growth for the autoscaler: {}", e.what());
  }
}

bool TrainerRunner::AnyWaitingForWorkers() {
  return std::any_of(runs_.begin(), runs_.end(), [](const auto& entry) {
    return entry.second.run && entry.second.run->WaitingForWorkers();
  });
}

void TrainerRunner::GrowTo(size_t trial, int workers) {
  auto it = runs_.find(trial);
  if (it != runs_.end() && it->second.run) it->second.run->GrowTo(workers);
}

void TrainerRunner::Answer(size_t trial, bool go_on) {
  auto it = runs_.find(trial);
  if (it != runs_.end() && it->second.run) it->second.run->Answer(go_on);
}

void TrainerRunner::Finished(size_t trial) {
  auto it = runs_.find(trial);
  if (it == runs_.end()) return;
  free_pools_.push_back(std::move(it->second.pool));
  runs_.erase(it);
}

}  // namespace rayd::tune::internal
