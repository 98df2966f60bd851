// `rayd microbenchmark`: Ray's microbenchmark suite (the metrics that apply so far) on an
// embedded cluster, next to the machine's own limits measured in the same run: the loopback
// TCP round trip and memcpy bandwidth. Each metric runs several times; we print min, median
// and max ops/s.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "commands.h"
#include "rayd/base/machine_limits.h"
#include "rayd/api.h"

namespace {

int Noop() { return 0; }
int Echo(int x) { return x; }

class Sink {
 public:
  static Sink* Create() { return new Sink(); }
  int Call(int x) { return x; }
};
RAYD_REMOTE(Noop, Echo, Sink::Create, &Sink::Call);

using BenchClock = std::chrono::steady_clock;

struct Metric {
  std::string name;
  std::vector<double> per_second;
};

// Runs `batch` (which performs `ops` operations) repeatedly for about `seconds`; returns ops/s.
double Rate(const std::function<size_t()>& batch, double seconds) {
  size_t ops = 0;
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

std::vector<Metric> RunSuite(int runs, double seconds) {
  using rayd::ObjectRef;
  std::vector<Metric> metrics;
  auto measure = [&](const std::string& name, const std::function<size_t()>& batch) {
    Metric m{name, {}};
    for (int r = 0; r < runs; ++r) m.per_second.push_back(Rate(batch, seconds));
    metrics.push_back(m);
    std::cerr << "  " << name << " done\n";
  };
  auto get_all = [](std::vector<ObjectRef<int>>& refs) {
    rayd::Get(refs);
    return refs.size();
  };
  measure("single_client_tasks_sync", [] {
    rayd::Get(rayd::Task(Noop).Remote());
    return size_t{1};
  });
  measure("single_client_tasks_async", [&] {
    std::vector<ObjectRef<int>> refs;
    for (int i = 0; i < 1000; ++i) refs.push_back(rayd::Task(Noop).Remote());
    return get_all(refs);
  });
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
    return size_t{1000};
  });
  auto actor = rayd::Actor(Sink::Create).Remote();
  rayd::Get(actor.Task(&Sink::Call).Remote(0));
  measure("1_1_actor_calls_sync", [&] {
    rayd::Get(actor.Task(&Sink::Call).Remote(1));
    return size_t{1};
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
    return size_t{1000};
  });
  auto small = rayd::Put(42);
  measure("single_client_get_calls", [&] {
    for (int i = 0; i < 100; ++i) rayd::Get(small);
    return size_t{100};
  });
  measure("single_client_put_calls", [&] {
    for (int i = 0; i < 100; ++i) rayd::Put(i);
    return size_t{100};
  });
  for (auto& a : actors) a.Kill();
  actor.Kill();
  concurrent.Kill();
  return metrics;
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
            << std::left << std::setw(30) << "metric" << std::right << std::setw(14) << "min/s"
            << std::setw(14) << "median/s" << std::setw(14) << "max/s" << "\n";
  for (const auto& m : out["metrics"]) {
    std::cout << std::left << std::setw(30) << std::string(m["name"]) << std::right
              << std::setprecision(0) << std::setw(14) << double(m["min"]) << std::setw(14)
              << double(m["median"]) << std::setw(14) << double(m["max"]) << "\n";
  }
  return 0;
}

}  // namespace rayd::cli
