// TPE over several objectives (MOTPE, mo_tpe.h) without the Tuner: the below/above split and
// the weights on hand-worked sets, constraints keeping infeasible trials out of "below", the
// random start, repeatability for a seed, an exact continuation after State()/Restore, and a
// ZDT1 front clearly better than random search's on the same budget.

#include "mo_tpe.h"

#include <rayd/tune/multi_objective.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mo_problems.h"
#include "tpe.h"

namespace rayd::tune::internal {
namespace {

using namespace testing;

using Catch::Matchers::Contains;
using nlohmann::json;
using Points = std::vector<std::vector<double>>;

ParamSpace MoTpeSpace() {
  return {{{"lr"}, Domain::LogUniform(1e-5, 1e-1)},
          {{"x"}, Domain::Uniform(-10, 10)},
          {{"q"}, Domain::QUniform(0, 1, 0.25)},
          {{"layers"}, Domain::RandInt(1, 5)},
          {{"batch"}, Domain::QRandInt(16, 128, 16)},
          {{"opt", "name"}, Domain::Choice({"sgd", "adam", "rmsprop"})},
          {{"opt", "momentum"}, 0.9}};
}

double Zdt1Hypervolume(const std::vector<json>& configs, int n) {
  Points points;
  for (const json& c : configs) points.push_back(ObjectiveVector(kTwo, Zdt1(c, n)));
  const std::vector<double> violations(points.size(), 0.0);
  Points front;
  for (size_t i : ParetoFront(points, violations)) front.push_back(points[i]);
  return Hypervolume(front, {1.1, 1.1});
}

// The hand-worked splits, subsets and weights below are also what Optuna 3.1's
// _split_observation_pairs, _solve_hssp and _calculate_weights_below_for_multi_objective return
// for the same points.
TEST_CASE("MOTPE fills below front by front and cuts the last front by hypervolume",
          "[tune][mo_tpe]") {
  // Front 0: 0, 1, 2. Front 1: 3, 4. Front 2: 5.
  const Points points = {{1, 5}, {2, 3}, {4, 1}, {3, 4}, {5, 2}, {5, 5}};
  const std::vector<double> feasible(points.size(), 0.0);
  auto below = [&](size_t n) { return SplitByFrontsAndHypervolume(points, feasible, n).below; };
  CHECK(below(0).empty());
  CHECK(below(3) == std::vector<size_t>{0, 1, 2});
  CHECK(below(5) == std::vector<size_t>{0, 1, 2, 3, 4});
  CHECK(below(9) == std::vector<size_t>{0, 1, 2, 3, 4, 5});
  // One of front 1, at the reference (5.5, 4.4): 3's box holds 2.5 x 0.4 = 1.0, 4's 0.5 x 2.4
  // = 1.2.
  const TpeSplit four = SplitByFrontsAndHypervolume(points, feasible, 4);
  CHECK(four.below == std::vector<size_t>{0, 1, 2, 4});
  CHECK(four.above == std::vector<size_t>{3, 5});
  // Two of front 0, at (4.4, 5.5): 1 alone holds the most (6.0); then 0 adds 0.5 and 2 adds 0.8.
  CHECK(below(2) == std::vector<size_t>{1, 2});
}

TEST_CASE("MOTPE's subset selection is greedy by contribution, ties to the earlier trial",
          "[tune][mo_tpe]") {
  // At (4.4, 4.4): (2, 2) holds the most alone (5.76), then (2.2, 1.9) (5.5); but beside (2, 2)
  // it adds 0.22 and each end 0.4. The ends tie: the earlier one is taken.
  const Points points = {{1, 4}, {2, 2}, {2.2, 1.9}, {4, 1}};
  CHECK(GreedyHypervolumeSubset(points, {0, 1, 2, 3}, 2) == std::vector<size_t>{1, 0});
  CHECK(GreedyHypervolumeSubset(points, {3, 2, 1, 0}, 2) == std::vector<size_t>{1, 3});
  CHECK(GreedyHypervolumeSubset(points, {0, 1, 2, 3}, 4) == std::vector<size_t>{1, 0, 3, 2});
  CHECK(GreedyHypervolumeSubset(points, {0, 1, 2, 3}, 9).size() == 4);
  CHECK(GreedyHypervolumeSubset(points, {0, 1}, 0).empty());
  // A missing objective (kWorstObjective) does not overflow the volumes.
  const Points huge = {{kWorstObjective, 1}, {1, kWorstObjective}, {2, 2}};
  CHECK(GreedyHypervolumeSubset(huge, {0, 1, 2}, 1).size() == 1);
}

TEST_CASE("MOTPE weighs below by a root of hypervolume contribution, infeasible hardly at all",
          "[tune][mo_tpe]") {
  // At (4.4, 4.4): (2, 2) alone dominates the square [2, 4) x [2, 4) (4.0), each end a 1 x 0.4
  // strip (0.4): contributions 0.1, 1, 0.1 of the largest, weights their square roots.
  const Points points = {{1, 4}, {2, 2}, {4, 1}, {0, 0}};
  std::vector<double> violations = {0, 0, 0, 0};
  std::vector<double> w = BelowWeights(points, violations, {0, 1, 2});
  REQUIRE(w.size() == 3);
  CHECK(w[0] == Approx(std::sqrt(0.1)));
  CHECK(w[1] == Approx(1.0));
  CHECK(w[2] == Approx(std::sqrt(0.1)));
  // Three objectives, the cube root. At (2.2, 2.2, 1.1): (1, 1, 1)'s box is 1.2 x 1.2 x 0.1
  // (0.144), (2, 2, 0.5)'s 0.2 x 0.2 x 0.6 (0.024), and they share 0.2 x 0.2 x 0.1 (0.004):
  // contributions 0.140 and 0.020, so 1 and (1/7)^(1/3).
  const Points three = {{1, 1, 1}, {2, 2, 0.5}};
  w = BelowWeights(three, {0, 0}, {0, 1});
  REQUIRE(w.size() == 2);
  CHECK(w[0] == Approx(1.0));
  CHECK(w[1] == Approx(std::cbrt(1.0 / 7)));
  // Their order is below's.
  // (4, 1) and (2, 2) alone, at (4.4, 2.2): each holds 0.4 of its own.
  w = BelowWeights(points, violations, {2, 1});
  CHECK(w[0] == Approx(1.0));
  CHECK(w[1] == Approx(1.0));
  // An infeasible trial in below weighs (almost) nothing while a feasible one is there...
  violations[3] = 0.5;
  w = BelowWeights(points, violations, {0, 1, 2, 3});
  CHECK(w[1] == Approx(1.0));
  CHECK(w[3] > 0);
  CHECK(w[3] < 1e-9);
  // ...and 1 each when none is feasible: the model leads towards less violation.
  const std::vector<double> none_feasible = {0.1, 0.2, 0.3, 0.5};
  CHECK(BelowWeights(points, none_feasible, {0, 3}) == std::vector<double>{1.0, 1.0});
  // One feasible trial, or one objective (constraints only): 1 each.
  CHECK(BelowWeights(points, violations, {3, 1}) == std::vector<double>{w[3], 1.0});
  const Points one = {{3}, {1}, {2}};
  CHECK(BelowWeights(one, {0, 0, 0}, {1, 2}) == std::vector<double>{1.0, 1.0});
  CHECK(BelowWeights(points, violations, {}).empty());
}

TEST_CASE("MOTPE keeps infeasible trials out of below while enough are feasible",
          "[tune][mo_tpe]") {
  // The infeasible 0 and 3 have the best objectives.
  const Points points = {{0, 0}, {1, 1}, {2, 2}, {0.5, 0.5}, {3, 0.5}};
  const std::vector<double> violations = {1.0, 0, 0, 0.2, 0};
  CHECK(SplitByFrontsAndHypervolume(points, violations, 2).below == std::vector<size_t>{1, 4});
  CHECK(SplitByFrontsAndHypervolume(points, violations, 3).below == std::vector<size_t>{1, 2, 4});
  // Fewer feasible than n_below: the least violating next.
  CHECK(SplitByFrontsAndHypervolume(points, violations, 4).below ==
        std::vector<size_t>{1, 2, 3, 4});
  // One objective under constraints: feasible by value, then by violation.
  const Points one = {{0}, {3}, {1}, {2}};
  CHECK(SplitByFrontsAndHypervolume(one, {0.5, 0, 0, 0}, 2).below == std::vector<size_t>{2, 3});

  // Through the searcher: feasible only with f1 = x0 >= 0.7, 0.3 of random draws. Trials 40 to
  // 100, over seeds 1 to 10, were feasible 0.60 of the time (Optuna 3.1's TPESampler with the
  // same constraints_func: 0.59).
  double share = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    MoTpeSearch searcher(Zdt1Space(4), kTwo, {ParseConstraint("f1 >= 0.7")}, {}, 200, seed);
    const std::vector<json> configs = Run(searcher, 100, [](const json& c) { return Zdt1(c, 4); });
    int n = 0;
    for (size_t i = 40; i < 100; ++i) n += configs[i].at("x0").get<double>() >= 0.7 ? 1 : 0;
    share += n / 60.0 / 4;
  }
  CAPTURE(share);
  CHECK(share > 0.5);
}

TEST_CASE("MOTPE starts at random, then proposes from the model, as tpe", "[tune][mo_tpe]") {
  MoTpeSearch searcher(Zdt1Space(3), kTwo, {}, {.n_startup_trials = 4}, 6, 1);
  CHECK(std::string(searcher.name()) == "tpe");
  for (int i = 0; i < 6; ++i) {
    CHECK(searcher.HasNext(static_cast<size_t>(i)));
    json config = searcher.Next();
    CHECK(searcher.ProposedBy() == (i < 4 ? "tpe (random start)" : "tpe"));
    searcher.OnTrialResult(config, Zdt1(config, 3));
    searcher.OnTrialEnd(config, std::nullopt);
  }
  CHECK_FALSE(searcher.HasNext(6));
  CHECK(searcher.tpe().num_observations() == 6);
  // A trial that reported nothing only stops being pending; a missing objective is the worst.
  MoTpeSearch other(Zdt1Space(3), kTwo, {}, {}, 6, 1);
  json silent = other.Next();
  other.OnTrialEnd(silent, std::nullopt);
  json partial = other.Next();
  other.OnTrialResult(partial, {{"f1", 0.5}});
  other.OnTrialEnd(partial, std::nullopt);
  CHECK(other.tpe().num_observations() == 1);
  CHECK(other.tpe().num_pending() == 0);
}

TEST_CASE("MOTPE repeats for a seed, and continues exactly after State and Restore",
          "[tune][mo_tpe]") {
  const std::vector<Constraint> constraints = {ParseConstraint("f1 <= 20")};
  auto make = [&](uint64_t seed) {
    return MoTpeSearch(MoTpeSpace(), kTwo, constraints, {.n_startup_trials = 5}, 100, seed);
  };
  MoTpeSearch a = make(7), b = make(7), other = make(8);
  const std::vector<json> run_a = Run(a, 25, Mixed);
  CHECK(Run(b, 25, Mixed) == run_a);
  CHECK(Run(other, 25, Mixed) != run_a);

  // Mid-sweep: one trial ended with no result, one running with a result whose constraint
  // metric is missing (an infinite violation, saved as null), one pending without a result.
  json silent = a.Next();
  a.OnTrialEnd(silent, std::nullopt);
  json running = a.Next();
  a.OnTrialResult(running, {{"f2", 1.0}});
  json pending = a.Next();
  // Through the state file's text, as a resume reads it; the state brings its own generator.
  MoTpeSearch restored = make(999);
  restored.Restore(json::parse(a.State().dump()));
  CHECK(restored.State() == a.State());
  for (MoTpeSearch* s : {&a, &restored}) {
    s->OnTrialEnd(running, std::nullopt);
    s->OnTrialResult(pending, Mixed(pending));
    s->OnTrialEnd(pending, std::nullopt);
  }
  CHECK(Run(restored, 15, Mixed) == Run(a, 15, Mixed));

  // A state of another kind or size is refused, and leaves the searcher as it was.
  MoTpeSearch three(MoTpeSpace(), {{"f1"}, {"f2"}, {"f3"}}, {}, {.n_startup_trials = 5}, 100, 1);
  const json before = three.State();
  CHECK_THROWS_WITH(three.Restore(a.State()), Contains("2 objectives, the searcher ranks 3"));
  CHECK(three.State() == before);
  TpeSearch single(MoTpeSpace(), "f1", "min", {}, 100, 1);
  CHECK_THROWS_WITH(single.Restore(a.State()), Contains("ranks several objectives"));
  for (int i = 0; i < 3; ++i) {
    json c = single.Next();
    single.OnTrialEnd(c, 1.0 + i);
  }
  CHECK_THROWS_WITH(three.Restore(single.State()), Contains("ranks one metric"));
  CHECK_THROWS_AS(three.Restore(json{{"observed", 1}}), std::invalid_argument);
}

TEST_CASE("MOTPE with a budget attribute fits at the highest budget enough trials reached",
          "[tune][mo_tpe]") {
  MoTpeSearch searcher(Zdt1Space(2), kTwo, {}, {.n_startup_trials = 2}, 20, 3,
                       std::string("training_iteration"));
  // Three configs (the parameters plus one) reach iteration 2; none has ended.
  for (int i = 0; i < 3; ++i) {
    json config = searcher.Next();
    for (double it : {1.0, 2.0}) {
      std::map<std::string, double> result = Zdt1(config, 2);
      result["training_iteration"] = it;
      searcher.OnTrialResult(config, result);
    }
  }
  CHECK(searcher.tpe().ModelBudget() == 2.0);
  const json next = searcher.Next();
  CHECK(searcher.ProposedBy() == "tpe (random start)");  // still: nothing ended
  CHECK(next.contains("x0"));
}

TEST_CASE("MOTPE fitted at a budget keeps at least the parameters plus one configs below",
          "[tune][mo_tpe]") {
  // Four configs reached iteration 1, two of them on the front, alike. Gamma's share of four
  // is one; BOHB's minimum (one parameter plus one) is two, so both front configs' categories
  // have more of l than one never tried; with gamma's share alone the second would have the
  // same as the untried one.
  std::vector<json> values;
  for (int i = 0; i < 5; ++i) values.push_back(i);
  const ParamSpace space = {{{"a"}, Domain::Choice(values)}};
  TpeSearcher tpe(space, "min", {.objectives = 2}, 1);
  const std::vector<std::vector<double>> points = {{0, 3}, {3, 0}, {4, 4}, {5, 5}};
  for (int a = 0; a < 4; ++a) tpe.ObserveAt({{"a", a}}, TpeOutcome{.point = points[a]}, 1.0);
  REQUIRE(tpe.ModelBudget() == 1.0);
  const double second = tpe.LogDensities({{"a", 1}}).first;
  const double untried = tpe.LogDensities({{"a", 4}}).first;
  CHECK(second > untried + 0.1);
  CHECK(tpe.LogDensities({{"a", 0}}).first == Approx(second));  // both below, alike
}

TEST_CASE("MOTPE refuses no objectives, domains TPE cannot model, and values for outcomes",
          "[tune][mo_tpe]") {
  CHECK_THROWS_WITH(MoTpeSearch(Zdt1Space(2), {}, {}, {}, 10, 1), Contains("none given"));
  const ParamSpace grid = {{{"hidden"}, Domain::GridSearch({64, 128})}};
  CHECK_THROWS_WITH(MoTpeSearch(grid, kTwo, {}, {}, 10, 1), Contains("hidden: TPE cannot model"));
  TpeSearcher outcomes(Zdt1Space(2), "min", {.objectives = 2}, 1);
  const json config = outcomes.Suggest();
  CHECK_THROWS_WITH(outcomes.Observe(config, 1.0), Contains("observe a TpeOutcome"));
  CHECK_THROWS_WITH(outcomes.Observe(config, TpeOutcome{{1.0}, 0}),
                    Contains("an outcome of 1 objectives, the searcher ranks 2"));
  CHECK_THROWS_AS(outcomes.Observe(config, TpeOutcome{{1.0, NAN}, 0}), std::invalid_argument);
  CHECK_THROWS_AS(outcomes.Observe(config, TpeOutcome{{1.0, 1.0}, -1}), std::invalid_argument);
  TpeSearcher values(Zdt1Space(2), "min", {}, 1);
  CHECK_THROWS_WITH(values.Observe(config, TpeOutcome{{1.0, 1.0}, 0}), Contains("ranks values"));
}

TEST_CASE("MOTPE raises the ZDT1 front's hypervolume clearly above random search's",
          "[tune][mo_tpe]") {
  constexpr int kParams = 5;
  constexpr int kTrials = 100;
  constexpr int kSeeds = 10;
  // The mean over seeds of the hypervolume at (1.1, 1.1) after 100 trials (the true front's is
  // 0.877); random search: the same 100 trials all drawn at random (a random start of 100).
  // Over 20 seeds it was 0.23 (standard error 0.04) against random's 0.03; Optuna 3.1's
  // TPESampler, on the same problem and seeds 1..20, 0.26 (0.03).
  double tpe_sum = 0, random_sum = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    MoTpeSearch tpe(Zdt1Space(kParams), kTwo, {}, {}, kTrials, seed);
    MoTpeSearch random(Zdt1Space(kParams), kTwo, {}, {.n_startup_trials = kTrials}, kTrials, seed);
    auto zdt1 = [](const json& c) { return Zdt1(c, kParams); };
    const double t = Zdt1Hypervolume(Run(tpe, kTrials, zdt1), kParams);
    const double r = Zdt1Hypervolume(Run(random, kTrials, zdt1), kParams);
    UNSCOPED_INFO("seed " << seed << ": tpe " << t << ", random " << r);
    tpe_sum += t;
    random_sum += r;
  }
  const double tpe_mean = tpe_sum / kSeeds, random_mean = random_sum / kSeeds;
  CAPTURE(tpe_mean, random_mean);
  CHECK(tpe_mean > random_mean + 0.1);
  CHECK(tpe_mean > 3 * random_mean);
}

}  // namespace
}  // namespace rayd::tune::internal
