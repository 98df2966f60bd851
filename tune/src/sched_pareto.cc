// ParetoRanking: how MO-ASHA, HyperBand, median stopping and PBT with several objectives see a
// result (a point to minimise and a constraint violation) and rank a set of them, in one place,
// over multi_objective.h's pure functions.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "rayd/tune/multi_objective.h"
#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

void SplitStandings(const std::vector<const ParetoRanking::Standing*>& standings,
                    std::vector<std::vector<double>>* points, std::vector<double>* violations) {
  for (const ParetoRanking::Standing* s : standings) {
    points->push_back(s->point);
    violations->push_back(s->violation);
  }
}

}  // namespace

ParetoRanking::ParetoRanking(std::vector<Objective> objectives, std::vector<Constraint> constraints)
    : objectives_(std::move(objectives)), constraints_(std::move(constraints)) {}

bool ParetoRanking::HasObjectives(const Metrics& metrics) const {
  return std::all_of(objectives_.begin(), objectives_.end(),
                     [&](const Objective& o) { return metrics.contains(o.metric); });
}

ParetoRanking::Standing ParetoRanking::Measure(const Metrics& metrics) const {
  return {ObjectiveVector(objectives_, metrics),
          std::min(TotalViolation(constraints_, metrics), kWorstObjective)};
}

std::vector<size_t> ParetoRanking::Rank(const std::vector<const Standing*>& standings) {
  if (standings.empty()) return {};
  std::vector<std::vector<double>> points;
  std::vector<double> violations;
  SplitStandings(standings, &points, &violations);
  return RankByParetoAndCrowding(points, violations);
}

std::vector<size_t> ParetoRanking::Front(const std::vector<const Standing*>& standings) {
  if (standings.empty()) return {};
  std::vector<std::vector<double>> points;
  std::vector<double> violations;
  SplitStandings(standings, &points, &violations);
  return ParetoFront(points, violations);
}

nlohmann::json ParetoRanking::ToJson(const Standing& standing) {
  return {{"point", standing.point}, {"violation", standing.violation}};
}

ParetoRanking::Standing ParetoRanking::FromJson(const nlohmann::json& saved) const {
  Standing standing{saved.at("point").get<std::vector<double>>(),
                    saved.at("violation").get<double>()};
  if (standing.point.size() != objectives_.size()) {
    throw std::invalid_argument("a saved result has " + std::to_string(standing.point.size()) +
                                " objectives, the scheduler " + std::to_string(objectives_.size()));
  }
  return standing;
}

}  // namespace rayd::tune::internal
