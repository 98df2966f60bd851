// `rayd microbenchmark`: Ray's microbenchmark suite (the metrics that apply so far) on an
// embedded cluster, next to the machine's own limits measured in the same run: the loopback
// TCP round trip and memcpy bandwidth. Each metric runs several times; we print min, median
// and max ops/s (GB/s for the *_gigabytes metrics). The cross-node get starts a second node
// daemon on this machine for the purpose.

#include <spawn.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "commands.h"
#include "rayd/base/machine_limits.h"
#include "rayd/api.h"

namespace {

int Noop() { return 0; }
int SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
int Echo(int x) { return x; }

// Child processes that each spin on a CPU until destroyed: a machine as busy as a shared
// cluster node, for the figures that must hold there too.
class CpuBurners {
 public:
  explicit CpuBurners(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile unsigned long spins = 0;  // async-signal-safe from here on: spin until killed
        for (;;) spins = spins + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~CpuBurners() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  CpuBurners(const CpuBurners&) = delete;
  CpuBurners& operator=(const CpuBurners&) = delete;

 private:
  std::vector<pid_t> pids_;
};

class Sink {
 public:
  static Sink* Create() { return new Sink(); }
  int Call(int x) { return x; }
};

// Puts an array of `bytes` `times` times from a worker (multi_client_put_gigabytes); each ref
// is dropped at once. The array is made once per worker, as a client would reuse its buffers.
int PutArray(int64_t bytes, int times) {
  static std::vector<float> v;
  v.resize(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
  for (int i = 0; i < times; ++i) rayd::Put(v);
  return 0;
}
// An array of `bytes` made where the task runs (the cross-node get).
std::vector<float> MakeArray(int64_t bytes) {
  return std::vector<float>(static_cast<size_t>(bytes) / sizeof(float), 2.0f);
}
// An object holding 10,000 refs, each to a value this task put (Ray's
// create_object_containing_ref for single_client_get_object_containing_10k_refs).
std::vector<rayd::ObjectRef<int>> MakeRefs(int n) {
  std::vector<rayd::ObjectRef<int>> refs;
  refs.reserve(n);
  for (int i = 0; i < n; ++i) refs.push_back(rayd::Put(i));
  return refs;
}
RAYD_REMOTE(Noop, SleepMs, Echo, Sink::Create, &Sink::Call, PutArray, MakeArray, MakeRefs);

constexpr int64_t kGiB = int64_t{1} << 30;

using BenchClock = std::chrono::steady_clock;

struct Metric {
  std::string name;
  std::vector<double> per_second;
};

// Runs `batch` (which performs `ops` operations, or moves that many GB) repeatedly for about
// `seconds`; returns ops/s.
double Rate(const std::function<double()>& batch, double seconds) {
  double ops = 0;
  const auto start = BenchClock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    ops += batch();
    elapsed = std::chrono::duration<double>(BenchClock::now() - start).count();
  }
  return ops / elapsed;
}

// Median loopback TCP round trip of an 8-byte message, in microseconds.
double LoopbackRoundTripUs() {
  std::vector<double> us = rayd::LoopbackRoundTripsUs(5000);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

using Measure = std::function<void(const std::string&, const std::function<double()>&)>;

// The shared-memory object store: Ray's put/get metrics for objects that live in the store
// (a 1 MiB array is above the 100 KiB inline limit), and gigabytes per second.
void RunObjectStoreSuite(const Measure& measure) {
  const std::vector<float> big(kGiB / 4 / sizeof(float), 3.0f);  // 256 MiB
  measure("single_client_put_gigabytes", [&] {
    rayd::Put(big);
    return big.size() * sizeof(float) / 1e9;
  });
  measure("multi_client_put_gigabytes", [&] {
    std::vector<rayd::ObjectRef<int>> refs;
    for (int i = 0; i < 4; ++i) refs.push_back(rayd::Task(PutArray).Remote(kGiB / 4, 4));
    rayd::Get(refs);
    return 4 * 4 * (kGiB / 4) / 1e9;
  });
  const auto medium = rayd::Put(std::vector<float>(1 << 18, 1.0f));  // 1 MiB
  measure("single_client_get_calls_store", [&] {
    for (int i = 0; i < 100; ++i) rayd::GetView(medium);
    return 100.0;
  });
  const std::vector<float> one_mib(1 << 18, 1.0f);
  measure("single_client_put_calls_store", [&] {
    for (int i = 0; i < 100; ++i) rayd::Put(one_mib);
    return 100.0;
  });
}

std::vector<Metric> RunSuite(int runs, double seconds) {
  using rayd::ObjectRef;
  std::vector<Metric> metrics;
  auto measure = [&](const std::string& name, const std::function<double()>& batch) {
    Metric m{name, {}};
    for (int r = 0; r < runs; ++r) m.per_second.push_back(Rate(batch, seconds));
    metrics.push_back(m);
    std::cerr << "  " << name << " done\n";
  };
  auto get_all = [](std::vector<ObjectRef<int>>& refs) {
    rayd::Get(refs);
    return static_cast<double>(refs.size());
  };
  measure("single_client_tasks_sync", [] {
    rayd::Get(rayd::Task(Noop).Remote());
    return 1.0;
  });
  measure("single_client_tasks_async", [&] {
    std::vector<ObjectRef<int>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(rayd::Task(Noop).Remote());
    return get_all(refs);
  });
  // N tasks of 100 ms on a cluster of N CPUs: the ideal takes 100 ms; reported as ideal / actual
  // (1.0: perfectly parallel; 1/N: one after another). Once on the machine as it is, once beside
  // two processes that keep two CPUs busy (sleeping tasks need no CPU, so the ideal holds there
  // too: a ratio below it means tasks waited behind busy workers).
  const int cpus = std::max(1, static_cast<int>(rayd::ClusterResources()["CPU"]));
  for (const bool busy : {false, true}) {
    constexpr int kSleepMs = 100;
    Metric m{std::string("single_client_tasks_parallel_sleep") + (busy ? "_busy" : "") +
                 " (ratio to ideal, " + std::to_string(cpus) + " tasks" +
                 (busy ? ", beside 2 CPU burners)" : ")"),
             {}};
    std::optional<CpuBurners> burners;
    if (busy) burners.emplace(2);
    for (int r = 0; r < runs; ++r) {
      const auto start = BenchClock::now();
      std::vector<ObjectRef<int>> refs;
      for (int i = 0; i < cpus; ++i) refs.push_back(rayd::Task(SleepMs).Remote(kSleepMs));
      rayd::Get(refs);
      const double elapsed = std::chrono::duration<double>(BenchClock::now() - start).count();
      m.per_second.push_back(kSleepMs / 1000.0 / elapsed);
    }
    metrics.push_back(m);
    std::cerr << "  single_client_tasks_parallel_sleep" << (busy ? "_busy" : "") << " done\n";
  }
  measure("multi_client_tasks_async", [&] {
    const int clients = 4;
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&] {
        std::vector<ObjectRef<int>> refs;
        for (int i = 0; i < 250; ++i) refs.push_back(rayd::Task(Noop).Remote());
        rayd::Get(refs);
      });
    }
    for (auto& t : threads) t.join();
    return 1000.0;
  });
  auto actor = rayd::Actor(Sink::Create).Remote();
  rayd::Get(actor.Task(&Sink::Call).Remote(0));
  measure("1_1_actor_calls_sync", [&] {
    rayd::Get(actor.Task(&Sink::Call).Remote(1));
    return 1.0;
  });
  measure("1_1_actor_calls_async", [&] {
    std::vector<ObjectRef<int>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(actor.Task(&Sink::Call).Remote(i));
    return get_all(refs);
  });
  auto concurrent = rayd::Actor(Sink::Create).SetMaxConcurrency(4).Remote();
  rayd::Get(concurrent.Task(&Sink::Call).Remote(0));
  measure("1_1_actor_calls_concurrent", [&] {
    std::vector<ObjectRef<int>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(concurrent.Task(&Sink::Call).Remote(i));
    return get_all(refs);
  });
  std::vector<rayd::ActorHandle<Sink>> actors;
  for (int i = 0; i < 4; ++i) actors.push_back(rayd::Actor(Sink::Create).Remote());
  for (auto& a : actors) rayd::Get(a.Task(&Sink::Call).Remote(0));
  measure("1_n_actor_calls_async", [&] {
    std::vector<ObjectRef<int>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(actors[i % 4].Task(&Sink::Call).Remote(i));
    return get_all(refs);
  });
  measure("n_n_actor_calls_async", [&] {
    std::vector<std::thread> threads;
    for (int c = 0; c < 4; ++c) {
      threads.emplace_back([&, c] {
        std::vector<ObjectRef<int>> refs;
        for (int i = 0; i < 250; ++i) refs.push_back(actors[c].Task(&Sink::Call).Remote(i));
        rayd::Get(refs);
      });
    }
    for (auto& t : threads) t.join();
    return 1000.0;
  });
  // Ray's single_client_wait_1k_refs: 1,000 tasks, then Wait for one at a time until none is
  // left (one op is the whole round).
  measure("single_client_wait_1k_refs", [] {
    std::vector<ObjectRef<int>> unready;
    for (int i = 0; i < 1000; ++i) unready.push_back(rayd::Task(Noop).Remote());
    while (!unready.empty()) unready = rayd::Wait(unready, 1, -1).unready;
    return 1.0;
  });
  // Ray's single_client_get_object_containing_10k_refs: a task returns 10,000 refs; Get it.
  measure("single_client_get_object_containing_10k_refs", [] {
    auto refs = rayd::Get(rayd::Task(MakeRefs).Remote(10000));
    return refs->size() == 10000 ? 1.0 : 0.0;
  });
  auto small = rayd::Put(42);
  measure("single_client_get_calls", [&] {
    for (int i = 0; i < 100; ++i) rayd::Get(small);
    return 100.0;
  });
  measure("single_client_put_calls", [&] {
    for (int i = 0; i < 100; ++i) rayd::Put(i);
    return 100.0;
  });
  for (auto& a : actors) a.Kill();
  actor.Kill();
  concurrent.Kill();
  // Ray's placement_group_create/removal: 100 one-bundle groups created, waited for, removed.
  measure("placement_group_create_removal", [] {
    std::vector<rayd::PlacementGroup> pgs;
    for (int i = 0; i < 100; ++i) {
      pgs.push_back(rayd::CreatePlacementGroup({.bundles = {{{"CPU", 0.001}}}}));
    }
    for (auto& pg : pgs) pg.Wait(30);
    for (auto& pg : pgs) rayd::RemovePlacementGroup(pg.GetID());
    return 100.0;
  });
  RunObjectStoreSuite(measure);
  return metrics;
}

// Runs `argv` (the rayd binary itself first) to completion; true on exit status 0.
bool RunSelf(std::vector<std::string> args) {
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return false;
  args.insert(args.begin(), self);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Its messages go to our stderr: stdout is the table, or the JSON with --json.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, self, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A cross-node get: a second node daemon joins the embedded cluster, a task there makes a
// 1 GiB array, and the driver reads it (pulled into its own node's store). GB/s per run.
std::vector<double> CrossNodeGet(int runs, const std::string& temp_root) {
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  std::string dir = (temp_root.empty() ? std::string("/tmp") : temp_root) + "/rayd-bench-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return {};
  std::vector<double> gbps;
  if (RunSelf({"start", "--address", endpoint.gcs_address, "--token", endpoint.token,
               "--temp-dir", dir, "--num-cpus", "1", "--resources", R"({"bench_remote": 1})",
               "--object-store-memory", "3GiB"})) {
    for (int r = 0; r < runs; ++r) {
      auto ref = rayd::Task(MakeArray).SetResource("bench_remote", 1).Remote(kGiB);
      rayd::Wait(std::vector{ref}, 1, -1);
      const auto start = BenchClock::now();
      auto view = rayd::GetView(ref);
      const double s = std::chrono::duration<double>(BenchClock::now() - start).count();
      if (view.size() * sizeof(float) == static_cast<size_t>(kGiB)) gbps.push_back(kGiB / s / 1e9);
    }
  } else {
    std::cerr << "  could not start a second node; skipping the cross-node get\n";
  }
  RunSelf({"stop", "--temp-dir", dir});
  std::filesystem::remove_all(dir);
  return gbps;
}

}  // namespace

namespace rayd::cli {

int RunMicrobenchmark(const MicrobenchmarkArgs& args) {
  std::cerr << "measuring the machine's limits...\n";
  const double rtt_us = LoopbackRoundTripUs();
  const double memcpy_gbps = rayd::MemcpyGBps();
  RaydConfig config;
  config.num_cpus = args.num_cpus;
  config.temp_dir = args.temp_dir;
  try {
    rayd::Init(config);
  } catch (const RaydError& e) {
    std::cerr << "rayd microbenchmark: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "running the suite (" << args.runs << " runs of " << args.seconds
            << " s per metric)...\n";
  auto metrics = RunSuite(args.runs, args.seconds);
  std::cerr << "  cross_node_get_gigabytes...\n";
  if (auto gbps = CrossNodeGet(args.runs, args.temp_dir); !gbps.empty()) {
    metrics.push_back({"cross_node_get_gigabytes", gbps});
  }
  rayd::Shutdown();

  nlohmann::json out = {{"loopback_round_trip_us", rtt_us},
                        {"memcpy_gb_per_s", memcpy_gbps},
                        {"metrics", nlohmann::json::array()}};
  for (auto& m : metrics) {
    std::sort(m.per_second.begin(), m.per_second.end());
    out["metrics"].push_back({{"name", m.name},
                              {"min", m.per_second.front()},
                              {"median", m.per_second[m.per_second.size() / 2]},
                              {"max", m.per_second.back()}});
  }
  if (args.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << std::fixed << std::setprecision(1) << "machine: loopback TCP round trip " << rtt_us
            << " us (" << 1e6 / rtt_us << " round trips/s), memcpy " << memcpy_gbps
            << " GB/s\n\n"
            << std::left << std::setw(46) << "metric" << std::right << std::setw(14) << "min/s"
            << std::setw(14) << "median/s" << std::setw(14) << "max/s" << "\n";
  for (const auto& m : out["metrics"]) {
    const bool small = double(m["median"]) < 100;  // GB/s: show the decimals
    std::cout << std::left << std::setw(46) << std::string(m["name"]) << std::right
              << std::setprecision(small ? 2 : 0) << std::setw(14) << double(m["min"]) << std::setw(14)
              << double(m["median"]) << std::setw(14) << double(m["max"]) << "\n";
  }
  return 0;
}

}  // namespace rayd::cli
