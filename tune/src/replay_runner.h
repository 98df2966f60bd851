#pragma once
// ReplayRunner: a TrialRunner that plays recorded learning curves on a simulated clock, for
// Tuner::Simulate (rayd/tune/simulator.h says what a user sees).
//
// It is a discrete-event simulation under the controller: every run's next result waits in a
// queue ordered by simulated time, and the earliest one is handed to the controller only when
// the controller has answered everything it was given and started what it wanted to start
// (the hand-over is posted to the loop, so it runs after the controller's current step). One
// event is out at a time, so the order of decisions depends on the recorded data and the
// seed, never on the machine.
//
// Runs write what a Trainer's would: params.json, result.json lines, and a checkpoint per
// result holding the run's place in its curve (the newest two kept), which a paused trial
// resumes from and PBT's exploit copies.

#include <rayd/base/event_loop.h>
#include <rayd/tune/simulator.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include "simulated_nodes.h"
#include "trial_runner.h"

namespace rayd::tune::internal {

// The recorded curves by the part of their config that a sweep's param_space determines.
class ReplayTable {
 public:
  ReplayTable(const RecordedCurves& curves, const ParamSpace& space);

  // What identifies `config` within `space`: its values at the space's paths, numbers to 12
  // significant digits. Empty when the config lacks one of the paths.
  std::string KeyOf(const nlohmann::json& config) const;
  // The curve trial `trial` plays for `config` (the same one each time it asks with the same
  // config; trials asking for one config take its curves in turn), or null.
  const RecordedCurve* Find(size_t trial, const nlohmann::json& config);
  bool Has(const std::string& key) const { return by_key_.count(key) != 0; }
  size_t distinct() const { return by_key_.size(); }

 private:
  const ParamSpace& space_;
  std::map<std::string, std::vector<const RecordedCurve*>> by_key_;
  std::map<std::string, size_t> taken_;  // curves handed out per key
  std::map<size_t, std::pair<std::string, const RecordedCurve*>> assigned_;  // by trial
};

class ReplayRunner : public TrialRunner {
 public:
  // `loop`, `table`, `scaling` and `simulated` must outlive the runner. Each run takes
  // `scaling`'s workers (an elastic trial its least) out of simulated.workers, waiting while
  // they are not free; `mode` ("min" or "max") says which value of `metric` is best.
  ReplayRunner(EventLoop& loop, ReplayTable& table, std::string metric, std::string mode,
               const train::ScalingConfig& scaling, const TuneConfig::Simulated& simulated);

  void SetPost(PostFn post) override { post_ = std::move(post); }
  void Start(const RunRequest& request) override;
  void Answer(size_t trial, bool go_on) override;
  void Finished(size_t trial) override;
  void ReleaseIdle() override {}
  int FreeWorkers() override;
  bool AnyWaitingForWorkers() override { return !waiting_.empty(); }
  void GrowTo(size_t trial, int workers) override;
  double NowSeconds() override { return now_; }

  // The iterations, clock and trace so far (Simulation's fields).
  void Fill(Simulation& simulation) const;

 private:
  struct Run {
    std::string trial_id;
    std::string dir;
    nlohmann::json config;
    const RecordedCurve* curve = nullptr;
    size_t place = 0;                      // results of the curve played so far (over every run)
    int next_checkpoint = 1;               // the index the next checkpoint gets
    std::vector<std::string> checkpoints;  // this run's, oldest first
    int workers = 0;                       // held while it runs (0: waiting for them)
    int grow_to = 0;                       // GrowTo's size, from its next result on (held already)
    bool restarting = false;               // its next iteration pays simulated.restart_s
    double busy_since = 0;                 // when `workers` last changed
  };
  // (simulated time, order of scheduling, trial)
  using Due = std::tuple<double, uint64_t, size_t>;

  void ScheduleNext(size_t trial);
  // The workers a run starts on: num_workers, or an elastic trial's least.
  int StartSize() const;
  // Iteration `place` of the run's curve on its workers.
  double Duration(const Run& run) const;
  // The run's workers go back (busy time counted), and waiting runs that now fit start.
  void Release(size_t trial);
  void StartWaiting();
  void End(size_t trial, std::string error, bool stopped);
  // The workers runs may hold now: simulated.workers, the autoscaled nodes' (0: unlimited).
  int Capacity() const;
  void RequestHandOver();
  void HandOver();
  void Play(size_t trial);

  EventLoop& loop_;
  ReplayTable& table_;
  std::string metric_;
  std::string mode_;
  const train::ScalingConfig& scaling_;
  const TuneConfig::Simulated& simulated_;
  int used_ = 0;                 // workers the runs hold
  double busy_ = 0;              // worker-seconds spent by ended runs and changed sizes
  std::vector<size_t> waiting_;  // started runs waiting for workers, in order
  PostFn post_;
  std::map<size_t, Run> runs_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  uint64_t scheduled_ = 0;
  int out_ = 0;  // events given to the controller and not yet answered or finished
  bool hand_over_posted_ = false;
  double now_ = 0;
  std::optional<SimulatedNodes> nodes_;  // simulated.autoscaler set
  int64_t iterations_ = 0;
  std::vector<Simulation::Event> trace_;
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);
};

}  // namespace rayd::tune::internal
