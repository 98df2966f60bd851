// MakeScheduler (option checks), FIFO, and the helpers the schedulers share. Each scheduler
// lives in its own sched_*.cc.

#include <rayd/tune/schedulers.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "sched_internal.h"

namespace rayd::tune {
namespace {

class FifoScheduler final : public TrialScheduler {
 public:
  const char* name() const override { return "FIFO"; }
  Decision OnTrialResult(const std::string&, const SchedulerResult&) override {
    return Decision::Continue();
  }
};

[[noreturn]] void Invalid(const std::string& message) { throw std::invalid_argument(message); }

std::string Num(double value) { return internal::FormatNumber(value); }

void CheckTimeAttr(const char* type, const std::string& time_attr) {
  if (time_attr.empty()) Invalid(std::string(type) + ": time_attr must not be empty");
}

// `type`: the scheduler the options are for ("asha", or "pasha" whose options are ASHA's).
void CheckAsha(const AshaConfig& c, const std::string& type = "asha") {
  CheckTimeAttr(type.c_str(), c.time_attr);
  if (!(c.max_t > 0)) Invalid(type + ": max_t must be > 0 (got " + Num(c.max_t) + ")");
  if (!(c.grace_period > 0)) {
    Invalid(type + ": grace_period must be > 0 (got " + Num(c.grace_period) + ")");
  }
  if (c.grace_period > c.max_t) {
    Invalid(type + ": grace_period (" + Num(c.grace_period) + ") must not exceed max_t (" +
            Num(c.max_t) + ")");
  }
  if (!(c.reduction_factor > 1)) {
    Invalid(type + ": reduction_factor must be > 1 (got " + Num(c.reduction_factor) + ")");
  }
  if (c.brackets < 1)
    Invalid(type + ": brackets must be >= 1 (got " + std::to_string(c.brackets) + ")");
  // Bracket s has rungs grace_period * rf^(k + s) <= max_t; one without any would never decide.
  const int rungs = internal::FloorLog(c.max_t / c.grace_period, c.reduction_factor) + 1;
  if (c.brackets > rungs) {
    Invalid(type + ": brackets (" + std::to_string(c.brackets) + ") must not exceed the number of " +
            "rungs between grace_period and max_t (" + std::to_string(rungs) + ")");
  }
}

void CheckHyperBand(const HyperBandConfig& c) {
  CheckTimeAttr("hyperband", c.time_attr);
  if (!(c.max_t >= 1)) Invalid("hyperband: max_t must be >= 1 (got " + Num(c.max_t) + ")");
  if (!(c.reduction_factor > 1)) {
    Invalid("hyperband: reduction_factor must be > 1 (got " + Num(c.reduction_factor) + ")");
  }
}

void CheckMedian(const MedianStoppingConfig& c) {
  CheckTimeAttr("median_stopping", c.time_attr);
  if (!(c.grace_period >= 0)) {
    Invalid("median_stopping: grace_period must be >= 0 (got " + Num(c.grace_period) + ")");
  }
  if (c.min_samples_required < 1) {
    Invalid("median_stopping: min_samples_required must be >= 1 (got " +
            std::to_string(c.min_samples_required) + ")");
  }
}

// `objectives`: the sweep's, which the weights and reference must name.
void CheckScalarization(const Scalarization& s, const std::vector<Objective>& objectives) {
  const std::string where = "median_stopping: scalarization: ";
  std::string names;
  for (const Objective& o : objectives) names += (names.empty() ? "" : ", ") + o.metric;
  auto check_objective = [&](const char* key, const std::string& metric) {
    for (const Objective& o : objectives) {
      if (o.metric == metric) return;
    }
    Invalid(where + key + ": '" + metric + "' is not an objective (the objectives: " + names + ")");
  };
  if (s.weights.empty()) Invalid(where + "weights: none given");
  bool any_positive = false;
  for (const auto& [metric, weight] : s.weights) {
    check_objective("weights", metric);
    if (!(weight >= 0) || !std::isfinite(weight)) {
      Invalid(where + "weights: '" + metric + "' must be finite and >= 0 (got " + Num(weight) +
              ")");
    }
    any_positive = any_positive || weight > 0;
  }
  if (!any_positive) Invalid(where + "weights: at least one must be above 0");
  if (s.kind != Scalarization::Kind::kChebyshev) {
    if (!s.reference.empty()) Invalid(where + "reference is for chebyshev only");
    return;
  }
  for (const auto& [metric, value] : s.reference) {
    check_objective("reference", metric);
    if (!std::isfinite(value)) {
      Invalid(where + "reference: '" + metric + "' must be finite (got " + Num(value) + ")");
    }
  }
  for (const auto& [metric, weight] : s.weights) {
    if (weight > 0 && !s.reference.contains(metric)) {
      Invalid(where + "reference: chebyshev needs the ideal value of '" + metric + "'");
    }
  }
}

void CheckPbt(const PbtConfig& c) {
  CheckTimeAttr("pbt", c.time_attr);
  if (!(c.perturbation_interval > 0)) {
    Invalid("pbt: perturbation_interval must be > 0 (got " + Num(c.perturbation_interval) + ")");
  }
  if (!(c.burn_in_period >= 0)) {
    Invalid("pbt: burn_in_period must be >= 0 (got " + Num(c.burn_in_period) + ")");
  }
  if (!(c.quantile_fraction > 0 && c.quantile_fraction <= 0.5)) {
    Invalid("pbt: quantile_fraction must be in (0, 0.5] (got " + Num(c.quantile_fraction) + ")");
  }
  if (!(c.resample_probability >= 0 && c.resample_probability <= 1)) {
    Invalid("pbt: resample_probability must be in [0, 1] (got " + Num(c.resample_probability) +
            ")");
  }
  if (c.perturbation_factors.empty()) Invalid("pbt: perturbation_factors is empty");
  for (double f : c.perturbation_factors) {
    if (!(f > 0) || !std::isfinite(f)) {
      Invalid("pbt: perturbation_factors must be positive (got " + Num(f) + ")");
    }
  }
  if (c.hyperparam_mutations.empty()) Invalid("pbt: hyperparam_mutations is empty");
  for (const Param& p : c.hyperparam_mutations) {
    const std::string where = "pbt: hyperparam_mutations '" + JoinPath(p.path) + "'";
    if (p.path.empty()) Invalid("pbt: hyperparam_mutations has an entry without a key");
    if (const auto* domain = std::get_if<Domain>(&p.value)) {
      try {
        domain->Validate();
      } catch (const std::invalid_argument& e) {
        Invalid(where + ": " + e.what());
      }
    } else {
      // Ray accepts a plain list as a choice of values; anything else cannot be explored.
      const auto& constant = std::get<nlohmann::json>(p.value);
      if (!constant.is_array() || constant.empty()) {
        Invalid(where + " must be a domain or a non-empty list of values");
      }
    }
  }
}

}  // namespace

const char* ToString(Decision::Action action) {
  switch (action) {
    case Decision::Action::kContinue:
      return "CONTINUE";
    case Decision::Action::kPause:
      return "PAUSE";
    case Decision::Action::kStop:
      return "STOP";
    case Decision::Action::kExploit:
      return "EXPLOIT";
  }
  return "UNKNOWN";
}

const char* ToString(Scalarization::Kind kind) {
  return kind == Scalarization::Kind::kChebyshev ? "chebyshev" : "weighted_sum";
}

const char* SchedulerType(const SchedulerConfig& config) {
  struct Namer {
    const char* operator()(const FifoConfig&) const { return "fifo"; }
    const char* operator()(const AshaConfig&) const { return "asha"; }
    const char* operator()(const HyperBandConfig&) const { return "hyperband"; }
    const char* operator()(const MedianStoppingConfig&) const { return "median_stopping"; }
    const char* operator()(const PbtConfig&) const { return "pbt"; }
    const char* operator()(const PashaConfig&) const { return "pasha"; }
  };
  return std::visit(Namer{}, config);
}

std::unique_ptr<TrialScheduler> MakeScheduler(const SchedulerConfig& config, std::string metric,
                                              std::string mode, uint64_t seed) {
  const std::string type = SchedulerType(config);
  if (std::holds_alternative<FifoConfig>(config)) {
    // FIFO ranks nothing: metric and mode may be absent, but a given mode must be valid.
    if (!mode.empty() && mode != "min" && mode != "max") {
      Invalid("mode must be min or max (got '" + mode + "')");
    }
    return std::make_unique<FifoScheduler>();
  }
  if (metric.empty()) Invalid("metric is required for " + type);
  if (mode != "min" && mode != "max") Invalid("mode must be min or max (got '" + mode + "')");
  if (const auto* c = std::get_if<AshaConfig>(&config)) {
    CheckAsha(*c);
    return internal::MakeAsha(*c, std::move(metric), std::move(mode), seed);
  }
  if (const auto* c = std::get_if<PashaConfig>(&config)) {
    const AshaConfig asha = internal::PashaAsAsha(*c);
    CheckAsha(asha, "pasha");
    if (c->epsilon && !(*c->epsilon >= 0)) {
      Invalid("pasha: epsilon must be >= 0 (got " + Num(*c->epsilon) + ")");
    }
    return internal::MakeAsha(asha, std::move(metric), std::move(mode), seed,
                              internal::PashaOptions{c->epsilon});
  }
  if (const auto* c = std::get_if<HyperBandConfig>(&config)) {
    CheckHyperBand(*c);
    return internal::MakeHyperBand(*c, std::move(metric), std::move(mode));
  }
  if (const auto* c = std::get_if<MedianStoppingConfig>(&config)) {
    CheckMedian(*c);
    if (c->scalarization) {
      Invalid(
          "median_stopping: scalarization is for several objectives or constraints; with "
          "one metric leave it out");
    }
    return internal::MakeMedianStopping(*c, std::move(metric), std::move(mode));
  }
  const auto& c = std::get<PbtConfig>(config);
  CheckPbt(c);
  return internal::MakePbt(c, std::move(metric), std::move(mode), seed);
}

std::unique_ptr<TrialScheduler> MakeScheduler(const SchedulerConfig& config,
                                              const std::vector<Objective>& objectives,
                                              const std::vector<Constraint>& constraints,
                                              uint64_t seed) {
  if (objectives.empty()) Invalid("several objectives: none given");
  if (std::holds_alternative<FifoConfig>(config)) return std::make_unique<FifoScheduler>();
  internal::ParetoRanking ranking(objectives, constraints);
  if (const auto* c = std::get_if<AshaConfig>(&config)) {
    CheckAsha(*c);
    if (c->promotion) Invalid("asha: promotion is not available with several objectives yet");
    if (c->brackets != 1) Invalid("asha: brackets must be 1 with several objectives");
    return internal::MakeMoAsha(*c, std::move(ranking));
  }
  if (const auto* c = std::get_if<HyperBandConfig>(&config)) {
    CheckHyperBand(*c);
    return internal::MakeMoHyperBand(*c, std::move(ranking));
  }
  if (const auto* c = std::get_if<MedianStoppingConfig>(&config)) {
    CheckMedian(*c);
    if (!c->scalarization) {
      Invalid(
          "median_stopping: scalarization is required with several objectives or "
          "constraints (e.g. {weights: {" +
          objectives[0].metric + ": 1}})");
    }
    CheckScalarization(*c->scalarization, objectives);
    return internal::MakeMoMedianStopping(*c, std::move(ranking));
  }
  if (const auto* c = std::get_if<PbtConfig>(&config)) {
    CheckPbt(*c);
    return internal::MakeMoPbt(*c, std::move(ranking), seed);
  }
  Invalid(std::string(SchedulerType(config)) +
          " ranks by one metric: with several objectives or constraints use fifo, asha, "
          "hyperband, median_stopping or pbt");
}

namespace internal {

double Percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double Median(std::vector<double> values) { return Percentile(std::move(values), 50); }

double Uniform01(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

size_t UniformIndex(Rng& rng, size_t n) {
  return std::min(static_cast<size_t>(Uniform01(rng) * static_cast<double>(n)), n - 1);
}

double StandardNormal(Rng& rng) {
  double u = Uniform01(rng);
  while (u <= 0) u = Uniform01(rng);
  return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * Uniform01(rng));
}

nlohmann::json RngState(const Rng& rng) {
  std::ostringstream out;
  out << rng;
  return out.str();
}

Rng RngFromState(const nlohmann::json& state) {
  Rng rng;
  std::istringstream in(state.is_string() ? state.get<std::string>() : "");
  in >> rng;
  if (!in) throw std::invalid_argument("the saved random generator is unreadable");
  return rng;
}

nlohmann::json OptionalNumber(std::optional<double> x) {
  return x ? nlohmann::json(*x) : nlohmann::json(nullptr);
}

std::optional<double> OptionalNumber(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<double>();
}

std::optional<double> Lookup(const Metrics& metrics, const std::string& key) {
  auto it = metrics.find(key);
  if (it == metrics.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
}

std::optional<double> Score(const Metrics& metrics, const std::string& key, double sign) {
  auto it = metrics.find(key);
  if (it == metrics.end()) return std::nullopt;
  return std::isfinite(it->second) ? sign * it->second : kWorstScore;
}

std::optional<ResultMeasure> MeasureResult(const std::optional<ParetoRanking>& ranking,
                                           const Metrics& metrics, const std::string& metric,
                                           double sign) {
  if (ranking) {
    if (!ranking->HasObjectives(metrics)) return std::nullopt;
    return ResultMeasure{std::nullopt, ranking->Measure(metrics)};
  }
  std::optional<double> score = Score(metrics, metric, sign);
  if (!score) return std::nullopt;
  return ResultMeasure{score, std::nullopt};
}

std::string FormatNumber(double value) {
  std::ostringstream out;
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    out << static_cast<int64_t>(value);
  } else {
    out << value;
  }
  return out.str();
}

int FloorLog(double x, double base) {
  return static_cast<int>(std::floor(std::log(x) / std::log(base) + 1e-9));
}

}  // namespace internal
}  // namespace rayd::tune
