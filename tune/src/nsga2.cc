// NSGA-II's proposals: random ones to start, then offspring of the best ended trials by
// tournament, uniform crossover and mutation (nsga2.h).

#include "nsga2.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "exact_number.h"
#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Offspring drawn per proposal before random configs are, and as many of those before a repeat
// of an earlier config is kept (nsga2.h).
constexpr int kFreshTries = 32;

void CheckProbability(const char* name, double p, bool zero_allowed) {
  if (!(p <= 1) || !(zero_allowed ? p >= 0 : p > 0)) {
    throw std::invalid_argument(std::string(name) + " must be in " +
                                (zero_allowed ? "[0, 1]" : "(0, 1]") + ", got " + ExactNumber(p));
  }
}

}  // namespace

Nsga2Search::Nsga2Search(const ParamSpace& space, std::vector<Objective> objectives,
                         std::vector<Constraint> constraints, const Nsga2Config& config,
                         int num_samples, uint64_t seed)
    : objectives_(std::move(objectives)),
      constraints_(std::move(constraints)),
      population_size_(static_cast<size_t>(std::max(config.population_size, 0))),
      crossover_prob_(config.crossover_prob),
      swapping_prob_(config.swapping_prob),
      num_samples_(static_cast<size_t>(std::max(num_samples, 0))),
      rng_(seed) {
  if (objectives_.empty()) {
    throw std::invalid_argument("nsga2 ranks by several objectives: none given");
  }
  if (config.population_size < 2) {
    throw std::invalid_argument("population_size must be at least 2, got " +
                                std::to_string(config.population_size));
  }
  CheckProbability("crossover_prob", crossover_prob_, true);
  CheckProbability("swapping_prob", swapping_prob_, true);
  for (const Param& param : space) {
    if (const auto* constant = std::get_if<nlohmann::json>(&param.value)) {
      SetPath(constants_, param.path, *constant);
      continue;
    }
    const Domain& domain = std::get<Domain>(param.value);
    try {
      domain.Validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(JoinPath(param.path) + ": " + e.what());
    }
    if (domain.kind() == Domain::Kind::kGridSearch) {
      throw std::invalid_argument(JoinPath(param.path) +
                                  ": nsga2 cannot draw grid_search (use choice)");
    }
    dims_.push_back({param.path, domain});
  }
  mutation_prob_ =
      config.mutation_prob.value_or(1.0 / static_cast<double>(std::max<size_t>(dims_.size(), 1)));
  CheckProbability("mutation_prob", mutation_prob_, false);
}

nlohmann::json Nsga2Search::Next() {
  const bool start = proposed_ < population_size_ || ended_.size() < 2;
  ++proposed_;
  const std::vector<size_t> population = start ? std::vector<size_t>{} : Population();
  nlohmann::json config;
  std::string text;
  // Offspring first; when they keep repeating (a small space, mostly tried), random configs.
  for (int tries = 0; tries < 2 * kFreshTries; ++tries) {
    const bool random = start || tries >= kFreshTries;
    config = random ? Random() : Offspring(population);
    text = config.dump();
    last_ = start ? Kind::kStart : random ? Kind::kRedrawn : Kind::kOffspring;
    if (!tried_.count(text)) break;
  }
  tried_.insert(std::move(text));
  return config;
}

nlohmann::json Nsga2Search::Random() {
  nlohmann::json config = constants_;
  for (const Dim& dim : dims_) SetPath(config, dim.path, dim.domain.Sample(rng_));
  return config;
}

std::vector<size_t> Nsga2Search::Population() const {
  std::vector<std::vector<double>> points;
  std::vector<double> violations;
  points.reserve(ended_.size());
  violations.reserve(ended_.size());
  for (const Ended& e : ended_) {
    points.push_back(e.outcome.point);
    violations.push_back(e.outcome.violation);
  }
  std::vector<size_t> ranked = RankByParetoAndCrowding(points, violations);
  ranked.resize(std::min(ranked.size(), population_size_));
  return ranked;
}

size_t Nsga2Search::Tournament(size_t n, std::optional<size_t> taken) {
  std::vector<size_t> eligible;
  eligible.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (i != taken) eligible.push_back(i);
  }
  if (eligible.size() == 1) return eligible[0];
  const size_t a = UniformIndex(rng_, eligible.size());
  size_t b = UniformIndex(rng_, eligible.size() - 1);
  if (b >= a) ++b;  // distinct from a
  // The population is ranked best first: the lower position wins on front, then crowding.
  return std::min(eligible[a], eligible[b]);
}

nlohmann::json Nsga2Search::Offspring(const std::vector<size_t>& population) {
  const size_t first = Tournament(population.size(), std::nullopt);
  const size_t second = Tournament(population.size(), first);
  const nlohmann::json& mother = ended_[population[first]].config;
  const nlohmann::json& father = ended_[population[second]].config;
  const bool crossover = Uniform01(rng_) < crossover_prob_;
  nlohmann::json child = constants_;
  for (const Dim& dim : dims_) {
    // Every draw is made whatever the outcome, so the sequence does not depend on the values.
    const bool swap = Uniform01(rng_) < swapping_prob_;
    const bool mutate = Uniform01(rng_) < mutation_prob_;
    nlohmann::json value = GetPath(crossover && swap ? father : mother, dim.path);
    if (mutate || !dim.domain.Contains(value)) value = dim.domain.Sample(rng_);
    SetPath(child, dim.path, std::move(value));
  }
  return child;
}

void Nsga2Search::OnTrialResult(const nlohmann::json& config,
                                const std::map<std::string, double>& result) {
  running_[config.dump()] = {ObjectiveVector(objectives_, result),
                             TotalViolation(constraints_, result)};
}

void Nsga2Search::OnTrialEnd(const nlohmann::json& config, std::optional<double> /*value*/) {
  Outcome outcome{std::vector<double>(objectives_.size(), kWorstObjective), kInf};
  if (auto it = running_.find(config.dump()); it != running_.end()) {
    outcome = std::move(it->second);
    running_.erase(it);
  }
  ended_.push_back({config, std::move(outcome)});
}

// JSON has no infinity: an infinite violation (no result, or a diverged constraint metric) is
// written as null.
nlohmann::json Nsga2Search::OutcomeJson(const nlohmann::json& config, const Outcome& o) const {
  return {{"config", config},
          {"objectives", o.point},
          {"violation", std::isinf(o.violation) ? nlohmann::json() : nlohmann::json(o.violation)}};
}

Nsga2Search::Outcome Nsga2Search::OutcomeFromJson(const nlohmann::json& j) const {
  Outcome o;
  o.point = j.at("objectives").get<std::vector<double>>();
  if (o.point.size() != objectives_.size()) {
    throw std::invalid_argument("the saved nsga2 state has " + std::to_string(o.point.size()) +
                                " objectives, the sweep " + std::to_string(objectives_.size()));
  }
  const nlohmann::json& v = j.at("violation");
  o.violation = v.is_null() ? kInf : v.get<double>();
  return o;
}

nlohmann::json Nsga2Search::State() const {
  nlohmann::json running = nlohmann::json::array();
  for (const auto& [text, outcome] : running_) {
    running.push_back(OutcomeJson(nlohmann::json::parse(text), outcome));
  }
  nlohmann::json ended = nlohmann::json::array();
  for (const Ended& e : ended_) ended.push_back(OutcomeJson(e.config, e.outcome));
  // As TpeSearcher keeps its own: the configs' JSON texts.
  return {{"proposed", proposed_},
          {"running", std::move(running)},
          {"ended", std::move(ended)},
          {"tried", tried_},
          {"rng", RngState(rng_)}};
}

void Nsga2Search::Restore(const nlohmann::json& state) {
  // Everything is read before anything changes: a state that does not fit leaves this as it was.
  size_t proposed = 0;
  std::map<std::string, Outcome> running;
  std::vector<Ended> ended;
  std::set<std::string> tried;
  Rng restored;
  try {
    proposed = state.at("proposed").get<size_t>();
    for (const nlohmann::json& r : state.at("running")) {
      running[r.at("config").dump()] = OutcomeFromJson(r);
    }
    for (const nlohmann::json& e : state.at("ended")) {
      ended.push_back({e.at("config"), OutcomeFromJson(e)});
    }
    restored = RngFromState(state.at("rng"));
    // A state saved before "tried" was kept: the configs it knows of.
    if (state.contains("tried")) {
      tried = state.at("tried").get<std::set<std::string>>();
    } else {
      for (const auto& [text, outcome] : running) tried.insert(text);
      for (const Ended& e : ended) tried.insert(e.config.dump());
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("the saved nsga2 state: ") + e.what());
  }
  proposed_ = proposed;
  running_ = std::move(running);
  ended_ = std::move(ended);
  tried_ = std::move(tried);
  rng_ = restored;
}

}  // namespace rayd::tune::internal
