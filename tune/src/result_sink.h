#pragma once
// ResultSink: what the Tuner does with its trials besides deciding about them: the trial files
// (trial_files_sink.h), experiment tracking (trial_tracking.h), the dashboard feed
// (dashboard_feed.h), the console table (console_table.h) and PBT's lineage logs
// (pbt_lineage.h), each a sink in its own file. The controller calls every sink, in order, on
// its thread; a sink's trouble is its own (it warns), never the sweep's, and nothing a sink
// does changes a decision.

#include <rayd/tune/schedulers.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trial.h"

namespace rayd::tune::internal {

// The sweep as the controller sees it after an event.
struct SweepView {
  const std::vector<Trial>& trials;
  int running = 0;
  int max_concurrent = 1;
  const TrialScheduler& scheduler;  // its Summary() only when shown: ticks come per event
  double elapsed_s = 0;
  bool finished = false;  // the sweep is over (the last call)
};

class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // A resumed trial's results from before the resume: nothing new to record, something to show.
  virtual void OnRestoredResult(const Trial& trial, const Metrics& result) {}
  // The trial's run starts (its first, or a later one after a pause, an exploit or a resume).
  virtual void OnTrialStart(const Trial& trial) {}
  // A result, persisted in result.json already and in `trial.history` now.
  virtual void OnResult(const Trial& trial, const Metrics& result) {}
  // A PBT exploit the controller applied: Ray's policy line (Decision::lineage).
  virtual void OnExploit(const nlohmann::json& lineage) {}
  // The trial's status changed (to ERROR: `trial.error` says why).
  virtual void OnStatus(const Trial& trial) {}
  // A failure the trial's run recovered from by restarting (max_failures), as it ended.
  virtual void OnFailure(const Trial& trial, const std::string& error) {}
  // After every event the controller handled, and last with `view.finished`.
  virtual void OnTick(const SweepView& view) {}
};

}  // namespace rayd::tune::internal
