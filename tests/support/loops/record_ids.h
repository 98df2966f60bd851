#pragma once
// Train loops for tests that check rayd Data's exact resume through real runs, in a shared
// library (rayd_test_loops) that a test binary links and `rayd train` loads (`libraries:`).
//
// RecordIds: takes the batches of dataset `ids` (one int64 column, id) an epoch at a time
// (IterBatches' next epoch, so a resumed attempt goes on where its checkpoint left the dataset,
// with no code for it) and records every id it took in its checkpoints: each rank its own file
// per attempt (ids_g<generation>_r<rank>.json: [[epoch, id], ...] this attempt), rank 0 carrying
// the earlier attempts' files forward. Reports with a checkpoint every 2 steps and at each
// epoch's end: epoch, step, generation (and world_size). Config: epochs (3); batch_size (4);
// pace_ms (0: sleep this long after each step, for a run a test acts on while it trains);
// fail_at: [[epoch, step, marker], ...]: the last rank throws after taking that step of that
// epoch, once (while `marker` does not exist; it creates it).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rayd::testing {

// The ids a RecordIds checkpoint directory holds (every rank's, every attempt's), by epoch, in
// the order taken; `files` counts the id files.
std::map<int, std::vector<int64_t>> IdsByEpoch(const std::string& checkpoint_dir,
                                               int* files = nullptr);

// Writes `dir`/ids.csv: a header `id` and the ids 0 .. rows-1, one a line; returns its path.
std::string WriteIdsCsv(const std::string& dir, int rows);

// The latest checkpoint_* directory of run directory `run_dir` ("" when there is none).
std::string LatestCheckpoint(const std::string& run_dir);

}  // namespace rayd::testing
