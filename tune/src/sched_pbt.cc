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
// With synch (Ray's synchronous PBT) a trial that reaches the sync point (every
// perturbation_interval, from max(perturbation_interval, burn_in_period)) pauses until every
// unfinished trial has reached it; then the population is ranked at once. The lower quantile's
// exploits are decided then and applied when each resumes (OnTrialResume); they resume first, so
// their donors, paused too, still hold the checkpoints that were ranked. Unlike Ray, the last
// trial to arrive goes on without a restart when no one clones it. A trial ending releases the
// trials waiting for it.
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
  double time = 0;  // time_attr of the last result
  bool has_checkpoint = false;
  bool done = false;
  bool waiting = false;  // synch: paused at the sync point
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
    trial.time = *t;
    if (config_.synch) return AtSyncPoint(trial_id);
    if (*t < config_.burn_in_period) return Decision::Continue();
    if (*t - trial.last_perturbation_time < config_.perturbation_interval) {
      return Decision::Continue();
    }
    trial.last_perturbation_time = *t;

    auto [lower, upper] = ranking_ ? ParetoQuantiles() : Quantiles();
    if (std::find(lower.begin(), lower.end(), trial_id) == lower.end()) {
      return Decision::Continue();
    }
    return Exploit(trial_id, upper);
  }

  Decision OnTrialResume(const std::string& trial_id) override {
    auto it = resume_exploits_.find(trial_id);
    if (it == resume_exploits_.end()) return Decision::Continue();
    Decision decision = std::move(it->second);
    resume_exploits_.erase(it);
    return decision;
  }

  std::optional<std::string> ChooseTrialToResume() override {
    if (released_.empty()) return std::nullopt;
    std::string id = std::move(released_.front());
    released_.erase(released_.begin());
    return id;
  }

  nlohmann::json State() const override {
    nlohmann::json trials = nlohmann::json::object();
    for (const auto& [id, t] : trials_) {
      trials[id] = {{"config", t.config},
                    {"score", OptionalNumber(t.score)},
                    {"iteration", t.iteration},
                    {"last_perturbation_time", t.last_perturbation_time},
                    {"time", t.time},
                    {"has_checkpoint", t.has_checkpoint},
                    {"done", t.done},
                    {"waiting", t.waiting}};
      if (ranking_) {
        trials[id]["standing"] = t.standing ? ParetoRanking::ToJson(*t.standing) : nullptr;
      }
    }
    nlohmann::json exploits = nlohmann::json::object();
    for (const auto& [id, d] : resume_exploits_) {
      exploits[id] = {{"donor", d.donor}, {"config", d.config}, {"lineage", d.lineage}};
    }
    return {{"trials", std::move(trials)},
            {"exploits", num_exploits_},
            {"rng", RngState(rng_)},
            {"next_sync", next_sync_},
            {"released", released_},
            {"resume_exploits", std::move(exploits)}};
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
      // (States saved before synch existed lack these.)
      trial.time = t.value("time", trial.iteration);
      trial.waiting = t.value("waiting", false);
      if (ranking_ && !t.at("standing").is_null()) {
        trial.standing = ranking_->FromJson(t.at("standing"));
      }
    }
    rng_ = RngFromState(state.at("rng"));
    trials_ = std::move(trials);
    num_exploits_ = state.at("exploits").get<int>();
    next_sync_ = state.value("next_sync", next_sync_);
    released_ = state.value("released", std::vector<std::string>{});
    resume_exploits_.clear();
    for (const auto& [id, d] : state.value("resume_exploits", nlohmann::json::object()).items()) {
      Decision& decision = resume_exploits_[id];
      decision.action = Decision::Action::kExploit;
      decision.donor = d.at("donor").get<std::string>();
      decision.config = d.at("config");
      decision.lineage = d.at("lineage");
    }
  }

  void OnTrialComplete(const std::string& trial_id) override { Ended(trial_id); }
  void OnTrialError(const std::string& trial_id) override { Ended(trial_id); }

  std::string Summary() const override {
    return std::string(name()) + ": " + std::to_string(num_exploits_) +
           (num_exploits_ == 1 ? " exploit" : " exploits");
  }

 private:
  // The lower-quantile trial `trial_id` takes a random donor of `upper` that has a checkpoint
  // (Continue when none has: Ray's "no checkpoint ... skip exploit").
  Decision Exploit(const std::string& trial_id, const std::vector<std::string>& upper) {
    std::vector<std::string> donors;
    for (const std::string& id : upper) {
      if (id != trial_id && trials_[id].has_checkpoint) donors.push_back(id);
    }
    if (donors.empty()) return Decision::Continue();
    const std::string donor_id = donors[UniformIndex(rng_, donors.size())];
    const PbtTrial& donor = trials_[donor_id];
    PbtTrial& trial = trials_[trial_id];

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

  // Synchronous mode: a trial that reached the sync point waits (paused) until every unfinished
  // trial has; the last to arrive ranks them all. It exploits at once when it is in the lower
  // quantile, goes on when no one takes its checkpoint, and otherwise pauses too, so that its
  // checkpoint stays the one ranked until the trials exploiting it (resumed first) have it.
  Decision AtSyncPoint(const std::string& trial_id) {
    if (trials_[trial_id].time < next_sync_) return Decision::Continue();
    trials_[trial_id].waiting = true;
    if (!AllAtSyncPoint()) return Decision::Pause();
    Sync();
    const bool donor = std::any_of(resume_exploits_.begin(), resume_exploits_.end(),
                                   [&](const auto& e) { return e.second.donor == trial_id; });
    if (donor) return Decision::Pause();
    std::erase(released_, trial_id);  // it is still running
    return OnTrialResume(trial_id);
  }

  bool AllAtSyncPoint() const {
    bool any = false;
    for (const auto& [id, t] : trials_) {
      if (t.done) continue;
      if (!t.waiting) return false;
      any = true;
    }
    return any;
  }

  // Every unfinished trial is at the sync point: decide each lower-quantile trial's exploit
  // (applied when it resumes) and release them all, the exploiting ones first.
  void Sync() {
    auto [lower, upper] = ranking_ ? ParetoQuantiles() : Quantiles();
    for (const std::string& id : lower) {
      Decision decision = Exploit(id, upper);
      if (decision.action == Decision::Action::kExploit) {
        resume_exploits_[id] = std::move(decision);
        released_.push_back(id);
      }
    }
    double latest = next_sync_;
    for (auto& [id, t] : trials_) {
      latest = std::max(latest, t.time);
      if (!t.waiting) continue;
      t.waiting = false;
      t.last_perturbation_time = t.time;
      if (!resume_exploits_.count(id)) released_.push_back(id);
    }
    next_sync_ = std::max(next_sync_ + config_.perturbation_interval, latest);
  }

  // A trial ended: the trials waiting on it may all be at the sync point now.
  void Ended(const std::string& trial_id) {
    trials_[trial_id].done = true;
    if (config_.synch && AllAtSyncPoint()) Sync();
  }

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
  // synch: the next sync point, the trials released from it not yet resumed, and the exploits
  // decided for them.
  double next_sync_ = std::max(config_.perturbation_interval, config_.burn_in_period);
  std::vector<std::string> released_;
  std::map<std::string, Decision> resume_exploits_;
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
