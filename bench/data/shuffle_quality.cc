// Shuffle quality against its cost, in one run: a pass of a rank's shard (world 1) over an .npy
// dataset of ROWS rows (an int64 id and a 784-byte image, Fashion-MNIST's shape, written here and
// read warm from the page cache) in batches of BATCH, three ways:
//   none     `shuffle: false`: the rows in file order;
//   buffer   `shuffle: false` and a local shuffle buffer of BUFFER rows (what streamed formats
//            get elsewhere: file order plus a buffer);
//   global   `shuffle: true`: the epoch's permutation of every row (rayd's default: every
//            format rayd reads is indexable).
// For each: samples/s (each batch's bytes touched once), its cost against `none`, and Mosaic
// Streaming's measure of shuffle quality, the entropy (bits) of the differences between
// neighbouring sample indices (0 for file order; about log2(ROWS) + 1 for a uniform permutation).
//
//   shuffle_quality [ROWS=60000] [BATCH=256] [BUFFER=10000] [ROUNDS=20]
// (each mode's best of ROUNDS passes, interleaved: a pass takes ~10 ms, and this machine's noise
// is larger than that)

#include <rayd/data/shard.h>

#include "bench_dataset.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Pass {
  double samples_per_s = 0;
  std::vector<int64_t> ids;
};

Pass RunPass(const rayd::data::DatasetSpec& spec, int64_t batch, int64_t buffer, int64_t epoch,
             uint64_t* sink) {
  std::unique_ptr<rayd::data::DatasetShard> shard = rayd::bench::OpenShard(spec, {.seed = 11});
  Pass out;
  const auto start = Clock::now();
  auto pass = shard->IterBatches(
      {.batch_size = batch, .epoch = epoch, .local_shuffle_buffer_size = buffer});
  rayd::bench::ForEachBatch(*pass, [&](const rayd::data::Block& b) {
    const rayd::data::Column* id = b.Find("id");
    const rayd::data::Column* image = b.Find("image");
    const uint8_t* pixels = image->As<uint8_t>();
    const int64_t bytes = b.num_rows() * image->RowBytes();
    for (int64_t i = 0; i < bytes; i += 64) *sink += pixels[i];
    out.ids.insert(out.ids.end(), id->As<int64_t>(), id->As<int64_t>() + b.num_rows());
  });
  out.samples_per_s =
      out.ids.size() / std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

// Entropy (bits) of the histogram of ids[i + 1] - ids[i].
double NeighbourEntropy(const std::vector<int64_t>& ids) {
  std::map<int64_t, int64_t> counts;
  for (size_t i = 0; i + 1 < ids.size(); ++i) ++counts[ids[i + 1] - ids[i]];
  const double n = static_cast<double>(ids.size() - 1);
  double h = 0;
  for (const auto& [d, c] : counts) h -= (c / n) * std::log2(c / n);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 60000;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 256;
  const int64_t buffer = argc > 3 ? std::atoll(argv[3]) : 10000;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 20;
  const std::string dir = rayd::bench::WriteIdImageNpy("rayd-shuffle-bench", rows);
  rayd::data::DatasetSpec ordered{.name = "bench", .format = "npy", .paths = {dir + "/*.npy"}};
  ordered.options["shuffle"] = false;
  rayd::data::DatasetSpec shuffled = ordered;
  shuffled.options["shuffle"] = true;

  std::printf("shuffle_quality: %lld rows of 792 bytes, batch %lld, buffer %lld, load %s\n",
              static_cast<long long>(rows), static_cast<long long>(batch),
              static_cast<long long>(buffer), rayd::bench::LoadAverage().c_str());
  uint64_t sink = 0;
  struct Mode {
    const char* name;
    const rayd::data::DatasetSpec* spec;
    int64_t buffer;
    double best = 0;
    double entropy = 0;
  };
  std::vector<Mode> modes = {{"none", &ordered, 0}, {"buffer", &ordered, buffer},
                             {"global", &shuffled, 0}};
  RunPass(ordered, batch, 0, 0, &sink);  // warm the page cache
  for (int round = 0; round < rounds; ++round) {
    for (Mode& m : modes) {  // interleaved, so that the machine's noise falls on every mode
      Pass p = RunPass(*m.spec, batch, m.buffer, round, &sink);
      m.best = std::max(m.best, p.samples_per_s);
      m.entropy = NeighbourEntropy(p.ids);
    }
  }
  std::printf("%-8s %14s %10s %14s\n", "mode", "samples/s", "vs none", "entropy (bits)");
  for (const Mode& m : modes) {
    std::printf("%-8s %14.0f %9.2fx %14.2f\n", m.name, m.best, m.best / modes[0].best, m.entropy);
  }
  std::printf("(a uniform permutation of %lld rows: about %.1f bits; sink %llu)\n",
              static_cast<long long>(rows), std::log2(static_cast<double>(rows)) + 1,
              static_cast<unsigned long long>(sink % 10));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
