#pragma once
// The multi-objective searchers mo_search_bench compares, each made through the Tuner's
// Searcher interface (tune/src/searcher.h), so the synthetic problems (mo_main.cc) and the
// recorded curves (mo_replay.cc) drive every arm the same way: Next, then OnTrialResult per
// result, then OnTrialEnd. A new searcher is one more entry in MoArms.
//
// Also the hypervolume both use: the exact one of rayd/tune/multi_objective.h over the Pareto
// front of the points given (points to minimise).

#include <rayd/tune/multi_objective.h>
#include <rayd/tune/search_space.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "mo_tpe.h"
#include "nsga2.h"
#include "searcher.h"

namespace rayd::bench {

// Random search as the Tuner's default draws it: every parameter by Domain::Sample, constants in
// place; for a space without grid_search the same configs, seed for seed, as GenerateVariants.
class RandomMoSearch : public tune::internal::Searcher {
 public:
  RandomMoSearch(const tune::ParamSpace& space, int num_samples, uint64_t seed)
      : space_(space), num_samples_(static_cast<size_t>(num_samples)), rng_(seed) {}
  const char* name() const override { return "random"; }
  bool HasNext(size_t made) const override { return made < num_samples_; }
  nlohmann::json Next() override {
    nlohmann::json config = nlohmann::json::object();
    for (const tune::Param& p : space_) {
      const auto* domain = std::get_if<tune::Domain>(&p.value);
      tune::SetPath(config, p.path,
                    domain ? domain->Sample(rng_) : std::get<nlohmann::json>(p.value));
    }
    return config;
  }
  std::string ProposedBy() const override { return "random"; }
  void OnTrialEnd(const nlohmann::json&, std::optional<double>) override {}
  nlohmann::json State() const override { return nullptr; }
  void Restore(const nlohmann::json&) override {}

 private:
  tune::ParamSpace space_;
  size_t num_samples_;
  tune::Rng rng_;
};

struct MoArm {
  std::string name;
  // A searcher for a sweep of `num_samples` trials over `space`, ranking by `objectives`;
  // `budget_attr`: an early-stopping scheduler's time attribute (as the Tuner passes it).
  std::function<std::unique_ptr<tune::internal::Searcher>(
      const tune::ParamSpace& space, const std::vector<tune::Objective>& objectives,
      int num_samples, uint64_t seed, std::optional<std::string> budget_attr)>
      make;
  // The same searcher as TuneConfig::search names it, for Tuner::Simulate.
  tune::SearchConfig search;
};

// Every searcher arm; NSGA-II with `population` trials per generation (Optuna's default: 50).
inline std::vector<MoArm> MoArms(int population) {
  using tune::internal::Searcher;
  using Objectives = std::vector<tune::Objective>;
  using Budget = std::optional<std::string>;
  const tune::Nsga2Config nsga2{.population_size = population};
  std::vector<MoArm> arms;
  arms.push_back({"random",
                  [](const tune::ParamSpace& space, const Objectives&, int n, uint64_t seed,
                     Budget) -> std::unique_ptr<Searcher> {
                    return std::make_unique<RandomMoSearch>(space, n, seed);
                  },
                  tune::RandomSearchConfig{}});
  arms.push_back({"nsga2",
                  [nsga2](const tune::ParamSpace& space, const Objectives& objectives, int n,
                          uint64_t seed, Budget) -> std::unique_ptr<Searcher> {
                    return std::make_unique<tune::internal::Nsga2Search>(
                        space, objectives, std::vector<tune::Constraint>{}, nsga2, n, seed);
                  },
                  nsga2});
  // MOTPE with TpeConfig's defaults (Optuna's); BOHB-style under MO-ASHA, as the Tuner makes it.
  arms.push_back({"mo_tpe",
                  [](const tune::ParamSpace& space, const Objectives& objectives, int n,
                     uint64_t seed, Budget budget) -> std::unique_ptr<Searcher> {
                    return std::make_unique<tune::internal::MoTpeSearch>(
                        space, objectives, std::vector<tune::Constraint>{}, tune::TpeConfig{}, n,
                        seed, std::move(budget));
                  },
                  tune::TpeConfig{}});
  return arms;
}

// The hypervolume of the Pareto front of `points` up to `reference`.
inline double FrontHypervolume(const std::vector<std::vector<double>>& points,
                               const std::vector<double>& reference) {
  if (points.empty()) return 0;
  std::vector<std::vector<double>> front;
  for (size_t i : tune::ParetoFront(points, std::vector<double>(points.size(), 0.0))) {
    front.push_back(points[i]);
  }
  return tune::Hypervolume(front, reference);
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0;
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace rayd::bench
