#pragma once
// TrialRunner: how the Tuner's controller runs trials, as events on its one queue.
//
// The controller asks a runner to Start a trial's run; the run's results come back as kResult
// events, each held until the controller Answers it (go on, or end the run); the run's end
// comes back as one kDone event, after which the controller calls Finished. Events may be
// posted from any thread, and are handled one at a time, in order, on the controller's
// thread, which is also the only thread that calls the runner.
//
// TrainerRunner (below) runs each trial as a TrainingRun on the controller's own event loop,
// so one thread drives every trial; unit tests drive the controller with a scripted runner
// instead (tests/unit/tune/controller_test.cc).

#include <rayd/base/event_loop.h>
#include <rayd/train/trainer.h>
#include <rayd/train/training_run.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rayd::tune {
struct Trainable;
}

namespace rayd::tune::internal {

// What a run tells the controller.
struct RunEvent {
  enum class Kind { kResult, kDone };
  Kind kind = Kind::kResult;
  size_t trial = 0;              // the controller's index for the trial
  train::ReportedResult result;  // kResult: persisted in the trial's directory already
  train::TrainResult ended;      // kDone
};

// What the controller asks a runner to start.
struct RunRequest {
  size_t trial = 0;  // echoed in the run's events
  std::string trial_id;
  std::string experiment_dir;  // absolute
  std::string run_dir_name;    // the trial's directory under experiment_dir
  nlohmann::json config;
};

class TrialRunner {
 public:
  using PostFn = std::function<void(RunEvent)>;
  virtual ~TrialRunner() = default;

  // Where the runs' events go; set by the controller before the first Start.
  virtual void SetPost(PostFn post) = 0;
  // Starts a run of the trial (resuming from the latest checkpoint in its directory).
  virtual void Start(const RunRequest& request) = 0;
  // Answers the run's latest result: go on, or end the run (its kDone follows).
  virtual void Answer(size_t trial, bool go_on) = 0;
  // The trial's kDone was handled: whatever its run held is released or kept for reuse.
  virtual void Finished(size_t trial) = 0;
  // No further run starts for now: what was kept for reuse is given back to the cluster.
  virtual void ReleaseIdle() = 0;
  // Elastic trials: how many more workers' bundles the cluster's free resources hold now, and
  // a running trial's restart at `workers` at its next checkpoint (TrainingRun::GrowTo).
  virtual int FreeWorkers() { return 0; }
  virtual void GrowTo(size_t trial, int workers) {}
  // Some run waits for its workers (its gang is not placed yet): free workers are its first.
  virtual bool AnyWaitingForWorkers() { return false; }
  // Elastic trials could use `workers` more workers than the cluster has free now (0: none):
  // what an autoscaler may launch nodes for. Called with each growth decision.
  virtual void WantWorkers(int workers) {}
  // Seconds on the runs' clock (a replay's is simulated), for the controller's resize interval.
  virtual double NowSeconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Each run a TrainingRun on `loop` (the controller's), its results held until answered;
// gangs are reused from one run to the next (Ray Tune's reuse_actors).
class TrainerRunner : public TrialRunner {
 public:
  // `loop`, `trainable` and `run` must outlive the runner.
  TrainerRunner(EventLoop& loop, const Trainable& trainable, const train::RunConfig& run);
  ~TrainerRunner() override;

  void SetPost(PostFn post) override { post_ = std::move(post); }
  void Start(const RunRequest& request) override;
  void Answer(size_t trial, bool go_on) override;
  void Finished(size_t trial) override;
  void ReleaseIdle() override { free_pools_.clear(); }
  int FreeWorkers() override;
  void GrowTo(size_t trial, int workers) override;
  bool AnyWaitingForWorkers() override;
  // Published for the head's autoscaler (KV "autoscaler", "tune:<run name>"; autoscaler_host.h)
  // as that many single-worker bundles, refreshed while it stands, withdrawn at 0 and at the end.
  void WantWorkers(int workers) override;

 private:
  struct Run {
    std::unique_ptr<train::TrainingRun> run;
    std::shared_ptr<train::GangPool> pool;
  };

  EventLoop& loop_;
  const Trainable& trainable_;
  const train::RunConfig& run_;
  PostFn post_;
  std::map<size_t, Run> runs_;
  // Gangs finished runs left, for the next runs to take.
  std::vector<std::shared_ptr<train::GangPool>> free_pools_;
  int wanted_ = 0;            // the growth published for the autoscaler
  double wanted_since_ = 0;   // when it was last published (steady seconds)
};

}  // namespace rayd::tune::internal
