#pragma once
// Trial schedulers: pure decision makers the Tuner consults on every result. They do no I/O
// except PBT's lineage logs. Names, options and defaults follow Ray Tune.
//
// The Tuner calls, on its controller thread only:
//   OnTrialAdd      once per trial, before it first runs
//   OnTrialResult   per reported result of a running trial -> what to do with the trial
//   OnTrialComplete when a trial's loop returned (finished) or it was stopped by a decision
//   OnTrialError    when a trial failed for good
//   ChooseTrialToResume  whenever a slot frees up: a paused trial to resume before starting a
//                   pending one (ASHA's promotion form, HyperBand); nullopt = start a new one
//   OnTrialResume   just before a paused trial runs again: resume it as it was, or exploit
//
// Results are flat maps of numbers: the trial's metrics plus "training_iteration",
// "time_total_s" and "time_this_iter_s", so time_attr may name any of them.

#include <rayd/tune/multi_objective.h>
#include <rayd/tune/search_space.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace rayd::tune {

using Metrics = std::map<std::string, double>;

struct SchedulerResult {
  Metrics metrics;
  // The trial's config when it reported (PBT perturbs and clones it).
  nlohmann::json config;
  // Whether the trial has a checkpoint now (this result's or an earlier one's). PBT never
  // clones a trial without one.
  bool has_checkpoint = false;
};

struct Decision {
  enum class Action {
    kContinue,
    kPause,    // stop it for now, keep its checkpoint; ChooseTrialToResume may bring it back
    kStop,     // done: early-stopped, or reached its last rung
    kExploit,  // PBT: restart this trial from `donor`'s latest checkpoint with `config`
  };
  Action action = Action::kContinue;
  std::string donor;      // kExploit
  nlohmann::json config;  // kExploit: the perturbed config to continue with
  // kExploit: Ray's policy line [target, donor, target iteration, donor iteration, donor
  // config, new config], which the Tuner appends to the lineage logs when it applies the
  // exploit (schedulers decide; they write nothing).
  nlohmann::json lineage;
  static Decision Continue() { return {}; }
  static Decision Pause() { return {Action::kPause, {}, {}}; }
  static Decision Stop() { return {Action::kStop, {}, {}}; }
};

const char* ToString(Decision::Action action);

class TrialScheduler {
 public:
  virtual ~TrialScheduler() = default;
  virtual const char* name() const = 0;
  virtual void OnTrialAdd(const std::string& trial_id, const nlohmann::json& config) {}
  virtual Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) = 0;
  virtual void OnTrialComplete(const std::string& trial_id) {}
  virtual void OnTrialError(const std::string& trial_id) {}
  virtual std::optional<std::string> ChooseTrialToResume() { return std::nullopt; }
  // A paused trial is about to resume: kExploit resumes it from `donor`'s checkpoint with the
  // decision's config instead of its own (synchronous PBT decides for the trials it paused);
  // anything else resumes it as it was.
  virtual Decision OnTrialResume(const std::string& trial_id) { return Decision::Continue(); }
  // Running trials, best first: who gets freed workers first when trials are elastic
  // (ScalingConfig::min_workers). `running` comes ranked by each trial's latest metric, best
  // first, which is what PBT's quantiles rank by; ASHA ranks by the highest rung a trial has
  // reached, then its score there.
  virtual std::vector<std::string> RankForGrowth(std::vector<std::string> running) const {
    return running;
  }
  // Whether growing this running trial comes before starting new trials: it has survived one
  // of the scheduler's decisions (ASHA: it passed a rung), so workers spent on it are better
  // spent than on a trial not yet judged. None by default.
  virtual bool GrowsBeforeNew(const std::string& trial_id) const { return false; }
  // A line or two for the console table's header ("ASHA: 3 rungs, 5 stopped early").
  virtual std::string Summary() const { return name(); }
  // Everything that decides the scheduler's next decisions (rungs, brackets, random generator),
  // as JSON, saved with the experiment's state; null when it keeps nothing. Restore, on a
  // scheduler made from the same config, continues exactly where State was taken; it throws
  // std::invalid_argument for a state it cannot take (another config's).
  virtual nlohmann::json State() const { return nullptr; }
  virtual void Restore(const nlohmann::json& state) {}
};

// Options, as tune.yaml spells them (scheduler: {type: asha, ...}).
struct FifoConfig {};

struct AshaConfig {
  std::string time_attr = "training_iteration";
  double max_t = 100;
  double grace_period = 1;
  double reduction_factor = 4;
  int brackets = 1;
  // Ray's form (false): a trial below the rung's cut-off is stopped, the rest continue.
  // The paper's promotion form (true): a trial pauses at each rung and is resumed (from its
  // checkpoint) only when it ranks in the top 1/reduction_factor of that rung; when nothing can
  // be promoted, a new trial starts.
  bool promotion = false;
  // Ray's stop_last_trials: stop trials at max_t.
  bool stop_last_trials = true;
};

struct HyperBandConfig {
  std::string time_attr = "training_iteration";
  double max_t = 81;
  double reduction_factor = 3;
  bool stop_last_trials = true;
};

// How median stopping turns several objectives into the one number it compares, higher being
// better. Each objective first takes its mode's direction, d = value for a maximised metric and
// -value for a minimised one, so weights are importances, never signs:
//   kWeightedSum:  sum over the objectives of weight * d
//   kChebyshev:    -max over the weighted objectives of weight * (ideal's d - d), where the ideal
//                  is `reference` (the best value one could hope for, in the metric's units)
// A result lacking a weighted objective is not counted (as a single metric's result without the
// metric); a NaN or infinite one scores the worst a feasible result can. A result that misses a
// constraint scores below every result that meets them all, lower the more it misses.
struct Scalarization {
  enum class Kind { kWeightedSum, kChebyshev };
  Kind kind = Kind::kWeightedSum;
  // By objective metric: each finite and >= 0, at least one above 0; an objective not listed
  // weighs 0. A metric that is not an objective is refused.
  std::map<std::string, double> weights;
  // kChebyshev only, and required there: a finite value for every objective weighted above 0.
  std::map<std::string, double> reference;
};

// "weighted_sum", "chebyshev": tune.yaml's spellings.
const char* ToString(Scalarization::Kind kind);

// One result's value under `scalarization`, higher being better, as MO median stopping compares
// it: each objective first takes its mode's direction, then the weighted sum (or minus the
// largest weighted shortfall from `reference`); every result that meets `constraints` scores
// above every one that misses them, which score lower the more they miss; a NaN or infinite
// objective weighted above 0 scores below every finite feasible value. nullopt when `metrics`
// lacks an objective weighted above 0. `scalarization` must name objectives of `objectives`
// only (MakeScheduler's check), and `objectives` must not be empty.
std::optional<double> Scalarize(const Scalarization& scalarization,
                                const std::vector<Objective>& objectives,
                                const std::vector<Constraint>& constraints, const Metrics& metrics);

struct MedianStoppingConfig {
  std::string time_attr = "time_total_s";
  double grace_period = 60;
  int min_samples_required = 3;
  // Ray's hard_stop: stop a trial below the median (false: pause it instead).
  bool hard_stop = true;
  // With several objectives or constraints: required, and what the rule compares (the running
  // means and best results of the scalarised value). With one metric: must be absent.
  std::optional<Scalarization> scalarization;
};

struct PbtConfig {
  std::string time_attr = "time_total_s";
  double perturbation_interval = 60;
  double burn_in_period = 0;
  // What explore may resample or perturb; a key's path is the config path.
  ParamSpace hyperparam_mutations;
  double quantile_fraction = 0.25;
  double resample_probability = 0.25;
  std::vector<double> perturbation_factors = {1.2, 0.8};
  // Ray's synch: every perturbation_interval the trials wait (paused) until every unfinished
  // trial has reached the same point, then the whole population is ranked at once. Slower
  // (paused trials restart from their checkpoints) but it does not depend on how fast each
  // trial happens to start or run.
  bool synch = false;
  // Directory where the Tuner writes pbt_global.txt and pbt_policy_<trial>.txt (the
  // experiment's by default); empty: none.
  std::string log_dir;
};

// PASHA (Bohdal et al., 2023): ASHA in its promotion form whose maximum resource starts at the
// second rung (grace_period * reduction_factor) and grows a rung at a time, up to max_t, only
// while the ranking of the trials at the top two rungs keeps changing. Two trials whose scores
// differ by no more than epsilon (in the metric's units) at a rung count as tied there.
struct PashaConfig {
  std::string time_attr = "training_iteration";
  double max_t = 100;
  double grace_period = 1;
  double reduction_factor = 3;
  // Unset ("auto" in tune.yaml): estimated as the sweep goes, as the paper does, from the noise
  // in rankings: the 90th percentile of the score gaps of pairs of trials whose order differs
  // between two consecutive rungs (0 until a pair does).
  std::optional<double> epsilon;
};

using SchedulerConfig = std::variant<FifoConfig, AshaConfig, HyperBandConfig, MedianStoppingConfig,
                                     PbtConfig, PashaConfig>;

// "fifo", "asha", "hyperband", "median_stopping", "pbt", "pasha".
const char* SchedulerType(const SchedulerConfig& config);

// metric/mode ("min" or "max") rank results. Throws std::invalid_argument for a bad config
// (grace_period > max_t, reduction_factor <= 1, quantile_fraction outside (0, 0.5], an empty
// hyperparam_mutations for PBT, ...), naming the option.
std::unique_ptr<TrialScheduler> MakeScheduler(const SchedulerConfig& config, std::string metric,
                                              std::string mode, uint64_t seed);

// A scheduler ranking by several objectives under constraints (rayd/tune/multi_objective.h),
// each named "MO-" and its type's name:
//  - fifo;
//  - asha as MO-ASHA (its stopping form, one bracket): a trial goes on from a rung when it is
//    among the top ceil(n / rf) there by constrained non-dominated sort and crowding distance;
//  - hyperband: each bracket keeps, at each rung, its best by the same ranking;
//  - median_stopping on MedianStoppingConfig::scalarization (required);
//  - pbt: a trial in the bottom quantile by that ranking, and off the non-dominated set (front
//    0), exploits a donor drawn from the non-dominated set (feasible ones when any is).
// `seed` drives PBT's draws, as in the other overload. Throws std::invalid_argument for no
// objective, bad options (naming them), or pasha, which ranks by one metric only.
std::unique_ptr<TrialScheduler> MakeScheduler(const SchedulerConfig& config,
                                              const std::vector<Objective>& objectives,
                                              const std::vector<Constraint>& constraints,
                                              uint64_t seed = 0);

}  // namespace rayd::tune
