// Tune controller benchmarks on an embedded cluster, with the Tuner's logging on (result.json,
// progress.csv, experiment_state.json): what the Tuner itself costs, next to the trials' work.
//
//   results/s         trials that report as fast as they can (no checkpoints): every result is
//                     persisted, logged, and decided on by the scheduler before the next counts
//   one-result trials N trials that report once, as many at once as the cluster has CPUs: each
//                     is a Fit on a gang (a placement group and a rank actor in a worker
//                     process); the first trial of each slot starts its gang, the rest reuse it.
//                     Printed: trials/s over the whole sweep, and on reused gangs (from the
//                     result of the first trials of every slot to the last result)
//   ASHA vs FIFO      the same seeded synthetic sweep (27 trials x 9 iterations) under FIFO,
//                     ASHA and HyperBand: iterations run (budget) and the best loss found
//
// The synthetic objective is bench/peers/optuna_sweep.py's: loss = ((x - 3)^2 + 1.1) /
// (1 + lr * i) at iteration i, x ~ U(0, 6), lr ~ choice(0.05, 0.1, 0.2).
//
//   build/bench/tune_bench [--results 50000] [--trials 10000] [--seeds 3]

#include <rayd/api.h>
#include <rayd/tune/tuner.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace rt = rayd::train;
namespace tune = rayd::tune;
using Clock = std::chrono::steady_clock;

double Loss(const nlohmann::json& config, int iteration) {
  const double x = config.value("x", 0.0);
  const double lr = config.value("lr", 0.1);
  return ((x - 3) * (x - 3) + 1.1) / (1 + lr * iteration);
}

// Reports `iterations` results as fast as it can.
void Flood(const nlohmann::json& config) {
  const int iterations = config.value("iterations", 1);
  for (int i = 1; i <= iterations; ++i) rt::Report({{"loss", Loss(config, i)}});
}
RAYD_TRAIN_LOOP(Flood);

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct Sweep {
  double seconds = 0;
  tune::ResultGrid grid;
};

Sweep Run(const std::string& root, const std::string& name, tune::ParamSpace space,
          tune::TuneConfig config) {
  auto start = Clock::now();
  tune::Tuner tuner({.train_loop = "Flood"}, std::move(space), std::move(config),
                    {.name = name, .storage_path = root});
  Sweep sweep;
  sweep.grid = tuner.Fit();
  sweep.seconds = Seconds(start);
  return sweep;
}

tune::ParamSpace SyntheticSpace(int iterations) {
  return {{{"x"}, tune::Domain::Uniform(0, 6)},
          {{"lr"}, tune::Domain::Choice({0.05, 0.1, 0.2})},
          {{"iterations"}, iterations}};
}

}  // namespace

int main(int argc, char** argv) {
  rayd::Init(rayd::RaydConfig{}, argc, argv);  // a worker re-run of this binary serves here
  CLI::App app{"Tune controller benchmarks"};
  int results = 50'000;
  int trials = 10000;
  int seeds = 3;
  app.add_option("--results", results, "Results per trial in the results/s run (2 trials)");
  app.add_option("--trials", trials, "One-result trials");
  app.add_option("--seeds", seeds, "Seeds of the synthetic sweep");
  CLI11_PARSE(app, argc, argv);

  const std::string root = fs::temp_directory_path() / ("rayd_tune_bench_" + std::to_string(getpid()));
  const int cpus = static_cast<int>(rayd::ClusterResources()["CPU"]);
  std::printf("Tune controller on an embedded cluster (%d CPUs), logging on\n\n", cpus);

  {
    Sweep s = Run(root, "flood", {{{"x"}, 1.0}, {{"iterations"}, results}},
                  {.metric = "loss", .num_samples = 2, .max_concurrent_trials = 2});
    double total = 0;
    for (const auto& t : s.grid.trials()) total += t.history.size();
    std::printf("%-34s %10.0f results/s  (%.0f results in %.2f s, 2 trials at once)\n",
                "results/s", total / s.seconds, total, s.seconds);
  }
  {
    Sweep s = Run(root, "one_result", {{{"x"}, 1.0}, {{"iterations"}, 1}},
                  {.metric = "loss", .num_samples = trials});
    const double per_trial_ms = s.seconds * cpus / trials * 1e3;
    std::printf("%-34s %10.1f trials/s   (%d trials in %.2f s; %.1f ms per trial per slot)\n",
                "one-result trials", trials / s.seconds, trials, s.seconds, per_trial_ms);
    // Reused gangs: the trials after the first of each slot, over the time their results span.
    std::vector<double> stamps;
    for (const auto& t : s.grid.trials()) {
      auto stamp = t.metrics.find("timestamp");
      if (stamp != t.metrics.end()) stamps.push_back(stamp->second);
      // Every trial must end with its one result: anything else is a bug worth seeing here.
      if (t.status != "TERMINATED" || stamp == t.metrics.end()) {
        std::fprintf(stderr, "trial %s: %s with %zu results %s\n", t.trial_id.c_str(),
                     t.status.c_str(), t.history.size(), t.error.c_str());
      }
    }
    std::sort(stamps.begin(), stamps.end());
    if (stamps.size() > static_cast<size_t>(cpus) + 1) {
      const double span = stamps.back() - stamps[cpus - 1];
      const double reused = static_cast<double>(stamps.size() - cpus);
      std::printf("%-34s %10.1f trials/s   (%.0f trials in %.2f s; %.2f ms per trial per slot)\n",
                  "one-result trials, reused gangs", reused / span, reused, span,
                  span * cpus / reused * 1e3);
    }
  }
  std::printf("\nSynthetic sweep, 27 trials x 9 iterations, mean over %d seeds:\n", seeds);
  std::printf("  %-12s %10s %12s %10s\n", "scheduler", "budget", "best loss", "seconds");
  struct Named {
    const char* name;
    tune::SchedulerConfig scheduler;
  };
  for (const Named& s :
       {Named{"fifo", tune::FifoConfig{}},
        Named{"asha", tune::AshaConfig{.max_t = 9, .grace_period = 1, .reduction_factor = 3}},
        Named{"hyperband", tune::HyperBandConfig{.max_t = 9, .reduction_factor = 3}}}) {
    double budget = 0, best = 0, seconds = 0;
    for (int seed = 0; seed < seeds; ++seed) {
      Sweep sweep = Run(root, std::string(s.name) + "_" + std::to_string(seed), SyntheticSpace(9),
                        {.metric = "loss",
                         .num_samples = 27,
                         .seed = static_cast<uint64_t>(seed),
                         .scheduler = s.scheduler});
      for (const auto& t : sweep.grid.trials()) budget += t.history.size();
      best += sweep.grid.GetBestResult().metrics.at("loss");
      seconds += sweep.seconds;
    }
    std::printf("  %-12s %10.1f %12.4f %10.2f\n", s.name, budget / seeds, best / seeds,
                seconds / seeds);
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  rayd::Shutdown();
  return 0;
}
