// Population based training (Jaderberg et al.), after Ray Tune's PopulationBasedTraining in its
// asynchronous form.
//
// How it works. Every perturbation_interval of time_attr (once past burn_in_period) a reporting
// trial is ranked against the population: every trial not yet finished with a result, by its
// last metric. With q = ceil(n * quantile_fraction) (at most n / 2), the q worst form the lower
// quantile and the q best the upper. A trial in the lower quantile exploits a random trial of
// the upper quantile that has a checkpoint: the Tuner restarts it from that checkpoint with the
// donor's config explored (Decision::kExploit). Explore, per hyperparam_mutations entry:
//  - a choice, grid search or plain list: resample with resample_probability (or when the
//    current value is not in the list), otherwise move to a neighbouring value;
//  - a numeric domain: resample with resample_probability (or when the current value is not a
//    number), otherwise multiply by one of perturbation_factors, then bring the value back
//    inside the domain (bounds, the step q; integers stay integers, truncated as Ray does).
//    Ray does not clamp; a value the domain would not contain is resampled.
// Each exploit's Decision carries Ray's policy line [target, donor, target iteration, donor
// iteration, donor config, new config] (Decision::lineage), which the Tuner appends to the
// lineage logs (pbt_lineage.h) when it applies the exploit. Iterations are the results'
// training_iteration (time_attr's value when absent), as Ray writes.
//
// Simplified from Ray: ranks by the latest result (Ray by the one at the last perturbation
// point) and never pauses a trial to yield to pending ones.
//
// With several objectives (MO-PBT) the population is ranked by ParetoRanking (constrained
// non-dominated sort, then crowding distance) over the same latest results. The lower quantile
// is the q worst that are not in the non-dominated set (front 0: the feasible non-dominated
// trials when any is feasible, else the least violating), so a non-dominated trial never
// exploits; the donors are the non-dominated set itself, whatever its size. A result counts once
// it names every objective (a NaN or infinite one is the worst value there is).

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

struct PbtTrial {
  nlohmann::json config;
  std::optional<double> score;  // higher is better
  // With several objectives instead of `score`.
  std::optional<ParetoRanking::Standing> standing;
  double iteration = 0;         // training_iteration of the last result, for the lineage logs
  double last_perturbation_time = 0;
  bool has_checkpoint = false;
  bool done = false;
};

// Brings `value` (a perturbed number) back inside a numeric `domain`; nullopt when the domain
// has no multiple of its step q inside its bounds.
std::optional<nlohmann::json> ClampInto(const Domain& domain, double value, bool integer) {
  const double lo = domain.lower(), hi = domain.upper(), q = domain.q();
  switch (domain.kind()) {
    case Domain::Kind::kUniform:
    case Domain::Kind::kLogUniform:
      value = std::clamp(value, lo, std::nextafter(hi, lo));  // upper is excluded
      break;
    case Domain::Kind::kQUniform:
    case Domain::Kind::kQLogUniform:
    case Domain::Kind::kQRandInt: {
      const double first = std::ceil(lo / q - 1e-9) * q, last = std::floor(hi / q + 1e-9) * q;
      if (first > last) return std::nullopt;
      value = std::clamp(std::round(value / q) * q, first, last);
      break;
    }
    case Domain::Kind::kRandInt:
      value = std::clamp(std::trunc(value), lo, hi - 1);  // upper is excluded
      break;
    default:  // randn: unbounded
      break;
  }
  if (integer || domain.is_integer()) {
    return nlohmann::json(static_cast<int64_t>(std::trunc(value)));
  }
  return nlohmann::json(value);
}

class PbtScheduler final : public TrialScheduler {
 public:
  // `ranking` set: several objectives, and `metric` and `mode` are unused.
  PbtScheduler(const PbtConfig& config, std::string metric, std::string mode, uint64_t seed,
               std::optional<ParetoRanking> ranking = std::nullopt)
      : config_(config),
        metric_(std::move(metric)),
        sign_(mode == "max" ? 1.0 : -1.0),
        ranking_(std::move(ranking)),
        rng_(seed) {}

  const char* name() const override { return ranking_ ? "MO-PBT" : "PBT"; }

  void OnTrialAdd(const std::string& trial_id, const nlohmann::json& config) override {
    trials_[trial_id].config = config;
  }

  Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) override {
    auto t = Lookup(result.metrics, config_.time_attr);
    if (!t) return Decision::Continue();
    std::optional<ResultMeasure> measure = MeasureResult(ranking_, result.metrics, metric_, sign_);
    if (!measure) return Decision::Continue();
    auto& [score, standing] = *measure;
    PbtTrial& trial = trials_[trial_id];
    trial.score = score;
    trial.standing = std::move(standing);
    trial.iteration = Lookup(result.metrics, "training_iteration").value_or(*t);
    trial.has_checkpoint = result.has_checkpoint;
    if (!result.config.is_null()) trial.config = result.config;
    if (*t < config_.burn_in_period) return Decision::Continue();
    if (*t - trial.last_perturbation_time < config_.perturbation_interval) {
      return Decision::Continue();
    }
    trial.last_perturbation_time = *t;

    auto [lower, upper] = ranking_ ? ParetoQuantiles() : Quantiles();
    if (std::find(lower.begin(), lower.end(), trial_id) == lower.end()) {
      return Decision::Continue();
    }
    std::vector<std::string> donors;
    for (const std::string& id : upper) {
      if (id != trial_id && trials_[id].has_checkpoint) donors.push_back(id);
    }
    if (donors.empty()) return Decision::Continue();  // Ray: "no checkpoint ... skip exploit"
    const std::string donor_id = donors[UniformIndex(rng_, donors.size())];
    const PbtTrial& donor = trials_[donor_id];

    Decision decision;
    decision.action = Decision::Action::kExploit;
    decision.donor = donor_id;
    decision.config = Explore(donor.config);
    decision.lineage = PolicyLine(trial_id, trial, donor_id, donor, decision.config);
    spdlog::debug("pbt: trial {} exploits {} with config {}", trial_id, donor_id,
                  decision.config.dump());
    // The trial goes on from the donor's checkpoint: it takes on the donor's schedule too.
    trial.config = decision.config;
    trial.last_perturbation_time = donor.last_perturbation_time;
    trial.has_checkpoint = true;
    ++num_exploits_;
    return decision;
  }

  nlohmann::json State() const override {
    nlohmann::json trials = nlohmann::json::object();
    for (const auto& [id, t] : trials_) {
      trials[id] = {{"config", t.config},
                    {"score", OptionalNumber(t.score)},
                    {"iteration", t.iteration},
                    {"last_perturbation_time", t.last_perturbation_time},
                    {"has_checkpoint", t.has_checkpoint},
                    {"done", t.done}};
      if (ranking_) {
        trials[id]["standing"] = t.standing ? ParetoRanking::ToJson(*t.standing) : nullptr;
      }
    }
    return {{"trials", std::move(trials)}, {"exploits", num_exploits_}, {"rng", RngState(rng_)}};
  }

  void Restore(const nlohmann::json& state) override {
    std::map<std::string, PbtTrial> trials;
    for (const auto& [id, t] : state.at("trials").items()) {
      PbtTrial& trial = trials[id];
      trial.config = t.at("config");
      trial.score = OptionalNumber(t.at("score"));
      trial.iteration = t.at("iteration").get<double>();
      trial.last_perturbation_time = t.at("last_perturbation_time").get<double>();
      trial.has_checkpoint = t.at("has_checkpoint").get<bool>();
      trial.done = t.at("done").get<bool>();
      if (ranking_ && !t.at("standing").is_null()) {
        trial.standing = ranking_->FromJson(t.at("standing"));
      }
    }
    rng_ = RngFromState(state.at("rng"));
    trials_ = std::move(trials);
    num_exploits_ = state.at("exploits").get<int>();
  }

  void OnTrialComplete(const std::string& trial_id) override { trials_[trial_id].done = true; }
  void OnTrialError(const std::string& trial_id) override { trials_[trial_id].done = true; }

  std::string Summary() const override {
    return std::string(name()) + ": " + std::to_string(num_exploits_) +
           (num_exploits_ == 1 ? " exploit" : " exploits");
  }

 private:
  // Ray's _quantiles: (lower, upper) over unfinished trials with a score, worst first.
  std::pair<std::vector<std::string>, std::vector<std::string>> Quantiles() const {
    std::vector<std::pair<double, std::string>> ranked;
    for (const auto& [id, state] : trials_) {
      if (state.score && !state.done) ranked.emplace_back(*state.score, id);
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t n = ranked.size();
    if (n <= 1) return {};
    auto count = static_cast<size_t>(std::ceil(static_cast<double>(n) * config_.quantile_fraction));
    count = std::min(count, n / 2);
    std::vector<std::string> lower, upper;
    for (size_t i = 0; i < count; ++i) {
      lower.push_back(ranked[i].second);
      upper.push_back(ranked[n - count + i].second);
    }
    return {lower, upper};
  }

  // Quantiles' counterpart with several objectives: (lower, donors). Lower: the q worst by
  // ParetoRanking that are off the non-dominated set, worst first; donors: that set.
  std::pair<std::vector<std::string>, std::vector<std::string>> ParetoQuantiles() const {
    std::vector<std::string> ids;
    std::vector<const ParetoRanking::Standing*> standings;
    for (const auto& [id, state] : trials_) {
      if (state.standing && !state.done) {
        ids.push_back(id);
        standings.push_back(&*state.standing);
      }
    }
    const size_t n = ids.size();
    if (n <= 1) return {};
    auto count = static_cast<size_t>(std::ceil(static_cast<double>(n) * config_.quantile_fraction));
    count = std::min(count, n / 2);
    const std::vector<size_t> front = ParetoRanking::Front(standings);
    const std::vector<size_t> ranked = ParetoRanking::Rank(standings);
    std::vector<std::string> lower, donors;
    for (size_t i = 0; i < count; ++i) {
      const size_t index = ranked[n - 1 - i];
      if (std::find(front.begin(), front.end(), index) == front.end()) lower.push_back(ids[index]);
    }
    for (size_t index : front) donors.push_back(ids[index]);
    return {lower, donors};
  }

  nlohmann::json Explore(const nlohmann::json& donor_config) {
    nlohmann::json config = donor_config;
    for (const Param& param : config_.hyperparam_mutations) {
      const nlohmann::json current = GetPath(donor_config, param.path);
      if (const auto* domain = std::get_if<Domain>(&param.value)) {
        if (domain->is_numeric()) {
          SetPath(config, param.path, ExploreNumeric(*domain, current));
        } else {
          SetPath(config, param.path, ExploreList(domain->values(), current));
        }
      } else {
        SetPath(config, param.path, ExploreList(std::get<nlohmann::json>(param.value), current));
      }
    }
    return config;
  }

  nlohmann::json ExploreNumeric(const Domain& domain, const nlohmann::json& current) {
    if (Uniform01(rng_) < config_.resample_probability || !current.is_number()) {
      return domain.Sample(rng_);
    }
    const double factor =
        config_.perturbation_factors[UniformIndex(rng_, config_.perturbation_factors.size())];
    auto value = ClampInto(domain, current.get<double>() * factor, current.is_number_integer());
    return value && domain.Contains(*value) ? *value : domain.Sample(rng_);
  }

  template <typename List>
  nlohmann::json ExploreList(const List& values, const nlohmann::json& current) {
    const auto it = std::find(values.begin(), values.end(), current);
    if (Uniform01(rng_) < config_.resample_probability || it == values.end()) {
      return values[UniformIndex(rng_, values.size())];
    }
    const auto index = static_cast<ptrdiff_t>(it - values.begin());
    const ptrdiff_t shift = UniformIndex(rng_, 2) == 0 ? -1 : 1;
    const ptrdiff_t last = static_cast<ptrdiff_t>(values.size()) - 1;
    return values[static_cast<size_t>(std::clamp(index + shift, ptrdiff_t{0}, last))];
  }

  static nlohmann::json PolicyLine(const std::string& trial_id, const PbtTrial& trial,
                                   const std::string& donor_id, const PbtTrial& donor,
                                   const nlohmann::json& new_config) {
    // Iterations are written as integers when they are (Ray's are ints).
    auto iteration = [](double v) {
      return v == std::floor(v) && std::fabs(v) < 9e15 ? nlohmann::json(static_cast<int64_t>(v))
                                                       : nlohmann::json(v);
    };
    return {trial_id,     donor_id,  iteration(trial.iteration), iteration(donor.iteration),
            donor.config, new_config};
  }

  const PbtConfig config_;
  const std::string metric_;
  const double sign_;  // +1 for max, -1 for min
  const std::optional<ParetoRanking> ranking_;  // set: several objectives
  Rng rng_;
  std::map<std::string, PbtTrial> trials_;
  int num_exploits_ = 0;
};

}  // namespace

std::unique_ptr<TrialScheduler> MakePbt(const PbtConfig& config, std::string metric,
                                        std::string mode, uint64_t seed) {
  return std::make_unique<PbtScheduler>(config, std::move(metric), std::move(mode), seed);
}

std::unique_ptr<TrialScheduler> MakeMoPbt(const PbtConfig& config, ParetoRanking ranking,
                                          uint64_t seed) {
  return std::make_unique<PbtScheduler>(config, "", "max", seed, std::move(ranking));
}

}  // namespace rayd::tune::internal
