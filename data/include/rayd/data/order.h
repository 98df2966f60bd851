#pragma once
// The order of an epoch, and each rank's share of it: pure functions, so that a shard's place is
// one number and every process that knows (rows, seed, epoch, world) agrees on it without
// talking (ARCHITECTURE.md §14: order is a function, not a state).
//
// How an epoch is dealt: the epoch's order is a permutation of the dataset's rows (the identity
// without shuffle). Ranks take it a global step at a time: step s hands rank r the rows
// order[s*W*B + r*B, s*W*B + (r+1)*B) for W ranks and batch size B. Every rank gets the same
// number of rows, floor(N / W), so every rank makes the same number of steps (DDP needs that):
// the last global step, shorter than W*B, is split evenly (each rank a batch of the same smaller
// size), and the N mod W rows at the very end of the order (fewer than W) are left out of that
// epoch. They differ from epoch to epoch when shuffling.

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

// The rows each of `world` ranks takes from one epoch (floor(num_rows / world)).
int64_t RowsPerRank(int64_t num_rows, int world);

// Rank `rank`'s rows of `order`, in the order it consumes them (see the file's comment).
std::vector<int64_t> RankRows(std::span<const int64_t> order, int world, int rank,
                              int64_t batch_size);

}  // namespace rayd::data
