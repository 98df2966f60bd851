// MOTPE's split and weights (pure functions over points), and the Searcher that feeds a
// TpeSearcher of outcomes (mo_tpe.h).

#include "mo_tpe.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <utility>

namespace rayd::tune::internal {
namespace {

// Optuna's EPS: what an infeasible "below" trial weighs, what is added to each contribution,
// and the reference coordinate where the worst value is 0.
constexpr double kMoTpeEps = 1e-12;
// Contributions this close (relatively) are a tie, which the earlier candidate wins.
constexpr double kMoTpeTie = 1e-12;

// points[indices], each coordinate divided by the largest magnitude of its objective among
// them (1 where that is 0): volumes all scale by the same factor, so no choice changes.
std::vector<std::vector<double>> ScaledSubset(const std::vector<std::vector<double>>& points,
                                              const std::vector<size_t>& indices) {
  std::vector<std::vector<double>> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(points.at(i));
  if (out.empty()) return out;
  for (size_t d = 0; d < out[0].size(); ++d) {
    double scale = 0;
    for (const auto& p : out) scale = std::max(scale, std::abs(p.at(d)));
    if (scale == 0) continue;
    for (auto& p : out) p.at(d) /= scale;
  }
  return out;
}

// Optuna's reference point: per objective max(1.1 w, 0.9 w) for the worst value w, EPS for 0.
std::vector<double> ReferenceBeyond(const std::vector<std::vector<double>>& points) {
  std::vector<double> worst = points.at(0);
  for (const auto& p : points) {
    for (size_t d = 0; d < worst.size(); ++d) worst[d] = std::max(worst[d], p.at(d));
  }
  for (double& w : worst) {
    w = std::max(1.1 * w, 0.9 * w);
    if (w == 0) w = kMoTpeEps;
  }
  return worst;
}

bool ClearlyAbove(double a, double b) {
  return a > b + kMoTpeTie * std::max(std::abs(a), std::abs(b));
}

}  // namespace

std::vector<size_t> GreedyHypervolumeSubset(const std::vector<std::vector<double>>& points,
                                            const std::vector<size_t>& candidates, size_t k) {
  k = std::min(k, candidates.size());
  if (k == 0) return {};
  const std::vector<std::vector<double>> scaled = ScaledSubset(points, candidates);
  const std::vector<double> reference = ReferenceBeyond(scaled);
  std::vector<bool> taken(candidates.size(), false);
  std::vector<std::vector<double>> picked;  // scaled points, in the order picked
  std::vector<size_t> out;
  double picked_volume = 0;
  while (out.size() < k) {
    std::optional<size_t> best;
    double best_gain = 0;
    for (size_t j = 0; j < candidates.size(); ++j) {
      if (taken[j]) continue;
      picked.push_back(scaled[j]);
      const double gain = Hypervolume(picked, reference) - picked_volume;
      picked.pop_back();
      if (!best || ClearlyAbove(gain, best_gain)) best = j, best_gain = gain;
    }
    taken[*best] = true;
    picked.push_back(scaled[*best]);
    picked_volume = Hypervolume(picked, reference);
    out.push_back(candidates[*best]);
  }
  return out;
}

TpeSplit SplitByFrontsAndHypervolume(const std::vector<std::vector<double>>& points,
                                     const std::vector<double>& violations, size_t n_below) {
  if (violations.size() != points.size()) {
    throw std::invalid_argument("one violation per point is needed");
  }
  n_below = std::min(n_below, points.size());
  std::vector<bool> is_below(points.size(), false);
  size_t filled = 0;
  if (n_below > 0) {
    for (const std::vector<size_t>& front : NonDominatedSort(points, violations)) {
      if (filled + front.size() <= n_below) {
        for (size_t i : front) is_below[i] = true;
        filled += front.size();
        if (filled == n_below) break;
        continue;
      }
      for (size_t i : GreedyHypervolumeSubset(points, front, n_below - filled)) is_below[i] = true;
      break;
    }
  }
  TpeSplit split;
  for (size_t i = 0; i < points.size(); ++i) {
    (is_below[i] ? split.below : split.above).push_back(i);
  }
  return split;
}

std::vector<double> BelowWeights(const std::vector<std::vector<double>>& points,
                                 const std::vector<double>& violations,
                                 const std::vector<size_t>& below) {
  std::vector<size_t> feasible;  // positions in `below`
  for (size_t k = 0; k < below.size(); ++k) {
    if (violations.at(below[k]) == 0) feasible.push_back(k);
  }
  // None feasible yet: lead towards the least violation (see mo_tpe.h).
  if (feasible.empty()) return std::vector<double>(below.size(), 1.0);
  std::vector<double> weights(below.size(), kMoTpeEps);
  const size_t objectives = points.at(below[feasible[0]]).size();
  if (feasible.size() == 1 || objectives < 2) {
    for (size_t k : feasible) weights[k] = 1.0;
    return weights;
  }
  std::vector<size_t> indices;
  for (size_t k : feasible) indices.push_back(below[k]);
  std::vector<std::vector<double>> scaled = ScaledSubset(points, indices);
  const std::vector<double> reference = ReferenceBeyond(scaled);
  const double total = Hypervolume(scaled, reference);
  std::vector<double> contributions;
  for (size_t j = 0; j < scaled.size(); ++j) {
    std::vector<std::vector<double>> others = scaled;
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(j));
    contributions.push_back(total - Hypervolume(others, reference) + kMoTpeEps);
  }
  // A contribution is a volume in as many dimensions as objectives: its k-th root, the side of
  // a cube that holds it, is how far the trial stands out (mo_tpe.h says why not the volume).
  const double top = *std::max_element(contributions.begin(), contributions.end());
  const double root = 1.0 / static_cast<double>(objectives);
  for (size_t j = 0; j < feasible.size(); ++j) {
    weights[feasible[j]] = std::pow(std::clamp(contributions[j] / top, 0.0, 1.0), root);
  }
  return weights;
}

namespace {

TpeOptions MoTpeOptions(const TpeConfig& config, size_t objectives) {
  if (objectives == 0) throw std::invalid_argument("tpe over objectives needs one: none given");
  return {.n_startup_trials = config.n_startup_trials,
          .n_ei_candidates = config.n_ei_candidates,
          .gamma = config.gamma,
          .prior_weight = config.prior_weight,
          .multivariate = config.multivariate,
          .weight_by_bandwidth = config.weight_by_bandwidth,
          .objectives = objectives};
}

}  // namespace

MoTpeSearch::MoTpeSearch(const ParamSpace& space, std::vector<Objective> objectives,
                         std::vector<Constraint> constraints, const TpeConfig& config,
                         int num_samples, uint64_t seed, std::optional<std::string> budget_attr)
    : objectives_(std::move(objectives)),
      constraints_(std::move(constraints)),
      budget_attr_(std::move(budget_attr)),
      tpe_(space, "min", MoTpeOptions(config, objectives_.size()), seed),
      num_samples_(static_cast<size_t>(std::max(num_samples, 0))) {}

nlohmann::json MoTpeSearch::Next() {
  startup_ = tpe_.in_startup();
  return tpe_.Suggest();
}

TpeOutcome MoTpeSearch::OutcomeOf(const std::map<std::string, double>& result) const {
  return {ObjectiveVector(objectives_, result), TotalViolation(constraints_, result)};
}

void MoTpeSearch::OnTrialResult(const nlohmann::json& config,
                                const std::map<std::string, double>& result) {
  TpeOutcome outcome = OutcomeOf(result);
  if (budget_attr_) {
    if (auto budget = result.find(*budget_attr_); budget != result.end()) {
      tpe_.ObserveAt(config, outcome, budget->second);
    }
  }
  running_[config.dump()] = std::move(outcome);
}

void MoTpeSearch::OnTrialEnd(const nlohmann::json& config, std::optional<double> /*value*/) {
  auto it = running_.find(config.dump());
  if (it == running_.end()) {
    tpe_.Observe(config, std::nullopt);  // no result: it only stops being pending
    return;
  }
  tpe_.Observe(config, it->second);
  running_.erase(it);
}

nlohmann::json MoTpeSearch::State() const {
  nlohmann::json state = tpe_.State();
  nlohmann::json running = nlohmann::json::array();
  for (const auto& [text, o] : running_) {
    running.push_back(
        {{"config", nlohmann::json::parse(text)},
         {"point", o.point},
         {"violation", std::isinf(o.violation) ? nlohmann::json() : nlohmann::json(o.violation)}});
  }
  state["running"] = std::move(running);
  return state;
}

void MoTpeSearch::Restore(const nlohmann::json& state) {
  // Everything is read before anything changes: a state that does not fit leaves this as it was.
  std::map<std::string, TpeOutcome> running;
  try {
    // A single-objective TPE's state has no "running": TpeSearcher::Restore says what it is.
    for (const nlohmann::json& r : state.value("running", nlohmann::json::array())) {
      TpeOutcome o;
      o.point = r.at("point").get<std::vector<double>>();
      if (o.point.size() != objectives_.size()) {
        throw std::invalid_argument("the saved tpe state has " + std::to_string(o.point.size()) +
                                    " objectives, the sweep " + std::to_string(objectives_.size()));
      }
      const nlohmann::json& v = r.at("violation");
      o.violation = v.is_null() ? std::numeric_limits<double>::infinity() : v.get<double>();
      running[r.at("config").dump()] = std::move(o);
    }
    tpe_.Restore(state);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the saved tpe state: ") + e.what());
  }
  running_ = std::move(running);
}

}  // namespace rayd::tune::internal
