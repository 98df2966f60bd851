// rayd's multi-objective search on problems with known fronts and on recorded learning curves
// (bench/search/mo_run.sh sets these next to Optuna's NSGAIISampler, TPESampler and
// RandomSampler from optuna_mo_peer.py and optuna_mo_replay_peer.py):
//
//   build/bench/mo_search_bench synthetic [--seeds 10] [--first-seed 1]
//       [--checkpoints 100,200,400] [--population 50] [--zdt-vars 30] [--dtlz-vars 12] [--json]
//     NSGA-II, MOTPE and random search (mo_arms.h) on ZDT1, ZDT2, ZDT3 and DTLZ2
//     (mo_objectives.h), one trial at a time: per seed, the hypervolume of the front of the
//     first N evaluations up to the problem's reference point; the table shows the median.
//
//   build/bench/mo_search_bench replay --curves bench/search/data/fashion_mo_curves.csv
//       [--seeds 20] [--trials 40] [--population 10] [--grace-period 1]
//       [--reduction-factor 3] [--simulator]
//     Recorded curves, accuracy against model size, with MO-ASHA (mo_replay.cc); JSON.
//
//   build/bench/mo_search_bench hv FILE
//     The hypervolume of each case of FILE ([{"reference": [...], "points": [[...], ...]}, ...])
//     as rayd computes it, as a JSON list: mo_run.sh checks it against Optuna's on a sample.
//
// Prints figures only; asserts nothing.

#include <rayd/tune/multi_objective.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "mo_arms.h"
#include "mo_objectives.h"
#include "mo_replay.h"

namespace {

using nlohmann::json;
using rayd::bench::MoArm;
using rayd::bench::MoProblem;
using rayd::tune::Domain;
using rayd::tune::Objective;
using rayd::tune::ParamSpace;

// The hypervolume of the problem's true front up to its reference: the ZDT fronts sampled at
// 5,001 values of f1 (within 1e-4 of the integral), DTLZ2's octant of the unit sphere exactly.
double OptimalHypervolume(const MoProblem& p) {
  if (p.reference.size() == 3) {
    return p.reference[0] * p.reference[1] * p.reference[2] - M_PI / 6;
  }
  std::vector<std::vector<double>> front;
  for (int i = 0; i <= 5000; ++i) {
    std::vector<double> x(static_cast<size_t>(p.num_vars), 0.0);
    x[0] = i / 5000.0;
    front.push_back(p.f(x));
  }
  return rayd::bench::FrontHypervolume(front, p.reference);
}

// Per checkpoint, the hypervolume of the first N evaluations, for one seed.
std::vector<double> Run(const MoArm& arm, const MoProblem& p, uint64_t seed,
                        const std::vector<int>& checkpoints) {
  ParamSpace space;
  for (int i = 0; i < p.num_vars; ++i) {
    space.push_back({{"x" + std::to_string(i)}, Domain::Uniform(0, 1)});
  }
  std::vector<Objective> objectives;
  for (size_t k = 0; k < p.reference.size(); ++k) {
    objectives.push_back({"f" + std::to_string(k + 1), false});
  }
  auto searcher = arm.make(space, objectives, checkpoints.back(), seed, std::nullopt);
  std::vector<std::vector<double>> points;
  std::vector<double> out;
  for (int t = 1; t <= checkpoints.back(); ++t) {
    json config = searcher->Next();
    std::vector<double> x;
    for (int i = 0; i < p.num_vars; ++i) x.push_back(config.at("x" + std::to_string(i)));
    std::vector<double> f = p.f(x);
    std::map<std::string, double> metrics;
    for (size_t k = 0; k < f.size(); ++k) metrics[objectives[k].metric] = f[k];
    searcher->OnTrialResult(config, metrics);
    searcher->OnTrialEnd(config, std::nullopt);
    points.push_back(std::move(f));
    if (std::find(checkpoints.begin(), checkpoints.end(), t) != checkpoints.end()) {
      out.push_back(rayd::bench::FrontHypervolume(points, p.reference));
    }
  }
  return out;
}

json Synthetic(int first_seed, int seeds, const std::vector<int>& checkpoints, int population,
               int zdt_vars, int dtlz_vars) {
  json out = {{"seeds", seeds},
              {"first_seed", first_seed},
              {"checkpoints", checkpoints},
              {"population", population}};
  for (const MoProblem& p : rayd::bench::MoProblems(zdt_vars, dtlz_vars)) {
    json& problem = out["problems"][p.name];
    problem = {
        {"num_vars", p.num_vars}, {"reference", p.reference}, {"optimum", OptimalHypervolume(p)}};
    for (const MoArm& arm : rayd::bench::MoArms(population)) {
      std::vector<std::vector<double>> per_checkpoint(checkpoints.size());
      for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
        std::vector<double> hv = Run(arm, p, static_cast<uint64_t>(seed), checkpoints);
        for (size_t k = 0; k < checkpoints.size(); ++k) per_checkpoint[k].push_back(hv[k]);
      }
      for (size_t k = 0; k < checkpoints.size(); ++k) {
        problem["arms"][arm.name][std::to_string(checkpoints[k])] = per_checkpoint[k];
      }
    }
  }
  return out;
}

void PrintSynthetic(const json& out) {
  std::printf("median over %d seeds of the hypervolume after N evaluations (higher is better)\n",
              out["seeds"].get<int>());
  std::printf("%-6s %-8s %6s %10s %8s\n", "problem", "search", "N", "rayd", "optimum");
  for (const auto& [name, problem] : out["problems"].items()) {
    for (const auto& [arm, by_n] : problem["arms"].items()) {
      for (int n : out["checkpoints"]) {
        const std::string key = std::to_string(n);
        std::printf("%-6s %-8s %6d %10.4f %8.4f\n", name.c_str(), arm.c_str(), n,
                    rayd::bench::Median(by_n[key].get<std::vector<double>>()),
                    problem["optimum"].get<double>());
      }
    }
  }
}

json HypervolumesOf(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  json out = json::array();
  for (const json& c : json::parse(in)) {
    out.push_back(
        rayd::bench::FrontHypervolume(c.at("points").get<std::vector<std::vector<double>>>(),
                                      c.at("reference").get<std::vector<double>>()));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rayd's multi-objective search on ZDT/DTLZ and on recorded curves"};
  app.require_subcommand(1);

  CLI::App* synthetic = app.add_subcommand("synthetic", "ZDT1-3 and DTLZ2");
  int seeds = 10, first_seed = 1, population = 50, zdt_vars = 30, dtlz_vars = 12;
  std::vector<int> checkpoints = {100, 200, 400};
  bool as_json = false;
  synthetic->add_option("--seeds", seeds, "seeds per figure (the median is shown)");
  synthetic->add_option("--first-seed", first_seed,
                        "seeds first-seed.. (another sample to pool with an earlier run's)");
  synthetic->add_option("--checkpoints", checkpoints, "evaluation counts, ascending")
      ->delimiter(',');
  synthetic->add_option("--population", population, "NSGA-II's population_size");
  synthetic->add_option("--zdt-vars", zdt_vars, "variables of ZDT1-3");
  synthetic->add_option("--dtlz-vars", dtlz_vars, "variables of DTLZ2 (3 objectives)");
  synthetic->add_flag("--json", as_json, "one JSON object (every seed) instead of the table");

  CLI::App* replay = app.add_subcommand("replay", "recorded curves, accuracy against size");
  rayd::bench::MoReplayOptions replay_options;
  replay->add_option("--curves", replay_options.curves, "a CSV table")->required();
  replay->add_option("--accuracy", replay_options.accuracy, "the metric maximised");
  replay->add_option("--size", replay_options.size, "the metric minimised");
  replay->add_option("--seeds", replay_options.seeds, "sweeps per arm");
  replay->add_option("--trials", replay_options.trials, "full-fidelity evaluations per sweep");
  replay->add_option("--population", replay_options.population, "NSGA-II's population_size");
  replay->add_option("--grace-period", replay_options.grace_period, "MO-ASHA's, in epochs");
  replay->add_option("--reduction-factor", replay_options.reduction_factor, "MO-ASHA's");
  replay->add_flag("--simulator", replay_options.simulator,
                   "through Tuner::Simulate instead of the bench's own loop");

  CLI::App* hv = app.add_subcommand("hv", "hypervolumes of the cases in a JSON file");
  std::string hv_path;
  hv->add_option("file", hv_path)->required();
  CLI11_PARSE(app, argc, argv);

  try {
    if (synthetic->parsed()) {
      std::sort(checkpoints.begin(), checkpoints.end());
      const json out = Synthetic(first_seed, seeds, checkpoints, population, zdt_vars, dtlz_vars);
      if (as_json) {
        std::printf("%s\n", out.dump().c_str());
      } else {
        PrintSynthetic(out);
      }
    } else if (replay->parsed()) {
      std::printf("%s\n", rayd::bench::ReplayMoCurves(replay_options).dump().c_str());
    } else {
      std::printf("%s\n", HypervolumesOf(hv_path).dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mo_search_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
