// DistributedSampler: each rank's shard of an epoch, how shards cover the dataset, padding and
// drop_last, and reshuffling by epoch.

#include <rayd/train/sampler.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <vector>

namespace rayd::train {
namespace {

std::vector<std::vector<int64_t>> Shards(int64_t n, int world, DistributedSamplerOptions options,
                                         int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> shards;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler(n, world, rank, options);
    sampler.SetEpoch(epoch);
    shards.push_back(sampler.Indices());
    REQUIRE(static_cast<int64_t>(shards.back().size()) == sampler.size());
  }
  return shards;
}

TEST_CASE("sampler shards are disjoint, equal and cover an evenly divisible dataset",
          "[train][sampler]") {
  const auto shards = Shards(100, 4, {.shuffle = true, .seed = 5});
  std::set<int64_t> seen;
  for (const auto& shard : shards) {
    CHECK(shard.size() == 25);
    for (int64_t i : shard) {
      CHECK(seen.insert(i).second);  // no index in two shards, or twice in one
      CHECK((i >= 0 && i < 100));
    }
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("sampler pads an uneven dataset so every rank gets the same count", "[train][sampler]") {
  const auto shards = Shards(10, 4, {.shuffle = true, .seed = 5});
  std::map<int64_t, int> count;
  for (const auto& shard : shards) {
    CHECK(shard.size() == 3);
    for (int64_t i : shard) ++count[i];
  }
  CHECK(count.size() == 10);  // everything covered; 12 slots, so exactly two repeats
  int repeats = 0;
  for (const auto& [index, n] : count) repeats += n - 1;
  CHECK(repeats == 2);
}

TEST_CASE("sampler with drop_last cuts the tail instead of repeating", "[train][sampler]") {
  const auto shards = Shards(10, 4, {.shuffle = true, .seed = 5, .drop_last = true});
  std::set<int64_t> seen;
  for (const auto& shard : shards) {
    CHECK(shard.size() == 2);
    for (int64_t i : shard) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 8);
}

TEST_CASE("sampler without shuffling strides the dataset by rank", "[train][sampler]") {
  const auto shards = Shards(7, 3, {.shuffle = false});
  CHECK(shards[0] == std::vector<int64_t>{0, 3, 6});
  CHECK(shards[1] == std::vector<int64_t>{1, 4, 0});  // padded with the head
  CHECK(shards[2] == std::vector<int64_t>{2, 5, 1});
}

TEST_CASE("sampler reshuffles by epoch and repeats an epoch exactly", "[train][sampler]") {
  const DistributedSamplerOptions options{.shuffle = true, .seed = 11};
  const auto epoch0 = Shards(64, 2, options, 0);
  const auto epoch1 = Shards(64, 2, options, 1);
  CHECK(epoch0 != epoch1);
  CHECK(Shards(64, 2, options, 1) == epoch1);
  // A different seed gives a different order; each epoch still covers the dataset.
  CHECK(Shards(64, 2, {.shuffle = true, .seed = 12}, 1) != epoch1);
  std::set<int64_t> seen(epoch1[0].begin(), epoch1[0].end());
  seen.insert(epoch1[1].begin(), epoch1[1].end());
  CHECK(seen.size() == 64);

  DistributedSampler sampler(64, 2, 0, options);
  CHECK(sampler.Indices() == epoch0[0]);
  sampler.SetEpoch(1);
  CHECK(sampler.epoch() == 1);
  CHECK(sampler.Indices() == epoch1[0]);
}

}  // namespace
}  // namespace rayd::train
