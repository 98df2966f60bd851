// ResultGrid's out-of-line methods: counting trials by status, picking the best one, and the
// Pareto front of a sweep with several objectives.

#include <rayd/api/errors.h>
#include <rayd/tune/tuner.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace rayd::tune {

int ResultGrid::num_errors() const {
  return static_cast<int>(std::count_if(trials_.begin(), trials_.end(),
                                        [](const TrialResult& t) { return t.status == "ERROR"; }));
}

int ResultGrid::num_terminated() const {
  return static_cast<int>(std::count_if(trials_.begin(), trials_.end(), [](const TrialResult& t) {
    return t.status == "TERMINATED";
  }));
}

const TrialResult& ResultGrid::GetBestResult(const std::string& metric,
                                             const std::string& mode) const {
  const std::string& by = metric.empty() ? metric_ : metric;
  const std::string& order = mode.empty() ? mode_ : mode;
  if (by.empty() && !objectives_.empty()) {
    throw RaydError(
        "GetBestResult: the sweep has several objectives, so there is no one best trial: give "
        "a rule (a Scalarization of the objectives), name the metric and mode to rank by, or "
        "take ParetoFront()");
  }
  if (by.empty()) {
    throw RaydError("GetBestResult: no metric given, and the TuneConfig names none");
  }
  if (order != "min" && order != "max") {
    throw RaydError("GetBestResult: mode must be \"min\" or \"max\", got \"" + order + "\"");
  }
  // As Ray's: the last result of each trial, NaN (and here infinities: diverged) skipped, the
  // first of equals wins.
  const TrialResult* best = nullptr;
  double best_value = 0;
  size_t diverged = 0;
  for (const TrialResult& trial : trials_) {
    auto it = trial.metrics.find(by);
    if (it == trial.metrics.end()) continue;
    if (!std::isfinite(it->second)) {
      ++diverged;
      continue;
    }
    bool better = order == "min" ? it->second < best_value : it->second > best_value;
    if (best == nullptr || better) {
      best = &trial;
      best_value = it->second;
    }
  }
  if (best == nullptr) {
    throw RaydError("GetBestResult: none of the " + std::to_string(trials_.size()) +
                    " trials reported a finite value of metric \"" + by + "\"" +
                    (diverged > 0
                         ? " (" + std::to_string(diverged) + " ended on NaN or an infinity)"
                         : std::string()));
  }
  return *best;
}

const TrialResult& ResultGrid::GetBestResult(const Scalarization& rule) const {
  if (objectives_.empty()) {
    throw RaydError("GetBestResult: a scalarization needs a sweep with objectives; this one "
                    "ranks by metric \"" + metric_ + "\"");
  }
  for (const auto& [metric, weight] : rule.weights) {
    const bool objective = std::any_of(objectives_.begin(), objectives_.end(),
                                       [&](const Objective& o) { return o.metric == metric; });
    if (!objective) {
      throw RaydError("GetBestResult: the rule weighs \"" + metric + "\", not an objective");
    }
  }
  const TrialResult* best = nullptr;
  double best_value = 0;
  for (const TrialResult& trial : trials_) {
    const std::optional<double> value = Scalarize(rule, objectives_, constraints_, trial.metrics);
    if (value && (best == nullptr || *value > best_value)) {
      best = &trial;
      best_value = *value;
    }
  }
  if (best == nullptr) {
    throw RaydError("GetBestResult: none of the " + std::to_string(trials_.size()) +
                    " trials reported every objective the rule weighs");
  }
  return *best;
}

bool ResultGrid::Feasible(size_t i) const {
  return TotalViolation(constraints_, trials_.at(i).metrics) == 0;
}

std::vector<size_t> ResultGrid::ParetoFront() const {
  if (objectives_.empty()) return {};
  std::vector<size_t> reported;  // trials with at least one objective in their last result
  std::vector<std::vector<double>> points;
  std::vector<double> violations;
  for (size_t i = 0; i < trials_.size(); ++i) {
    const Metrics& m = trials_[i].metrics;
    const bool any = std::any_of(objectives_.begin(), objectives_.end(),
                                 [&](const Objective& o) { return m.contains(o.metric); });
    if (!any) continue;
    reported.push_back(i);
    points.push_back(ObjectiveVector(objectives_, m));
    violations.push_back(TotalViolation(constraints_, m));
  }
  std::vector<size_t> front;
  for (size_t k : tune::ParetoFront(points, violations)) {
    // With no trial feasible, the least-violating ones are no Pareto front.
    if (violations[k] == 0) front.push_back(reported[k]);
  }
  return front;
}

double ResultGrid::FrontHypervolume(std::vector<double>* reference) const {
  const std::vector<Objective>& objectives = objectives_;
  if (objectives.empty()) return 0;
  std::vector<double> ref;
  if (reference_point_.size() == objectives.size()) {
    for (size_t d = 0; d < objectives.size(); ++d) {
      ref.push_back(objectives[d].maximize ? -reference_point_[d] : reference_point_[d]);
    }
  } else {
    std::vector<std::vector<double>> points;
    for (const TrialResult& t : trials_) points.push_back(ObjectiveVector(objectives, t.metrics));
    ref = DerivedReferencePoint(points);
  }
  if (ref.empty()) return 0;  // some objective no trial reported
  std::vector<std::vector<double>> front;
  for (size_t i : ParetoFront()) front.push_back(ObjectiveVector(objectives, trials_[i].metrics));
  if (reference != nullptr) *reference = ref;
  return front.empty() ? 0 : Hypervolume(front, ref);
}

}  // namespace rayd::tune
