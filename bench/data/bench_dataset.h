#pragma once
// What the rayd Data benchmarks share: opening a shard and taking its batches (exiting with the
// error), an .npy dataset of `rows` rows (an int64 `id` and a 28x28
// uint8 `image`, Fashion-MNIST's shape, each image filled with id % 251), written to a fresh
// directory under the temp dir that the caller removes; and the load average, to print beside a
// figure.

#include <rayd/data/shard.h>
#include <rayd/data/writer.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace rayd::bench {

inline std::string WriteIdImageNpy(const std::string& name, int64_t rows) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           (name + "-" + std::to_string(::getpid())))
                              .string();
  rayd::data::DatasetWriter writer("npy", dir);
  for (int64_t at = 0; at < rows; at += 4096) {
    const int64_t n = std::min<int64_t>(4096, rows - at);
    rayd::data::BlockBuilder b(n);
    auto* id = reinterpret_cast<int64_t*>(b.AddFixed({"id", rayd::data::DType::kInt64, {}}));
    uint8_t* image = b.AddFixed({"image", rayd::data::DType::kUInt8, {28, 28}});
    for (int64_t r = 0; r < n; ++r) {
      id[r] = at + r;
      std::memset(image + r * 784, static_cast<int>((at + r) % 251), 784);
    }
    if (!writer.Write(std::move(b).Finish()).ok()) {
      std::fprintf(stderr, "cannot write the dataset to %s\n", dir.c_str());
      std::exit(1);
    }
  }
  if (!writer.Close().ok()) {
    std::fprintf(stderr, "cannot write the dataset to %s\n", dir.c_str());
    std::exit(1);
  }
  return dir;
}

// The shard of `spec`; exits naming the error when it cannot be opened.
inline std::unique_ptr<rayd::data::DatasetShard> OpenShard(const rayd::data::DatasetSpec& spec,
                                                           rayd::data::ShardOptions options = {}) {
  auto shard = rayd::data::DatasetShard::Open(spec, options);
  if (!shard.ok()) {
    std::fprintf(stderr, "%s\n", shard.status().message().c_str());
    std::exit(1);
  }
  return std::move(*shard);
}

// Calls `f` with each batch of `pass` to its end; exits naming the error that ends it early.
template <typename F>
void ForEachBatch(rayd::data::BatchIterator& pass, F&& f) {
  while (true) {
    auto next = pass.Next();
    if (!next.ok()) {
      std::fprintf(stderr, "%s\n", next.status().message().c_str());
      std::exit(1);
    }
    if (!*next) return;
    f(**next);
  }
}

// /proc/loadavg's first line, without its newline.
inline std::string LoadAverage() {
  char load[128] = "?";
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fgets(load, sizeof load, f) == nullptr) load[0] = 0;
    std::fclose(f);
  }
  load[std::strcspn(load, "\n")] = 0;
  return load;
}

}  // namespace rayd::bench
