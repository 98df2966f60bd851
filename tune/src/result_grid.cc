// ResultGrid's out-of-line methods: counting trials by status and picking the best one.

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

}  // namespace rayd::tune
