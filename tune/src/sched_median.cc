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
//
// With several objectives (MO-MedianStopping) the rule runs, unchanged, on one number per result:
// MedianStoppingConfig::scalarization's, higher being better (MedianScalarizer below).

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

// A result's scalarised value (Scalarization's contract, schedulers.h), in bands that keep every
// feasible result above every infeasible one and are far enough from the double's limits that
// running means of thousands of them stay finite:
//   feasible:   clamped to [-kScalarBound, kScalarBound]; a diverged weighted objective is
//               -kScalarBound;
//   infeasible: -kScalarBound * (2 + log1p(violation)), below -2 * kScalarBound, decreasing with
//               the violation (capped at kWorstObjective: at most ~693 * kScalarBound).
class MedianScalarizer {
 public:
  static constexpr double kScalarBound = 1e290;

  // `scalarization` names objectives of `ranking` only (MakeScheduler checks).
  MedianScalarizer(const Scalarization& scalarization, ParetoRanking ranking)
      : kind_(scalarization.kind), ranking_(std::move(ranking)) {
    for (const Objective& o : ranking_.objectives()) {
      auto w = scalarization.weights.find(o.metric);
      weights_.push_back(w == scalarization.weights.end() ? 0.0 : w->second);
      auto r = scalarization.reference.find(o.metric);
      const double ideal = r == scalarization.reference.end() ? 0.0 : r->second;
      ideal_.push_back(o.maximize ? -ideal : ideal);  // minimised, as ObjectiveVector's points
    }
  }

  Scalarization::Kind kind() const { return kind_; }

  // nullopt when `metrics` lacks an objective weighted above 0.
  std::optional<double> Value(const Metrics& metrics) const {
    const std::vector<Objective>& objectives = ranking_.objectives();
    bool diverged = false;
    for (size_t i = 0; i < objectives.size(); ++i) {
      if (weights_[i] == 0) continue;
      auto it = metrics.find(objectives[i].metric);
      if (it == metrics.end()) return std::nullopt;
      diverged = diverged || !std::isfinite(it->second);
    }
    const ParetoRanking::Standing standing = ranking_.Measure(metrics);
    if (standing.violation > 0) return -kScalarBound * (2 + std::log1p(standing.violation));
    if (diverged) return -kScalarBound;
    double value = 0;
    if (kind_ == Scalarization::Kind::kWeightedSum) {
      for (size_t i = 0; i < weights_.size(); ++i) value -= weights_[i] * standing.point[i];
    } else {
      double worst = -INFINITY;
      for (size_t i = 0; i < weights_.size(); ++i) {
        if (weights_[i] > 0) worst = std::max(worst, weights_[i] * (standing.point[i] - ideal_[i]));
      }
      value = -worst;
    }
    if (std::isnan(value)) return -kScalarBound;  // +inf and -inf terms: extremes both ways
    return std::clamp(value, -kScalarBound, kScalarBound);
  }

 private:
  const Scalarization::Kind kind_;
  const ParetoRanking ranking_;
  std::vector<double> weights_;  // per objective, in order
  std::vector<double> ideal_;    // per objective, minimised (kChebyshev)
};

class MedianStoppingScheduler final : public TrialScheduler {
 public:
  // `scalarizer` set: several objectives, and `metric` and `mode` are unused.
  MedianStoppingScheduler(const MedianStoppingConfig& config, std::string metric, std::string mode,
                          std::optional<MedianScalarizer> scalarizer = std::nullopt)
      : config_(config),
        metric_(std::move(metric)),
        max_mode_(scalarizer || mode == "max"),
        scalarizer_(std::move(scalarizer)) {}

  const char* name() const override { return scalarizer_ ? "MO-MedianStopping" : "MedianStopping"; }

  Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) override {
    auto t = Lookup(result.metrics, config_.time_attr);
    auto value = Value(result.metrics);
    if (!t || !value) return Decision::Continue();
    if (stopped_.count(trial_id)) return Decision::Continue();  // Ray: falls back to FIFO
    results_[trial_id].push_back({*t, *value});
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
    std::string out = name();
    if (scalarizer_) out += std::string(" (") + ToString(scalarizer_->kind()) + ")";
    return out + ": " + std::to_string(stopped_.size()) +
           (config_.hard_stop ? " stopped" : " paused");
  }

 private:
  struct Point {
    double time;
    double value;
  };

  // What the rule compares: the metric's value (a diverged one the worst under the mode), or
  // the scalarised value; nullopt when the result lacks it.
  std::optional<double> Value(const Metrics& metrics) const {
    if (scalarizer_) return scalarizer_->Value(metrics);
    const double sign = max_mode_ ? 1.0 : -1.0;
    auto score = Score(metrics, metric_, sign);
    if (!score) return std::nullopt;
    return sign * *score;
  }

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
  const std::optional<MedianScalarizer> scalarizer_;   // set: several objectives
  std::map<std::string, std::vector<Point>> results_;  // every result with the metric, per trial
  std::set<std::string> stopped_;
};

}  // namespace

std::unique_ptr<TrialScheduler> MakeMedianStopping(const MedianStoppingConfig& config,
                                                   std::string metric, std::string mode) {
  return std::make_unique<MedianStoppingScheduler>(config, std::move(metric), std::move(mode));
}

std::unique_ptr<TrialScheduler> MakeMoMedianStopping(const MedianStoppingConfig& config,
                                                     ParetoRanking ranking) {
  return std::make_unique<MedianStoppingScheduler>(
      config, "", "max", MedianScalarizer(*config.scalarization, std::move(ranking)));
}

}  // namespace rayd::tune::internal

namespace rayd::tune {

std::optional<double> Scalarize(const Scalarization& scalarization,
                                const std::vector<Objective>& objectives,
                                const std::vector<Constraint>& constraints, const Metrics& metrics) {
  return internal::MedianScalarizer(scalarization, internal::ParetoRanking(objectives, constraints))
      .Value(metrics);
}

}  // namespace rayd::tune
