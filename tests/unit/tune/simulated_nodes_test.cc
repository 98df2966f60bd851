// The autoscaled cluster of `rayd tune --simulate` (tune/src/simulated_nodes.h): launches when
// work waits, ready after the launch latency, idle nodes terminated after the timeout down to
// min_nodes, node-seconds paid from each launch; and a replayed sweep on it.
#include <rayd/tune/simulator.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "simulated_nodes.h"
#include "test_util.h"

namespace {

using rayd::tune::TuneConfig;
using rayd::tune::internal::SimulatedNodes;

TuneConfig::Simulated::Autoscaler Model(int per_node, int min_nodes, int max_nodes) {
  TuneConfig::Simulated::Autoscaler m;
  m.workers_per_node = per_node;
  m.min_nodes = min_nodes;
  m.max_nodes = max_nodes;
  m.launch_latency_s = 60;
  m.idle_timeout_s = 30;
  return m;
}

TEST_CASE("simulated nodes launch for waiting work and are ready after the latency",
          "[tune][simulator]") {
  SimulatedNodes nodes(Model(4, 0, 3));
  CHECK(nodes.ReadyWorkers() == 0);
  CHECK(std::isinf(nodes.NextEvent()));  // nothing pending: +inf
  nodes.Want(10, 6);  // two nodes of 4
  CHECK(nodes.launches() == 2);
  nodes.Want(11, 6);  // already coming
  CHECK(nodes.launches() == 2);
  CHECK(nodes.NextEvent() == Approx(70));
  nodes.Advance(70);
  CHECK(nodes.ReadyWorkers() == 8);
  // Never past max_nodes.
  nodes.Want(70, 100);
  CHECK(nodes.launches() == 3);
  CHECK(nodes.peak() == 3);
}

TEST_CASE("idle simulated nodes go after the timeout but never below min_nodes, paid from launch",
          "[tune][simulator]") {
  SimulatedNodes nodes(Model(2, 1, 4));
  CHECK(nodes.ReadyWorkers() == 2);  // min_nodes are there from the start
  nodes.Want(0, 6);
  nodes.Used(0, 2);  // the min node works while the others launch
  nodes.Advance(60);
  nodes.Used(60, 6);  // all three busy
  CHECK(std::isinf(nodes.NextEvent()));
  nodes.Used(100, 2);  // two idle from 100
  CHECK(nodes.NextEvent() == Approx(130));
  nodes.Used(110, 4);  // one busy again: the most recently idle one works
  nodes.Advance(130);
  CHECK(nodes.ReadyWorkers() == 4);  // one went
  nodes.Used(140, 0);
  nodes.Advance(nodes.NextEvent());
  CHECK(nodes.ReadyWorkers() == 2);  // down to min_nodes, no further
  CHECK(std::isinf(nodes.NextEvent()));
  // Node-seconds: the min node 0..200, the two launched at 0 until 130 and 170.
  CHECK(nodes.NodeSeconds(200) == Approx(200 + 130 + 170));
}

TEST_CASE("a replayed sweep on an autoscaled cluster pays fewer node-hours than a fixed one",
          "[tune][simulator]") {
  using namespace rayd::tune;
  // Eight configs: ASHA stops most early; the tail runs alone.
  std::string csv = "trial_id,training_iteration,loss,time_this_iter_s,config/lr\n";
  for (int id = 1; id <= 8; ++id) {
    for (int i = 1; i <= 9; ++i) {
      csv += "t" + std::to_string(id) + "," + std::to_string(i) + "," +
             std::to_string(1.0 / (1.0 + i * (9 - id) * 0.1)) + ",100," + std::to_string(id * 0.1) +
             "\n";
    }
  }
  auto curves = RecordedCurves::ParseCsv(csv, "curves.csv");
  REQUIRE(curves.ok());
  ParamSpace space = {{{"lr"}, Domain::GridSearch({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8})}};
  rayd::testing::TempDir dir;
  auto run = [&](TuneConfig::Simulated simulated, const std::string& name) {
    TuneConfig tune{.metric = "loss", .mode = "min", .num_samples = 1, .seed = 3};
    tune.scheduler = AshaConfig{.max_t = 9, .grace_period = 1, .reduction_factor = 3};
    tune.max_concurrent_trials = 8;
    tune.simulate = simulated;
    Tuner tuner(Trainable{"replayed", {}}, space, tune,
                rayd::train::RunConfig{.name = name, .storage_path = dir.path()});
    return tuner.Simulate(*curves);
  };
  TuneConfig::Simulated fixed;
  fixed.workers = 8;
  TuneConfig::Simulated scaled;
  scaled.autoscaler = Model(2, 0, 4);
  const Simulation f = run(fixed, "fixed");
  const Simulation a = run(scaled, "scaled");
  CHECK(a.grid.num_terminated() == 8);
  CHECK(a.peak_nodes == 4);
  CHECK(a.launches >= 4);
  // The same decisions, one launch latency later.
  CHECK(a.simulated_s == Approx(f.simulated_s + 60));
  const double fixed_node_s = 4 * f.simulated_s;
  INFO("fixed " << f.simulated_s << " s; autoscaled " << a.simulated_s << " s, "
                << a.node_seconds << " node-s, " << a.launches << " launches");
  CHECK(a.node_seconds < 0.8 * fixed_node_s);
  CHECK(a.node_seconds > 0);
}

}  // namespace
