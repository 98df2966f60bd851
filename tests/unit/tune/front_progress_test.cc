// FrontProgress (tune/src/front_progress.h): a sweep's Pareto front and hypervolume over time,
// in <experiment>/progress.csv and for the dashboard.
#include "front_progress.h"

#include <catch2/catch.hpp>
#include <rayd/tune/schedulers.h>

#include <cmath>
#include <string>
#include <vector>

#include "dashboard_feed.h"
#include "test_util.h"
#include "trial.h"

namespace {

using rayd::testing::ReadFile;
using rayd::testing::TempDir;
using rayd::tune::Constraint;
using rayd::tune::FifoConfig;
using rayd::tune::Metrics;
using rayd::tune::Objective;
using rayd::tune::ParseConstraint;
using rayd::tune::internal::FrontProgress;
using rayd::tune::internal::MakeTrial;
using rayd::tune::internal::ParseCsv;
using rayd::tune::internal::SweepView;
using rayd::tune::internal::Trial;

// Accuracy to maximise, parameters to minimise.
const std::vector<Objective> kObjectives = {{"acc", true}, {"params", false}};

struct FrontSweep {
  std::vector<Trial> trials;
  std::unique_ptr<rayd::tune::TrialScheduler> fifo =
      rayd::tune::MakeScheduler(FifoConfig{}, "acc", "max", 1);

  void Report(FrontProgress& progress, size_t trial, const Metrics& m) {
    while (trials.size() <= trial) {
      trials.push_back(MakeTrial("abcde", static_cast<int>(trials.size()), "loop", {}));
    }
    trials[trial].last_result = m;
    progress.OnResult(trials[trial], m);
  }
  void Tick(FrontProgress& progress, double elapsed, bool finished) {
    progress.OnTick(SweepView{trials, 0, 1, *fifo, elapsed, finished});
  }
};

std::vector<std::vector<std::string>> Rows(const std::string& dir) {
  return ParseCsv(ReadFile(dir + "/progress.csv"));
}

}  // namespace

TEST_CASE("the sweep's progress.csv adds a row when its front changes, with the hypervolume at "
          "a given reference point",
          "[tune][front]") {
  TempDir dir;
  FrontProgress progress(dir.path(), kObjectives, {}, {0.0, 100.0});
  FrontSweep sweep;
  sweep.Report(progress, 0, {{"acc", 0.5}, {"params", 50}});
  sweep.Tick(progress, 1.0, false);
  // A dominated point leaves the front as it was: no row (even once the throttle allows one).
  sweep.Report(progress, 1, {{"acc", 0.4}, {"params", 60}});
  sweep.Tick(progress, 2.0, true);
  auto rows = Rows(dir.path());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0] == std::vector<std::string>{"elapsed_s", "results", "trials_reported",
                                             "front_size", "hypervolume", "reference/acc",
                                             "reference/params"});
  // Box from (-0.5, 50) to (0, 100): 0.5 * 50.
  CHECK(rows[1] == std::vector<std::string>{"1", "1", "1", "1", "25", "0", "100"});

  // A new trial on the front: another row (at the end, whatever the throttle).
  FrontProgress again(dir.path(), kObjectives, {}, {0.0, 100.0});
  FrontSweep second;
  second.Report(again, 0, {{"acc", 0.5}, {"params", 50}});
  second.Tick(again, 1.0, false);
  second.Report(again, 1, {{"acc", 0.8}, {"params", 80}});
  second.Tick(again, 1.5, true);
  rows = Rows(dir.path());
  REQUIRE(rows.size() == 3);
  // 0.5 * 50 + (0.8 - 0.5) * 20.
  CHECK(std::stod(rows[2][4]) == Approx(31.0));
  CHECK(rows[2][3] == "2");
  CHECK(rows[2][1] == "2");
  REQUIRE(again.rows().size() == 2);
  CHECK(again.Hypervolume(again.rows()[0]) == Approx(25.0));
}

TEST_CASE("without a reference point the rows are rewritten at the end with the final derived "
          "one, which the summary's hypervolume uses too",
          "[tune][front]") {
  TempDir dir;
  FrontProgress progress(dir.path(), kObjectives, {}, {});
  FrontSweep sweep;
  sweep.Report(progress, 0, {{"acc", 0.5}, {"params", 50}});
  sweep.Tick(progress, 1.0, false);
  sweep.Report(progress, 1, {{"acc", 0.9}, {"params", 90}});
  sweep.Report(progress, 2, {{"acc", 0.1}, {"params", 150}});  // dominated: widens the range
  sweep.Tick(progress, 3.0, true);
  // Final reference: acc 0.1 - 0.08 = 0.02, params 150 + 10 = 160.
  auto rows = Rows(dir.path());
  REQUIRE(rows.size() == 3);
  for (size_t r = 1; r < rows.size(); ++r) {
    CHECK(std::stod(rows[r][5]) == Approx(0.02));
    CHECK(rows[r][6] == "160");
  }
  // Row 1: (0.5, 50) alone; row 2: with (0.9, 90).
  CHECK(std::stod(rows[1][4]) == Approx((0.5 - 0.02) * (160 - 50)));
  CHECK(std::stod(rows[2][4]) == Approx((0.5 - 0.02) * (160 - 50) + (0.9 - 0.5) * (160 - 90)));

  // The grid's FrontHypervolume agrees.
  std::vector<rayd::tune::TrialResult> results;
  for (const Trial& t : sweep.trials) results.push_back(t.ToResult(dir.path()));
  rayd::tune::ResultGrid grid(dir.path(), std::move(results), "", "", kObjectives);
  CHECK(grid.FrontHypervolume() == Approx(std::stod(rows[2][4])));
}

TEST_CASE("the front leaves out infeasible trials and trials that reported no objective, and the "
          "dashboard gets every point with its place",
          "[tune][front]") {
  TempDir dir;
  const std::vector<Constraint> constraints = {ParseConstraint("latency <= 5")};
  FrontProgress progress(dir.path(), kObjectives, constraints, {0.0, 100.0});
  FrontSweep sweep;
  sweep.Report(progress, 0, {{"acc", 0.5}, {"params", 50}, {"latency", 4}});
  sweep.Report(progress, 1, {{"acc", 0.9}, {"params", 10}, {"latency", 9}});  // infeasible
  sweep.Report(progress, 2, {{"loss", 1.0}});                                  // no objective
  sweep.Report(progress, 3, {{"acc", 0.6}, {"latency", 1}});                   // params missing
  sweep.Tick(progress, 1.0, true);
  const auto& points = progress.points();
  REQUIRE(points.size() == 3);
  CHECK(points[0].trial_id == sweep.trials[0].id);
  CHECK(points[0].on_front);
  CHECK(points[0].feasible);
  CHECK_FALSE(points[1].on_front);
  CHECK_FALSE(points[1].feasible);
  CHECK(points[2].trial_id == sweep.trials[3].id);
  CHECK(std::isnan(points[2].values[1]));
  // As ResultGrid::ParetoFront counts it: the missing params are the worst value, so its better
  // accuracy keeps it on the front, where it adds no volume.
  CHECK(points[2].on_front);
  auto rows = Rows(dir.path());
  REQUIRE(rows.size() == 2);
  CHECK(rows[1][2] == "3");  // trials_reported
  CHECK(rows[1][3] == "2");  // front_size
  CHECK(rows[1][4] == "25");

  // No trial feasible: no front, hypervolume 0.
  TempDir none;
  FrontProgress empty(none.path(), kObjectives, constraints, {0.0, 100.0});
  FrontSweep infeasible;
  infeasible.Report(empty, 0, {{"acc", 0.9}, {"params", 10}, {"latency", 9}});
  infeasible.Tick(empty, 1.0, true);
  CHECK(empty.rows().empty());
  CHECK_FALSE(empty.points().at(0).on_front);
}

TEST_CASE("a reference point of the wrong length is refused", "[tune][front]") {
  TempDir dir;
  CHECK_THROWS_WITH(FrontProgress(dir.path(), kObjectives, {}, {1.0}),
                    Catch::Contains("1 values for 2 objectives"));
}

TEST_CASE("GetBestResult of a sweep with objectives asks for a rule and picks by a scalarization",
          "[tune][front]") {
  using rayd::tune::ResultGrid;
  using rayd::tune::Scalarization;
  using rayd::tune::TrialResult;
  auto trial = [](const std::string& id, Metrics m) {
    TrialResult t;
    t.trial_id = id;
    t.metrics = std::move(m);
    return t;
  };
  const ResultGrid grid("/exp",
                        {trial("a", {{"acc", 0.9}, {"params", 100}, {"latency", 1}}),
                         trial("b", {{"acc", 0.8}, {"params", 10}, {"latency", 1}}),
                         trial("c", {{"acc", 0.99}, {"params", 1}, {"latency", 9}}),
                         trial("d", {{"loss", 1}})},
                        "", "", kObjectives, {ParseConstraint("latency <= 5")});
  CHECK_THROWS_WITH(grid.GetBestResult(), Catch::Contains("give a rule"));
  Scalarization rule;
  rule.weights = {{"acc", 1.0}, {"params", 0.001}};
  CHECK(grid.GetBestResult(rule).trial_id == "a");  // 0.8 against b's 0.79; c misses latency
  rule.weights["params"] = 0.01;
  CHECK(grid.GetBestResult(rule).trial_id == "b");  // 0.7 against a's -0.1
  rule.weights = {{"loss", 1.0}};
  CHECK_THROWS_WITH(grid.GetBestResult(rule), Catch::Contains("\"loss\", not an objective"));
  const ResultGrid single("/exp", {trial("a", {{"loss", 1}})}, "loss", "min");
  CHECK_THROWS_WITH(single.GetBestResult(Scalarization{.weights = {{"loss", 1}}}),
                    Catch::Contains("needs a sweep with objectives"));
}
