// One preprocessing for a sweep (`{cache: node}`, docs/data.md), measured: N trials on one node
// each read an epoch of the same JPEG folder (decode, then random_crop), each with its own seed,
// all at once (a rayd task and so a worker process per trial, as a sweep's trials are), as N
// separate pipelines, then sharing the node's cache after the decode (each trial crops), then
// after the crop too. Prints what moving a page through shared memory costs on this machine
// (PageTouchCosts), then, for each N, the CPU seconds all processes took (this one and rayd's
// workers: the trials and the cache's actor) and the wall time, and the shared/separate ratios
// against the target CPU 1.2/N; and the load.
//
//   sharing_bench IMAGE_DIR [TRIALS=1,4,8] [EPOCHS=1] [BATCH=64] [CROP=56]
//   SHARING_THREADS=1 sharing_bench ...        # the trials as threads of this process instead
//   SHARING_SEPARATE_ONLY=1 sharing_bench ...  # the separate pipelines alone
//
// bench/data/sharing.sh makes the folder (bench/data/make_image_folder.py) and runs it.

#include <dirent.h>
#include <fcntl.h>
#include <rayd/api.h>
#include <rayd/data/shard.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
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
// process running this binary (rayd's workers are re-runs of it: the trials, the cache's actor),
// now; with those of the exited workers this process reaped.
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
    // This process reaps the workers its node starts: a worker that has exited (an idle cache,
    // a trial's process) moved its CPU time into this process's cutime and cstime.
    if (pid == ::getpid()) cpu[pid] += (std::stod(f[13]) + std::stod(f[14])) / tick;
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

// What moving rows through shared memory costs on this machine, per 4 KiB page of a /dev/shm
// file populated through one mapping: its first write through another mapping (the cache's
// process putting a chunk into the store's arena), its first read through a third (a trial's
// first read of that chunk), and a read again (warm), each copying 4 KiB pages in a random
// order. A shared run pays the first write once per page of the dataset and the first read once
// per page and trial process; a separate pipeline's buffers are reused, so warm.
std::string PageTouchCosts() {
  constexpr size_t kPage = 4096, kPages = 8192, kBytes = kPage * kPages;
  const std::string path = "/dev/shm/rayd-sharing-probe-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ::unlink(path.c_str());
  if (fd < 0 || ::ftruncate(fd, kBytes) != 0) return "page probe: no /dev/shm";
  auto map = [&](int prot) {
    return static_cast<uint8_t*>(::mmap(nullptr, kBytes, prot, MAP_SHARED, fd, 0));
  };
  uint8_t* store = map(PROT_READ | PROT_WRITE);
  std::memset(store, 1, kBytes);
  uint8_t* writer = map(PROT_READ | PROT_WRITE);
  const uint8_t* reader = map(PROT_READ);
  std::vector<size_t> order(kPages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  std::vector<uint8_t> rows(64 * kPage, 2);
  auto per_page = [&](auto&& copy) {
    const auto start = Clock::now();
    for (size_t i = 0; i < kPages; ++i) copy(order[i] * kPage, (i % 64) * kPage);
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kPages;
  };
  const double write = per_page([&](size_t at, size_t row) {
    std::memcpy(writer + at, rows.data() + row, kPage);
  });
  auto read = [&](size_t at, size_t row) { std::memcpy(rows.data() + row, reader + at, kPage); };
  const double first = per_page(read), warm = per_page(read);
  for (uint8_t* p : {store, writer, const_cast<uint8_t*>(reader)}) ::munmap(p, kBytes);
  ::close(fd);
  char out[200];
  std::snprintf(out, sizeof(out), "a shared 4 KiB page costs %.2f us on its first write in a "
                "process, %.2f us on its first read, %.2f us warm", write, first, warm);
  return out;
}

// CPU seconds (user + system) this process has taken.
double ProcessCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

struct Figures {
  double cpu_s = 0, wall_s = 0;
  double trials_cpu_s = 0;  // what the trials' own processes took of cpu_s (-1: threads)
  int64_t rows = 0, chunks_made = 0, chunks_hit = 0;
};

// One trial's read: `epochs` epochs of the folder at `dir` through `transforms`, with its own
// seed; returns {rows, cache chunks made, cache chunks hit, its process's CPU microseconds (-1
// as a thread of a process with other work)}. Run as a rayd task, so in a worker process of its
// own, as a sweep's trial is (it maps the node cache's chunks itself).
std::vector<int64_t> TrialPass(std::string dir, std::string transforms, int seed, int epochs,
                               int64_t batch, bool as_thread) {
  const double cpu_before = ProcessCpuSeconds();
  DatasetSpec spec{.name = "images",
                   .format = "images",
                   .paths = {dir},
                   .options = {{"mode", "L"},
                               {"seed", seed},
                               {"transforms", nlohmann::json::parse(transforms)}}};
  std::unique_ptr<DatasetShard> shard = rayd::bench::OpenShard(spec);
  int64_t rows = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    auto pass = shard->IterBatches({.batch_size = batch, .epoch = epoch});
    rayd::bench::ForEachBatch(*pass, [&](const rayd::data::Block& b) { rows += b.num_rows(); });
  }
  const auto cpu_us =
      as_thread ? -1 : static_cast<int64_t>((ProcessCpuSeconds() - cpu_before) * 1e6);
  return {rows, shard->stats().cache_chunks_made, shard->stats().cache_chunks_hit, cpu_us};
}

// Holds a worker for a moment: `n` of these at once start `n` worker processes before any run
// is timed, so no run pays for starting its trials' processes.
int Hold(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
RAYD_REMOTE(TrialPass, Hold);

// Where the cache step stands: none (N separate pipelines), after the decode (each trial crops
// its own rows), or after the crop too (before the cache, random_crop is drawn once for every
// trial and epoch: it costs what a deterministic crop or resize there would).
enum class Layout { kSeparate, kDecodeShared, kAllShared };

Figures Run(const std::string& folder, int trials, int epochs, int64_t batch, int crop_side,
            Layout layout, bool as_threads) {
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
  std::vector<std::vector<int64_t>> each(trials);
  const double cpu_before = TreeCpuSeconds();
  const auto start = Clock::now();
  if (as_threads) {
    std::vector<std::thread> threads;
    for (int t = 0; t < trials; ++t) {
      threads.emplace_back(
          [&, t] { each[t] = TrialPass(dir, transforms.dump(), t, epochs, batch, true); });
    }
    for (std::thread& t : threads) t.join();
  } else {
    std::vector<rayd::ObjectRef<std::vector<int64_t>>> refs;
    for (int t = 0; t < trials; ++t) {
      refs.push_back(
          rayd::Task(TrialPass).Remote(dir, transforms.dump(), t, epochs, batch, false));
    }
    for (int t = 0; t < trials; ++t) each[t] = *rayd::Get(refs[t]);
  }
  Figures out;
  out.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  out.cpu_s = TreeCpuSeconds() - cpu_before;
  ::unlink(dir.c_str());
  for (const std::vector<int64_t>& f : each) {
    out.rows += f[0];
    out.chunks_made += f[1];
    out.chunks_hit += f[2];
    out.trials_cpu_s = f[3] < 0 ? -1 : out.trials_cpu_s + static_cast<double>(f[3]) / 1e6;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  std::stringstream list(argc > 2 ? argv[2] : "1,4,8");
  for (std::string n; std::getline(list, n, ',');) counts.push_back(std::stoi(n));
  const int most = counts.empty() ? 1 : *std::max_element(counts.begin(), counts.end());
  rayd::RaydConfig config;
  config.num_cpus = std::max(2, most);  // every trial at once, as a sweep's would be
  config.dashboard_port = -1;
  rayd::Init(config, argc, argv);  // a worker's re-run of this binary (a trial, the cache) serves
                                   // here and never returns
  if (argc < 2) {
    std::fprintf(stderr, "usage: sharing_bench IMAGE_DIR [TRIALS=1,4,8] [EPOCHS=1] [BATCH=64] "
                         "[CROP=56]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 1;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 64;
  const int crop_side = argc > 5 ? std::atoi(argv[5]) : 56;
  // SHARING_SEPARATE_ONLY=1: the separate pipelines alone (to time a change to the pipeline).
  const bool separate_only = std::getenv("SHARING_SEPARATE_ONLY") != nullptr;
  // SHARING_THREADS=1: the trials as threads of this process, sharing one mapping of the
  // cache's chunks (how this bench ran before 2026-12-06), not a worker process each.
  const bool as_threads = std::getenv("SHARING_THREADS") != nullptr;
  if (!as_threads) {
    std::vector<rayd::ObjectRef<int>> held;
    for (int t = 0; t < most; ++t) held.push_back(rayd::Task(Hold).Remote(500));
    for (const auto& ref : held) rayd::Get(ref);
  }
  std::printf("trials as %s; %s\n", as_threads ? "threads of one process" : "worker processes",
              PageTouchCosts().c_str());
  // What the cluster's processes burn doing nothing (heartbeats, polls), per second: printed, so
  // that it can be set against each run's wall time.
  const double idle_before = TreeCpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::printf("idle cluster: %.3f CPU s per second\n", (TreeCpuSeconds() - idle_before) / 2);
  std::printf("%-7s %-14s %10s %8s %9s %8s %16s\n", "trials", "cache", "rows", "CPU s",
              "(trials')", "wall s", "chunks made/hit");
  // The trials' own CPU seconds: "-" where they ran as threads of this process.
  auto trials_cpu = [](const Figures& f) {
    char text[16] = "-";
    if (f.trials_cpu_s >= 0) std::snprintf(text, sizeof(text), "%.2f", f.trials_cpu_s);
    return std::string(text);
  };
  for (const int n : counts) {
    const Figures separate = Run(dir, n, epochs, batch, crop_side, Layout::kSeparate, as_threads);
    std::printf("%-7d %-14s %10lld %8.2f %9s %8.2f %16s\n", n, "separate",
                static_cast<long long>(separate.rows), separate.cpu_s,
                trials_cpu(separate).c_str(), separate.wall_s, "-");
    if (separate_only) continue;
    for (const auto& [layout, name] : {std::pair{Layout::kDecodeShared, "decode shared"},
                                       std::pair{Layout::kAllShared, "all shared"}}) {
      const Figures shared = Run(dir, n, epochs, batch, crop_side, layout, as_threads);
      std::printf("%-7d %-14s %10lld %8.2f %9s %8.2f %9lld/%-6lld CPU %.3fx, wall %.3fx "
                  "(target CPU <= 1.2/%d = %.3f)\n",
                  n, name, static_cast<long long>(shared.rows), shared.cpu_s,
                  trials_cpu(shared).c_str(), shared.wall_s,
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
