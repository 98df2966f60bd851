// The median stopping rule (Golovin et al., "Google Vizier"), after Ray Tune's
// MedianStoppingRule: past grace_period, a trial whose best result so far is worse than the
// median of the other trials' running means at the same time is stopped (paused without
// hard_stop). A trial's running mean at time t averages its results with
// grace_period <= time <= t; "other trials" are those that have reported at t or later.
//
// Simplified from Ray: with too few other trials it always continues (Ray may pause it to yield
// to pending trials, which this scheduler cannot see), and a trial paused for being below the
// median is never resumed by the scheduler (Ray's FIFO fallback resumes it after every pending
// trial; the Tuner ends paused trials that nothing resumes).

#include <algorithm>
#include <map>
#include <set>

#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

class MedianStoppingScheduler final : public TrialScheduler {
 public:
  MedianStoppingScheduler(const MedianStoppingConfig& config, std::string metric, std::string mode)
      : config_(config), metric_(std::move(metric)), max_mode_(mode == "max") {}

  const char* name() const override { return "MedianStopping"; }

  Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) override {
    auto t = Lookup(result.metrics, config_.time_attr);
    const double sign = max_mode_ ? 1.0 : -1.0;
    auto score = Score(result.metrics, metric_, sign);
    if (!t || !score) return Decision::Continue();
    const double value = sign * *score;  // a diverged trial's worst value under the mode
    if (stopped_.count(trial_id)) return Decision::Continue();  // Ray: falls back to FIFO
    results_[trial_id].push_back({*t, value});
    if (*t < config_.grace_period) return Decision::Continue();

    std::vector<double> means;
    for (const auto& [other, history] : results_) {
      if (other == trial_id || history.back().time < *t) continue;
      if (auto mean = RunningMean(history, *t)) means.push_back(*mean);
    }
    if (static_cast<int>(means.size()) < config_.min_samples_required) {
      return Decision::Continue();
    }
    const double median = Median(means);
    const double best = Best(results_[trial_id]);
    if (max_mode_ ? median > best : median < best) {
      stopped_.insert(trial_id);
      return config_.hard_stop ? Decision::Stop() : Decision::Pause();
    }
    return Decision::Continue();
  }

  nlohmann::json State() const override {
    nlohmann::json results = nlohmann::json::object();
    for (const auto& [id, history] : results_) {
      nlohmann::json points = nlohmann::json::array();
      for (const Point& p : history) points.push_back({p.time, p.value});
      results[id] = std::move(points);
    }
    return {{"results", std::move(results)}, {"stopped", stopped_}};
  }

  void Restore(const nlohmann::json& state) override {
    std::map<std::string, std::vector<Point>> results;
    for (const auto& [id, points] : state.at("results").items()) {
      for (const nlohmann::json& p : points) {
        results[id].push_back({p.at(0).get<double>(), p.at(1).get<double>()});
      }
    }
    stopped_ = state.at("stopped").get<std::set<std::string>>();
    results_ = std::move(results);
  }

  std::string Summary() const override {
    return std::string("MedianStopping: ") + std::to_string(stopped_.size()) +
           (config_.hard_stop ? " stopped" : " paused");
  }

 private:
  struct Point {
    double time;
    double value;
  };

  std::optional<double> RunningMean(const std::vector<Point>& history, double t) const {
    double sum = 0;
    int n = 0;
    for (const Point& p : history) {
      if (p.time >= config_.grace_period && p.time <= t) {
        sum += p.value;
        ++n;
      }
    }
    if (n == 0) return std::nullopt;  // Ray's np.mean([]) is NaN, which np.median propagates
    return sum / n;
  }

  double Best(const std::vector<Point>& history) const {
    double best = history.front().value;
    for (const Point& p : history)
      best = max_mode_ ? std::max(best, p.value) : std::min(best, p.value);
    return best;
  }

  const MedianStoppingConfig config_;
  const std::string metric_;
  const bool max_mode_;
  std::map<std::string, std::vector<Point>> results_;  // every result with the metric, per trial
  std::set<std::string> stopped_;
};

}  // namespace

std::unique_ptr<TrialScheduler> MakeMedianStopping(const MedianStoppingConfig& config,
                                                   std::string metric, std::string mode) {
  return std::make_unique<MedianStoppingScheduler>(config, std::move(metric), std::move(mode));
}

}  // namespace rayd::tune::internal
