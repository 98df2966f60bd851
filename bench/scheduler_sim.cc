// Placement decisions per second on a simulated cluster: 1,000 nodes with 64 CPUs and 8 GPUs.
//
//   scheduler_sim [groups] [single_requests]
//
// Places `groups` placement groups (default 10,000; a mix of PACK, STRICT_SPREAD, STRICT_PACK
// and SPREAD), applying each placed group to the snapshot, then `single_requests` single
// requests (default 100,000) with the hybrid policy. Work leaves the cluster as it arrives: a
// random earlier placement is removed with probability 1/4 per step, whenever a request does
// not fit, and whenever more than the target share of GPUs is in use. Each run is done twice:
// churning at 80% of the GPUs (steady state) and at up to 100% (saturated: most nodes are full,
// so policies scan far and many answers are "not now").
//
// Only the policy call is timed (not Apply): prints decisions/second over the timed calls and
// p50/p99/max latency per decision. Figures only, no assertions.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "rayd/scheduler/placement.h"

using namespace rayd::scheduler;

namespace {

constexpr size_t kNodes = 1000;

ClusterSnapshot MakeCluster() {
  ClusterSnapshot cluster;
  for (size_t i = 0; i < kNodes; ++i) {
    char id[32];
    std::snprintf(id, sizeof(id), "node-%04zu", i);
    ResourceSet total{{kCPU, 64}, {kGPU, 8}};
    total.Set(kMemory, FixedPoint::FromWhole(int64_t{256} << 30));
    cluster.nodes.push_back({id, NodeResources(total, {{"zone", i % 2 ? "a" : "b"}}), true});
  }
  return cluster;
}

struct Latencies {
  std::vector<double> ns;
  double total_ns = 0;
  void Add(std::chrono::steady_clock::duration d) {
    const double value = std::chrono::duration<double, std::nano>(d).count();
    ns.push_back(value);
    total_ns += value;
  }
  void Print(const char* what) {
    std::sort(ns.begin(), ns.end());
    auto at = [&](double q) { return ns[static_cast<size_t>(q * (ns.size() - 1))] / 1000; };
    std::printf("%s%zu decisions, %.0f decisions/s, p50 %.2f us, p99 %.2f us, max %.2f us\n", what,
                ns.size(), ns.size() / (total_ns / 1e9), at(0.5), at(0.99), at(1.0));
  }
};

double GpuUtilisation(const ClusterSnapshot& cluster) {
  double used = 0, total = 0;
  for (const NodeState& node : cluster.nodes) {
    total += node.resources.total().Get(kGPU).ToDouble();
    used += (node.resources.total().Get(kGPU) - node.resources.available().Get(kGPU)).ToDouble();
  }
  return used / total;
}

GroupRequest MakeGroup(int kind) {
  GroupRequest group;
  auto repeat = [&](int count, ResourceSet demand, GroupStrategy strategy) {
    group.bundles.assign(count, Bundle{std::move(demand), {}});
    group.strategy = strategy;
  };
  switch (kind) {
    case 0:
      repeat(4, {{kGPU, 1}, {kCPU, 4}}, GroupStrategy::kPack);
      break;
    case 1:
      repeat(2, {{kGPU, 2}}, GroupStrategy::kStrictSpread);
      break;
    case 2:
      repeat(8, {{kGPU, 0.5}}, GroupStrategy::kStrictPack);
      break;
    default:
      repeat(1, {{kGPU, 1}}, GroupStrategy::kSpread);
      break;
  }
  return group;
}

double GroupGpus(const GroupRequest& group) {
  double gpus = 0;
  for (const Bundle& bundle : group.bundles) gpus += bundle.demand.Get(kGPU).ToDouble();
  return gpus;
}

constexpr double kClusterGpus = 8.0 * kNodes;

void RunGroups(size_t count, double target) {
  ClusterSnapshot cluster = MakeCluster();
  std::mt19937 rng(42);
  struct Live {
    GroupRequest request;
    GroupPlacement placement;
  };
  std::vector<Live> live;
  double used_gpus = 0;
  auto remove_random = [&] {
    if (live.empty()) return;
    const size_t victim = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
    Unapply(cluster, live[victim].request, live[victim].placement);
    used_gpus -= GroupGpus(live[victim].request);
    live[victim] = std::move(live.back());
    live.pop_back();
  };
  Latencies latencies;
  size_t outcomes[3] = {0, 0, 0};
  for (size_t i = 0; i < count; ++i) {
    if (rng() % 4 == 0) remove_random();
    while (used_gpus > target * kClusterGpus) remove_random();
    GroupRequest request = MakeGroup(static_cast<int>(rng() % 4));
    const auto start = std::chrono::steady_clock::now();
    GroupPlacement placement = PlaceGroup(cluster, request);
    latencies.Add(std::chrono::steady_clock::now() - start);
    ++outcomes[static_cast<int>(placement.outcome)];
    if (placement.outcome == Outcome::kPlaced) {
      if (!Apply(cluster, request, placement).ok()) std::abort();
      used_gpus += GroupGpus(request);
      live.push_back({std::move(request), std::move(placement)});
    } else {
      remove_random();
    }
  }
  std::printf("PlaceGroup, GPU target %.0f%%: ", 100 * target);
  latencies.Print("");
  std::printf(
      "  placed %zu, not now %zu, infeasible %zu; live groups %zu, GPU utilisation %.1f%%\n",
      outcomes[0], outcomes[1], outcomes[2], live.size(), 100 * GpuUtilisation(cluster));
}

void RunSingles(size_t count, double target) {
  ClusterSnapshot cluster = MakeCluster();
  std::mt19937 rng(7);
  const ResourceSet shapes[] = {
      {{kCPU, 1}}, {{kCPU, 4}, {kGPU, 1}}, {{kGPU, 0.5}}, {{kCPU, 2}, {kGPU, 0.25}}};
  struct Live {
    size_t node;
    ResourceSet demand;
  };
  std::vector<Live> live;
  double used_gpus = 0;
  auto remove_random = [&] {
    if (live.empty()) return;
    const size_t victim = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
    cluster.nodes[live[victim].node].resources.Release(live[victim].demand);
    used_gpus -= live[victim].demand.Get(kGPU).ToDouble();
    live[victim] = std::move(live.back());
    live.pop_back();
  };
  Latencies latencies;
  size_t outcomes[3] = {0, 0, 0};
  PlacementRequest request;
  for (size_t i = 0; i < count; ++i) {
    if (rng() % 4 == 0) remove_random();
    while (used_gpus > target * kClusterGpus) remove_random();
    request.demand = shapes[rng() % 4];
    // Half the requests come from a "local" node the policy should try first.
    request.preferred_node = rng() % 2 ? cluster.nodes[rng() % kNodes].id : std::string();
    const auto start = std::chrono::steady_clock::now();
    const Placement placement = PlaceOne(cluster, request);
    latencies.Add(std::chrono::steady_clock::now() - start);
    ++outcomes[static_cast<int>(placement.outcome)];
    if (placement.outcome == Outcome::kPlaced) {
      if (!cluster.nodes[placement.node].resources.TryAllocate(request.demand)) std::abort();
      used_gpus += request.demand.Get(kGPU).ToDouble();
      live.push_back({placement.node, request.demand});
    } else {
      remove_random();
    }
  }
  std::printf("PlaceOne (hybrid), GPU target %.0f%%: ", 100 * target);
  latencies.Print("");
  std::printf("  placed %zu, not now %zu, infeasible %zu; live %zu, GPU utilisation %.1f%%\n",
              outcomes[0], outcomes[1], outcomes[2], live.size(), 100 * GpuUtilisation(cluster));
}

}  // namespace

int main(int argc, char** argv) {
  const size_t groups = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 10000;
  const size_t singles = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 100000;
  std::printf("cluster: %zu nodes x {CPU: 64, GPU: 8, memory: 256GiB}\n", kNodes);
  for (double target : {0.8, 1.0}) RunGroups(groups, target);
  for (double target : {0.8, 1.0}) RunSingles(singles, target);
  return 0;
}
