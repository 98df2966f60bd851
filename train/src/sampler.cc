#include "rayd/train/sampler.h"

#include <rayd/base/logging.h>

#include <numeric>
#include <random>
#include <utility>

namespace rayd::train {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), options_(options) {
  RAYD_CHECK(dataset_size >= 0 && world_size > 0 && rank >= 0 && rank < world_size);
  per_rank_ = options_.drop_last ? dataset_size_ / world_size_
                                 : (dataset_size_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::Indices() const {
  std::vector<int64_t> order(dataset_size_);
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed + static_cast<uint64_t>(epoch_));
    for (int64_t i = dataset_size_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(order[i], order[j]);
    }
  }
  const int64_t total = per_rank_ * world_size_;
  std::vector<int64_t> shard;
  shard.reserve(per_rank_);
  for (int64_t i = rank_; i < total; i += world_size_) {
    // Past the end only when padding: wrap around to the permutation's head.
    shard.push_back(order[i % dataset_size_]);
  }
  return shard;
}

}  // namespace rayd::train
