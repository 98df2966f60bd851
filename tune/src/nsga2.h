#pragma once
// Nsga2Search: NSGA-II (Deb et al., 2002) as Optuna's NSGAIISampler, proposing the trial configs
// of a sweep with several objectives, constraints, or both (TuneConfig::objectives).
//
// How it works:
//   - The first `population_size` proposals are drawn at random from the space (each parameter
//     by Domain::Sample, as GenerateVariants draws), and so is every proposal made while fewer
//     than two trials have ended (there is nothing to breed from yet).
//   - Every later proposal is an offspring. The parent population is the best population_size
//     of all trials ended so far, ranked by RankByParetoAndCrowding (rayd/tune/multi_objective.h):
//     constrained non-dominated front first, crowding distance within a front. It is recomputed
//     for each proposal (steady state), so nothing waits for a generation to complete and each
//     proposal uses every result in so far: with one trial at a time and population_size
//     trials per generation this is NSGA-II's elitist (mu + lambda) selection.
//   - Two distinct parents are picked by binary tournament: two distinct members drawn
//     uniformly, the better ranked wins (front, then crowding). With probability crossover_prob
//     the child takes each parameter from the second parent with probability swapping_prob
//     (uniform crossover, Optuna's default), else from the first; without crossover it is a copy
//     of the first. Then each parameter is redrawn from its domain with probability
//     mutation_prob (default 1 / the number of drawn parameters, Optuna's), and so is a value
//     its domain cannot hold.
//   - A proposal that repeats a config proposed before is drawn again: an offspring up to
//     kFreshTries times (32), then random configs as many times, and only then is the repeat
//     kept. ProposedBy says which kind was kept ("nsga2 (random: offspring repeated tried
//     configs)" for a random one). A repeat replays the same training for the same result and
//     costs a trial: Optuna's NSGAIISampler keeps it. On the Fashion-MNIST replay
//     (4 categorical parameters, 504 configs, 40 trials, population 10) it made 30 distinct
//     configs in 40 trials; with the redraw every one is new, and the front after 40 trials is
//     higher in 0.67 of seed pairs (bench/search, 300 seeds each; 0.84 under MO-ASHA). In a
//     continuous space only a clone repeats (no crossover, no mutation: ~3.5% of children at
//     12-30 parameters); on ZDT1-3 and DTLZ2 the redraw made no clear difference (40 seeds,
//     0.42-0.54 of seed pairs).
//   - What a trial achieved is its last result (OnTrialResult, kept per config while it runs),
//     fixed when it ends (OnTrialEnd): its ObjectiveVector and TotalViolation. A trial that
//     reported nothing ranks below every other (every objective worst, violation +infinity).
//     A trial that failed counts by what it reported before failing (the controller passes no
//     value for several objectives, so failure is not told apart from the end).
//
// Invariants: ended_ holds one entry per ended trial, in the order they ended; proposed_ counts
// Next calls; tried_ holds the JSON text of every config Next returned. Deterministic: the same
// space, options, seed and calls in the same order give the same configs, and State()/Restore
// carry all of it over a restart.
// Threading: none of its own; the controller's loop calls it.

#include <rayd/tune/multi_objective.h>
#include <rayd/tune/search_space.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "searcher.h"

namespace rayd::tune::internal {

class Nsga2Search : public Searcher {
 public:
  // Throws std::invalid_argument for no objectives, options out of range (population_size < 2,
  // mutation_prob outside (0, 1], crossover_prob or swapping_prob outside [0, 1]) or a
  // grid_search domain (naming the parameter); every domain is validated.
  Nsga2Search(const ParamSpace& space, std::vector<Objective> objectives,
              std::vector<Constraint> constraints, const Nsga2Config& config, int num_samples,
              uint64_t seed);

  const char* name() const override { return "nsga2"; }
  bool HasNext(size_t made) const override { return made < num_samples_; }
  nlohmann::json Next() override;
  std::string ProposedBy() const override {
    switch (last_) {
      case Kind::kStart: return "nsga2 (random start)";
      case Kind::kRedrawn: return "nsga2 (random: offspring repeated tried configs)";
      case Kind::kOffspring: break;
    }
    return "nsga2";
  }
  void OnTrialResult(const nlohmann::json& config,
                     const std::map<std::string, double>& result) override;
  // `value` is ignored: what counts is the trial's last result (see above).
  void OnTrialEnd(const nlohmann::json& config, std::optional<double> value) override;
  nlohmann::json State() const override;
  // Throws std::invalid_argument for a state of another space or number of objectives.
  void Restore(const nlohmann::json& state) override;

  // The mutation probability in use (the default resolved).
  double mutation_prob() const { return mutation_prob_; }
  size_t num_ended() const { return ended_.size(); }

 private:
  struct Dim {
    std::vector<std::string> path;
    Domain domain;
  };
  // What a trial achieved, as multi_objective.h ranks it.
  struct Outcome {
    std::vector<double> point;  // ObjectiveVector: to minimise
    double violation = 0;       // TotalViolation: 0 = feasible, +infinity = no result
  };
  struct Ended {
    nlohmann::json config;
    Outcome outcome;
  };

  // Indices into ended_ of the parent population, best first.
  std::vector<size_t> Population() const;
  // A binary tournament over positions [0, n) of the population, other than `taken`: the
  // better (lower) of two distinct positions drawn uniformly. n - (taken ? 1 : 0) >= 1.
  size_t Tournament(size_t n, std::optional<size_t> taken);
  // A child of two parents of `population` (Population()'s).
  nlohmann::json Offspring(const std::vector<size_t>& population);
  nlohmann::json Random();
  nlohmann::json OutcomeJson(const nlohmann::json& config, const Outcome& o) const;
  Outcome OutcomeFromJson(const nlohmann::json& j) const;

  std::vector<Dim> dims_;
  nlohmann::json constants_ = nlohmann::json::object();  // the space's constants, in place
  std::vector<Objective> objectives_;
  std::vector<Constraint> constraints_;
  size_t population_size_;
  double mutation_prob_;
  double crossover_prob_;
  double swapping_prob_;
  size_t num_samples_;
  Rng rng_;
  size_t proposed_ = 0;
  // What the last proposal was: a random start, an offspring, or random after offspring that
  // all repeated tried configs.
  enum class Kind { kStart, kOffspring, kRedrawn };
  Kind last_ = Kind::kOffspring;
  // The last result of each running trial, by its config's JSON text.
  std::map<std::string, Outcome> running_;
  std::vector<Ended> ended_;
  std::set<std::string> tried_;  // every config proposed, as JSON text
};

}  // namespace rayd::tune::internal
