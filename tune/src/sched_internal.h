#pragma once
// Private to the trial schedulers (schedulers.cc, sched_*.cc) and the searchers (tpe.cc): one factory per scheduler, called
// by MakeScheduler after it validated the options, and the small numeric helpers they share.

#include <rayd/tune/schedulers.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rayd::tune::internal {

// `metric` is non-empty and `mode` is "min" or "max" for all but FIFO (MakeScheduler checks).
// With `pasha`, ASHA is PASHA (PashaConfig): its maximum resource grows only while the top two
// rungs rank trials differently (beyond epsilon; unset: estimated from the rankings' noise).
struct PashaOptions {
  std::optional<double> epsilon;
};
std::unique_ptr<TrialScheduler> MakeAsha(const AshaConfig& config, std::string metric,
                                         std::string mode, uint64_t seed,
                                         std::optional<PashaOptions> pasha = std::nullopt);
// PASHA's rungs and promotions are ASHA's promotion form with one bracket.
AshaConfig PashaAsAsha(const PashaConfig& config);
std::unique_ptr<TrialScheduler> MakeHyperBand(const HyperBandConfig& config, std::string metric,
                                              std::string mode);
std::unique_ptr<TrialScheduler> MakeMedianStopping(const MedianStoppingConfig& config,
                                                   std::string metric, std::string mode);
std::unique_ptr<TrialScheduler> MakePbt(const PbtConfig& config, std::string metric,
                                        std::string mode, uint64_t seed);

// Several objectives under constraints, as the schedulers that rank by Pareto dominance see
// results (sched_pareto.cc over multi_objective.h). A plain value: each scheduler owns its own.
class ParetoRanking {
 public:
  // A result as it is ranked.
  struct Standing {
    std::vector<double> point;  // to minimise (ObjectiveVector)
    double violation = 0;       // TotalViolation, at most kWorstObjective (JSON has no infinity)
  };

  // `objectives` is not empty (MakeScheduler checks).
  ParetoRanking(std::vector<Objective> objectives, std::vector<Constraint> constraints);

  const std::vector<Objective>& objectives() const { return objectives_; }
  const std::vector<Constraint>& constraints() const { return constraints_; }

  // Whether `metrics` names every objective (a NaN or infinite value counts: it is the worst).
  bool HasObjectives(const Metrics& metrics) const;
  Standing Measure(const Metrics& metrics) const;

  // Indices into `standings`, best first: RankByParetoAndCrowding, ties to the lower index.
  static std::vector<size_t> Rank(const std::vector<const Standing*>& standings);
  // Indices (ascending) of the constrained front 0: the feasible non-dominated standings when
  // any is feasible, else the least violating.
  static std::vector<size_t> Front(const std::vector<const Standing*>& standings);

  // {"point": [...], "violation": v}, and back; FromJson throws std::invalid_argument for a
  // point of another number of objectives.
  static nlohmann::json ToJson(const Standing& standing);
  Standing FromJson(const nlohmann::json& saved) const;

 private:
  std::vector<Objective> objectives_;
  std::vector<Constraint> constraints_;
};

// The schedulers ranking by several objectives (MakeScheduler's second overload), options
// checked. MO-ASHA (sched_mo_asha.cc): ASHA's stopping form.
std::unique_ptr<TrialScheduler> MakeMoAsha(const AshaConfig& config, ParetoRanking ranking);
// HyperBand (sched_hyperband.cc): each halving keeps the best by `ranking`.
std::unique_ptr<TrialScheduler> MakeMoHyperBand(const HyperBandConfig& config,
                                                ParetoRanking ranking);
// Median stopping (sched_median.cc) on config.scalarization, which is set and names objectives
// of `ranking` only.
std::unique_ptr<TrialScheduler> MakeMoMedianStopping(const MedianStoppingConfig& config,
                                                     ParetoRanking ranking);
// PBT (sched_pbt.cc): the bottom quantile by `ranking` exploits the non-dominated set.
std::unique_ptr<TrialScheduler> MakeMoPbt(const PbtConfig& config, ParetoRanking ranking,
                                          uint64_t seed);

// numpy's percentile with linear interpolation (np.nanpercentile without NaNs): `q` in [0, 100].
// `values` must not be empty.
double Percentile(std::vector<double> values, double q);
// numpy's median.
double Median(std::vector<double> values);

// A uniform double in [0, 1) and a uniform index in [0, n), n > 0. Written out rather than taken
// from <random>'s distributions, whose sequences differ between standard libraries, so a seed
// gives the same decisions everywhere.
double Uniform01(Rng& rng);
size_t UniformIndex(Rng& rng, size_t n);
// A standard normal draw (Box-Muller over Uniform01), as deterministic.
double StandardNormal(Rng& rng);

// A generator's whole state as JSON text, for TrialScheduler::State and the searchers', and
// back; RngFromState throws std::invalid_argument for anything else.
nlohmann::json RngState(const Rng& rng);
Rng RngFromState(const nlohmann::json& state);
// An optional number as JSON (null when unset), and back.
nlohmann::json OptionalNumber(std::optional<double> x);
std::optional<double> OptionalNumber(const nlohmann::json& j);

// What a result counts as: under several objectives (`ranking` set) its standing, else its
// score under `metric` (Score). nullopt when it lacks them: the scheduler lets the trial go on.
struct ResultMeasure {
  std::optional<double> score;
  std::optional<ParetoRanking::Standing> standing;
};
std::optional<ResultMeasure> MeasureResult(const std::optional<ParetoRanking>& ranking,
                                           const Metrics& metrics, const std::string& metric,
                                           double sign);

// The value under `key` when present and finite.
std::optional<double> Lookup(const Metrics& metrics, const std::string& key);

// What a diverged trial scores: below any real score, and far enough from the double's limits
// that the sums, means and interpolations of thousands of them stay finite (and JSON-writable).
inline constexpr double kWorstScore = -1e300;
// A trial's score under the metric `key`, higher is better: `sign` (+1 for mode max, -1 for min)
// times its value; kWorstScore for NaN or an infinity (a diverged trial is an outcome, ranked
// below every other and stopped wherever the scheduler stops anything); nullopt when absent.
std::optional<double> Score(const Metrics& metrics, const std::string& key, double sign);

// "3" for 3.0, "2.5" for 2.5: milestones in summaries.
std::string FormatNumber(double value);

// floor(log(x) / log(base)) without 2 = log(9)/log(3) coming out as 1.9999 (x > 0, base > 1).
int FloorLog(double x, double base);

}  // namespace rayd::tune::internal
