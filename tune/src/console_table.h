#pragma once
// The live trial table on the console (Ray's layout, trial.h's RenderTable), every
// `interval_s` while the sweep runs and once more at its end.

#include <chrono>
#include <string>

#include "result_sink.h"

namespace rayd::tune::internal {

class ConsoleTable : public ResultSink {
 public:
  // `trainable` must outlive the sink (its scaling makes the resources line).
  ConsoleTable(const Trainable& trainable, std::string metric, double interval_s)
      : trainable_(trainable), metric_(std::move(metric)), interval_(interval_s) {}

  void OnTick(const SweepView& view) override;

 private:
  const Trainable& trainable_;
  std::string metric_;
  std::chrono::duration<double> interval_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::time_point::min();
};

}  // namespace rayd::tune::internal
