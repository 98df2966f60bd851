// Time to the first batch after a restore, at 0%, 50% and 95% of an epoch, in one run: a shard
// (world 2, rank 0) of an .npy dataset of ROWS rows (an int64 id and a 784-byte image, written
// here, read warm from the page cache), shuffled, batches of BATCH, opened anew and resumed at the
// position a checkpoint taken there records (DatasetShard::ResumeAt), against the peer method
// (Ray's benchmark's): open at the epoch's start and skip the batches already consumed. Prints
// the median of ROUNDS of each, and the load.
//
//   resume_bench [ROWS=60000] [BATCH=64] [ROUNDS=5]

#include <rayd/data/shard.h>

#include "bench_dataset.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using rayd::data::DatasetShard;
using rayd::data::DatasetSpec;

std::unique_ptr<DatasetShard> Open(const DatasetSpec& spec) {
  return rayd::bench::OpenShard(spec, {.world_size = 2, .rank = 0, .seed = 3});
}

// Seconds from opening the shard to its first batch after `skip` steps of epoch 1: resumed at
// the position those steps record, or (skip_batches) by taking and dropping them.
double FirstBatch(const DatasetSpec& spec, int64_t batch, int64_t steps, bool skip_batches,
                  const rayd::data::ShardPosition& at) {
  const auto start = Clock::now();
  std::unique_ptr<DatasetShard> shard = Open(spec);
  if (!skip_batches) shard->ResumeAt(at);
  auto pass = shard->IterBatches({.batch_size = batch, .epoch = 1});
  for (int64_t s = 0; skip_batches && s < steps; ++s) (void)pass->Next();
  auto first = pass->Next();
  if (!first.ok() || !*first) {
    std::fprintf(stderr, "no batch after the restore\n");
    std::exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 60000;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 64;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::string dir = rayd::bench::WriteIdImageNpy("rayd-resume-bench", rows);
  DatasetSpec spec{.name = "bench", .format = "npy", .paths = {dir + "/*.npy"}};
  std::printf("resume_bench: %lld rows, 2 ranks, batch %lld, median of %d, load %s\n",
              static_cast<long long>(rows), static_cast<long long>(batch), rounds,
              rayd::bench::LoadAverage().c_str());
  std::printf("%-10s %14s %22s\n", "epoch at", "resumed (ms)", "skipping batches (ms)");
  const int64_t steps_per_epoch = rows / (2 * batch);
  FirstBatch(spec, batch, 0, false, {1, 0});  // warm the page cache
  for (double fraction : {0.0, 0.5, 0.95}) {
    const int64_t steps = static_cast<int64_t>(fraction * steps_per_epoch);
    // The position a checkpoint after `steps` steps records.
    std::unique_ptr<DatasetShard> ran = Open(spec);
    auto pass = ran->IterBatches({.batch_size = batch, .epoch = 1});
    for (int64_t s = 0; s < steps; ++s) (void)pass->Next();
    const rayd::data::ShardPosition at = ran->position();
    pass.reset();
    std::vector<double> resumed, skipped;
    for (int r = 0; r < rounds; ++r) {
      resumed.push_back(FirstBatch(spec, batch, steps, false, at));
      skipped.push_back(FirstBatch(spec, batch, steps, true, at));
    }
    std::printf("%-10s %14.2f %22.2f\n", (std::to_string(static_cast<int>(fraction * 100)) + "%").c_str(),
                Median(resumed) * 1e3, Median(skipped) * 1e3);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
