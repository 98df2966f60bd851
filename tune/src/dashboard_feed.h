#pragma once
// DashboardFeed: publishes a running sweep to the cluster's KV, where the head's dashboard and
// /metrics read it (the keys are in rayd/runtime/cluster.h): a summary with the trial table, and
// each trial's learning curve (the sweep's metric against training_iteration), and the tails of
// a command trial's rank logs (rank_N.log in its directory) while it runs.
//
// Publishing is throttled (at most once a second, and less often when a publish is slow, so it
// never costs a sweep more than a few percent) and best effort: a head that cannot take the
// writes costs one warning, never the sweep.

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "front_progress.h"
#include "result_sink.h"
#include "trial.h"

namespace rayd::tune::internal {

class DashboardFeed : public ResultSink {
 public:
  // At most this many points per curve; a longer curve keeps every other point.
  static constexpr size_t kMaxCurvePoints = 2000;

  // The last this many bytes of each rank log are shown.
  static constexpr size_t kLogTailBytes = 8192;

  // `front`: a sweep with several objectives publishes its front and hypervolume from it (it
  // must outlive the feed and come before it among the sinks); null for one metric.
  DashboardFeed(std::string name, std::string metric, std::string mode, std::string scheduler,
                std::string experiment_dir, const FrontProgress* front = nullptr);

  // A trial reported `result` (before a resume, too: its curve is shown whole).
  void OnResult(const Trial& trial, const Metrics& result) override;
  void OnRestoredResult(const Trial& trial, const Metrics& result) override {
    OnResult(trial, result);
  }
  // Publishes the sweep's state if the throttle allows (always at its end).
  void OnTick(const SweepView& view) override { Publish(view.trials, view.finished); }
  void Publish(const std::vector<Trial>& trials, bool finished);

 private:
  using Curve = std::vector<std::pair<double, double>>;

  nlohmann::json Summary(const std::vector<Trial>& trials, bool finished) const;
  // {"objectives": [{metric, mode}], "points": [{trial_id, values, feasible, on_front}],
  //  "reference": [...], "hypervolume": [[elapsed_s, value], ...]}: values and the reference in
  // the objectives' units, the hypervolume at the reference as it is now.
  nlohmann::json FrontJson() const;
  // The rank logs of running trials (and of trials that ended since) that grew since last time.
  void PublishLogs(const std::vector<Trial>& trials);

  std::string name_, metric_, mode_, scheduler_, experiment_dir_;
  const FrontProgress* front_;
  std::map<std::string, uintmax_t> log_bytes_;  // by trial id: its rank logs' total size
  std::set<std::string> logs_final_;  // trials whose logs were published after they ended
  int64_t started_ms_;
  uint64_t results_ = 0;
  std::map<std::string, Curve> curves_;   // by trial id
  std::map<std::string, double> best_;    // by trial id: the best metric value reported
  std::set<std::string> changed_curves_;  // not published since they grew
  std::chrono::steady_clock::time_point next_publish_{};
  bool disabled_ = false;
};

}  // namespace rayd::tune::internal
