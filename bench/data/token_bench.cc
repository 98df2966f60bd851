// Token files into a rank, against memcpy in the same run: a nanoGPT-style uint16 .bin of
// TOKENS tokens (written here, then read warm from the page cache) cut into windows of
// SEQ_LEN + 1 tokens, one pass of a rank's shard (world 1) in batches of BATCH, in order and
// globally shuffled, each batch's bytes touched once; the peer is memcpy of the same bytes in
// 4 MiB pieces from the file's mapping. Prints GB/s and the ratio.
//
//   token_bench [TOKENS=100000000] [SEQ_LEN=1024] [BATCH=32] [ROUNDS=3]

#include <fcntl.h>
#include <rayd/data/shard.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "bench_dataset.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Sums a byte every 64: touches each cache line, as a consumer of the batch would.
uint64_t Touch(const uint8_t* data, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i += 64) sum += data[i];
  return sum;
}

double PassGBs(const rayd::data::DatasetSpec& spec, int64_t batch, uint64_t* sink) {
  std::unique_ptr<rayd::data::DatasetShard> shard = rayd::bench::OpenShard(spec);
  const auto start = Clock::now();
  auto pass = shard->IterBatches({.batch_size = batch});
  size_t bytes = 0;
  rayd::bench::ForEachBatch(*pass, [&](const rayd::data::Block& batch) {
    const rayd::data::Column& c = batch.columns()[0];
    const size_t n = static_cast<size_t>(batch.num_rows() * c.RowBytes());
    *sink += Touch(c.data, n);
    bytes += n;
  });
  return bytes / Seconds(start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 100'000'000;
  const int64_t seq_len = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 32;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 3;
  char dir[] = "/tmp/rayd-token-bench-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return 1;
  const std::string path = std::string(dir) + "/train.bin";
  {
    std::vector<uint16_t> data(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) data[i] = static_cast<uint16_t>((i * 2654435761u) >> 16);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(tokens * 2));
  }
  rayd::data::DatasetSpec spec{.name = "tokens", .format = "tokens", .paths = {path}};
  spec.options["seq_len"] = seq_len;
  uint64_t sink = 0;

  // The peer: memcpy of the bytes one pass delivers (windows overlap by one token), from the
  // file's mapping into a reused 4 MiB buffer, touched likewise.
  const int fd = ::open(path.c_str(), O_RDONLY);
  const size_t file_bytes = static_cast<size_t>(tokens) * 2;
  auto* map = static_cast<const uint8_t*>(::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0));
  const size_t rows = static_cast<size_t>((tokens - 1) / seq_len);
  const size_t row_bytes = static_cast<size_t>(seq_len + 1) * 2;
  std::vector<uint8_t> buffer(4 << 20);
  std::vector<double> memcpy_gbs, ordered_gbs, shuffled_gbs;
  for (int round = 0; round < rounds; ++round) {
    const auto start = Clock::now();
    size_t done = 0;
    const size_t per_chunk = buffer.size() / row_bytes;
    for (size_t r = 0; r < rows; r += per_chunk) {
      const size_t n = std::min(per_chunk, rows - r);
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(buffer.data() + i * row_bytes, map + (r + i) * seq_len * 2, row_bytes);
      }
      sink += Touch(buffer.data(), n * row_bytes);
      done += n * row_bytes;
    }
    memcpy_gbs.push_back(done / Seconds(start) / 1e9);
    spec.options["shuffle"] = false;
    ordered_gbs.push_back(PassGBs(spec, batch, &sink));
    spec.options["shuffle"] = true;
    shuffled_gbs.push_back(PassGBs(spec, batch, &sink));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double m = median(memcpy_gbs), o = median(ordered_gbs), s = median(shuffled_gbs);
  double load[3] = {0, 0, 0};
  (void)::getloadavg(load, 3);
  std::printf("tokens %lld, seq_len %lld, batch %lld: %zu rows, %.0f MB a pass; load %.2f\n",
              static_cast<long long>(tokens), static_cast<long long>(seq_len),
              static_cast<long long>(batch), rows, rows * row_bytes / 1e6, load[0]);
  std::printf("%-34s %8.2f GB/s\n", "memcpy (the peer)", m);
  std::printf("%-34s %8.2f GB/s  %.2fx memcpy\n", "rayd Data, in order", o, o / m);
  std::printf("%-34s %8.2f GB/s  %.2fx memcpy\n", "rayd Data, global shuffle", s, s / m);
  std::printf("(median of %d rounds; checksum %llu)\n", rounds, static_cast<unsigned long long>(sink));
  ::munmap(const_cast<uint8_t*>(map), file_bytes);
  ::close(fd);
  std::remove(path.c_str());
  ::rmdir(dir);
}
