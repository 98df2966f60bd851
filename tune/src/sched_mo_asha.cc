// MO-ASHA (Schmucker et al. 2021): ASHA's rungs, ranking the trials recorded at a rung by
// constrained non-dominated sorting with a crowding-distance tie-break (multi_objective.h)
// instead of by one metric, in Ray's stopping form:
//  - rungs at grace_period * rf^k below max_t;
//  - a trial reaching a rung it has not recorded at is ranked with the n trials recorded there
//    (itself included): it goes on when it is among the top ceil(n / rf), and stops otherwise.
//    It wins ties with those recorded before it, as a scalar ASHA trial exactly at the cut-off
//    goes on; alone at a rung it goes on;
//  - at max_t it stops (stop_last_trials).
// A trial that misses a constraint ranks below every one that meets them all, by how far it
// misses; a missing or diverged objective is the worst value there is. The ranking itself is
// ParetoRanking's (sched_pareto.cc), which HyperBand and PBT share.

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rayd/tune/multi_objective.h"
#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

using MoRecord = ParetoRanking::Standing;

struct MoRung {
  double milestone = 0;
  std::map<std::string, MoRecord> recorded;  // by trial
};

class MoAshaScheduler final : public TrialScheduler {
 public:
  MoAshaScheduler(const AshaConfig& config, ParetoRanking ranking)
      : config_(config), ranking_(std::move(ranking)) {
    // Ray's rungs: grace_period * rf^k for every k with the milestone below max_t.
    for (double t = config_.grace_period; t < config_.max_t; t *= config_.reduction_factor) {
      rungs_.push_back({t, {}});
    }
  }

  const char* name() const override { return "MO-ASHA"; }

  Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) override {
    auto t = Lookup(result.metrics, config_.time_attr);
    if (!t) return Decision::Continue();
    if (*t >= config_.max_t && config_.stop_last_trials) {
      ++num_stopped_;
      return Decision::Stop();
    }
    // Only the highest rung reached and not yet recorded at decides, as in Ray's ASHA.
    for (size_t k = rungs_.size(); k-- > 0;) {
      MoRung& rung = rungs_[k];
      if (*t < rung.milestone) continue;
      if (rung.recorded.contains(trial_id)) return Decision::Continue();
      MoRecord record = ranking_.Measure(result.metrics);
      const bool kept = Survives(rung, record);
      rung.recorded.emplace(trial_id, std::move(record));
      if (kept) return Decision::Continue();
      ++num_stopped_;
      return Decision::Stop();
    }
    return Decision::Continue();
  }

  std::string Summary() const override {
    std::string rungs;
    for (const MoRung& r : rungs_) rungs += (rungs.empty() ? "" : "/") + FormatNumber(r.milestone);
    return std::string("MO-ASHA: rungs ") + (rungs.empty() ? "none" : rungs) + ", " +
           std::to_string(num_stopped_) + " stopped";
  }

  nlohmann::json State() const override {
    nlohmann::json rungs = nlohmann::json::array();
    for (const MoRung& r : rungs_) {
      nlohmann::json recorded = nlohmann::json::object();
      for (const auto& [id, record] : r.recorded) {
        recorded[id] = ParetoRanking::ToJson(record);
      }
      rungs.push_back({{"milestone", r.milestone}, {"recorded", std::move(recorded)}});
    }
    return {{"rungs", std::move(rungs)}, {"num_stopped", num_stopped_}};
  }

  void Restore(const nlohmann::json& state) override {
    const nlohmann::json& rungs = state.at("rungs");
    if (!rungs.is_array() || rungs.size() != rungs_.size()) {
      throw std::invalid_argument("the saved MO-ASHA state has other rungs");
    }
    std::vector<MoRung> restored = rungs_;
    for (size_t k = 0; k < restored.size(); ++k) {
      if (rungs[k].at("milestone").get<double>() != restored[k].milestone) {
        throw std::invalid_argument("the saved MO-ASHA state has other rungs");
      }
      for (const auto& [id, r] : rungs[k].at("recorded").items()) {
        restored[k].recorded.emplace(id, ranking_.FromJson(r));
      }
    }
    rungs_ = std::move(restored);
    num_stopped_ = state.at("num_stopped").get<int>();
  }

 private:
  // Whether `newcomer` ranks within the top ceil(n / rf) of the rung's n records with it. It
  // comes first in the ranking's index order, so it wins ties.
  bool Survives(const MoRung& rung, const MoRecord& newcomer) const {
    if (rung.recorded.empty()) return true;
    std::vector<const MoRecord*> standings = {&newcomer};
    for (const auto& [id, record] : rung.recorded) standings.push_back(&record);
    const std::vector<size_t> ranked = ParetoRanking::Rank(standings);
    const auto kept = static_cast<size_t>(
        std::ceil(static_cast<double>(standings.size()) / config_.reduction_factor));
    return std::find(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(kept), 0) !=
           ranked.begin() + static_cast<std::ptrdiff_t>(kept);
  }

  const AshaConfig config_;
  const ParetoRanking ranking_;
  std::vector<MoRung> rungs_;
  int num_stopped_ = 0;
};

}  // namespace

std::unique_ptr<TrialScheduler> MakeMoAsha(const AshaConfig& config, ParetoRanking ranking) {
  return std::make_unique<MoAshaScheduler>(config, std::move(ranking));
}

}  // namespace rayd::tune::internal
