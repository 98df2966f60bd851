#pragma once
// DistributedSampler: which dataset indices one rank of a data-parallel job trains on in one
// epoch, as torch.utils.data.DistributedSampler decides them.
//
// Every rank builds the same permutation of [0, dataset_size) from seed + epoch (or the
// identity when not shuffling), pads it by repeating its head until it divides evenly among the
// ranks (or, with drop_last, cuts the tail), and takes every world_size-th index starting at
// its rank. The shards are disjoint apart from the padding, cover the dataset, and have equal
// lengths, so every rank runs the same number of steps (a rank with fewer would leave the
// others waiting in an all-reduce). Call SetEpoch(e) at the start of each epoch to reshuffle.
//
// The permutation is our own Fisher-Yates over a std::mt19937_64, so it is the same on every
// platform, but it is not the one PyTorch's torch.randperm draws.
//
// A plain value; no LibTorch types, so the driver side can use it too.

#include <cstdint>
#include <vector>

namespace rayd::train {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // Cut the tail instead of padding, so no sample is seen twice in an epoch.
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Requires 0 <= rank < world_size (checked).
  DistributedSampler(int64_t dataset_size, int world_size, int rank,
                     DistributedSamplerOptions options = {});

  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // The number of indices each rank gets per epoch.
  int64_t size() const { return per_rank_; }
  // This rank's indices for the current epoch, in the order to visit them.
  std::vector<int64_t> Indices() const;

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t per_rank_;
  int64_t epoch_ = 0;
};

}  // namespace rayd::train
