// The TPE searcher: Parzen estimators over the space's internal coordinates, fitted on the
// good and the other observations, and proposals that maximise their density ratio.

#include "tpe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include "mo_tpe.h"
#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLogSqrt2Pi = 0.91893853320467274178;
// Optuna's default weights: the 25 newest observations weigh 1, older ones ramp down to 1/n.
constexpr size_t kFlatWeights = 25;

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double LogSumExp(const std::vector<double>& v) {
  double top = -kInf;
  for (double x : v) top = std::max(top, x);
  if (!std::isfinite(top)) return top;
  // Terms below e^-40 of the largest change the sum by less than 1e-17 each: most of a large
  // side's kernels, far from x, are skipped without an exp.
  constexpr double kNegligible = 40;
  double sum = 0;
  for (double x : v) {
    if (x > top - kNegligible) sum += std::exp(x - top);
  }
  return top + std::log(sum);
}

std::vector<double> ObservationWeights(size_t n) {
  std::vector<double> w(n, 1.0);
  if (n <= kFlatWeights) return w;
  const size_t ramp = n - kFlatWeights;
  for (size_t i = 0; i < ramp; ++i) {
    w[i] = ramp == 1 ? 1.0 / static_cast<double>(n)
                     : 1.0 / static_cast<double>(n) + (1.0 - 1.0 / static_cast<double>(n)) *
                                                          static_cast<double>(i) /
                                                          static_cast<double>(ramp - 1);
  }
  return w;
}

bool IsLog(Domain::Kind kind) {
  return kind == Domain::Kind::kLogUniform || kind == Domain::Kind::kQLogUniform;
}

// A candidate's score, log l - log g; -inf rather than NaN (both -inf), so that sorting by it
// is well defined.
double Score(double log_l, double log_g) {
  const double score = log_l - log_g;
  return std::isnan(score) ? -std::numeric_limits<double>::infinity() : score;
}

}  // namespace

TpeSearcher::TpeSearcher(const ParamSpace& space, const std::string& mode,
                         const TpeOptions& options, uint64_t seed)
    : maximize_(mode == "max"), options_(options), rng_(seed) {
  if (mode != "min" && mode != "max") {
    throw std::invalid_argument("mode must be min or max, got '" + mode + "'");
  }
  if (options.n_startup_trials < 0) throw std::invalid_argument("n_startup_trials < 0");
  if (options.n_ei_candidates < 1) throw std::invalid_argument("n_ei_candidates must be >= 1");
  if (!(options.gamma > 0 && options.gamma <= 1)) {
    throw std::invalid_argument("gamma must be in (0, 1]");
  }
  if (options.gamma_cap < 1) throw std::invalid_argument("gamma_cap must be >= 1");
  if (!(options.prior_weight > 0)) throw std::invalid_argument("prior_weight must be > 0");
  for (const Param& param : space) {
    if (const auto* constant = std::get_if<nlohmann::json>(&param.value)) {
      SetPath(constants_, param.path, *constant);
      continue;
    }
    const Domain& domain = std::get<Domain>(param.value);
    domain.Validate();
    Dim dim{param.path, domain};
    const double lo = domain.lower(), hi = domain.upper(), q = domain.q();
    switch (domain.kind()) {
      case Domain::Kind::kGridSearch:
      case Domain::Kind::kRandn:
        throw std::invalid_argument(JoinPath(param.path) + ": TPE cannot model " + domain.name() +
                                    (domain.kind() == Domain::Kind::kGridSearch
                                         ? " (use choice)"
                                         : " (give it bounds: uniform)"));
      case Domain::Kind::kChoice:
        dim.categorical = true;
        dim.low = 0;
        dim.high = static_cast<double>(domain.values().size());
        break;
      case Domain::Kind::kUniform:
        dim.low = lo, dim.high = hi;
        break;
      case Domain::Kind::kQUniform:
      case Domain::Kind::kQRandInt:
        dim.low = lo - q / 2, dim.high = hi + q / 2;
        break;
      case Domain::Kind::kLogUniform:
        dim.low = std::log10(lo), dim.high = std::log10(hi);
        break;
      case Domain::Kind::kQLogUniform:
        dim.low = std::log10(std::max(lo - q / 2, lo / 2)), dim.high = std::log10(hi + q / 2);
        break;
      case Domain::Kind::kRandInt:
        dim.low = lo - 0.5, dim.high = hi - 0.5;  // upper is excluded
        break;
    }
    dims_.push_back(std::move(dim));
  }
}

std::optional<TpeSearcher::Observation> TpeSearcher::Encode(const nlohmann::json& config,
                                                            double loss) const {
  Observation o;
  o.loss = loss;
  for (const Dim& dim : dims_) {
    const nlohmann::json value = GetPath(config, dim.path);
    if (dim.categorical) {
      const auto& values = dim.domain.values();
      auto it = std::find(values.begin(), values.end(), value);
      if (it == values.end()) return std::nullopt;
      o.x.push_back(static_cast<double>(it - values.begin()));
      continue;
    }
    if (!value.is_number()) return std::nullopt;
    double x = value.get<double>();
    if (IsLog(dim.domain.kind())) {
      if (x <= 0) return std::nullopt;
      x = std::log10(x);
    }
    o.x.push_back(std::clamp(x, dim.low, dim.high));
  }
  return o;
}

nlohmann::json TpeSearcher::Decode(const std::vector<double>& x) const {
  nlohmann::json config = constants_;
  for (size_t d = 0; d < dims_.size(); ++d) {
    const Dim& dim = dims_[d];
    const Domain& domain = dim.domain;
    if (dim.categorical) {
      SetPath(config, dim.path, domain.values()[static_cast<size_t>(x[d])]);
      continue;
    }
    double v = IsLog(domain.kind()) ? std::pow(10.0, x[d]) : x[d];
    const double lo = domain.lower(), hi = domain.upper(), q = domain.q();
    switch (domain.kind()) {
      case Domain::Kind::kRandInt:
        SetPath(config, dim.path,
                std::clamp<int64_t>(std::llround(v), static_cast<int64_t>(lo),
                                    static_cast<int64_t>(hi) - 1));
        continue;
      case Domain::Kind::kQRandInt: {
        const auto step = static_cast<int64_t>(q);
        int64_t n = std::llround(v / q) * step;
        while (n < static_cast<int64_t>(lo)) n += step;
        while (n > static_cast<int64_t>(hi)) n -= step;
        SetPath(config, dim.path, n);
        continue;
      }
      case Domain::Kind::kQUniform:
      case Domain::Kind::kQLogUniform:
        v = std::round(v / q) * q;
        while (v < lo) v += q;
        while (v > hi) v -= q;
        break;
      default:
        // [lower, upper): keep a value on the upper bound inside.
        if (v >= hi) v = std::nextafter(hi, lo);
        v = std::max(v, lo);
        break;
    }
    SetPath(config, dim.path, v);
  }
  return config;
}

std::vector<double> TpeSearcher::SampleRandom() {
  nlohmann::json config = constants_;
  for (const Dim& dim : dims_) SetPath(config, dim.path, dim.domain.Sample(rng_));
  return Encode(config, 0)->x;
}

size_t TpeSearcher::PickComponent(const std::vector<double>& weights) {
  double u = Uniform01(rng_);
  for (size_t i = 0; i < weights.size(); ++i) {
    if (u < weights[i]) return i;
    u -= weights[i];
  }
  return weights.size() - 1;
}

// The components are the side's observations (weighted as they age) and a prior covering the
// domain, last. A numeric kernel is a normal truncated to the domain: univariate, its width
// the larger gap to its sorted neighbours (the outermost take their one gap), clipped to
// [range / min(100, 1 + components), range] (Optuna's defaults); multivariate, Scott's rule per
// dimension. A category kernel puts 1 on its category and prior_weight / (observations + 1)
// on every category (Optuna's: more observations, sharper kernels); the prior is uniform.
TpeSearcher::Parzen TpeSearcher::Fit(size_t d, const std::vector<const Observation*>& side,
                                     const std::vector<double>& weights) const {
  const Dim& dim = dims_[d];
  Parzen p;
  p.weights = weights;
  p.weights.push_back(options_.prior_weight);
  const double total = std::accumulate(p.weights.begin(), p.weights.end(), 0.0);
  for (double& w : p.weights) w /= total;
  for (double w : p.weights) p.log_weights.push_back(std::log(w));
  for (const Observation* o : side) p.mus.push_back(o->x[d]);
  if (dim.categorical) {
    p.mus.push_back(-1);  // the prior: no category of its own
    p.category_spread = options_.prior_weight / static_cast<double>(side.size() + 1);
    return p;
  }
  const double range = dim.high - dim.low;
  p.mus.push_back((dim.low + dim.high) / 2);
  const size_t n = p.mus.size();
  p.sigmas.assign(n, range);
  if (n > 1) {
    if (options_.multivariate) {
      const double bandwidth =
          0.2 * std::pow(static_cast<double>(n), -1.0 / (static_cast<double>(dims_.size()) + 4));
      for (size_t i = 0; i + 1 < n; ++i) p.sigmas[i] = bandwidth * range;
    } else {
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return p.mus[a] < p.mus[b]; });
      // The larger gap to a sorted neighbour; the outermost kernels take their one inner gap
      // (the bounds count only when there are fewer than two kernels).
      for (size_t k = 0; k < n; ++k) {
        const double mu = p.mus[order[k]];
        const double left = k == 0 ? 0 : mu - p.mus[order[k - 1]];
        const double right = k + 1 == n ? 0 : p.mus[order[k + 1]] - mu;
        p.sigmas[order[k]] = std::max(left, right);
      }
    }
    // Optuna's "magic clip": no kernel narrower than the range over (1 + kernels), at most 100.
    const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(n));
    for (size_t i = 0; i + 1 < n; ++i) p.sigmas[i] = std::clamp(p.sigmas[i], min_sigma, range);
    p.sigmas[n - 1] = range;  // the prior's
  }
  for (size_t i = 0; i < n; ++i) {
    const double sigma = p.sigmas[i];
    const double mass =
        NormalCdf((dim.high - p.mus[i]) / sigma) - NormalCdf((dim.low - p.mus[i]) / sigma);
    // With weight_by_bandwidth, the kernel's weight is multiplied by sigma, which cancels its
    // 1/sigma (Optuna 3.1's kernels).
    const double log_height = options_.weight_by_bandwidth ? 0.0 : -std::log(sigma);
    p.log_norm.push_back(log_height - kLogSqrt2Pi - std::log(std::max(mass, 1e-300)));
  }
  return p;
}

// log of component `i`'s kernel at x, for dimension d.
double TpeSearcher::LogKernel(size_t d, const Parzen& p, size_t i, double x) const {
  if (dims_[d].categorical) {
    const double choices = dims_[d].high;
    if (p.mus[i] < 0) return -std::log(choices);
    const double v = p.category_spread;
    return std::log((v + (p.mus[i] == x ? 1.0 : 0.0)) / (choices * v + 1));
  }
  const double z = (x - p.mus[i]) / p.sigmas[i];
  return p.log_norm[i] - 0.5 * z * z;
}

double TpeSearcher::LogDensity(size_t d, const Parzen& p, double x) const {
  std::vector<double> terms(p.mus.size());
  for (size_t i = 0; i < p.mus.size(); ++i) terms[i] = p.log_weights[i] + LogKernel(d, p, i, x);
  return LogSumExp(terms);
}

double TpeSearcher::Draw(size_t d, const Parzen& p, size_t i) {
  const Dim& dim = dims_[d];
  if (dim.categorical) {
    const auto choices = static_cast<size_t>(dim.high);
    // The component's own category with its extra weight, else uniformly (the spread's share).
    if (p.mus[i] >= 0 && Uniform01(rng_) < 1.0 / (dim.high * p.category_spread + 1)) {
      return p.mus[i];
    }
    return static_cast<double>(UniformIndex(rng_, choices));
  }
  for (int tries = 0; tries < 100; ++tries) {
    const double x = p.mus[i] + p.sigmas[i] * StandardNormal(rng_);
    if (x >= dim.low && x <= dim.high) return x;
  }
  return std::clamp(p.mus[i], dim.low, dim.high);
}

TpeSearcher::Model TpeSearcher::FitModel() const {
  // The good and the other observations; pending configs (loss +inf) land with the others,
  // unless the model is fitted at a budget where they have a value already.
  // At a budget, a config that did not reach it (stopped below it, or still on its way) counts
  // as bad there too: the early-stopping scheduler did not promote it (yet).
  // By pointer: the observations are not copied per proposal; the liars' encodings live here.
  std::vector<const Observation*> all;
  std::vector<nlohmann::json> liars;
  const std::optional<double> budget = ModelBudget();
  if (budget) {
    std::set<nlohmann::json> reached;  // a set: this runs per proposal, over every config
    for (const auto& [config, o] : at_budget_.at(*budget)) {
      all.push_back(&o);
      reached.insert(config);
    }
    std::set<nlohmann::json> bad;
    for (const nlohmann::json& config : pending_) {
      if (!reached.count(config)) bad.insert(config);
    }
    for (const auto& [other, seen] : at_budget_) {
      if (other >= *budget) continue;
      for (const auto& [config, o] : seen) {
        if (!reached.count(config)) bad.insert(config);
      }
    }
    liars.assign(bad.begin(), bad.end());
  } else {
    for (const Observation& o : observed_) all.push_back(&o);
    liars = pending_;
  }
  std::vector<Observation> lies;
  lies.reserve(liars.size());  // stable addresses for `all`
  for (const nlohmann::json& config : liars) {
    if (auto o = Encode(config, kInf)) lies.push_back(std::move(*o));
  }
  const size_t seen = all.size();
  for (const Observation& o : lies) all.push_back(&o);
  std::vector<const Observation*> below, above;
  std::vector<double> w_below;
  if (options_.objectives > 0) {
    // As Optuna's in a multi-objective study, gamma counts observations only.
    SplitOutcomes(all, seen, BelowCount(seen, budget.has_value()), below, w_below, above);
  } else {
    std::vector<size_t> rank(all.size());
    std::iota(rank.begin(), rank.end(), 0);
    std::stable_sort(rank.begin(), rank.end(),
                     [&](size_t a, size_t b) { return all[a]->loss < all[b]->loss; });
    // (BOHB's minimum made no clear difference here: on the example MLP's curves, 100 seeds,
    // TPE+ASHA reached random+ASHA's best in 57 results without it and 69 with it, 208 and 186
    // four trials at a time.)
    const size_t n_below = BelowCount(all.size(), false);
    std::vector<bool> is_below(all.size(), false);
    for (size_t k = 0; k < n_below; ++k) is_below[rank[k]] = true;
    for (size_t i = 0; i < all.size(); ++i) (is_below[i] ? below : above).push_back(all[i]);
    w_below = ObservationWeights(below.size());
  }
  const std::vector<double> w_above = ObservationWeights(above.size());

  Model model;
  for (size_t d = 0; d < dims_.size(); ++d) {
    model.l.push_back(Fit(d, below, w_below));
    model.g.push_back(Fit(d, above, w_above));
  }
  return model;
}

// BOHB's good set holds at least min_points_in_model configs (Falkner et al. 2018). MOTPE takes
// that minimum when fitted at a budget: there only a few configs have a result, gamma's share
// of them is one or two, and the model chases one config's early result and size (on the
// Fashion-MNIST replay, 300 seeds, MO-ASHA with MOTPE reached Optuna MOTPE's final hypervolume
// in 0.58x the epochs of its full-fidelity sweep with gamma's share alone, 0.48x with it).
size_t TpeSearcher::BelowCount(size_t n, bool bohb_minimum) const {
  size_t below = std::min<size_t>(
      static_cast<size_t>(std::ceil(options_.gamma * static_cast<double>(n))),
      static_cast<size_t>(options_.gamma_cap));
  if (bohb_minimum) below = std::max(below, std::min(n, min_points_in_model()));
  return below;
}

// Unlike the single-objective split, gamma counts observations only (as Optuna, which leaves
// running trials out of a multi-objective study's split): the pending configs join "above".
void TpeSearcher::SplitOutcomes(const std::vector<const Observation*>& all, size_t seen,
                                size_t n_below, std::vector<const Observation*>& below,
                                std::vector<double>& w_below,
                                std::vector<const Observation*>& above) const {
  std::vector<std::vector<double>> points;
  std::vector<double> violations;
  points.reserve(seen);
  violations.reserve(seen);
  for (size_t i = 0; i < seen; ++i) {
    points.push_back(all[i]->outcome.point);
    violations.push_back(all[i]->outcome.violation);
  }
  const TpeSplit split = SplitByFrontsAndHypervolume(points, violations, n_below);
  for (size_t i : split.below) below.push_back(all[i]);
  w_below = BelowWeights(points, violations, split.below);
  for (size_t i : split.above) above.push_back(all[i]);
  for (size_t i = seen; i < all.size(); ++i) above.push_back(all[i]);
}

// log of the joint density of `x` under one side's estimators (multivariate: one component of
// every dimension's at once).
double TpeSearcher::JointLogDensity(const std::vector<Parzen>& side,
                                    const std::vector<double>& x) const {
  const size_t n = side.empty() ? 0 : side[0].weights.size();
  std::vector<double> terms(n);
  for (size_t i = 0; i < n; ++i) {
    double t = side[0].log_weights[i];
    for (size_t d = 0; d < dims_.size(); ++d) t += LogKernel(d, side[d], i, x[d]);
    terms[i] = t;
  }
  return LogSumExp(terms);
}

std::pair<double, double> TpeSearcher::LogDensities(const nlohmann::json& config) const {
  const Model model = FitModel();
  const std::optional<Observation> o = Encode(config, 0);
  if (!o) throw std::invalid_argument("the config is not in the searcher's space");
  if (options_.multivariate) {
    return {JointLogDensity(model.l, o->x), JointLogDensity(model.g, o->x)};
  }
  double log_l = 0, log_g = 0;
  for (size_t d = 0; d < dims_.size(); ++d) {
    log_l += LogDensity(d, model.l[d], o->x[d]);
    log_g += LogDensity(d, model.g[d], o->x[d]);
  }
  return {log_l, log_g};
}

std::vector<double> TpeSearcher::SampleTpe(
    const std::function<bool(const std::vector<double>&)>& fresh) {
  const Model model = FitModel();
  const std::vector<Parzen>& l = model.l;
  const std::vector<Parzen>& g = model.g;
  const size_t dims = dims_.size();
  const auto candidates = static_cast<size_t>(options_.n_ei_candidates);
  if (dims == 0) return {};
  if (options_.multivariate) {
    // Joint candidates: one component of l for every dimension, scored by the joint ratio.
    std::vector<std::pair<double, std::vector<double>>> joint;
    for (size_t c = 0; c < candidates; ++c) {
      const size_t i = PickComponent(l[0].weights);
      std::vector<double> x(dims);
      for (size_t d = 0; d < dims; ++d) x[d] = Draw(d, l[d], i);
      joint.emplace_back(Score(JointLogDensity(l, x), JointLogDensity(g, x)), std::move(x));
    }
    std::stable_sort(joint.begin(), joint.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [score, x] : joint) {
      if (fresh(x)) return x;
    }
    return joint.front().second;
  }
  // Each parameter on its own: its candidates from l, best ratio first, each value once.
  using Scored = std::pair<double, double>;  // (score, value)
  std::vector<std::vector<Scored>> ranked(dims);
  for (size_t d = 0; d < dims; ++d) {
    std::vector<Scored>& r = ranked[d];
    for (size_t c = 0; c < candidates; ++c) {
      const double x = Draw(d, l[d], PickComponent(l[d].weights));
      r.emplace_back(Score(LogDensity(d, l[d], x), LogDensity(d, g[d], x)), x);
    }
    std::stable_sort(r.begin(), r.end(),
                     [](const Scored& a, const Scored& b) { return a.first > b.first; });
    std::set<double> seen;
    r.erase(std::remove_if(r.begin(), r.end(),
                           [&](const Scored& s) { return !seen.insert(s.second).second; }),
            r.end());
  }
  // Combinations of the parameters' candidates by their summed score, best first (the first is
  // every parameter's best): a frontier of index tuples, each popped one's successors (one
  // parameter moved to its next candidate) pushed once.
  auto point = [&](const std::vector<size_t>& at) {
    std::vector<double> x(dims);
    for (size_t d = 0; d < dims; ++d) x[d] = ranked[d][at[d]].second;
    return x;
  };
  auto total = [&](const std::vector<size_t>& at) {
    double sum = 0;
    for (size_t d = 0; d < dims; ++d) sum += ranked[d][at[d]].first;
    return sum;
  };
  const std::vector<size_t> top(dims, 0);
  std::multimap<double, std::vector<size_t>, std::greater<>> frontier = {{total(top), top}};
  std::set<std::vector<size_t>> pushed = {top};
  for (int popped = 0; popped < kRankedProposals && !frontier.empty(); ++popped) {
    const std::vector<size_t> at = frontier.begin()->second;
    frontier.erase(frontier.begin());
    std::vector<double> x = point(at);
    if (fresh(x)) return x;
    for (size_t d = 0; d < dims; ++d) {
      if (at[d] + 1 == ranked[d].size()) continue;
      std::vector<size_t> next = at;
      ++next[d];
      if (pushed.insert(next).second) frontier.emplace(total(next), std::move(next));
    }
  }
  return point(top);
}

bool TpeSearcher::in_startup() const {
  return observed_.size() < static_cast<size_t>(options_.n_startup_trials);
}

nlohmann::json TpeSearcher::Suggest() {
  // A config tried already would only repeat its result (in a space of few configs the model's
  // favourite soon is one): the model's next best untried one teaches more, else a random one.
  auto fresh = [&](const std::vector<double>& x) { return !tried_.count(Decode(x).dump()); };
  nlohmann::json config = Decode(in_startup() ? SampleRandom() : SampleTpe(fresh));
  for (int draw = 0; draw < kUntriedDraws && tried_.count(config.dump()); ++draw) {
    nlohmann::json other = Decode(SampleRandom());
    if (!tried_.count(other.dump())) config = std::move(other);
  }
  tried_.insert(config.dump());
  pending_.push_back(config);
  return config;
}

double TpeSearcher::Loss(double value) const {
  // A diverged trial (NaN, an infinity) is an observation too: the worst loss, so its region
  // of the space lands with the bad ones rather than being tried again as if unexplored.
  if (!std::isfinite(value)) return -kWorstScore;
  return maximize_ ? -value : value;
}

void TpeSearcher::Observe(const nlohmann::json& config, std::optional<double> value) {
  if (value && options_.objectives > 0) {
    throw std::invalid_argument("this TPE searcher ranks outcomes of " +
                                std::to_string(options_.objectives) +
                                " objectives: observe a TpeOutcome, not a value");
  }
  tried_.insert(config.dump());
  auto it = std::find(pending_.begin(), pending_.end(), config);
  if (it != pending_.end()) pending_.erase(it);
  if (!value) return;
  if (auto o = Encode(config, Loss(*value))) observed_.push_back(std::move(*o));
}

void TpeSearcher::CheckOutcome(const TpeOutcome& outcome) const {
  if (options_.objectives == 0) {
    throw std::invalid_argument("this TPE searcher ranks values: observe a value, not an outcome");
  }
  if (outcome.point.size() != options_.objectives) {
    throw std::invalid_argument("an outcome of " + std::to_string(outcome.point.size()) +
                                " objectives, the searcher ranks " +
                                std::to_string(options_.objectives));
  }
  for (double v : outcome.point) {
    if (!std::isfinite(v)) throw std::invalid_argument("an outcome's objective is not finite");
  }
  if (!(outcome.violation >= 0)) {
    throw std::invalid_argument("an outcome's violation must be >= 0 (not NaN)");
  }
}

void TpeSearcher::Observe(const nlohmann::json& config, const TpeOutcome& outcome) {
  CheckOutcome(outcome);
  tried_.insert(config.dump());
  auto it = std::find(pending_.begin(), pending_.end(), config);
  if (it != pending_.end()) pending_.erase(it);
  if (auto o = Encode(config, 0)) {
    o->outcome = outcome;
    observed_.push_back(std::move(*o));
  }
}

void TpeSearcher::ObserveAt(const nlohmann::json& config, double value, double budget) {
  if (options_.objectives > 0) {
    throw std::invalid_argument("this TPE searcher ranks outcomes: observe a TpeOutcome");
  }
  if (!std::isfinite(budget)) return;
  if (std::optional<Observation> o = Encode(config, Loss(value))) {
    AddAtBudget(config, std::move(*o), budget);
  }
}

void TpeSearcher::ObserveAt(const nlohmann::json& config, const TpeOutcome& outcome,
                            double budget) {
  CheckOutcome(outcome);
  if (!std::isfinite(budget)) return;
  if (std::optional<Observation> o = Encode(config, 0)) {
    o->outcome = outcome;
    AddAtBudget(config, std::move(*o), budget);
  }
}

// Replaces the config's earlier observation at the same budget.
void TpeSearcher::AddAtBudget(const nlohmann::json& config, Observation o, double budget) {
  auto& seen = at_budget_[budget];
  for (auto& [known, earlier] : seen) {
    if (known == config) {
      earlier = std::move(o);
      return;
    }
  }
  seen.emplace_back(config, std::move(o));
}

std::optional<double> TpeSearcher::ModelBudget() const {
  for (auto it = at_budget_.rbegin(); it != at_budget_.rend(); ++it) {
    if (it->second.size() >= min_points_in_model()) return it->first;
  }
  return std::nullopt;
}

// An observation as the state file keeps it: {x, loss} for a value, {x, point, violation} for an
// outcome (JSON has no infinity: an infinite violation is written as null).
nlohmann::json TpeSearcher::ObservationJson(const Observation& o) const {
  if (options_.objectives == 0) return {{"x", o.x}, {"loss", o.loss}};
  const double v = o.outcome.violation;
  return {{"x", o.x},
          {"point", o.outcome.point},
          {"violation", std::isinf(v) ? nlohmann::json() : nlohmann::json(v)}};
}

TpeSearcher::Observation TpeSearcher::ObservationFromJson(const nlohmann::json& j) const {
  Observation o;
  o.x = j.at("x").get<std::vector<double>>();
  if (o.x.size() != dims_.size()) {
    throw std::invalid_argument("the saved TPE state is for another search space");
  }
  if (options_.objectives == 0) {
    if (j.contains("point")) {
      throw std::invalid_argument(
          "the saved TPE state ranks several objectives, the sweep one "
          "metric");
    }
    o.loss = j.at("loss").get<double>();
    return o;
  }
  if (!j.contains("point")) {
    throw std::invalid_argument("the saved TPE state ranks one metric, the sweep " +
                                std::to_string(options_.objectives) + " objectives");
  }
  o.outcome.point = j.at("point").get<std::vector<double>>();
  const nlohmann::json& v = j.at("violation");
  o.outcome.violation = v.is_null() ? std::numeric_limits<double>::infinity() : v.get<double>();
  try {
    CheckOutcome(o.outcome);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("the saved TPE state: ") + e.what());
  }
  return o;
}

nlohmann::json TpeSearcher::State() const {
  nlohmann::json observed = nlohmann::json::array();
  for (const Observation& o : observed_) observed.push_back(ObservationJson(o));
  nlohmann::json budgets = nlohmann::json::array();
  for (const auto& [budget, seen] : at_budget_) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& [config, o] : seen) {
      nlohmann::json entry = ObservationJson(o);
      entry["config"] = config;
      entries.push_back(std::move(entry));
    }
    budgets.push_back({{"budget", budget}, {"observed", std::move(entries)}});
  }
  return {{"observed", std::move(observed)},
          {"at_budget", std::move(budgets)},
          {"pending", pending_},
          {"tried", tried_},
          {"rng", RngState(rng_)}};
}

void TpeSearcher::Restore(const nlohmann::json& state) {
  std::vector<Observation> observed;
  for (const nlohmann::json& o : state.at("observed")) observed.push_back(ObservationFromJson(o));
  const Rng restored = RngFromState(state.at("rng"));
  std::map<double, std::vector<std::pair<nlohmann::json, Observation>>> at_budget;
  for (const nlohmann::json& b : state.value("at_budget", nlohmann::json::array())) {
    auto& seen = at_budget[b.at("budget").get<double>()];
    for (const nlohmann::json& o : b.at("observed")) {
      seen.emplace_back(o.at("config"), ObservationFromJson(o));
    }
  }
  std::vector<nlohmann::json> pending = state.at("pending").get<std::vector<nlohmann::json>>();
  std::set<std::string> tried = state.value("tried", std::set<std::string>{});
  observed_ = std::move(observed);
  at_budget_ = std::move(at_budget);
  pending_ = std::move(pending);
  tried_ = std::move(tried);
  rng_ = restored;
}

}  // namespace rayd::tune::internal
