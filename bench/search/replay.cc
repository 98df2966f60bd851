// Schedulers and searchers on recorded learning curves, through the simulator
// (Tuner::Simulate): for each seed, each arm is one replayed sweep of --trials trials over the
// table's configurations (each key the table varies becomes a choice of its values). Prints,
// per arm and seed, the best final value after 25, 50 and 100 trials, the budget (results
// replayed) at which the best value so far improved, and the total budget. bench/search/run.sh
// sets these next to Optuna's on the same table and computes the medians and ratios.
//
//   build/bench/search_replay_bench --curves bench/search/data/mlp_curves.csv [--seeds 20]
//       [--trials 100] [--concurrent 4] [--arms a,b] [--metric loss] [--mode min]
//
// Arms: random and tpe one trial at a time (FIFO: every trial runs its whole curve);
// random+asha and tpe+asha (ASHA's stopping form: grace 1, reduction factor 3, max_t the
// longest curve) one at a time, as Optuna's study runs, and --concurrent at a time ("@4");
// asha_promotion and pasha (random search, the same rungs, promotion form) --concurrent at a
// time. Prints figures only; asserts nothing.

#include <rayd/tune/simulator.h>
#include <rayd/tune/tuner.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "replay_space.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace rayd::tune;

using rayd::bench::SpaceOf;

struct Arm {
  std::string name;
  SearchConfig search;
  SchedulerConfig scheduler;
  int concurrent;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Schedulers and searchers on recorded learning curves, through the simulator"};
  std::string curves_path, metric = "loss", mode = "min";
  int seeds = 20, trials = 100, concurrent = 4, startup = 10;
  std::vector<std::string> only;
  app.add_option("--curves", curves_path, "a recorded experiment or CSV table")->required();
  app.add_option("--seeds", seeds, "sweeps per arm");
  app.add_option("--trials", trials, "trials per sweep");
  app.add_option("--concurrent", concurrent, "trials at once in the ASHA and PASHA arms");
  app.add_option("--startup", startup, "TPE's n_startup_trials");
  app.add_option("--arms", only, "only these arms (default: all)")->delimiter(',');
  app.add_option("--metric", metric);
  app.add_option("--mode", mode);
  CLI11_PARSE(app, argc, argv);

  rayd::Result<RecordedCurves> curves = RecordedCurves::Load(curves_path);
  if (!curves.ok()) {
    std::fprintf(stderr, "%s\n", curves.status().message().c_str());
    return 2;
  }
  const ParamSpace space = SpaceOf(*curves);
  size_t longest = 0;
  for (const RecordedCurve& curve : curves->curves()) {
    longest = std::max(longest, curve.results.size());
  }
  const double max_t = static_cast<double>(longest);
  const AshaConfig asha{.max_t = max_t, .grace_period = 1, .reduction_factor = 3};
  AshaConfig promotion = asha;
  promotion.promotion = true;
  const PashaConfig pasha{.max_t = max_t, .grace_period = 1, .reduction_factor = 3};
  const TpeConfig tpe{.n_startup_trials = startup};
  const std::string at = "@" + std::to_string(concurrent);
  const std::vector<Arm> arms = {
      {"random", RandomSearchConfig{}, FifoConfig{}, 1},
      {"tpe", tpe, FifoConfig{}, 1},
      {"random+asha", RandomSearchConfig{}, asha, 1},
      {"tpe+asha", tpe, asha, 1},
      {"random+asha" + at, RandomSearchConfig{}, asha, concurrent},
      {"tpe+asha" + at, tpe, asha, concurrent},
      {"asha_promotion", RandomSearchConfig{}, promotion, concurrent},
      {"pasha", RandomSearchConfig{}, pasha, concurrent},
  };

  // The replayed sweeps' files are a scratch: on tmpfs they cost a tenth of what a disk makes
  // them cost (mkdir and open dominate a replay).
  const fs::path scratch_root = fs::is_directory("/dev/shm") ? fs::path("/dev/shm")
                                                             : fs::temp_directory_path();
  const fs::path scratch = scratch_root / ("rayd_search_replay_" + std::to_string(getpid()));
  json out = {{"curves", curves->curves().size()}, {"configs", json::array()}, {"arms", {}}};
  for (const Param& p : space) {
    if (const auto* d = std::get_if<Domain>(&p.value)) {
      out["configs"].push_back({{"path", p.path}, {"values", d->values()}});
    }
  }
  double wall = 0;
  int sweeps = 0;
  for (const Arm& arm : arms) {
    if (!only.empty() && std::find(only.begin(), only.end(), arm.name) == only.end()) continue;
    for (int seed = 1; seed <= seeds; ++seed) {
      TuneConfig tune{.metric = metric,
                      .mode = mode,
                      .num_samples = trials,
                      .max_concurrent_trials = arm.concurrent,
                      .seed = static_cast<uint64_t>(seed),
                      .scheduler = arm.scheduler,
                      .search = arm.search};
      const std::string name = arm.name + "_" + std::to_string(seed);
      Tuner tuner(Trainable{"replayed", {}}, space, tune,
                  rayd::train::RunConfig{.name = name, .storage_path = scratch.string()});
      const auto started = std::chrono::steady_clock::now();
      Simulation sim = tuner.Simulate(*curves);
      wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      ++sweeps;
      const double sign = mode == "min" ? 1 : -1;
      // The best final value among the first N trials (in the order they were made).
      json best_after = json::object();
      double best = INFINITY;
      for (size_t i = 0; i < sim.grid.size(); ++i) {
        auto value = sim.grid[i].metrics.find(metric);
        if (value != sim.grid[i].metrics.end()) best = std::min(best, sign * value->second);
        const size_t n = i + 1;
        if (n == 25 || n == 50 || n == 100 || n == sim.grid.size()) {
          best_after[std::to_string(n)] = sign * best;
        }
      }
      // The budget at which the best value reported so far improved.
      json improvements = json::array();
      double incumbent = INFINITY;
      for (const Simulation::Event& e : sim.trace) {
        if (std::isnan(e.value) || sign * e.value >= incumbent) continue;
        incumbent = sign * e.value;
        improvements.push_back({e.iterations, e.value});
      }
      // The config the sweep would pick: the best by its last result among the trials that got
      // furthest; and what that config reaches trained to the end (its recorded curve's last
      // value): how PASHA's paper scores a sweep that stopped short of max_t.
      double furthest = 0, picked = INFINITY;
      const TrialResult* choice = nullptr;
      for (const TrialResult& trial : sim.grid.trials()) {
        auto it = trial.metrics.find("training_iteration");
        auto value = trial.metrics.find(metric);
        if (it == trial.metrics.end() || value == trial.metrics.end()) continue;
        if (it->second > furthest || (it->second == furthest && sign * value->second < picked)) {
          furthest = it->second;
          picked = sign * value->second;
          choice = &trial;
        }
      }
      json chosen = nullptr;
      if (choice != nullptr) {
        for (const RecordedCurve& curve : curves->curves()) {
          if (curve.config != choice->config || curve.results.empty()) continue;
          auto last = curve.results.back().find(metric);
          if (last != curve.results.back().end()) chosen = last->second;
          break;
        }
      }
      out["arms"][arm.name].push_back({{"seed", seed},
                                       {"best_after", best_after},
                                       {"improvements", improvements},
                                       {"budget", sim.iterations},
                                       {"max_resource", furthest},
                                       {"chosen_full", chosen},
                                       {"simulated_s", sim.simulated_s}});
      std::error_code ec;
      fs::remove_all(scratch / name, ec);
    }
  }
  std::error_code ec;
  fs::remove_all(scratch, ec);
  out["sweeps"] = sweeps;
  out["seconds_per_sweep"] = wall / std::max(sweeps, 1);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
