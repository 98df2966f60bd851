#pragma once
// The order of an epoch, and each rank's share of it: pure functions, so that a shard's place is
// one number and every process that knows (rows, seed, epoch, world) agrees on it without
// talking (ARCHITECTURE.md §14: order is a function, not a state).
//
// How an epoch is dealt: the epoch's order is a permutation of the dataset's rows (the identity
// without shuffle). Ranks take it a global step at a time: step s hands rank r the rows
// order[s*W*B + r*B, s*W*B + (r+1)*B) for W ranks and batch size B. What is left after the
// full steps, R < W*B rows, is not dropped: every rank makes the same number of steps (DDP needs
// that), so
//   - R >= W: one more, shorter step, R split as evenly as it goes (ranks below R mod W one row
//     more);
//   - 0 < R < W: the last full step grows by those rows (ranks below R one row more);
//   - with drop_last, the R rows are left out and every batch has B rows;
//   - fewer rows than ranks (no full step and R < W) cannot make equal steps: they are left out.
// A pass may start at a cursor into the order (the rows a checkpoint's steps covered, over every
// rank): the rest of the order is dealt the same way, to however many ranks there are now.

#include <cstdint>
#include <span>
#include <vector>

namespace rayd::data {

// SplitMix64 (Steele, Lea and Flood 2014): a fixed, portable stream, unlike std::shuffle's
// distribution, which each standard library implements its own way.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound): Lemire's multiply-shift with rejection (bound > 0).
  uint64_t Below(uint64_t bound) {
    while (true) {
      const unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
      const uint64_t low = static_cast<uint64_t>(m);
      if (low >= bound || low >= (0 - bound) % bound) return static_cast<uint64_t>(m >> 64);
    }
  }

 private:
  uint64_t state_;
};

// A permutation of [0, num_rows): Fisher-Yates over a SplitMix64 stream seeded by (seed,
// epoch); the same on every machine and build. The identity without `shuffle`.
std::vector<int64_t> EpochOrder(int64_t num_rows, uint64_t seed, int64_t epoch, bool shuffle);

// The rows each of `world` ranks takes at least from one epoch (floor(num_rows / world));
// some take one more.
int64_t RowsPerRank(int64_t num_rows, int world);

// A rank's part of an order (see the file's comment): its rows in the order it takes them, and
// its steps' batch sizes (the same count on every rank).
struct RankShare {
  std::vector<int64_t> rows;
  std::vector<int64_t> steps;
  int64_t left_out = 0;  // rows of the order no rank takes (drop_last, or fewer than ranks)
};
RankShare DealRank(std::span<const int64_t> order, int world, int rank, int64_t batch_size,
                   bool drop_last = false);

// The steps of a deal of `num_rows` rows (the same on every rank), and rank `rank`'s rows in step
// `step` < StepCount: the `count` rows of the order from `first` (DealRank's, one step at a time).
int64_t StepCount(int64_t num_rows, int world, int64_t batch_size, bool drop_last = false);
struct StepRows {
  int64_t first = 0;
  int64_t count = 0;
};
StepRows RankStepRows(int64_t num_rows, int world, int rank, int64_t batch_size, bool drop_last,
                      int64_t step);

// How many rows of an order of `num_rows` the first `steps` steps cover over all `world` ranks:
// the cursor a checkpoint taken after them records.
int64_t RowsAfterSteps(int64_t num_rows, int world, int64_t batch_size, bool drop_last,
                       int64_t steps);

}  // namespace rayd::data
