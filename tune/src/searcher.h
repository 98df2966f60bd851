#pragma once
// Searcher: where a sweep's trial configs come from, beyond the trials the Tuner made at the
// start. The controller asks for the next config when a slot frees and no made trial waits, and
// tells the searcher how each trial ended; its state is saved with the experiment's, so a
// resumed sweep proposes what an uninterrupted one would have.
//
// Random and grid search make every trial at the start (GenerateVariants) and need no searcher;
// TPE proposes each new trial from the results of the trials that ended (tpe.h; with several
// objectives or constraints, MOTPE: mo_tpe.h); NSGA-II breeds it from the best of them
// (nsga2.h).

#include <rayd/tune/search_space.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tpe.h"

namespace rayd::tune::internal {

class Searcher {
 public:
  virtual ~Searcher() = default;
  // "tpe", "nsga2": what the console and the state file call it.
  virtual const char* name() const = 0;
  // Whether another trial may be made once `made` trials exist.
  virtual bool HasNext(size_t made) const = 0;
  // The next trial's config.
  virtual nlohmann::json Next() = 0;
  // What proposed the config Next returned last, for the trial table ("tpe").
  virtual std::string ProposedBy() const = 0;
  // A result of a running trial it proposed.
  virtual void OnTrialResult(const nlohmann::json& config,
                             const std::map<std::string, double>& result) {}
  // A trial it proposed ended: its config as proposed, and its last value of the metric
  // (nullopt: it reported none, or failed before).
  virtual void OnTrialEnd(const nlohmann::json& config, std::optional<double> value) = 0;
  virtual nlohmann::json State() const = 0;
  // Throws std::invalid_argument for a state that does not fit.
  virtual void Restore(const nlohmann::json& state) = 0;
};

// TPE for a sweep of `num_samples` trials. With `budget_attr` (an early-stopping scheduler's
// time_attr: ASHA, HyperBand) it is BOHB-style: every result counts as the trial's value at that
// budget, and each proposal's model is fitted at the highest budget enough trials reached
// (tpe.h), asynchronously: nothing waits for a bracket.
class TpeSearch : public Searcher {
 public:
  TpeSearch(const ParamSpace& space, const std::string& metric, const std::string& mode,
            const TpeConfig& config, int num_samples, uint64_t seed,
            std::optional<std::string> budget_attr = std::nullopt)
      : metric_(metric),
        budget_attr_(std::move(budget_attr)),
        tpe_(space, mode,
             {.n_startup_trials = config.n_startup_trials,
              .n_ei_candidates = config.n_ei_candidates,
              .gamma = config.gamma,
              .prior_weight = config.prior_weight,
              .multivariate = config.multivariate,
              .weight_by_bandwidth = config.weight_by_bandwidth},
             seed),
        num_samples_(static_cast<size_t>(num_samples)) {}

  const char* name() const override { return "tpe"; }
  bool HasNext(size_t made) const override { return made < num_samples_; }
  nlohmann::json Next() override {
    startup_ = tpe_.in_startup();
    return tpe_.Suggest();
  }
  std::string ProposedBy() const override { return startup_ ? "tpe (random start)" : "tpe"; }
  void OnTrialResult(const nlohmann::json& config,
                     const std::map<std::string, double>& result) override {
    if (!budget_attr_) return;
    auto value = result.find(metric_);
    auto budget = result.find(*budget_attr_);
    if (value != result.end() && budget != result.end()) {
      tpe_.ObserveAt(config, value->second, budget->second);
    }
  }
  void OnTrialEnd(const nlohmann::json& config, std::optional<double> value) override {
    tpe_.Observe(config, value);
  }
  nlohmann::json State() const override { return tpe_.State(); }
  void Restore(const nlohmann::json& state) override { tpe_.Restore(state); }

 private:
  std::string metric_;
  std::optional<std::string> budget_attr_;
  TpeSearcher tpe_;
  size_t num_samples_;
  bool startup_ = false;  // the last proposal was one of the random start
};

}  // namespace rayd::tune::internal
