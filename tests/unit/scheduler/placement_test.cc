#include <rayd/scheduler/placement.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace rayd::scheduler {
namespace {

NodeState Node(std::string id, ResourceSet total, Labels labels = {}, bool alive = true) {
  return {std::move(id), NodeResources(std::move(total), std::move(labels)), alive};
}

ClusterSnapshot Cluster(std::vector<NodeState> nodes) { return {std::move(nodes)}; }

PlacementRequest Request(ResourceSet demand) {
  PlacementRequest request;
  request.demand = std::move(demand);
  return request;
}

GroupRequest Group(GroupStrategy strategy, std::vector<ResourceSet> demands) {
  GroupRequest group;
  group.strategy = strategy;
  for (auto& demand : demands) group.bundles.push_back({std::move(demand), {}});
  return group;
}

// Places one request and takes its demand from the chosen node; returns the node index.
size_t PlaceAndTake(ClusterSnapshot& cluster, const PlacementRequest& request) {
  const Placement placement = PlaceOne(cluster, request);
  INFO(placement.reason);
  REQUIRE(placement.outcome == Outcome::kPlaced);
  REQUIRE(cluster.nodes[placement.node].resources.TryAllocate(request.demand));
  return placement.node;
}

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

// ---- PlaceOne ----

TEST_CASE("PlaceOne places an empty demand on the first alive candidate", "[placement]") {
  ClusterSnapshot cluster =
      Cluster({Node("dead", {{kCPU, 4}}, {}, false), Node("a", {}), Node("b", {{kCPU, 1}})});
  Placement placement = PlaceOne(cluster, Request({}));
  CHECK(placement.outcome == Outcome::kPlaced);
  CHECK(placement.node == 1);
  CHECK(PlaceOne(Cluster({}), Request({})).outcome == Outcome::kInfeasible);
}

TEST_CASE("Hybrid policy packs below the threshold, then spreads", "[placement][hybrid]") {
  ClusterSnapshot cluster =
      Cluster({Node("a", {{kCPU, 4}}), Node("b", {{kCPU, 4}}), Node("c", {{kCPU, 4}})});
  const PlacementRequest one_cpu = Request({{kCPU, 1}});
  // Packs onto "a" while it stays at or below 50%, then moves on in order.
  std::vector<size_t> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(PlaceAndTake(cluster, one_cpu));
  CHECK(nodes == std::vector<size_t>{0, 0, 1, 1, 2, 2});
  // Every node is at 50%: the least utilised after placing wins, ties towards the front.
  cluster.nodes[1].resources.Release({{kCPU, 1}});
  CHECK(PlaceAndTake(cluster, one_cpu) == 1);  // b at 25% -> 50%, below the threshold
  CHECK(PlaceAndTake(cluster, one_cpu) == 0);  // all at 50%: each would be 75%, a is first
  CHECK(PlaceAndTake(cluster, one_cpu) == 1);  // a 100% vs b, c 75%
  CHECK(PlaceAndTake(cluster, one_cpu) == 2);
}

TEST_CASE("Hybrid policy tries the preferred node first", "[placement][hybrid]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 4}}), Node("b", {{kCPU, 4}})});
  PlacementRequest request = Request({{kCPU, 2}});
  request.preferred_node = "b";
  CHECK(PlaceAndTake(cluster, request) == 1);
  // b would go to 100%: above the threshold, so the policy falls back to a.
  CHECK(PlaceAndTake(cluster, request) == 0);
  // Threshold 1.0 packs everything onto the preferred node while it fits.
  cluster = Cluster({Node("a", {{kCPU, 4}}), Node("b", {{kCPU, 4}})});
  HybridOptions pack_all{1.0};
  CHECK(PlaceOne(cluster, request, pack_all).node == 1);
  // An unknown preferred node is ignored.
  request.preferred_node = "nope";
  CHECK(PlaceOne(cluster, request).node == 0);
}

TEST_CASE("Hybrid utilisation only counts the resources the demand names", "[placement][hybrid]") {
  // "a" has its GPUs busy but its CPUs idle; a CPU-only request still packs onto it.
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 8}, {kGPU, 2}}), Node("b", {{kCPU, 8}})});
  REQUIRE(cluster.nodes[0].resources.TryAllocate({{kGPU, 2}}));
  CHECK(PlaceOne(cluster, Request({{kCPU, 2}})).node == 0);
  CHECK(PlaceOne(cluster, Request({{kCPU, 2}, {kGPU, 0.5}})).outcome == Outcome::kNotNow);
}

TEST_CASE("PlaceOne tells never from not now, with reasons", "[placement][reasons]") {
  ClusterSnapshot cluster =
      Cluster({Node("small", {{kCPU, 16}}), Node("gpu", {{kCPU, 8}, {kGPU, 1}})});
  Placement never = PlaceOne(cluster, Request({{kCPU, 64}, {kGPU, 1}}));
  CHECK(never.outcome == Outcome::kInfeasible);
  // "gpu" covers one of the two resources in full, "small" none.
  CHECK(never.reason ==
        "no node can ever satisfy {CPU: 64, GPU: 1}: the largest node (gpu) has {CPU: 8, GPU: 1}");
  // Equal coverage: the node with more CPUs is named; missing resources print as 0.
  never = PlaceOne(cluster, Request({{"tpu", 1}}));
  CHECK(never.reason == "no node can ever satisfy {tpu: 1}: the largest node (small) has {tpu: 0}");

  REQUIRE(cluster.nodes[1].resources.TryAllocate({{kGPU, 1}}));
  Placement later = PlaceOne(cluster, Request({{kGPU, 1}}));
  CHECK(later.outcome == Outcome::kNotNow);
  CHECK_THAT(later.reason, Contains("{GPU: 1}") && Contains("1 node could run it"));
}

TEST_CASE("PlaceOne honours label selectors", "[placement][labels]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 4}}, {{"zone", "us"}}),
                                     Node("b", {{kCPU, 4}}, {{"zone", "eu"}, {"disk", "ssd"}})});
  PlacementRequest request = Request({{kCPU, 1}});
  request.label_selector = {{"zone", "eu"}};
  CHECK(PlaceOne(cluster, request).node == 1);
  request.label_selector = {{"zone", "eu"}, {"disk", "ssd"}};
  CHECK(PlaceOne(cluster, request).node == 1);
  request.label_selector = {{"zone", "us"}, {"disk", "ssd"}};
  Placement none = PlaceOne(cluster, request);
  CHECK(none.outcome == Outcome::kInfeasible);
  CHECK_THAT(none.reason, Contains("no alive node matches label selector {disk=ssd, zone=us}"));
  request.label_selector = {{"zone", "us"}};
  request.demand = {{kCPU, 8}};
  Placement too_big = PlaceOne(cluster, request);
  CHECK(too_big.outcome == Outcome::kInfeasible);
  CHECK_THAT(too_big.reason, Contains("no node with labels {zone=us} can ever satisfy {CPU: 8}") &&
                                 Contains("(a) has {CPU: 4}"));
}

TEST_CASE("Hard node affinity pins to one node", "[placement][affinity]") {
  ClusterSnapshot cluster = Cluster(
      {Node("a", {{kCPU, 4}}), Node("b", {{kCPU, 4}}), Node("dead", {{kCPU, 4}}, {}, false)});
  PlacementRequest request = Request({{kCPU, 3}});
  request.affinity = NodeAffinity{"b", false};
  CHECK(PlaceAndTake(cluster, request) == 1);
  Placement busy = PlaceOne(cluster, request);  // "a" is idle but not allowed
  CHECK(busy.outcome == Outcome::kNotNow);
  CHECK_THAT(busy.reason, Contains("node b") && Contains("available now"));

  request.demand = {{kCPU, 5}};
  Placement too_big = PlaceOne(cluster, request);
  CHECK(too_big.outcome == Outcome::kInfeasible);
  CHECK_THAT(too_big.reason, Contains("can never satisfy {CPU: 5}"));

  request.demand = {{kCPU, 1}};
  request.affinity = NodeAffinity{"dead", false};
  Placement dead = PlaceOne(cluster, request);
  CHECK(dead.outcome == Outcome::kInfeasible);
  CHECK_THAT(dead.reason, Contains("node dead") && Contains("is dead"));
  request.affinity = NodeAffinity{"ghost", false};
  Placement unknown = PlaceOne(cluster, request);
  CHECK(unknown.outcome == Outcome::kInfeasible);
  CHECK_THAT(unknown.reason, Contains("ghost") && Contains("no such node"));
  request.affinity = NodeAffinity{"a", false};
  request.label_selector = {{"zone", "x"}};
  CHECK(PlaceOne(cluster, request).outcome == Outcome::kInfeasible);
}

TEST_CASE("Soft node affinity prefers one node and falls back", "[placement][affinity]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 4}}), Node("b", {{kCPU, 4}})});
  PlacementRequest request = Request({{kCPU, 3}});
  request.affinity = NodeAffinity{"b", true};
  // Soft affinity ignores the threshold: 75% on b.
  CHECK(PlaceAndTake(cluster, request) == 1);
  CHECK(PlaceAndTake(cluster, request) == 0);  // b is full: fall back
  CHECK(PlaceOne(cluster, request).outcome == Outcome::kNotNow);
  request.affinity = NodeAffinity{"ghost", true};
  request.demand = {{kCPU, 1}};
  CHECK(PlaceOne(cluster, request).outcome == Outcome::kPlaced);
}

TEST_CASE("PlaceOne handles fractional amounts exactly", "[placement][fractional]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kGPU, 1}})});
  const PlacementRequest tiny = Request({{kGPU, 0.0001}});
  const PlacementRequest third = Request({{kGPU, 0.3333}});
  for (int i = 0; i < 3; ++i) PlaceAndTake(cluster, third);
  CHECK(cluster.nodes[0].resources.available().Get(kGPU) == FixedPoint::FromUnits(1));
  PlaceAndTake(cluster, tiny);
  CHECK(PlaceOne(cluster, tiny).outcome == Outcome::kNotNow);
}

// ---- PlaceGroup ----

TEST_CASE("STRICT_PACK puts every bundle on one node", "[placement][group]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kGPU, 0.5}}), Node("b", {{kGPU, 1}})});
  GroupRequest quarters = Group(GroupStrategy::kStrictPack,
                                {{{kGPU, 0.25}}, {{kGPU, 0.25}}, {{kGPU, 0.25}}, {{kGPU, 0.25}}});
  GroupPlacement placed = PlaceGroup(cluster, quarters);
  REQUIRE(placed.outcome == Outcome::kPlaced);
  CHECK(placed.bundle_nodes == std::vector<size_t>{1, 1, 1, 1});
  REQUIRE(Apply(cluster, quarters, placed).ok());
  CHECK(cluster.nodes[1].resources.available().IsEmpty());
  GroupPlacement again = PlaceGroup(cluster, quarters);
  CHECK(again.outcome == Outcome::kNotNow);
  CHECK_THAT(again.reason, StartsWith("STRICT_PACK: ") && Contains("{GPU: 1}"));

  GroupRequest too_much = Group(GroupStrategy::kStrictPack,
                                {{{kGPU, 0.3}}, {{kGPU, 0.3}}, {{kGPU, 0.3}}, {{kGPU, 0.3}}});
  GroupPlacement never = PlaceGroup(cluster, too_much);
  CHECK(never.outcome == Outcome::kInfeasible);
  CHECK_THAT(never.reason, StartsWith("STRICT_PACK: ") && Contains("{GPU: 1.2}") &&
                               Contains("largest node (b) has {GPU: 1}"));
}

TEST_CASE("STRICT_PACK needs one node with every bundle's labels", "[placement][group]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 8}}, {{"zone", "a"}}),
                                     Node("b", {{kCPU, 8}}, {{"zone", "b"}, {"disk", "ssd"}})});
  GroupRequest group = Group(GroupStrategy::kStrictPack, {{{kCPU, 1}}, {{kCPU, 1}}});
  group.bundles[0].label_selector = {{"zone", "b"}};
  group.bundles[1].label_selector = {{"disk", "ssd"}};
  CHECK(PlaceGroup(cluster, group).bundle_nodes == std::vector<size_t>{1, 1});
  group.bundles[1].label_selector = {{"zone", "a"}};
  GroupPlacement conflict = PlaceGroup(cluster, group);
  CHECK(conflict.outcome == Outcome::kInfeasible);
  CHECK_THAT(conflict.reason, Contains("conflicting labels"));
}

TEST_CASE("STRICT_SPREAD puts every bundle on a different node", "[placement][group]") {
  // Greedy in bundle order would put the small bundle on the big node and strand the big one.
  ClusterSnapshot cluster = Cluster({Node("big", {{kGPU, 4}}), Node("small", {{kGPU, 1}})});
  GroupRequest group = Group(GroupStrategy::kStrictSpread, {{{kGPU, 1}}, {{kGPU, 4}}});
  GroupPlacement placed = PlaceGroup(cluster, group);
  REQUIRE(placed.outcome == Outcome::kPlaced);
  CHECK(placed.bundle_nodes == std::vector<size_t>{1, 0});

  GroupRequest three = Group(GroupStrategy::kStrictSpread, {{{kGPU, 1}}, {{kGPU, 1}}, {}});
  GroupPlacement never = PlaceGroup(cluster, three);
  CHECK(never.outcome == Outcome::kInfeasible);
  CHECK_THAT(never.reason, StartsWith("STRICT_SPREAD: ") && Contains("3 distinct nodes") &&
                               Contains("at most 2"));

  REQUIRE(cluster.nodes[1].resources.TryAllocate({{kGPU, 1}}));
  GroupRequest two = Group(GroupStrategy::kStrictSpread, {{{kGPU, 1}}, {{kGPU, 1}}});
  GroupPlacement later = PlaceGroup(cluster, two);
  CHECK(later.outcome == Outcome::kNotNow);
  CHECK_THAT(later.reason, Contains("only 1"));
}

TEST_CASE("PACK fills the node that holds the most bundles first", "[placement][group]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kGPU, 2}}), Node("b", {{kGPU, 4}})});
  std::vector<ResourceSet> ones(3, ResourceSet{{kGPU, 1}});
  GroupPlacement three = PlaceGroup(cluster, Group(GroupStrategy::kPack, ones));
  CHECK(three.bundle_nodes == std::vector<size_t>{1, 1, 1});
  ones.resize(5, ResourceSet{{kGPU, 1}});
  GroupPlacement five = PlaceGroup(cluster, Group(GroupStrategy::kPack, ones));
  CHECK(five.bundle_nodes == std::vector<size_t>{1, 1, 1, 1, 0});
  ones.resize(7, ResourceSet{{kGPU, 1}});
  GroupPlacement seven = PlaceGroup(cluster, Group(GroupStrategy::kPack, ones));
  CHECK(seven.outcome == Outcome::kInfeasible);
  CHECK_THAT(seven.reason, StartsWith("PACK: the 7 bundles ({GPU: 7} in all) can never fit"));
}

TEST_CASE("SPREAD uses distinct nodes first, then reuses", "[placement][group]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 4}}), Node("b", {{kCPU, 4}})});
  std::vector<ResourceSet> ones(3, ResourceSet{{kCPU, 1}});
  GroupPlacement three = PlaceGroup(cluster, Group(GroupStrategy::kSpread, ones));
  CHECK(three.bundle_nodes == std::vector<size_t>{0, 1, 0});
  // Greedy puts the 2-GPU bundle on the 3-GPU node first; the search finds the other way.
  cluster = Cluster({Node("a", {{kGPU, 3}}), Node("b", {{kGPU, 2}})});
  GroupRequest mixed = Group(GroupStrategy::kSpread, {{{kGPU, 2}}, {{kGPU, 3}}});
  GroupPlacement placed = PlaceGroup(cluster, mixed);
  CHECK(placed.bundle_nodes == std::vector<size_t>{1, 0});
}

TEST_CASE("Groups tell never from not now", "[placement][group][reasons]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kCPU, 8}, {kGPU, 2}}), Node("b", {{kCPU, 8}})});
  for (GroupStrategy strategy : {GroupStrategy::kPack, GroupStrategy::kSpread,
                                 GroupStrategy::kStrictPack, GroupStrategy::kStrictSpread}) {
    INFO(GroupStrategyName(strategy));
    GroupPlacement never = PlaceGroup(cluster, Group(strategy, {{{kGPU, 4}}}));
    CHECK(never.outcome == Outcome::kInfeasible);
    CHECK_THAT(never.reason, StartsWith(std::string(GroupStrategyName(strategy)) + ": ") &&
                                 Contains("{GPU: 4}") && Contains("(a) has {GPU: 2}"));
  }
  REQUIRE(cluster.nodes[0].resources.TryAllocate({{kGPU, 1}}));
  for (GroupStrategy strategy : {GroupStrategy::kPack, GroupStrategy::kSpread,
                                 GroupStrategy::kStrictPack, GroupStrategy::kStrictSpread}) {
    INFO(GroupStrategyName(strategy));
    CHECK(PlaceGroup(cluster, Group(strategy, {{{kGPU, 2}}})).outcome == Outcome::kNotNow);
  }
  // Each bundle fits some node, but the group never fits at once.
  GroupRequest pair = Group(GroupStrategy::kPack, {{{kCPU, 6}}, {{kCPU, 6}}, {{kCPU, 6}}});
  GroupPlacement never = PlaceGroup(cluster, pair);
  CHECK(never.outcome == Outcome::kInfeasible);
  CHECK_THAT(never.reason, Contains("even with every node idle"));
}

TEST_CASE("An empty group is placed", "[placement][group]") {
  GroupPlacement placed = PlaceGroup(Cluster({}), Group(GroupStrategy::kStrictSpread, {}));
  CHECK(placed.outcome == Outcome::kPlaced);
  CHECK(placed.bundle_nodes.empty());
  CHECK(std::string(GroupStrategyName(GroupStrategy::kStrictPack)) == "STRICT_PACK");
}

TEST_CASE("Apply is atomic and Unapply gives everything back", "[placement][apply]") {
  ClusterSnapshot cluster = Cluster({Node("a", {{kGPU, 1}}), Node("b", {{kGPU, 1}})});
  const ClusterSnapshot idle = cluster;
  GroupRequest group = Group(GroupStrategy::kStrictSpread, {{{kGPU, 0.5}}, {{kGPU, 1}}});
  GroupPlacement placed = PlaceGroup(cluster, group);
  REQUIRE(placed.outcome == Outcome::kPlaced);
  REQUIRE(Apply(cluster, group, placed).ok());
  const ClusterSnapshot applied = cluster;
  // The 0.5 bundle's node still has 0.5 left, the other node has nothing: no change at all.
  Status again = Apply(cluster, group, placed);
  CHECK(again.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(again.message(), Contains("no longer has"));
  CHECK(cluster == applied);
  GroupPlacement not_placed = PlaceGroup(cluster, group);
  CHECK_FALSE(Apply(cluster, group, not_placed).ok());
  CHECK(cluster == applied);
  Unapply(cluster, group, placed);
  CHECK(cluster == idle);
  Unapply(cluster, group, placed);  // a double release cannot create resources
  CHECK(cluster == idle);
}

// ---- property tests ----

ResourceSet RandomAmounts(std::mt19937& rng, double scale) {
  static const std::string kNames[] = {std::string(kCPU), std::string(kGPU), std::string(kMemory),
                                       "tpu"};
  ResourceSet set;
  for (const std::string& name : kNames) {
    if (rng() % 3 == 0) continue;
    int64_t units = 0;
    switch (rng() % 3) {
      case 0:  // whole
        units = static_cast<int64_t>(rng() % static_cast<unsigned>(8 * scale + 1)) * 10000;
        break;
      case 1:  // quarters
        units = static_cast<int64_t>(rng() % static_cast<unsigned>(16 * scale + 1)) * 2500;
        break;
      default:  // down to 0.0001
        units = static_cast<int64_t>(rng() % static_cast<unsigned>(40000 * scale + 1));
    }
    set.Set(name, FixedPoint::FromUnits(units));
  }
  return set;
}

Labels RandomSelector(std::mt19937& rng) {
  if (rng() % 4 != 0) return {};
  return {{"zone", rng() % 2 ? "a" : "b"}};
}

ClusterSnapshot RandomCluster(std::mt19937& rng, size_t nodes) {
  ClusterSnapshot cluster;
  for (size_t i = 0; i < nodes; ++i) {
    Labels labels;
    if (rng() % 3 != 0) labels["zone"] = rng() % 2 ? "a" : "b";
    cluster.nodes.push_back(
        Node("n" + std::to_string(i), RandomAmounts(rng, 1.0), labels, rng() % 10 != 0));
  }
  return cluster;
}

bool Candidate(const NodeState& node, const Labels& selector) {
  if (!node.alive) return false;
  for (const auto& [key, value] : selector) {
    auto it = node.resources.labels().find(key);
    if (it == node.resources.labels().end() || it->second != value) return false;
  }
  return true;
}

// Does any assignment of bundles to nodes satisfy the strategy's hard constraints against the
// nodes' available resources (or totals)? nullopt when there are too many to try.
std::optional<bool> BruteForceGroup(const ClusterSnapshot& cluster, const GroupRequest& group,
                                    bool totals) {
  const size_t n = cluster.nodes.size(), k = group.bundles.size();
  double combinations = std::pow(static_cast<double>(n), static_cast<double>(k));
  if (combinations > 20000) return std::nullopt;
  std::vector<size_t> assignment(k, 0);
  for (size_t index = 0; index < static_cast<size_t>(combinations); ++index) {
    size_t rest = index;
    for (size_t b = 0; b < k; ++b, rest /= n) assignment[b] = rest % n;
    const std::set<size_t> distinct(assignment.begin(), assignment.end());
    if (group.strategy == GroupStrategy::kStrictPack && distinct.size() > 1) continue;
    if (group.strategy == GroupStrategy::kStrictSpread && distinct.size() < k) continue;
    std::vector<ResourceSet> sums(n);
    bool ok = true;
    for (size_t b = 0; b < k && ok; ++b) {
      ok = Candidate(cluster.nodes[assignment[b]], group.bundles[b].label_selector);
      sums[assignment[b]] += group.bundles[b].demand;
    }
    for (size_t i = 0; i < n && ok; ++i) {
      const NodeResources& r = cluster.nodes[i].resources;
      ok = sums[i].IsSubsetOf(totals ? r.total() : r.available());
    }
    if (ok) return true;
  }
  return k == 0;
}

// The hybrid policy restated plainly: the expected PlaceOne answer (without affinity).
Outcome ExpectedOne(const ClusterSnapshot& cluster, const PlacementRequest& request,
                    std::optional<size_t>* node) {
  auto utilisation = [&](const NodeResources& r) {
    double worst = 0;
    for (const auto& [name, amount] : request.demand) {
      double total = r.total().Get(name).ToDouble();
      worst =
          std::max(worst, (total - r.available().Get(name).ToDouble() + amount.ToDouble()) / total);
    }
    return worst;
  };
  std::optional<size_t> preferred = cluster.Find(request.preferred_node);
  std::optional<size_t> first_below, least;
  bool feasible = false;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeResources& r = cluster.nodes[i].resources;
    if (!Candidate(cluster.nodes[i], request.label_selector)) continue;
    feasible = feasible || r.IsFeasible(request.demand);
    if (!r.IsAvailable(request.demand)) continue;
    if (!first_below && utilisation(r) <= 0.5) first_below = i;
    if (!least || utilisation(r) < utilisation(cluster.nodes[*least].resources)) least = i;
  }
  if (preferred && Candidate(cluster.nodes[*preferred], request.label_selector) &&
      cluster.nodes[*preferred].resources.IsAvailable(request.demand) &&
      utilisation(cluster.nodes[*preferred].resources) <= 0.5) {
    *node = preferred;
  } else {
    *node = first_below ? first_below : least;
  }
  if (*node) return Outcome::kPlaced;
  return feasible ? Outcome::kNotNow : Outcome::kInfeasible;
}

// Every node's available plus what we know we took equals its total: nothing over-committed,
// nothing leaked.
void CheckAccounting(const ClusterSnapshot& cluster, const std::vector<ResourceSet>& taken) {
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeResources& r = cluster.nodes[i].resources;
    REQUIRE(r.available().IsSubsetOf(r.total()));
    REQUIRE(r.available() + taken[i] == r.total());
  }
}

struct LiveGroup {
  GroupRequest request;
  GroupPlacement placement;
};

void CheckGroup(ClusterSnapshot& cluster, std::vector<ResourceSet>& taken,
                const GroupRequest& group, std::vector<LiveGroup>& live) {
  const GroupPlacement placement = PlaceGroup(cluster, group);
  INFO(GroupStrategyName(group.strategy)
       << " with " << group.bundles.size() << " bundles: " << placement.reason);
  if (placement.outcome != Outcome::kPlaced) {
    CHECK_THAT(placement.reason, StartsWith(GroupStrategyName(group.strategy)));
  }
  if (auto now = BruteForceGroup(cluster, group, false)) {
    auto ever = BruteForceGroup(cluster, group, true);
    const Outcome expected =
        *now ? Outcome::kPlaced : (*ever ? Outcome::kNotNow : Outcome::kInfeasible);
    REQUIRE(placement.outcome == expected);
  }
  const ClusterSnapshot before = cluster;
  const Status applied = Apply(cluster, group, placement);
  REQUIRE(applied.ok() == (placement.outcome == Outcome::kPlaced));
  if (!applied.ok()) {
    REQUIRE(cluster == before);
    return;
  }
  const auto& nodes = placement.bundle_nodes;
  REQUIRE(nodes.size() == group.bundles.size());
  const std::set<size_t> distinct(nodes.begin(), nodes.end());
  if (group.strategy == GroupStrategy::kStrictPack) REQUIRE(distinct.size() <= 1);
  if (group.strategy == GroupStrategy::kStrictSpread) REQUIRE(distinct.size() == nodes.size());
  for (size_t b = 0; b < nodes.size(); ++b) {
    REQUIRE(Candidate(cluster.nodes[nodes[b]], group.bundles[b].label_selector));
    taken[nodes[b]] += group.bundles[b].demand;
  }
  live.push_back({group, placement});
}

TEST_CASE("Random request streams never over-commit and agree with brute force",
          "[placement][property]") {
  std::mt19937 rng(20240607);
  constexpr GroupStrategy kStrategies[] = {GroupStrategy::kPack, GroupStrategy::kSpread,
                                           GroupStrategy::kStrictPack,
                                           GroupStrategy::kStrictSpread};
  size_t placed = 0, not_now = 0, infeasible = 0;
  for (int round = 0; round < 300; ++round) {
    const size_t n = 1 + rng() % (round % 2 ? 20 : 5);  // half the clusters small enough to check
    ClusterSnapshot cluster = RandomCluster(rng, n);
    std::vector<ResourceSet> taken(n);
    std::vector<LiveGroup> live;
    std::vector<std::pair<size_t, ResourceSet>> singles;
    for (int step = 0; step < 20; ++step) {
      if (rng() % 2 == 0) {
        PlacementRequest request = Request(RandomAmounts(rng, 0.5));
        request.label_selector = RandomSelector(rng);
        if (rng() % 3 == 0) request.preferred_node = "n" + std::to_string(rng() % n);
        std::optional<size_t> expected_node;
        const Outcome expected = ExpectedOne(cluster, request, &expected_node);
        const Placement placement = PlaceOne(cluster, request);
        REQUIRE(placement.outcome == expected);
        (placement.outcome == Outcome::kInfeasible ? infeasible
         : placement.outcome == Outcome::kNotNow   ? not_now
                                                   : placed)++;
        if (expected != Outcome::kPlaced) continue;
        REQUIRE(placement.node == *expected_node);
        REQUIRE(cluster.nodes[placement.node].resources.TryAllocate(request.demand));
        taken[placement.node] += request.demand;
        singles.emplace_back(placement.node, request.demand);
      } else {
        GroupRequest group;
        group.strategy = kStrategies[rng() % 4];
        const size_t bundles = 1 + rng() % 4;
        for (size_t b = 0; b < bundles; ++b) {
          group.bundles.push_back({RandomAmounts(rng, 0.4), RandomSelector(rng)});
        }
        CheckGroup(cluster, taken, group, live);
      }
      CheckAccounting(cluster, taken);
      if (!live.empty() && rng() % 3 == 0) {
        const size_t victim = rng() % live.size();
        Unapply(cluster, live[victim].request, live[victim].placement);
        for (size_t b = 0; b < live[victim].request.bundles.size(); ++b) {
          taken[live[victim].placement.bundle_nodes[b]] -= live[victim].request.bundles[b].demand;
        }
        live.erase(live.begin() + static_cast<long>(victim));
      }
      if (!singles.empty() && rng() % 3 == 0) {
        const auto [node, demand] = singles.back();
        cluster.nodes[node].resources.Release(demand);
        taken[node] -= demand;
        singles.pop_back();
      }
      CheckAccounting(cluster, taken);
    }
  }
  // The generator must exercise every outcome, or the checks above prove little.
  CHECK(placed > 100);
  CHECK(not_now > 20);
  CHECK(infeasible > 20);
}

TEST_CASE("Random affinity requests follow the affinity rules", "[placement][property]") {
  std::mt19937 rng(77);
  for (int round = 0; round < 2000; ++round) {
    ClusterSnapshot cluster = RandomCluster(rng, 1 + rng() % 6);
    for (NodeState& node : cluster.nodes) {
      (void)node.resources.TryAllocate(RandomAmounts(rng, 0.5));
    }
    PlacementRequest request = Request(RandomAmounts(rng, 0.5));
    request.label_selector = RandomSelector(rng);
    const size_t target = rng() % (cluster.nodes.size() + 1);  // one past the end: unknown
    request.affinity = NodeAffinity{"n" + std::to_string(target), rng() % 2 == 0};
    const Placement placement = PlaceOne(cluster, request);
    INFO(placement.reason);
    const bool known = target < cluster.nodes.size();
    const bool usable = known && Candidate(cluster.nodes[target], request.label_selector);
    if (!request.affinity->soft) {
      const NodeResources* r = known ? &cluster.nodes[target].resources : nullptr;
      const Outcome expected = !usable || !r->IsFeasible(request.demand) ? Outcome::kInfeasible
                               : r->IsAvailable(request.demand)          ? Outcome::kPlaced
                                                                         : Outcome::kNotNow;
      REQUIRE(placement.outcome == expected);
      if (expected == Outcome::kPlaced) REQUIRE(placement.node == target);
      if (expected != Outcome::kPlaced)
        REQUIRE_THAT(placement.reason, Contains(request.affinity->node_id));
    } else if (usable && cluster.nodes[target].resources.IsAvailable(request.demand)) {
      REQUIRE(placement.outcome == Outcome::kPlaced);
      REQUIRE(placement.node == target);
    } else {
      std::optional<size_t> expected_node;
      REQUIRE(placement.outcome == ExpectedOne(cluster, request, &expected_node));
      if (expected_node) REQUIRE(placement.node == *expected_node);
    }
  }
}

}  // namespace
}  // namespace rayd::scheduler
