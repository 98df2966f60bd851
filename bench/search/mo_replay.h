#pragma once
// mo_search_bench's replay of recorded learning curves with two objectives (mo_replay.cc):
// what `mo_search_bench replay` runs.

#include <nlohmann/json.hpp>
#include <string>

namespace rayd::bench {

struct MoReplayOptions {
  std::string curves;                     // a CSV table in progress.csv's layout
  std::string accuracy = "val_accuracy";  // maximised; the hypervolume counts 1 - accuracy
  std::string size = "params";            // minimised; the hypervolume counts log10(size)
  int seeds = 20;
  int trials = 40;      // full-fidelity evaluations; MO-ASHA arms get trials x the longest curve
  int population = 10;  // NSGA-II's
  double grace_period = 1;      // MO-ASHA's, in epochs
  double reduction_factor = 3;  // MO-ASHA's
  // Replay through Tuner::Simulate (the Tuner's controller) instead of the bench's own loop.
  bool simulator = false;
};

// One JSON object: the table's reference point and best front, and per arm and seed the
// hypervolume against the epochs spent. Throws std::runtime_error for a table it cannot read.
nlohmann::json ReplayMoCurves(const MoReplayOptions& options);

}  // namespace rayd::bench
