#pragma once
// TrainingRun: one Fit of a train loop, driven without blocking, so that one thread can drive
// many at once (the Tuner's controller drives every trial of a sweep this way; Trainer::Fit
// drives one and waits for it).
//
//   rayd::EventLoop loop;
//   rayd::train::TrainingRun run(loop, "TrainMlp", config, scaling, run_config, {}, {
//       .on_result = [&](const ReportedResult& r) { run.Answer(KeepGoing(r)); },
//       .on_done = [&](TrainResult r) { loop.Stop(); }});
//   loop.Run();
//
// The run is the same sequence of attempts as Fit (trainer.h): reserve the gang, start its
// ranks, host the rendezvous, run the loop on every rank, restart from the latest checkpoint
// within max_failures. Each step is a call whose answer wakes the run on `loop` (the runtime's
// WhenReady), with a deadline timer beside it; nothing waits in between. Rank 0's reports
// reach the driver as they happen: one Poll of rank 0 is always in flight, and rank 0 answers
// it the moment it reports (or its loop ends).
//
// Threading: every method, and every callback, runs on `loop`'s thread. The calls that set up
// and tear down a gang (creating the group and the actors, killing them) are short round trips
// to the head made on that thread; nothing on it waits for training.

#include <rayd/base/event_loop.h>
#include <rayd/train/command.h>
#include <rayd/train/trainer.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

namespace rayd::train {

class TrainingRun {
 public:
  struct Callbacks {
    // A report of rank 0, persisted already (result.json, its checkpoint). No further result is
    // handed over, and no further report persisted, until Answer.
    std::function<void(const ReportedResult&)> on_result;
    // The run is over: finished, failed for good (after its restarts), or stopped by
    // Answer(false). Called once, last, from the loop (never from inside another call of the
    // run's), so the run may be destroyed inside it.
    std::function<void(TrainResult)> on_done;
  };

  // What every rank runs: a registered train loop's name, or a command (rayd/train/command.h).
  using Target = std::variant<std::string, Command>;

  // Checks the configuration as Fit does (throwing RaydError: no name or storage path, an
  // unknown train loop or a command that cannot run, GPUs shared between ranks of the group, MLflow that cannot be opened),
  // writes params.json, and starts the first attempt. FitOptions::on_report is not used here:
  // results go to callbacks.on_result. `loop` must outlive the run.
  TrainingRun(EventLoop& loop, Target target, nlohmann::json config,
              ScalingConfig scaling, RunConfig run, const FitOptions& options, Callbacks callbacks);
  // A run not over yet ends at once: its ranks are killed and its group removed; on_done is
  // not called.
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Answers the latest on_result: go on, or stop the run (a stopped single-rank run leaves its
  // loop at its next Report and its gang may be reused; a larger gang is torn down).
  void Answer(bool go_on);
  // An elastic run (ScalingConfig::min_workers) restarts at `workers` (at most num_workers) at
  // its next checkpointed report, from that checkpoint: how a Tuner gives a trial the workers
  // it decided it gets. Ignored when the run has that many already, or is not elastic.
  void GrowTo(int workers);
  // The run is waiting for its gang to be placed (the cluster lacks the room for now).
  bool WaitingForWorkers() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace rayd::train
