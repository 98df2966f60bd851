#pragma once
// The Tuner's controller: drives every trial of a sweep from one thread and one event queue.
//
// It starts trials through a TrialRunner while slots are free (max_concurrent; paused trials
// the scheduler wants back first, then PBT's restarts, then new trials in order), and handles
// the runs' events one at a time, in arrival order: each result goes to the sinks
// (result_sink.h: trial files, MLflow, the dashboard feed, the console table, PBT's lineage
// logs), is checked against TuneConfig::stop and given to the scheduler,
// and the run is told to go on or to end; each run's end decides what its trial becomes
// (terminated, paused, errored, pending again for PBT's exploit or after a stop request).
// experiment_state.json is saved after every change (throttled), so a crashed sweep resumes.
//
// Threading: Run() drives `loop` on the calling thread, and everything the controller does
// runs there, woken by what happens: a run's event, the stop signal, the save throttle's
// timer, and a once-a-second tick for the console table and the dashboard feed. The runner's
// events may be posted from any thread.

#include <rayd/base/event_loop.h>
#include <rayd/tune/tuner.h>
#include <uv.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "result_sink.h"
#include "searcher.h"
#include "stop_signal.h"
#include "trial.h"
#include "trial_runner.h"

namespace rayd::tune::internal {

class Controller {
 public:
  // Everything passed by reference must outlive the controller. `stop` is the Tuner's: once
  // raised, running trials stop at their next result and stay resumable.
  Controller(EventLoop& loop, const Trainable& trainable, const TuneConfig& tune,
             const train::RunConfig& run, std::unique_ptr<TrialScheduler> scheduler,
             std::string experiment_dir, std::vector<std::unique_ptr<ResultSink>> sinks,
             StopSignal& stop, TrialRunner& runner);
  ~Controller();

  // New trials from `searcher` once the given ones are all started, as slots free, named
  // MakeTrial(tag, index, name, config) (trial.h); it hears how each trial ended, and its state
  // is saved with the experiment's. Call before Run.
  void SetSearcher(std::unique_ptr<Searcher> searcher, std::string tag, std::string name);

  // The scheduler was restored (TrialScheduler::Restore) from a state that had seen `seen[id]`
  // results of each trial: Run gives it only the results after those. Call before Run.
  void SchedulerRestored(std::map<std::string, size_t> seen) { scheduler_seen_ = std::move(seen); }

  // Runs `trials` (new, or loaded by a resume) until none is left to run, or until a stop
  // request has ended every running one; returns them as they ended.
  ResultGrid Run(std::vector<Trial> trials, int max_concurrent);

 private:
  // What the controller decided about a running trial, applied when its run ends.
  enum class Pending { kNone, kStop, kPause, kExploit, kInterrupt };
  struct Running {
    Pending pending = Pending::kNone;
    std::string cloned;         // kExploit: the donor's checkpoint, copied into this trial
    nlohmann::json new_config;  // kExploit
    // Elastic trials: the workers of its latest result (0: none yet), the size it was told to
    // grow to (0: none pending), and since when it has had its size.
    int workers = 0;
    int growing_to = 0;
    double sized_at = 0;  // TrialRunner::NowSeconds
  };

  void LaunchWhatFits();
  // Elastic trials: the cluster's free workers to the running trials the scheduler ranks best
  // first (see controller.cc).
  void GrowElastic(bool before_new);
  void PublishGrowthWant();
  // An elastic trial that may grow now: its size known, no answer or growth pending, below its
  // most, its last resize resize_interval_s old.
  bool CanGrowNow(const Running& r, double now) const;
  // One that may, and the scheduler judged (GrowsBeforeNew): new trials wait for free workers.
  bool JudgedCanGrow();
  // A new trial from the searcher, if it has one; its index.
  std::optional<size_t> MakeNext();
  // The trial ended for good (TERMINATED or ERROR): the searcher learns how.
  void Ended(const Trial& trial);
  bool FinishStrandedPauses();
  std::optional<size_t> IndexOf(const std::string& id) const;
  void Start(size_t index);
  void Post(RunEvent event);
  // Handles the posted events, then takes the sweep's next steps.
  void Drain();
  void Handle(RunEvent event);
  // Starts what fits, ends the loop when nothing is left to run.
  void Step();
  void OnStopSignal();
  bool OnResult(size_t index, train::ReportedResult result);
  void OnDone(size_t index, const train::TrainResult& ended);
  Status Clone(size_t index, const std::string& donor_id, std::string* cloned);
  bool CloneForExploit(size_t index, const Decision& decision, std::string* cloned);
  void InterruptAll();
  void Save(bool now = false);
  // Gives every sink the sweep as it stands.
  void Tick(bool finished);

  EventLoop& loop_;
  StopSignal& stop_;
  uv_poll_t* stop_watch_ = nullptr;  // owned; freed by its close callback
  Timer save_timer_;
  Timer tick_timer_;
  bool done_ = false;
  // Expires with the controller: what it posted to the loop checks it first.
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);
  const Trainable& trainable_;
  const TuneConfig& tune_;
  const train::RunConfig& run_;
  std::unique_ptr<TrialScheduler> scheduler_;
  std::optional<std::map<std::string, size_t>> scheduler_seen_;  // set: restored
  std::unique_ptr<Searcher> searcher_;  // null: every trial was given to Run
  std::string trial_tag_, trial_name_;
  std::string dir_;
  std::vector<std::unique_ptr<ResultSink>> sinks_;  // called in order
  TrialRunner& runner_;
  std::vector<Trial> trials_;
  std::vector<TrialFiles> files_;
  std::map<size_t, Running> running_;
  std::map<size_t, std::string> result_checkpoint_;  // the checkpoint of each trial's last result
  std::set<size_t> resume_when_paused_;  // promoted while their pausing run was still ending
  int max_concurrent_ = 1;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_save_;
  std::chrono::steady_clock::duration save_gap_{};  // from last_save_ to the next save
  bool save_pending_ = false;

  std::mutex mu_;
  std::deque<RunEvent> events_;  // guarded by mu_; a Drain is posted when it becomes non-empty
};

}  // namespace rayd::tune::internal
