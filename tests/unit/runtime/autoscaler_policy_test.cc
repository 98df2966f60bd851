// The autoscaler's decisions (autoscaler/policy.h) as pure functions: demand bin-packed onto
// node types, gangs whole or not at all, limits, min_nodes, floors, and idle nodes drained.

#include <catch2/catch.hpp>

#include "autoscaler/node_provider.h"
#include "autoscaler/policy.h"

namespace rayd::autoscaler {
namespace {

using scheduler::GroupStrategy;
using scheduler::ResourceSet;

NodeTypeConfig Type(const std::string& name, ResourceSet resources, int max_nodes,
                    double cost = 1.0, scheduler::Labels labels = {}) {
  NodeTypeConfig t;
  t.name = name;
  t.resources = std::move(resources);
  t.max_nodes = max_nodes;
  t.cost = cost;
  t.labels = std::move(labels);
  return t;
}

AutoscalerConfig Config(std::vector<NodeTypeConfig> types, int max_nodes) {
  AutoscalerConfig c;
  c.provider_type = "local";
  c.max_nodes = max_nodes;
  c.idle_timeout_s = 60;
  c.node_types = std::move(types);
  return c;
}

// A gang of `n` identical bundles.
DemandUnit Gang(const std::string& source, int n, ResourceSet each,
                GroupStrategy strategy = GroupStrategy::kPack, int count = 1) {
  DemandUnit u;
  u.source = source;
  u.strategy = strategy;
  u.count = count;
  for (int i = 0; i < n; ++i) u.bundles.push_back({each, {}});
  return u;
}

// A node the autoscaler launched, of `type`, with `available` of its resources free.
NodeView Managed(const NodeTypeConfig& type, const std::string& id, NodeView::Status status,
                 const ResourceSet& available, double idle_s = 0) {
  NodeView n;
  n.node_id = status == NodeView::Status::kLaunching ? "" : "node-" + id;
  n.instance_id = id;
  n.node_type = type.name;
  n.status = status;
  n.resources = scheduler::NodeResources(type.resources, available, TypeLabels(type));
  n.idle_s = idle_s;
  return n;
}

int Launched(const Decision& d, const std::string& type) {
  for (const Launch& l : d.launches) {
    if (l.node_type == type) return l.count;
  }
  return 0;
}

TEST_CASE("autoscaler policy: no demand and no nodes decide nothing", "[autoscaler_policy]") {
  auto config = Config({Type("cpu2", {{"CPU", 2}}, 4)}, 4);
  Decision d = Decide(config, {});
  CHECK(d.launches.empty());
  CHECK(d.drains.empty());
  CHECK(d.unmet.empty());
}

TEST_CASE("autoscaler policy: a waiting 2-worker gang launches one node that holds it",
          "[autoscaler_policy]") {
  auto config = Config({Type("cpu2", {{"CPU", 2}}, 4)}, 4);
  PolicyInput in;
  in.waiting.push_back(Gang("placement group 3f2a1b0c", 2, {{"CPU", 1}}));
  Decision d = Decide(config, in);
  REQUIRE(d.launches.size() == 1);
  CHECK(d.launches[0].node_type == "cpu2");
  CHECK(d.launches[0].count == 1);
  CHECK_THAT(d.launches[0].reason, Catch::Contains("placement group 3f2a1b0c") &&
                                       Catch::Contains("2 x {CPU: 1}, PACK"));
}

TEST_CASE("autoscaler policy: eight gangs stop at max_nodes and say so", "[autoscaler_policy]") {
  auto config = Config({Type("cpu2", {{"CPU", 2}}, 8)}, 4);
  PolicyInput in;
  in.waiting.push_back(Gang("trial", 2, {{"CPU", 1}}, GroupStrategy::kPack, 8));
  Decision d = Decide(config, in);
  CHECK(Launched(d, "cpu2") == 4);
  REQUIRE(d.unmet.size() == 1);
  CHECK_FALSE(d.unmet[0].infeasible);
  CHECK_THAT(d.unmet[0].reason, Catch::Contains("max_nodes reached (4 of 4"));
  CHECK_THAT(d.launches[0].reason, Catch::Contains("and 3 more"));
}

TEST_CASE("autoscaler policy: nodes already launching are not launched again",
          "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 4);
  auto config = Config({cpu2}, 4);
  PolicyInput in;
  in.nodes.push_back(Managed(cpu2, "a", NodeView::Status::kLaunching, cpu2.resources));
  in.nodes.push_back(Managed(cpu2, "b", NodeView::Status::kLaunching, cpu2.resources));
  in.waiting.push_back(Gang("trial", 2, {{"CPU", 1}}, GroupStrategy::kPack, 2));
  CHECK(Decide(config, in).launches.empty());
  in.waiting[0].count = 3;
  CHECK(Launched(Decide(config, in), "cpu2") == 1);
}

TEST_CASE("autoscaler policy: a gang that needs more nodes than the max launches none of them",
          "[autoscaler_policy]") {
  auto config = Config({Type("cpu2", {{"CPU", 2}}, 3)}, 3);
  PolicyInput in;
  in.waiting.push_back(Gang("group", 4, {{"CPU", 1}}, GroupStrategy::kStrictSpread));
  Decision d = Decide(config, in);
  CHECK(d.launches.empty());
  REQUIRE(d.unmet.size() == 1);
  CHECK_FALSE(d.unmet[0].infeasible);
  // With room for four it launches four: one bundle per node.
  config = Config({Type("cpu2", {{"CPU", 2}}, 4)}, 4);
  CHECK(Launched(Decide(config, in), "cpu2") == 4);
}

TEST_CASE("autoscaler policy: demand no node type could hold is infeasible and launches nothing",
          "[autoscaler_policy]") {
  auto config = Config({Type("cpu2", {{"CPU", 2}}, 4)}, 4);
  PolicyInput in;
  in.waiting.push_back(Gang("actor Trainer", 1, {{"CPU", 1}, {"GPU", 1}}));
  in.waiting.push_back(Gang("group", 1, {{"CPU", 4}}, GroupStrategy::kStrictPack));
  Decision d = Decide(config, in);
  CHECK(d.launches.empty());
  REQUIRE(d.unmet.size() == 2);
  CHECK(d.unmet[0].infeasible);
  CHECK(d.unmet[0].source == "actor Trainer");
  CHECK_THAT(d.unmet[0].reason, Catch::Contains("no node type can hold 1 x {CPU: 1, GPU: 1}") &&
                                    Catch::Contains("cpu2 {CPU: 2}"));
  CHECK(d.unmet[1].infeasible);
}

TEST_CASE("autoscaler policy: the cheapest type that fits, by cost, then by size",
          "[autoscaler_policy]") {
  auto config = Config({Type("cpu8", {{"CPU", 8}}, 4, 3.0), Type("cpu2", {{"CPU", 2}}, 8, 1.0)},
                       8);
  PolicyInput one;
  one.waiting.push_back(Gang("task", 1, {{"CPU", 1}}));
  Decision d = Decide(config, one);
  CHECK(Launched(d, "cpu2") == 1);
  CHECK(Launched(d, "cpu8") == 0);
  // Eight workers packed: one cpu8 (cost 3) beats four cpu2 (cost 4).
  PolicyInput eight;
  eight.waiting.push_back(Gang("trial", 8, {{"CPU", 1}}));
  d = Decide(config, eight);
  CHECK(Launched(d, "cpu8") == 1);
  CHECK(Launched(d, "cpu2") == 0);
  // Equal cost: the smaller type.
  config.node_types[0].cost = 1.0;
  d = Decide(config, one);
  CHECK(Launched(d, "cpu2") == 1);
}

TEST_CASE("autoscaler policy: a label selector picks the type that carries the label",
          "[autoscaler_policy]") {
  auto config = Config({Type("zone_a", {{"CPU", 2}}, 2, 1.0, {{"zone", "a"}}),
                        Type("zone_b", {{"CPU", 2}}, 2, 1.0, {{"zone", "b"}})},
                       4);
  PolicyInput in;
  DemandUnit u = Gang("actor Reader", 1, {{"CPU", 1}});
  u.bundles[0].label_selector = {{"zone", "b"}};
  in.waiting.push_back(u);
  Decision d = Decide(config, in);
  CHECK(Launched(d, "zone_b") == 1);
  CHECK(Launched(d, "zone_a") == 0);
  // The node-type label selects the type itself.
  in.waiting[0].bundles[0].label_selector = {{kNodeTypeLabel, "zone_a"}};
  CHECK(Launched(Decide(config, in), "zone_a") == 1);
}

TEST_CASE("autoscaler policy: min_nodes are kept whatever the demand", "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 4);
  cpu2.min_nodes = 2;
  auto config = Config({cpu2}, 4);
  Decision d = Decide(config, {});
  REQUIRE(d.launches.size() == 1);
  CHECK(d.launches[0].count == 2);
  CHECK_THAT(d.launches[0].reason, Catch::Contains("min_nodes 2"));
  // Two idle nodes at the minimum stay.
  PolicyInput in;
  in.nodes.push_back(Managed(cpu2, "a", NodeView::Status::kRunning, cpu2.resources, 600));
  in.nodes.push_back(Managed(cpu2, "b", NodeView::Status::kRunning, cpu2.resources, 600));
  d = Decide(config, in);
  CHECK(d.launches.empty());
  CHECK(d.drains.empty());
  // A third one goes, the longest idle first.
  in.nodes.push_back(Managed(cpu2, "c", NodeView::Status::kRunning, cpu2.resources, 900));
  d = Decide(config, in);
  REQUIRE(d.drains.size() == 1);
  CHECK(d.drains[0].instance_id == "c");
  CHECK_THAT(d.drains[0].reason, Catch::Contains("idle for 900 s (idle_timeout_s 60)"));
}

TEST_CASE("autoscaler policy: idle nodes are drained after the timeout, busy and unmanaged never",
          "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 4);
  auto config = Config({cpu2}, 4);
  PolicyInput in;
  in.nodes.push_back(Managed(cpu2, "young", NodeView::Status::kRunning, cpu2.resources, 30));
  in.nodes.push_back(Managed(cpu2, "old", NodeView::Status::kRunning, cpu2.resources, 61));
  in.nodes.push_back(Managed(cpu2, "busy", NodeView::Status::kRunning, {{"CPU", 0}}, 0));
  in.nodes.push_back(Managed(cpu2, "leaving", NodeView::Status::kDraining, cpu2.resources, 99));
  NodeView head;
  head.node_id = "head";
  head.resources = scheduler::NodeResources(ResourceSet{{"CPU", 2}}, ResourceSet{{"CPU", 2}}, {});
  head.idle_s = 1000;
  in.nodes.push_back(head);
  Decision d = Decide(config, in);
  REQUIRE(d.drains.size() == 1);
  CHECK(d.drains[0].node_id == "node-old");
}

TEST_CASE("autoscaler policy: an idle node that queued demand will use is kept",
          "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 4);
  auto config = Config({cpu2}, 4);
  PolicyInput in;
  in.nodes.push_back(Managed(cpu2, "a", NodeView::Status::kRunning, cpu2.resources, 120));
  in.nodes.push_back(Managed(cpu2, "b", NodeView::Status::kRunning, cpu2.resources, 120));
  // A sweep's queued trial: it will land on one of them.
  in.waiting.push_back(Gang("sweep: 1 queued trial", 2, {{"CPU", 1}}));
  Decision d = Decide(config, in);
  CHECK(d.launches.empty());
  REQUIRE(d.drains.size() == 1);
  CHECK(d.drains[0].instance_id == "b");
}

TEST_CASE("autoscaler policy: a draining node takes no demand", "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 4);
  auto config = Config({cpu2}, 4);
  PolicyInput in;
  in.nodes.push_back(Managed(cpu2, "a", NodeView::Status::kDraining, cpu2.resources));
  in.waiting.push_back(Gang("trial", 2, {{"CPU", 1}}));
  CHECK(Launched(Decide(config, in), "cpu2") == 1);
}

TEST_CASE("autoscaler policy: requested resources are a floor on the cluster's totals",
          "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 8);
  auto config = Config({cpu2}, 8);
  PolicyInput in;
  in.nodes.push_back(Managed(cpu2, "busy", NodeView::Status::kRunning, {{"CPU", 0}}));
  in.requested.push_back(Gang("rayd request-resources", 1, {{"CPU", 2}}, GroupStrategy::kPack, 3));
  Decision d = Decide(config, in);
  CHECK(Launched(d, "cpu2") == 2);
  // A floor the cluster already holds launches nothing, and keeps its nodes from draining.
  in.nodes[0] = Managed(cpu2, "idle", NodeView::Status::kRunning, cpu2.resources, 600);
  in.requested[0].count = 1;
  d = Decide(config, in);
  CHECK(d.launches.empty());
  CHECK(d.drains.empty());
  // Waiting work then uses the floor's new nodes before launching more.
  in.requested[0].count = 2;
  in.waiting.push_back(Gang("task", 1, {{"CPU", 2}}));
  d = Decide(config, in);
  CHECK(Launched(d, "cpu2") == 1);
}

TEST_CASE("autoscaler policy: launches in flight are limited by upscaling_speed",
          "[autoscaler_policy]") {
  auto cpu2 = Type("cpu2", {{"CPU", 2}}, 100);
  auto config = Config({cpu2}, 100);
  PolicyInput in;
  in.waiting.push_back(Gang("task", 1, {{"CPU", 2}}, GroupStrategy::kPack, 20));
  // Nothing running: at most five in flight.
  Decision d = Decide(config, in);
  CHECK(Launched(d, "cpu2") == 5);
  REQUIRE(d.unmet.size() == 1);
  CHECK_THAT(d.unmet[0].reason, Catch::Contains("5 launches in flight (the limit: 5"));
  // Ten running, speed 1: ten in flight.
  for (int i = 0; i < 10; ++i) {
    in.nodes.push_back(Managed(cpu2, std::to_string(i), NodeView::Status::kRunning, {{"CPU", 0}}));
  }
  CHECK(Launched(Decide(config, in), "cpu2") == 10);
  config.upscaling_speed = 0.5;
  CHECK(Launched(Decide(config, in), "cpu2") == 5);
  // A gang that starts under the limit launches whole, past it.
  PolicyInput gang;
  gang.waiting.push_back(Gang("trial", 8, {{"CPU", 2}}, GroupStrategy::kSpread));
  CHECK(Launched(Decide(config, gang), "cpu2") == 8);
}

}  // namespace
}  // namespace rayd::autoscaler
