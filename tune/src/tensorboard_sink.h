#pragma once
// TensorBoard event files in each trial's directory, as Ray Tune writes them by default (its
// TBXLoggerCallback): every result's numbers as scalars tagged "ray/tune/<metric>" (Ray's tags,
// so existing TensorBoard layouts keep working) at step training_iteration. One file per trial
// and Tuner run, events.out.tfevents.<unix seconds>.<host>.<pid> (a resumed sweep starts new
// files; TensorBoard reads them together). `tensorboard --logdir <experiment dir>` shows every
// trial as a run. A file that cannot be written is warned about once, and that trial's events
// are skipped.

#include <map>
#include <optional>
#include <set>
#include <string>

#include "event_file.h"
#include "result_sink.h"

namespace rayd::tune::internal {

class TensorBoardSink : public ResultSink {
 public:
  explicit TensorBoardSink(std::string experiment_dir) : dir_(std::move(experiment_dir)) {}

  void OnResult(const Trial& trial, const Metrics& result) override;
  // A trial that ended for good closes its file: a sweep of thousands of trials holds open only
  // the files of trials that may still report.
  void OnStatus(const Trial& trial) override;
  // Writes this tick's events, a write per trial.
  void OnTick(const SweepView& view) override;

 private:
  std::string dir_;
  // By trial id; nullopt once writing failed.
  std::map<std::string, std::optional<EventFileWriter>> writers_;
  std::set<std::string> unflushed_;  // trial ids with events written since the last tick
};

}  // namespace rayd::tune::internal
