#pragma once
// The test problems the multi-objective searchers' tests share (nsga2_test, mo_tpe_test): ZDT1,
// a made-up two-objective function of a mixed space, and a one-trial-at-a-time driver.

#include <rayd/tune/multi_objective.h>
#include <rayd/tune/search_space.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rayd::tune::internal::testing {

// Two objectives, both minimised: f1 and f2.
inline const std::vector<Objective> kTwo = {{"f1", false}, {"f2", false}};

// ZDT1 over n parameters x0..x(n-1) in [0, 1): f1 = x0, g = 1 + 9 * mean(x1..), f2 = g (1 -
// sqrt(f1 / g)); the front is f2 = 1 - sqrt(f1) at x1.. = 0.
inline ParamSpace Zdt1Space(int n) {
  ParamSpace space;
  for (int i = 0; i < n; ++i) space.push_back({{"x" + std::to_string(i)}, Domain::Uniform(0, 1)});
  return space;
}

inline std::map<std::string, double> Zdt1(const nlohmann::json& config, int n) {
  const double f1 = config.at("x0").get<double>();
  double sum = 0;
  for (int i = 1; i < n; ++i) sum += config.at("x" + std::to_string(i)).get<double>();
  const double g = 1 + 9 * sum / (n - 1);
  return {{"f1", f1}, {"f2", g * (1 - std::sqrt(f1 / g))}};
}

// Smooth made-up objectives of a space with x, lr, layers and q.
inline std::map<std::string, double> Mixed(const nlohmann::json& c) {
  const double x = c.at("x").get<double>();
  const double lr = std::log10(c.at("lr").get<double>());
  return {{"f1", (x - 3) * (x - 3) + c.at("layers").get<double>()},
          {"f2", (lr + 3) * (lr + 3) + c.at("q").get<double>()}};
}

// One trial at a time: propose, report, end. Returns the configs proposed.
template <typename Searcher, typename Fn>
std::vector<nlohmann::json> Run(Searcher& searcher, int trials, Fn objective) {
  std::vector<nlohmann::json> configs;
  for (int i = 0; i < trials; ++i) {
    nlohmann::json config = searcher.Next();
    searcher.OnTrialResult(config, objective(config));
    searcher.OnTrialEnd(config, std::nullopt);
    configs.push_back(std::move(config));
  }
  return configs;
}

}  // namespace rayd::tune::internal::testing
