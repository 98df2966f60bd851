#pragma once
// TpeSearcher: the Tree-structured Parzen Estimator (Bergstra et al., 2011), proposing trial
// configs from the results of earlier ones.
//
// After `n_startup_trials` random configs, the observations are split into the best
// gamma(n) = min(ceil(gamma * n), gamma_cap) ("below") and the rest ("above"); each side becomes
// a Parzen estimator over the space (a mixture of truncated normals per numeric parameter, in
// log space for log domains; weighted category frequencies per choice), each with a prior
// component covering the domain. `n_ei_candidates` configs are drawn from the "below" estimator
// and the one maximising l(x) / g(x) is proposed. Univariate (each parameter chosen on its own)
// by default, as Optuna's TPESampler; multivariate scores joint candidates with one kernel per
// observation across every parameter. Older observations weigh less once there are more than 25
// (Optuna's default weights), and a numeric kernel weighs by its bandwidth unless
// weight_by_bandwidth is off (see TpeConfig). Configs proposed but not yet observed count as
// "above" (the constant liar), so that concurrent trials spread out. A proposal already tried is
// replaced by an untried random config when one turns up.
//
// With several objectives, constraints or both (TpeOptions::objectives), each observation is an
// outcome (TpeOutcome: a point to minimise and a constraint violation) and the split is
// MOTPE's, as Optuna's TPESampler makes it for a multi-objective study: "below" filled by
// constrained Pareto front and hypervolume, and weighted by hypervolume contribution
// (mo_tpe.h). The estimators, candidates and ratio are the same.
//
// Models uniform, quniform, loguniform, qloguniform, randint, qrandint and choice domains,
// nested paths and constants; grid_search and randn are refused (construction throws
// std::invalid_argument naming the parameter). Seeded: the same seed, observations and
// proposals in the same order give the same configs, and State()/Restore carry a searcher over
// a restart.

#include <rayd/tune/search_space.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rayd::tune::internal {

struct TpeOptions {
  int n_startup_trials = 10;
  int n_ei_candidates = 24;
  double gamma = 0.1;  // the share of observations that are "good"
  int gamma_cap = 25;  // ... at most this many
  double prior_weight = 1.0;
  bool multivariate = false;
  bool weight_by_bandwidth = true;  // TpeConfig::weight_by_bandwidth
  // 0: observations are values ranked by `mode` (Observe(config, value)). k >= 1: they are
  // outcomes with k objectives (Observe(config, TpeOutcome)), split by constrained Pareto front
  // and hypervolume (MOTPE, mo_tpe.h); `mode` is then unused.
  size_t objectives = 0;
};

// What a trial achieved, for a searcher of outcomes: the point to minimise (ObjectiveVector,
// TpeOptions::objectives finite coordinates) and its TotalViolation (0 = feasible, +infinity
// allowed, not NaN).
struct TpeOutcome {
  std::vector<double> point;
  double violation = 0;
};

class TpeSearcher {
 public:
  // `mode`: "min" or "max", how observed values rank.
  TpeSearcher(const ParamSpace& space, const std::string& mode, const TpeOptions& options,
              uint64_t seed);

  // The next config to try; it counts as pending (the constant liar) until observed.
  nlohmann::json Suggest();
  // A config's outcome: its value, or nullopt when it gave none (failed, or no metric): then it
  // only stops being pending. NaN or an infinity (diverged) counts as the worst loss.
  // A searcher of outcomes takes nullopt only (std::invalid_argument otherwise).
  void Observe(const nlohmann::json& config, std::optional<double> value);
  // A config's outcome, for a searcher of outcomes (TpeOptions::objectives > 0); throws
  // std::invalid_argument on a searcher of values, or for a point of another size, not finite,
  // or a NaN or negative violation.
  void Observe(const nlohmann::json& config, const TpeOutcome& outcome);
  // A running config's value at `budget` (its training_iteration, say): with an early-stopping
  // scheduler, BOHB's rule fits the model on the highest budget that at least
  // min_points_in_model configs have reached, rather than on final values (which stopped trials
  // reach early). Replaces the config's earlier value at the same budget.
  void ObserveAt(const nlohmann::json& config, double value, double budget);
  // The same for a searcher of outcomes (its checks as Observe's).
  void ObserveAt(const nlohmann::json& config, const TpeOutcome& outcome, double budget);
  // The budget the next proposal's model is fitted on; nullopt: final values.
  std::optional<double> ModelBudget() const;

  size_t num_observations() const { return observed_.size(); }
  // Whether the next Suggest is one of the random start's.
  bool in_startup() const;
  // BOHB's minimum: the number of parameters plus one.
  size_t min_points_in_model() const { return dims_.size() + 1; }
  size_t num_pending() const { return pending_.size(); }
  // log l(config) and log g(config) under the model the next proposal would be drawn from
  // (univariate: summed over the parameters' estimators; multivariate: the joint ones), in the
  // internal space (log10 for log domains). Throws std::invalid_argument for a config outside
  // the space. For tests and tools; costs a fit.
  std::pair<double, double> LogDensities(const nlohmann::json& config) const;

  // Everything that decides the next proposals (observations, pending configs, the random
  // generator), as JSON; Restore on a searcher made from the same space and options continues
  // exactly where State was taken.
  nlohmann::json State() const;
  void Restore(const nlohmann::json& state);

 private:
  // One modelled parameter; numeric values live in its internal space (log10 for log domains).
  struct Dim {
    std::vector<std::string> path;
    Domain domain;
    bool categorical = false;
    double low = 0, high = 1;  // the internal space's bounds (widened by q/2 for steps)
  };
  struct Observation {
    std::vector<double> x;  // per Dim: internal value, or the category's index
    double loss = 0;        // lower is better; +inf for a pending config
    // A searcher of outcomes': what it achieved (loss unused); a pending config has none.
    TpeOutcome outcome;
  };

  // One side's estimator for one dimension.
  struct Parzen {
    std::vector<double> weights;      // normalised; the prior's is last
    std::vector<double> mus, sigmas;  // numeric (categorical: mus are category indices, -1 the prior's)
    // Per component, what its log density adds to -z^2/2 (numeric: -log(sigma sqrt(2 pi)
    // mass), the truncation's mass computed once here), and log(weight).
    std::vector<double> log_norm, log_weights;
    // Categorical: what each category gets in an observation's kernel beside the 1 on its own,
    // prior_weight / (observations + 1) (Optuna's): a side with more observations has sharper
    // kernels.
    double category_spread = 0;
  };

  // Both sides' estimators, per dimension, as the next proposal would fit them.
  struct Model {
    std::vector<Parzen> l, g;
  };
  Model FitModel() const;
  // MOTPE's split of `all`, whose first `seen` are observations and the rest pending configs
  // (always "above"): "below" with its weights, and "above".
  void SplitOutcomes(const std::vector<const Observation*>& all, size_t seen, size_t n_below,
                     std::vector<const Observation*>& below, std::vector<double>& w_below,
                     std::vector<const Observation*>& above) const;
  // How many of `n` configs are "below": gamma's share, at most gamma_cap; with bohb_minimum,
  // at least min_points_in_model (of the n).
  size_t BelowCount(size_t n, bool bohb_minimum) const;
  void CheckOutcome(const TpeOutcome& outcome) const;
  void AddAtBudget(const nlohmann::json& config, Observation o, double budget);
  nlohmann::json ObservationJson(const Observation& o) const;
  Observation ObservationFromJson(const nlohmann::json& j) const;
  double JointLogDensity(const std::vector<Parzen>& side, const std::vector<double>& x) const;

  // What TPE minimises: the value, negated for mode max; diverged values worst of all.
  double Loss(double value) const;
  std::optional<Observation> Encode(const nlohmann::json& config, double loss) const;
  nlohmann::json Decode(const std::vector<double>& x) const;
  std::vector<double> SampleRandom();
  // The model's proposal: its best point (Optuna's) when `fresh` takes it, else the best of
  // its next kRankedProposals that `fresh` takes, else its best. Univariate, the points are
  // combinations of each parameter's candidates, best first by their summed log l - log g;
  // multivariate, the joint candidates by their score.
  std::vector<double> SampleTpe(const std::function<bool(const std::vector<double>&)>& fresh);
  Parzen Fit(size_t dim, const std::vector<const Observation*>& side,
             const std::vector<double>& weights) const;
  // log of component i's kernel at x, and of the whole mixture.
  double LogKernel(size_t dim, const Parzen& p, size_t i, double x) const;
  double LogDensity(size_t dim, const Parzen& p, double x) const;
  double Draw(size_t dim, const Parzen& p, size_t component);
  size_t PickComponent(const std::vector<double>& weights);

  std::vector<Dim> dims_;
  nlohmann::json constants_ = nlohmann::json::object();  // the space's constants, in place
  bool maximize_ = false;
  TpeOptions options_;
  Rng rng_;
  std::vector<Observation> observed_;
  std::vector<nlohmann::json> pending_;
  // Every config suggested or observed (as JSON text): a proposal already tried is replaced by
  // the model's next best that is not (within kRankedProposals), else by a random one that is
  // not (within kUntriedDraws draws).
  std::set<std::string> tried_;
  static constexpr int kRankedProposals = 256;
  static constexpr int kUntriedDraws = 100;
  // ObserveAt's: by budget, the configs that reached it (in the order they first did).
  std::map<double, std::vector<std::pair<nlohmann::json, Observation>>> at_budget_;
};

}  // namespace rayd::tune::internal
