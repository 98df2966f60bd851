// The simulator (rayd/tune/simulator.h): recorded curves from a CSV table and from an
// experiment's directories, the check that a sweep can be replayed, and Tuner::Simulate's
// replay on a simulated clock: every decision the controller would make, in simulated-time
// order, the same each time, with no cluster.

#include <rayd/tune/simulator.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rayd::testing::TempDir;
using namespace rayd::tune;

// A table of `configs` (lr, hidden), each a curve of `length` losses that fall at a rate set by
// its lr, each result taking `seconds(hidden)` simulated seconds.
std::string Table(const std::vector<std::pair<double, int>>& configs, int length) {
  std::string csv = "trial_id,training_iteration,loss,time_this_iter_s,config/lr,config/hidden\n";
  int id = 0;
  for (const auto& [lr, hidden] : configs) {
    ++id;
    for (int i = 1; i <= length; ++i) {
      double loss = 1.0 / (1.0 + i * lr * 10);
      csv += "t" + std::to_string(id) + "," + std::to_string(i) + "," + std::to_string(loss) +
             "," + std::to_string(hidden / 32) + "," + std::to_string(lr) + "," +
             std::to_string(hidden) + "\n";
    }
  }
  return csv;
}

RecordedCurves Parse(const std::string& csv) {
  auto curves = RecordedCurves::ParseCsv(csv, "curves.csv");
  REQUIRE(curves.ok());
  return std::move(curves).value();
}

struct Sim {
  TempDir dir;
  ParamSpace space = {{{"lr"}, Domain::Choice({0.1, 0.2})}, {{"hidden"}, Domain::Choice({32, 64})}};
  TuneConfig tune{.metric = "loss", .mode = "min", .num_samples = 4, .seed = 7};

  Simulation Run(const RecordedCurves& curves, const std::string& name = "sim") {
    Tuner tuner(Trainable{"replayed", {}}, space, tune,
                rayd::train::RunConfig{.name = name, .storage_path = dir.path()});
    return tuner.Simulate(curves);
  }
};

TEST_CASE("a CSV table's rows make curves by trial_id, config columns nested by their path",
          "[tune][simulator]") {
  RecordedCurves curves = Parse(
      "trial_id,training_iteration,loss,config/opt/lr,config/wide,config/layers\n"
      "a,1,0.9,0.1,True,\"[1,2]\"\n"
      "b,1,0.8,0.2,False,\"[3]\"\n"
      "a,2,0.7,0.1,True,\"[1,2]\"\n");
  REQUIRE(curves.curves().size() == 2);
  const RecordedCurve& a = curves.curves()[0];
  CHECK(a.config == json{{"opt", {{"lr", 0.1}}}, {"wide", true}, {"layers", {1, 2}}});
  REQUIRE(a.results.size() == 2);
  CHECK(a.results[1].at("loss") == 0.7);
  CHECK(a.results[1].at("training_iteration") == 2);
  CHECK(a.source == "curves.csv:2");
  CHECK(curves.curves()[1].config["wide"] == false);
}

TEST_CASE("without trial_id, a curve is consecutive rows of one config whose iteration rises",
          "[tune][simulator]") {
  // Two recordings of the same config (two seeds), then another config.
  RecordedCurves curves = Parse(
      "training_iteration,loss,config/lr\n"
      "1,0.9,0.1\n2,0.8,0.1\n"
      "1,0.95,0.1\n2,0.85,0.1\n"
      "1,0.5,0.2\n");
  REQUIRE(curves.curves().size() == 3);
  CHECK(curves.curves()[0].results.size() == 2);
  CHECK(curves.curves()[1].results.front().at("loss") == 0.95);
  CHECK(curves.curves()[2].config["lr"] == 0.2);
}

TEST_CASE("a malformed table is refused with its line", "[tune][simulator]") {
  auto short_row = RecordedCurves::ParseCsv("loss,config/lr\n0.5,0.1\n0.4\n", "t.csv");
  REQUIRE_FALSE(short_row.ok());
  CHECK(short_row.status().message() == "t.csv:3: expected 2 fields as the header has, got 1");
  auto no_config = RecordedCurves::ParseCsv("loss,lr\n0.5,0.1\n", "t.csv");
  REQUIRE_FALSE(no_config.ok());
  CHECK_THAT(no_config.status().message(), Catch::StartsWith("t.csv:1: no config/<key> columns"));
  CHECK_FALSE(RecordedCurves::ParseCsv("", "t.csv").ok());
  CHECK_FALSE(RecordedCurves::ParseCsv("loss,config/lr\n", "t.csv").ok());
  auto missing = RecordedCurves::Load("/nonexistent/curves.csv");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("no such file or directory"));
}

TEST_CASE("an experiment directory's trials are curves, configs from params.json, in path order",
          "[tune][simulator]") {
  TempDir dir;
  auto write = [&](const std::string& trial, const json& params, std::vector<double> losses) {
    fs::create_directories(fs::path(dir.path()) / trial);
    if (!params.is_null()) std::ofstream(fs::path(dir.path()) / trial / "params.json") << params;
    std::ofstream results(fs::path(dir.path()) / trial / "result.json");
    for (size_t i = 0; i < losses.size(); ++i) {
      results << json{{"loss", losses[i]}, {"training_iteration", i + 1}, {"trial_id", trial}}
              << "\n";
    }
  };
  write("trial_b", {{"lr", 0.2}}, {0.5, 0.4});
  write("trial_a", {{"lr", 0.1}}, {0.9});
  write("trial_empty", {{"lr", 0.3}}, {});  // started, reported nothing: no curve
  auto curves = RecordedCurves::Load(dir.path());
  REQUIRE(curves.ok());
  REQUIRE(curves->curves().size() == 2);
  CHECK(curves->curves()[0].config["lr"] == 0.1);
  CHECK(curves->curves()[1].results.size() == 2);

  write("trial_c", nullptr, {0.3});  // no params.json, no config in its lines
  auto unusable = RecordedCurves::Load(dir.path());
  REQUIRE_FALSE(unusable.ok());
  CHECK_THAT(unusable.status().message(), Catch::Contains("trial_c/result.json: no params.json"));
}

TEST_CASE("a sweep is replayable only when every config it can ask for was recorded",
          "[tune][simulator]") {
  RecordedCurves curves = Parse(Table({{0.1, 32}, {0.1, 64}, {0.2, 32}}, 3));
  Sim sim;
  auto problem = CheckReplayable(sim.space, sim.tune, curves);
  REQUIRE(problem);  // (0.2, 64) was never run, though each value was
  CHECK(problem->key == "param_space");
  CHECK(problem->reason ==
        "no recorded curve for {\"hidden\":64,\"lr\":0.2} (3 configurations recorded in "
        "curves.csv)");

  sim.space[1] = {{"hidden"}, Domain::Choice({32, 128})};
  problem = CheckReplayable(sim.space, sim.tune, curves);
  REQUIRE(problem);
  CHECK(problem->key == "param_space.hidden");
  CHECK(problem->reason == "no recorded curve in curves.csv has hidden = 128 (recorded: 32, 64)");

  sim.space[0] = {{"lr"}, Domain::LogUniform(0.1, 0.2)};
  problem = CheckReplayable(sim.space, sim.tune, curves);
  REQUIRE(problem);
  CHECK(problem->key == "param_space.lr");
  CHECK_THAT(problem->reason, Catch::Contains("loguniform does not"));

  sim.space = {{{"lr"}, Domain::Choice({0.1})}};
  sim.tune.metric = "accuracy";
  problem = CheckReplayable(sim.space, sim.tune, curves);
  REQUIRE(problem);
  CHECK(problem->key == "tune.metric");
  CHECK_THAT(problem->reason, Catch::Contains("do not report 'accuracy'"));

  // A quantized domain's values are computed (0.1 * 3 is 0.30000000000000004), and still match
  // the recorded 0.3; extra recorded keys (hidden) are ignored.
  sim.tune.metric = "loss";
  sim.space = {{{"lr"}, Domain::QUniform(0.1, 0.3, 0.1)}};
  CHECK_FALSE(CheckReplayable(sim.space, sim.tune,
                              Parse(Table({{0.1, 32}, {0.2, 32}, {0.3, 32}}, 2))));
}

TEST_CASE("a replay plays each trial's recorded curve, in simulated-time order, without a "
          "cluster",
          "[tune][simulator]") {
  // hidden 64 results take 2 s each, hidden 32 ones 1 s.
  RecordedCurves curves = Parse(Table({{0.1, 32}, {0.1, 64}, {0.2, 32}, {0.2, 64}}, 4));
  Sim sim;
  sim.space = {{{"lr"}, Domain::GridSearch({0.1, 0.2})},
               {{"hidden"}, Domain::GridSearch({32, 64})}};
  sim.tune.num_samples = 1;
  sim.tune.max_concurrent_trials = 4;
  Simulation result = sim.Run(curves);
  REQUIRE(result.grid.size() == 4);
  CHECK(result.grid.num_terminated() == 4);
  CHECK(result.iterations == 16);
  CHECK(result.simulated_s == 8);  // the 2-second trials end last, at 4 x 2 s
  REQUIRE(result.trace.size() == 16);
  for (size_t i = 1; i < result.trace.size(); ++i) {
    CHECK(result.trace[i].time_s >= result.trace[i - 1].time_s);
    CHECK(result.trace[i].iterations == static_cast<int64_t>(i) + 1);
  }
  // At t=2 both 1-second trials report their second result and both 2-second ones their first.
  CHECK(result.trace[0].time_s == 1);
  CHECK(result.trace[5].time_s == 2);
  // Each trial's history is its curve, and its files are a Trainer's.
  const TrialResult& fast = result.grid[0];
  CHECK(fast.config == json{{"lr", 0.1}, {"hidden", 32}});
  REQUIRE(fast.history.size() == 4);
  CHECK(fast.history[3].at("loss") == Approx(1.0 / (1.0 + 4 * 0.1 * 10)).epsilon(1e-5));
  CHECK(fs::exists(fs::path(fast.path) / "params.json"));
  CHECK(fs::exists(fs::path(fast.path) / "progress.csv"));
  REQUIRE(fast.checkpoint);
}

TEST_CASE("a replay with a seed decides the same way every time, ASHA stopping trials early",
          "[tune][simulator]") {
  RecordedCurves curves = Parse(Table({{0.1, 32}, {0.1, 64}, {0.2, 32}, {0.2, 64}}, 9));
  Sim sim;
  sim.tune.num_samples = 12;
  sim.tune.max_concurrent_trials = 3;
  sim.tune.scheduler = AshaConfig{.max_t = 9, .grace_period = 1, .reduction_factor = 3};
  Simulation first = sim.Run(curves, "first");
  Simulation second = sim.Run(curves, "second");
  REQUIRE(first.trace.size() == second.trace.size());
  for (size_t i = 0; i < first.trace.size(); ++i) {
    CHECK(first.trace[i].trial_id == second.trace[i].trial_id);
    CHECK(first.trace[i].time_s == second.trace[i].time_s);
  }
  CHECK(first.grid.num_terminated() == 12);
  CHECK(first.iterations < 12 * 9);  // some trials stopped at a rung
  CHECK(first.iterations == second.iterations);
}

TEST_CASE("ASHA's promotion form pauses replayed trials and resumes them where they stopped",
          "[tune][simulator]") {
  RecordedCurves curves = Parse(Table({{0.1, 32}, {0.1, 64}, {0.2, 32}, {0.2, 64}}, 9));
  Sim sim;
  sim.tune.num_samples = 6;
  sim.tune.max_concurrent_trials = 2;
  sim.tune.scheduler =
      AshaConfig{.max_t = 9, .grace_period = 1, .reduction_factor = 3, .promotion = true};
  Simulation result = sim.Run(curves);
  int promoted = 0;
  for (const TrialResult& trial : result.grid.trials()) {
    // Every result once and in order, across the trial's runs.
    for (size_t i = 0; i < trial.history.size(); ++i) {
      CHECK(trial.history[i].at("training_iteration") == static_cast<double>(i + 1));
    }
    if (trial.history.size() > 1) ++promoted;
  }
  CHECK(promoted > 0);
}

TEST_CASE("trials asking for one config take the curves recorded for it in turn",
          "[tune][simulator]") {
  RecordedCurves curves = Parse(
      "training_iteration,loss,config/lr\n"
      "1,0.9,0.1\n"
      "1,0.7,0.1\n");
  Sim sim;
  sim.space = {{{"lr"}, Domain::Choice({0.1})}};
  sim.tune.num_samples = 3;
  sim.tune.max_concurrent_trials = 1;
  Simulation result = sim.Run(curves);
  REQUIRE(result.grid.size() == 3);
  CHECK(result.grid[0].metrics.at("loss") == 0.9);
  CHECK(result.grid[1].metrics.at("loss") == 0.7);
  CHECK(result.grid[2].metrics.at("loss") == 0.9);
}

TEST_CASE("TPE proposes from replayed results, as it would from trained ones",
          "[tune][simulator]") {
  std::vector<std::pair<double, int>> configs;
  for (double lr : {0.01, 0.02, 0.05, 0.1, 0.2, 0.5}) {
    for (int hidden : {32, 64}) configs.emplace_back(lr, hidden);
  }
  RecordedCurves curves = Parse(Table(configs, 5));
  Sim sim;
  sim.space = {{{"lr"}, Domain::Choice({0.01, 0.02, 0.05, 0.1, 0.2, 0.5})},
               {{"hidden"}, Domain::Choice({32, 64})}};
  sim.tune.num_samples = 30;
  sim.tune.max_concurrent_trials = 2;
  sim.tune.search = TpeConfig{.n_startup_trials = 5};
  Simulation result = sim.Run(curves);
  CHECK(result.grid.size() == 30);
  CHECK(result.grid.num_terminated() == 30);
  // The best lr (0.5, the fastest fall) is found and then asked for again and again (random
  // search would ask for it 5 times in 30).
  int best = 0;
  for (const TrialResult& trial : result.grid.trials()) best += trial.config["lr"] == 0.5;
  CHECK(best >= 10);
  CHECK(result.grid.GetBestResult().config["lr"] == 0.5);
}

}  // namespace

TEST_CASE(
    "a sweep never starts over an experiment that exists, even one whose state cannot be "
    "read, and Tuner::CanRestore says which exist",
    "[tune][simulator]") {
  RecordedCurves curves = Parse(Table({{0.1, 32}, {0.1, 64}, {0.2, 32}, {0.2, 64}}, 2));
  Sim sim;
  const std::string experiment = (fs::path(sim.dir.path()) / "sim").string();
  CHECK_FALSE(Tuner::CanRestore(experiment));
  sim.Run(curves);
  CHECK(Tuner::CanRestore(experiment));
  CHECK_THROWS_WITH(sim.Run(curves), Catch::Contains("an experiment already exists at"));

  // A state file that does not parse is still someone's experiment: refused, not overwritten.
  const std::string broken = (fs::path(sim.dir.path()) / "broken").string();
  fs::create_directories(broken);
  std::ofstream(fs::path(broken) / "experiment_state.json") << "{ not json";
  CHECK(Tuner::CanRestore(broken));
  CHECK_THROWS_WITH(sim.Run(curves, "broken"), Catch::Contains("an experiment already exists at"));
  std::ifstream in(fs::path(broken) / "experiment_state.json");
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "{ not json");
}

TEST_CASE(
    "a replay models the cluster's workers: fixed gangs wait for them, elastic trials grow "
    "and pay for restarts",
    "[tune][simulator][elastic]") {
  // Two configs, 8 results of 1 s each on one worker; a cluster of 2 workers, linear speedup.
  RecordedCurves curves = Parse(Table({{0.1, 32}, {0.2, 32}}, 8));
  Sim fixed;
  fixed.space = {{{"lr"}, Domain::GridSearch({0.1, 0.2})}, {{"hidden"}, Domain::Choice({32})}};
  fixed.tune.num_samples = 1;
  fixed.tune.max_concurrent_trials = 2;
  fixed.tune.simulate = {.workers = 2, .recorded_workers = 1};
  Simulation both = [&] {
    Tuner tuner(Trainable{"replayed", {.num_workers = 2}}, fixed.space, fixed.tune,
                rayd::train::RunConfig{.name = "fixed", .storage_path = fixed.dir.path()});
    return tuner.Simulate(curves);
  }();
  // Each trial needs both workers: one at a time, 0.5 s a result, 8 s in all, never idle.
  CHECK(both.simulated_s == Approx(8));
  CHECK(both.utilization == Approx(1.0));
  CHECK(both.time_to_best_s == Approx(8));  // lr 0.2's last result, the best loss

  // [1, 2] workers, one trial at a time, a resize costing 1 s: each trial starts on 1 worker;
  // its second result (t + 2) is the first a resize interval after its size began, so it is
  // told to grow; its third comes on 1 worker still (t + 3), the rest on 2, the first of them
  // 1 s late (t + 4.5, then every 0.5 s to t + 6.5).
  Sim elastic;
  elastic.space = fixed.space;
  elastic.tune = fixed.tune;
  elastic.tune.max_concurrent_trials = 1;
  elastic.tune.simulate = {.workers = 2, .restart_s = 1};  // recorded at its least: 1
  Simulation grown = [&] {
    Tuner tuner(
        Trainable{"replayed", {.num_workers = 2, .min_workers = 1, .resize_interval_s = 0.5}},
        elastic.space, elastic.tune,
        rayd::train::RunConfig{.name = "elastic", .storage_path = elastic.dir.path()});
    return tuner.Simulate(curves);
  }();
  REQUIRE(grown.grid.size() == 2);
  CHECK(grown.simulated_s == Approx(13));
  for (const TrialResult& trial : grown.grid.trials()) {
    REQUIRE(trial.history.size() == 8);
    CHECK(trial.history[2].at("world_size") == 1);
    CHECK(trial.history[3].at("world_size") == 2);
  }
  // Busy: per trial 3 s on 1 worker and 3.5 s on 2 (the restart included) = 10 worker-seconds;
  // 20 of 2 x 13.
  CHECK(grown.utilization == Approx(20.0 / 26.0));
}

TEST_CASE("a replay with several objectives ranks by them under MO-ASHA and writes the front's "
          "hypervolume on the simulated clock",
          "[tune][simulator]") {
  // The table's second metric: the config's hidden size, to minimise against the loss.
  std::string csv = Table({{0.1, 32}, {0.1, 64}, {0.2, 32}, {0.2, 64}}, 9);
  RecordedCurves curves = Parse(csv);
  Sim sim;
  sim.tune.metric.clear();
  sim.tune.objectives = {{"loss", false}, {"time_this_iter_s", false}};
  sim.tune.reference_point = {1.0, 3.0};
  sim.tune.num_samples = 8;
  sim.tune.max_concurrent_trials = 2;
  sim.tune.scheduler = AshaConfig{.max_t = 9, .grace_period = 1, .reduction_factor = 3};
  Simulation result = sim.Run(curves);
  CHECK(result.grid.num_terminated() == 8);
  CHECK(result.iterations < 8 * 9);  // MO-ASHA stopped some at a rung
  CHECK_FALSE(result.grid.ParetoFront().empty());
  const std::string progress = rayd::testing::ReadFile(sim.dir.path() + "/sim/progress.csv");
  CHECK(progress.starts_with("elapsed_s,results,trials_reported,front_size,hypervolume,"
                             "reference/loss,reference/time_this_iter_s\n"));
  // Its last row is the grid's front at the same reference.
  std::vector<std::string> last;
  std::string line, previous;
  std::istringstream lines(progress);
  while (std::getline(lines, line)) previous = line;
  std::istringstream fields(previous);
  for (std::string field; std::getline(fields, field, ',');) last.push_back(field);
  REQUIRE(last.size() == 7);
  CHECK(std::stod(last[4]) == Approx(result.grid.FrontHypervolume()));
  CHECK(std::stod(last[0]) <= result.simulated_s);  // the simulated clock, not the wall's

  // An objective the recordings lack is refused before anything runs.
  sim.tune.objectives[1].metric = "params";
  CHECK_THROWS_WITH(sim.Run(curves, "missing"), Catch::Contains("do not report 'params'"));
}
