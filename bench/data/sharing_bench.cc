// One preprocessing for a sweep (`{cache: node}`, docs/data.md), measured: N trials on one node
// each read an epoch of the same JPEG folder (decode, then random_crop), each with its own seed,
// all at once (one thread and shard per trial, as N trials' ranks would), as N separate
// pipelines, then sharing the node's cache after the decode (each trial crops), then after the
// crop too. Prints, for each N, the CPU seconds all processes took (this one and rayd's
// workers: the cache's actor among them) and the wall time, and the shared/separate ratios
// against the target CPU 1.2/N; and the load.
//
//   sharing_bench IMAGE_DIR [TRIALS=1,4,8] [EPOCHS=1] [BATCH=64] [CROP=56]
//
// bench/data/sharing.sh makes the folder (bench/data/make_image_folder.py) and runs it.

#include <dirent.h>
#include <rayd/api.h>
#include <rayd/data/shard.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_dataset.h"

namespace {

using Clock = std::chrono::steady_clock;
using rayd::data::DatasetShard;
using rayd::data::DatasetSpec;

// CPU seconds (user + system) of this process, every process descended from it, and every
// process running this binary (rayd's workers are re-runs of it: the cache's actor), now.
double TreeCpuSeconds() {
  char self_exe[4096] = {};
  const ssize_t self_len = ::readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
  std::map<int, int> parent;
  std::map<int, double> cpu;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  DIR* proc = ::opendir("/proc");
  for (dirent* e; (e = ::readdir(proc)) != nullptr;) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    // Fields after the command's closing parenthesis: state ppid ... utime(12) stime(13).
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    std::vector<std::string> f;
    while (rest >> field) f.push_back(field);
    if (f.size() < 13) continue;
    parent[pid] = std::stoi(f[1]);
    cpu[pid] = (std::stod(f[11]) + std::stod(f[12])) / tick;
  }
  ::closedir(proc);
  std::set<int> tree{::getpid()};
  for (const auto& [pid, ppid] : parent) {
    char exe[4096] = {};
    const std::string link = "/proc/" + std::to_string(pid) + "/exe";
    const ssize_t len = ::readlink(link.c_str(), exe, sizeof(exe) - 1);
    if (len > 0 && len == self_len && std::string(exe, len) == std::string(self_exe, self_len)) {
      tree.insert(pid);
    }
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [pid, ppid] : parent) {
      if (tree.count(ppid) && tree.insert(pid).second) grew = true;
    }
  }
  double total = 0;
  for (const int pid : tree) total += cpu[pid];
  return total;
}

struct Figures {
  double cpu_s = 0, wall_s = 0;
  int64_t rows = 0, chunks_made = 0, chunks_hit = 0;
};

// Where the cache step stands: none (N separate pipelines), after the decode (each trial crops
// its own rows), or after the crop too (before the cache, random_crop is drawn once for every
// trial and epoch: it costs what a deterministic crop or resize there would).
enum class Layout { kSeparate, kDecodeShared, kAllShared };

Figures Run(const std::string& folder, int trials, int epochs, int64_t batch, int crop_side,
            Layout layout) {
  // Each run reads the folder through a link of its own: another path, so another fingerprint,
  // and the shared runs each start with a cold cache.
  static int runs = 0;
  const std::string dir = folder + "-run" + std::to_string(runs++);
  ::symlink(folder.c_str(), dir.c_str());
  const nlohmann::json crop = {{"map_batches", "random_crop"}, {"size", {crop_side, crop_side}}, {"seed", 0}};
  nlohmann::json transforms = nlohmann::json::array();
  if (layout == Layout::kAllShared) transforms.push_back(crop);
  if (layout != Layout::kSeparate) transforms.push_back({{"cache", "node"}});
  if (layout != Layout::kAllShared) transforms.push_back(crop);
  std::vector<std::thread> threads;
  std::vector<Figures> each(trials);
  const double cpu_before = TreeCpuSeconds();
  const auto start = Clock::now();
  for (int t = 0; t < trials; ++t) {
    threads.emplace_back([&, t] {
      DatasetSpec spec{.name = "images",
                       .format = "images",
                       .paths = {dir},
                       .options = {{"mode", "L"}, {"seed", t}, {"transforms", transforms}}};
      std::unique_ptr<DatasetShard> shard = rayd::bench::OpenShard(spec);
      for (int epoch = 0; epoch < epochs; ++epoch) {
        auto pass = shard->IterBatches({.batch_size = batch, .epoch = epoch});
        rayd::bench::ForEachBatch(*pass, [&](const rayd::data::Block& b) { each[t].rows += b.num_rows(); });
      }
      each[t].chunks_made = shard->stats().cache_chunks_made;
      each[t].chunks_hit = shard->stats().cache_chunks_hit;
    });
  }
  for (std::thread& t : threads) t.join();
  Figures out;
  out.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  out.cpu_s = TreeCpuSeconds() - cpu_before;
  ::unlink(dir.c_str());
  for (const Figures& f : each) {
    out.rows += f.rows;
    out.chunks_made += f.chunks_made;
    out.chunks_hit += f.chunks_hit;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  rayd::RaydConfig config;
  config.num_cpus = 2;
  config.dashboard_port = -1;
  rayd::Init(config, argc, argv);  // a worker re-run of this binary (the cache's actor) serves here
  if (argc < 2) {
    std::fprintf(stderr, "usage: sharing_bench IMAGE_DIR [TRIALS=1,4,8] [EPOCHS=1] [BATCH=64]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<int> counts;
  std::stringstream list(argc > 2 ? argv[2] : "1,4,8");
  for (std::string n; std::getline(list, n, ',');) counts.push_back(std::stoi(n));
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 1;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 64;
  const int crop_side = argc > 5 ? std::atoi(argv[5]) : 56;
  // What the cluster's processes burn doing nothing (heartbeats, polls), per second: printed, so
  // that it can be set against each run's wall time.
  const double idle_before = TreeCpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::printf("idle cluster: %.3f CPU s per second\n", (TreeCpuSeconds() - idle_before) / 2);
  std::printf("%-7s %-14s %10s %8s %8s %16s\n", "trials", "cache", "rows", "CPU s", "wall s",
              "chunks made/hit");
  for (const int n : counts) {
    const Figures separate = Run(dir, n, epochs, batch, crop_side, Layout::kSeparate);
    std::printf("%-7d %-14s %10lld %8.2f %8.2f %16s\n", n, "separate",
                static_cast<long long>(separate.rows), separate.cpu_s, separate.wall_s, "-");
    for (const auto& [layout, name] : {std::pair{Layout::kDecodeShared, "decode shared"},
                                       std::pair{Layout::kAllShared, "all shared"}}) {
      const Figures shared = Run(dir, n, epochs, batch, crop_side, layout);
      std::printf("%-7d %-14s %10lld %8.2f %8.2f %9lld/%-6lld CPU %.3fx, wall %.3fx "
                  "(target CPU <= 1.2/%d = %.3f)\n",
                  n, name, static_cast<long long>(shared.rows), shared.cpu_s, shared.wall_s,
                  static_cast<long long>(shared.chunks_made),
                  static_cast<long long>(shared.chunks_hit), shared.cpu_s / separate.cpu_s,
                  shared.wall_s / separate.wall_s, n, 1.2 / n);
    }
    std::fflush(stdout);
  }
  std::printf("%s\n", rayd::bench::LoadAverage().c_str());
  rayd::Shutdown();
  return 0;
}
