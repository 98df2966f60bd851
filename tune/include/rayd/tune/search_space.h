#pragma once
// Search spaces: the domains a hyperparameter is drawn from, and the generator that turns a
// parameter space into trial configs (Ray Tune's BasicVariantGenerator rules).
//
//   rayd::tune::ParamSpace space = {
//       {{"lr"}, rayd::tune::Domain::LogUniform(1e-4, 1e-1)},
//       {{"hidden"}, rayd::tune::Domain::GridSearch({64, 128})},
//       {{"optim", "momentum"}, 0.9},                       // a constant, nested under "optim"
//   };
//   std::vector<nlohmann::json> configs = rayd::tune::GenerateVariants(space, 4, /*seed=*/42);
//
// Ranges follow Ray Tune: uniform/loguniform draw from [lower, upper); randint from
// [lower, upper) (upper excluded); qrandint from [lower, upper] in steps of q (upper included);
// quniform/qloguniform round the draw to a multiple of q. loguniform's base is 10.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

namespace rayd::tune {

using Rng = std::mt19937_64;

class Domain {
 public:
  enum class Kind {
    kGridSearch,
    kChoice,
    kUniform,
    kQUniform,
    kLogUniform,
    kQLogUniform,
    kRandInt,
    kQRandInt,
    kRandn,
  };

  // Every value is a trial of its own (times num_samples).
  static Domain GridSearch(std::vector<nlohmann::json> values);
  // One of `values`, uniformly.
  static Domain Choice(std::vector<nlohmann::json> values);
  static Domain Uniform(double lower, double upper);
  static Domain QUniform(double lower, double upper, double q);
  static Domain LogUniform(double lower, double upper);
  static Domain QLogUniform(double lower, double upper, double q);
  static Domain RandInt(int64_t lower, int64_t upper);
  static Domain QRandInt(int64_t lower, int64_t upper, int64_t q);
  static Domain Randn(double mean = 0.0, double sd = 1.0);

  Kind kind() const { return kind_; }
  // The YAML/JSON spelling of the kind: "grid_search", "choice", "uniform", ...
  const char* name() const;
  // Grid search and choice: the values.
  const std::vector<nlohmann::json>& values() const { return values_; }
  // Numeric domains: their bounds and step (mean and sd for randn).
  double lower() const { return lower_; }
  double upper() const { return upper_; }
  double q() const { return q_; }
  bool is_numeric() const { return kind_ != Kind::kGridSearch && kind_ != Kind::kChoice; }
  bool is_integer() const { return kind_ == Kind::kRandInt || kind_ == Kind::kQRandInt; }

  // A draw (for grid search: one of the values, uniformly; the variant generator enumerates
  // grids instead). Integers come back as JSON integers, the rest as numbers or the values.
  nlohmann::json Sample(Rng& rng) const;
  // Whether `value` could have been drawn from this domain (bounds, steps, membership), for
  // PBT's perturbations that must stay inside the space.
  bool Contains(const nlohmann::json& value) const;
  // {"loguniform": [0.0001, 0.1]} and so on: the spelling tune.yaml uses.
  nlohmann::json ToJson() const;
  // Throws std::invalid_argument with a one-line reason for an empty domain or bad bounds
  // (lower >= upper, non-positive loguniform bounds, q <= 0, sd <= 0).
  void Validate() const;

 private:
  Kind kind_ = Kind::kUniform;
  std::vector<nlohmann::json> values_;
  double lower_ = 0, upper_ = 1, q_ = 0;
};

// One entry of a parameter space: a path of keys (nesting) and a constant or a domain.
struct Param {
  std::vector<std::string> path;
  std::variant<nlohmann::json, Domain> value;

  Param(std::vector<std::string> p, Domain d) : path(std::move(p)), value(std::move(d)) {}
  Param(std::vector<std::string> p, nlohmann::json v) : path(std::move(p)), value(std::move(v)) {}
  template <typename T>
    requires std::is_arithmetic_v<T>
  Param(std::vector<std::string> p, T v) : path(std::move(p)), value(nlohmann::json(v)) {}
  Param(std::vector<std::string> p, const char* v) : path(std::move(p)), value(nlohmann::json(v)) {}
};
using ParamSpace = std::vector<Param>;

// Sets `value` at `path` inside `config` (creating nested objects).
void SetPath(nlohmann::json& config, const std::vector<std::string>& path, nlohmann::json value);
// The value at `path` in `config`, or null.
nlohmann::json GetPath(const nlohmann::json& config, const std::vector<std::string>& path);
// "a/b": how paths are written in messages, tables and progress.csv columns ("config/a/b").
std::string JoinPath(const std::vector<std::string>& path);

// How a sweep's configs are chosen (TuneConfig::search).
// Ray Tune's BasicVariantGenerator: every grid_search combination, num_samples times, every
// other domain drawn at random; all configs are known when the sweep starts. ("grid" in
// tune.yaml is the same generator.)
struct RandomSearchConfig {};
// The Tree-structured Parzen Estimator (Bergstra et al., 2011) as Optuna's TPESampler: the first
// n_startup_trials at random, then each new trial proposed from the results of those that
// ended (a trial's last value of TuneConfig::metric), when a slot frees. Needs a metric, or
// several objectives or constraints (then it is MOTPE, tune/src/mo_tpe.h), and a space without
// grid_search and randn.
struct TpeConfig {
  int n_startup_trials = 10;
  int n_ei_candidates = 24;
  double gamma = 0.1;          // the share of trials that count as good (at most 25 of them)
  double prior_weight = 1.0;
  bool multivariate = false;   // one joint model instead of one per parameter
  // A numeric kernel counts with its bandwidth as its weight (its peak height is the same for
  // every kernel), as Optuna 3.1's TPESampler evaluates its kernels (its truncated normal's log
  // density leaves out the 1/scale factor); false: each kernel is a proper density (the
  // textbook Parzen estimator). On Hartmann-6 the former finds better configs sooner
  // (bench/search: median best after 50 trials -2.74 against -2.42, over 40 seeds).
  bool weight_by_bandwidth = true;
};
// NSGA-II (Deb et al., 2002) as Optuna's NSGAIISampler: the first population_size trials at
// random, then each new trial, when a slot frees, bred from the best population_size of the
// trials that ended (constrained non-dominated sorting, then crowding distance): two parents by
// binary tournament, uniform crossover, then mutation by redrawing parameters from their
// domains. Needs TuneConfig::objectives (several objectives, or constraints) and a space
// without grid_search.
struct Nsga2Config {
  int population_size = 50;            // at least 2
  std::optional<double> mutation_prob;  // in (0, 1]; unset: 1 / the number of drawn parameters
  double crossover_prob = 0.9;          // in [0, 1]: else the child copies one parent
  double swapping_prob = 0.5;           // in [0, 1]: per parameter, take the second parent's
};
using SearchConfig = std::variant<RandomSearchConfig, TpeConfig, Nsga2Config>;

// The trial configs of a sweep, in order: for each of `num_samples` samples, every combination
// of the grid-search values (the last grid parameter varies fastest), with every other domain
// drawn afresh per config. The same space, num_samples and seed give the same configs.
std::vector<nlohmann::json> GenerateVariants(const ParamSpace& space, int num_samples,
                                             uint64_t seed);

}  // namespace rayd::tune
