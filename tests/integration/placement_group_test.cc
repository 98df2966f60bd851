// Placement groups, label selectors and node affinity on real clusters: bundles reserved all or
// nothing across nodes (STRICT_SPREAD over three GPU nodes), the devices their actors see, an
// infeasible group reported and then created or failed, bundles and actors rescheduled after a
// node is SIGKILLed, groups competing for the same GPUs all getting their turn, and removal
// killing what ran in a group.
//
// CLI tests start `rayd start --head` and nodes on free ports in a fresh temp root (CliCluster
// stops everything); they synchronise through the API's blocking calls or by polling with
// deadlines.

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <rayd/api.h>
#include <set>
#include <string>
#include <vector>

#include "runtime_harness.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using nlohmann::json;
using rayd::testing::ProcessGone;
using rayd::testing::WaitFor;
using rayd_runtime_test::CliCluster;
using rayd_runtime_test::EmbeddedRayd;
using rayd_runtime_test::kSettleTimeout;
using rayd_runtime_test::ThrownMessage;

constexpr int kGetTimeoutMs = 60000;

// Where a task or actor ran and which devices its worker sees.
struct Placed {
  std::string node;
  std::string visible;   // CUDA_VISIBLE_DEVICES
  std::vector<int> ids;  // rayd::GetGpuIds()
  MSGPACK_DEFINE(node, visible, ids);
};

Placed Here() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return Placed{rayd::GetNodeId(), visible ? visible : "", rayd::GetGpuIds()};
}

Placed PgTaskHere() { return Here(); }

class PgMember {
 public:
  static PgMember* Create() { return new PgMember(); }
  Placed Where() { return Here(); }
};

RAYD_REMOTE(PgTaskHere, PgMember::Create, &PgMember::Where);

rayd::PlacementGroupCreationOptions Group(std::string name, int bundles,
                                          std::map<std::string, double> bundle,
                                          rayd::PlacementStrategy strategy) {
  return {.name = std::move(name),
          .bundles = std::vector<std::unordered_map<std::string, double>>(
              bundles, std::unordered_map<std::string, double>(bundle.begin(), bundle.end())),
          .strategy = strategy};
}

// The pid of the daemon of node `node_id`, from `rayd status`.
pid_t NodePid(CliCluster& cluster, const std::string& node_id) {
  const json status = cluster.Json({"status"});
  for (const auto& n : status.at("nodes")) {
    if (n.at("node_id") == node_id) return n.at("pid").get<pid_t>();
  }
  FAIL("node " << node_id << " is not listed: " << status.dump(2));
  return 0;
}

}  // namespace

TEST_CASE("placement groups: STRICT_SPREAD over three GPU nodes gives each bundle its own node "
          "and device and removal kills its actors and frees the GPUs",
          "[integration][placement]") {
  CliCluster cluster;
  std::set<std::string> nodes;
  nodes.insert(cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus",
                              "2", "--num-gpus", "2"}));
  for (int i = 0; i < 2; ++i) {
    nodes.insert(
        cluster.Start({"--address", cluster.address(), "--num-cpus", "2", "--num-gpus", "2"}));
  }
  cluster.InitDriver();

  rayd::PlacementGroup pg = rayd::CreatePlacementGroup(
      Group("spread3", 3, {{"GPU", 1}, {"CPU", 1}}, rayd::PlacementStrategy::STRICT_SPREAD));
  REQUIRE(pg.Wait(30));
  CHECK(pg.GetState() == rayd::PlacementGroupState::CREATED);
  const std::vector<std::string> bundle_nodes = pg.GetBundleNodes();
  REQUIRE(bundle_nodes.size() == 3);
  CHECK(std::set<std::string>(bundle_nodes.begin(), bundle_nodes.end()) == nodes);

  // An actor per bundle runs on that bundle's node and sees exactly one device.
  std::vector<rayd::ActorHandle<PgMember>> members;
  for (int i = 0; i < 3; ++i) {
    members.push_back(
        rayd::Actor(PgMember::Create).SetPlacementGroup(pg, i).SetResource("GPU", 1).Remote());
  }
  for (int i = 0; i < 3; ++i) {
    Placed p = *rayd::Get(members[i].Task(&PgMember::Where).Remote(), kGetTimeoutMs);
    INFO("bundle " << i << " node " << p.node << " CUDA_VISIBLE_DEVICES=" << p.visible);
    CHECK(p.node == bundle_nodes[i]);
    REQUIRE(p.ids.size() == 1);
    CHECK(p.visible == std::to_string(p.ids[0]));
  }
  // A task in bundle 1 takes the bundle's CPU and runs on its node.
  Placed task = *rayd::Get(
      rayd::Task(PgTaskHere).SetPlacementGroup(pg, 1).SetResource("CPU", 1).Remote(), kGetTimeoutMs);
  CHECK(task.node == bundle_nodes[1]);

  // Found by name, and listed.
  rayd::PlacementGroup by_name = rayd::GetPlacementGroup("spread3");
  REQUIRE_FALSE(by_name.Empty());
  CHECK(by_name.GetID() == pg.GetID());
  std::string table;
  REQUIRE(cluster.Rayd({"list", "placement-groups"}, &table) == 0);
  CHECK_THAT(table, Contains(pg.GetID().substr(0, 8)) && Contains("CREATED") &&
                        Contains("STRICT_SPREAD"));

  rayd::RemovePlacementGroup(pg.GetID());
  rayd::RemovePlacementGroup(pg.GetID());  // twice is fine
  CHECK(pg.GetState() == rayd::PlacementGroupState::REMOVED);
  CHECK(rayd::GetPlacementGroup("spread3").Empty());
  // The removal kills the members asynchronously: a call routed before a member's death is
  // known may still be served (seen once in five full runs under load). Each member dies, and
  // then its calls fail with ActorDiedError.
  for (auto& m : members) {
    const bool died = WaitFor(
        [&] {
          try {
            rayd::Get(m.Task(&PgMember::Where).Remote(), kGetTimeoutMs);
            return false;
          } catch (const rayd::ActorDiedError&) {
            return true;
          }
        },
        kSettleTimeout);
    CHECK(died);
    CHECK_THROWS_AS(rayd::Get(m.Task(&PgMember::Where).Remote(), kGetTimeoutMs),
                    rayd::ActorDiedError);
  }
  // Every GPU is free again: a group needing all six is created.
  rayd::PlacementGroup all = rayd::CreatePlacementGroup(
      Group("", 3, {{"GPU", 2}}, rayd::PlacementStrategy::STRICT_SPREAD));
  CHECK(all.Wait(30));
}

TEST_CASE("placement groups: an infeasible group is reported and waits until a node that fits "
          "joins",
          "[integration][placement]") {
  CliCluster cluster;
  cluster.StartHead(2);
  cluster.InitDriver();
  rayd::PlacementGroup pg = rayd::CreatePlacementGroup(
      Group("pair", 2, {{"CPU", 1}}, rayd::PlacementStrategy::STRICT_SPREAD));
  CHECK_FALSE(pg.Wait(1));
  CHECK(pg.GetState() == rayd::PlacementGroupState::PENDING);
  std::string table;
  const bool reported = WaitFor(
      [&] {
        return cluster.Rayd({"status"}, &table) == 0 &&
               table.find(pg.GetID().substr(0, 8)) != std::string::npos;
      },
      kSettleTimeout);
  INFO(table);
  CHECK(reported);
  CHECK_THAT(table, Contains("STRICT_SPREAD"));

  const std::string joined = cluster.Start({"--address", cluster.address(), "--num-cpus", "1"});
  REQUIRE(pg.Wait(30));
  const auto bundle_nodes = pg.GetBundleNodes();
  REQUIRE(bundle_nodes.size() == 2);
  CHECK(bundle_nodes[0] != bundle_nodes[1]);
  CHECK((bundle_nodes[0] == joined || bundle_nodes[1] == joined));
}

TEST_CASE("placement groups: a group infeasible past the timeout fails with InfeasibleError",
          "[integration][placement]") {
  CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "2",
                 "--infeasible-timeout-ms", "1500"});
  cluster.InitDriver();
  rayd::PlacementGroup pg =
      rayd::CreatePlacementGroup(Group("", 1, {{"CPU", 64}}, rayd::PlacementStrategy::PACK));
  const std::string message = ThrownMessage<rayd::InfeasibleError>([&] { pg.Wait(30); });
  CHECK_THAT(message, Contains("CPU: 64") && Contains("largest node"));
  CHECK(pg.GetState() == rayd::PlacementGroupState::FAILED);
  // Work aimed at it fails the same way instead of hanging.
  auto ref = rayd::Task(PgTaskHere).SetPlacementGroup(pg, 0).Remote();
  CHECK_THROWS_AS(rayd::Get(ref, kGetTimeoutMs), rayd::InfeasibleError);
}

TEST_CASE("placement groups: a SIGKILLed node's bundles and actors are rescheduled on the "
          "remaining nodes",
          "[integration][placement][fault]") {
  CliCluster cluster;
  // The head holds no CPU, so the bundles land on the three worker nodes.
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "0",
                 "--heartbeat-period-ms", "200", "--missed-heartbeats", "5"});
  std::set<std::string> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.insert(cluster.Start({"--address", cluster.address(), "--num-cpus", "1"}));
  }
  cluster.InitDriver();
  rayd::PlacementGroup pg = rayd::CreatePlacementGroup(
      Group("survivor", 2, {{"CPU", 1}}, rayd::PlacementStrategy::STRICT_SPREAD));
  REQUIRE(pg.Wait(30));
  const auto before = pg.GetBundleNodes();
  REQUIRE(before.size() == 2);
  std::vector<rayd::ActorHandle<PgMember>> members;
  for (int i = 0; i < 2; ++i) {
    members.push_back(
        rayd::Actor(PgMember::Create).SetPlacementGroup(pg, i).SetMaxRestarts(1).Remote());
    CHECK(rayd::Get(members[i].Task(&PgMember::Where).Remote(), kGetTimeoutMs)->node == before[i]);
  }

  const pid_t victim = NodePid(cluster, before[1]);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(WaitFor([&] { return ProcessGone(victim); }, kSettleTimeout));

  std::set<std::string> spare = nodes;
  spare.erase(before[0]);
  spare.erase(before[1]);
  REQUIRE(spare.size() == 1);
  std::vector<std::string> after;
  const bool moved = WaitFor(
      [&] {
        after = pg.GetBundleNodes();
        return pg.GetState() == rayd::PlacementGroupState::CREATED && after.size() == 2 &&
               after[1] == *spare.begin();
      },
      30s);
  INFO("bundle nodes after the kill: " << (after.size() == 2 ? after[0] + ", " + after[1] : "?"));
  REQUIRE(moved);
  CHECK(after[0] == before[0]);  // the surviving bundle stays where it was
  // The actor of the lost bundle restarted on the bundle's new node; the other never moved.
  CHECK(rayd::Get(members[1].Task(&PgMember::Where).Remote(), kGetTimeoutMs)->node == after[1]);
  CHECK(rayd::Get(members[0].Task(&PgMember::Where).Remote(), kGetTimeoutMs)->node == before[0]);
}

TEST_CASE("placement groups: groups competing for the same GPUs never deadlock and all get "
          "their turn",
          "[integration][placement]") {
  CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "2",
                 "--num-gpus", "2"});
  cluster.Start({"--address", cluster.address(), "--num-cpus", "2", "--num-gpus", "2"});
  cluster.InitDriver();
  // Four GPUs in all; eight gangs of two, each of which could take half of what is free.
  std::vector<rayd::PlacementGroup> groups;
  for (int i = 0; i < 8; ++i) {
    groups.push_back(rayd::CreatePlacementGroup(
        Group("", 2, {{"GPU", 1}},
              i % 2 ? rayd::PlacementStrategy::STRICT_SPREAD : rayd::PlacementStrategy::PACK)));
  }
  std::set<size_t> done;
  size_t most_at_once = 0;
  const bool all_ran = WaitFor(
      [&] {
        // Nothing is removed during this pass, so the groups seen CREATED hold their GPUs at once.
        std::vector<size_t> created;
        for (size_t i = 0; i < groups.size(); ++i) {
          if (!done.count(i) && groups[i].GetState() == rayd::PlacementGroupState::CREATED) {
            created.push_back(i);
          }
        }
        most_at_once = std::max(most_at_once, created.size());
        for (size_t i : created) {
          const auto where = groups[i].GetBundleNodes();
          CHECK(std::count(where.begin(), where.end(), std::string()) == 0);
          if (i % 2) CHECK(where[0] != where[1]);
          rayd::RemovePlacementGroup(groups[i].GetID());
          done.insert(i);
        }
        return done.size() == groups.size();
      },
      60s);
  INFO(done.size() << " of " << groups.size() << " groups were created");
  CHECK(all_ran);
  CHECK(most_at_once <= 2);  // two gangs of two GPUs fill the cluster
}

TEST_CASE("placement groups: a bundle's reservation is held for its tasks only until removal",
          "[integration][placement]") {
  EmbeddedRayd rt;  // 2 CPUs
  CHECK_THROWS_WITH(rayd::CreatePlacementGroup({}), Contains("bundle"));
  CHECK_THROWS_WITH(rayd::CreatePlacementGroup({.bundles = {{{"CPU", 1}}, {}}}),
                    Contains("bundle 1 is empty"));

  rayd::PlacementGroup pg =
      rayd::CreatePlacementGroup(Group("both", 1, {{"CPU", 2}}, rayd::PlacementStrategy::PACK));
  REQUIRE(pg.Wait(30));
  // Inside the bundle: runs here, on its CPUs.
  CHECK(rayd::Get(rayd::Task(PgTaskHere).SetPlacementGroup(pg, 0).Remote(), kGetTimeoutMs)->node ==
        rayd::GetNodeId());
  CHECK(rayd::Get(rayd::Task(PgTaskHere).SetPlacementGroup(pg).Remote(), kGetTimeoutMs)->node ==
        rayd::GetNodeId());
  // More than the bundle holds can never run in it.
  auto too_big = rayd::Task(PgTaskHere).SetPlacementGroup(pg, 0).SetResource("CPU", 3).Remote();
  CHECK_THROWS_AS(rayd::Get(too_big, kGetTimeoutMs), rayd::InfeasibleError);
  // Outside it, the node has no CPU left until the group goes.
  auto outside = rayd::Task(PgTaskHere).Remote();
  CHECK(rayd::Wait(std::vector{outside}, 1, 500).ready.empty());
  rayd::RemovePlacementGroup(pg.GetID());
  CHECK(rayd::Get(outside, kGetTimeoutMs)->node == rayd::GetNodeId());
  CHECK_THROWS_AS(pg.Wait(1), rayd::RaydError);
  // Work aimed at a removed group fails instead of waiting.
  CHECK_THROWS_WITH(rayd::Get(rayd::Task(PgTaskHere).SetPlacementGroup(pg, 0).Remote(),
                              kGetTimeoutMs),
                    Contains("removed"));
}

TEST_CASE("placement groups: what a removed group held is placed again at once, not at the "
          "node's next heartbeat",
          "[integration][placement]") {
  // Heartbeats 15 s apart. Once one has told the GCS the node is full, a group removed there
  // frees the node at once: the node reports what it freed then, and the next group (a sweep's
  // next trial) is placed in well under a period. Before, it waited for the next heartbeat.
  constexpr int kPeriodMs = 15000;
  CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "2",
                 "--heartbeat-period-ms", std::to_string(kPeriodMs)});
  cluster.InitDriver();
  rayd::PlacementGroup first =
      rayd::CreatePlacementGroup(Group("first", 2, {{"CPU", 1}}, rayd::PlacementStrategy::PACK));
  REQUIRE(first.Wait(20));
  const bool reported_full = WaitFor(
      [&] {
        const std::optional<json> status = cluster.TryJson({"status"});
        return status && status->at("available").value("CPU", 0.0) == 0.0;  // none left
      },
      std::chrono::milliseconds(3 * kPeriodMs));
  REQUIRE(reported_full);
  rayd::RemovePlacementGroup(first.GetID());
  rayd::PlacementGroup second =
      rayd::CreatePlacementGroup(Group("second", 2, {{"CPU", 1}}, rayd::PlacementStrategy::PACK));
  CHECK(second.Wait(kPeriodMs / 2000));
  auto member = rayd::Actor(PgMember::Create).SetPlacementGroup(second, 1).Remote();
  CHECK(rayd::Get(member.Task(&PgMember::Where).Remote(), kGetTimeoutMs)->node == rayd::GetNodeId());
}

TEST_CASE("scheduling: label selectors and node affinity choose the node", "[integration]") {
  CliCluster cluster;
  const std::string head = cluster.StartHead(1);
  const std::string zoned =
      cluster.Start({"--address", cluster.address(), "--num-cpus", "1", "--labels", "zone=b"});
  cluster.InitDriver();
  CHECK(rayd::Get(rayd::Task(PgTaskHere).SetLabelSelector({{"zone", "b"}}).Remote(),
                  kGetTimeoutMs)
            ->node == zoned);
  CHECK(rayd::Get(rayd::Task(PgTaskHere).SetNodeAffinity(zoned).Remote(), kGetTimeoutMs)->node ==
        zoned);
  CHECK(rayd::Get(rayd::Task(PgTaskHere).SetNodeAffinity(head).Remote(), kGetTimeoutMs)->node ==
        head);
  auto member = rayd::Actor(PgMember::Create).SetLabelSelector({{"zone", "b"}}).Remote();
  CHECK(rayd::Get(member.Task(&PgMember::Where).Remote(), kGetTimeoutMs)->node == zoned);
  auto pinned = rayd::Actor(PgMember::Create).SetNodeAffinity(head).Remote();
  CHECK(rayd::Get(pinned.Task(&PgMember::Where).Remote(), kGetTimeoutMs)->node == head);
  // Soft affinity to a node that does not exist falls back to any node.
  const std::string nowhere(32, 'f');
  CHECK(rayd::Get(rayd::Task(PgTaskHere).SetNodeAffinity(nowhere, /*soft=*/true).Remote(),
                  kGetTimeoutMs)
            ->node.size() == 32);
  // Hard affinity to it fails with a reason.
  CHECK_THROWS_WITH(
      rayd::Get(rayd::Task(PgTaskHere).SetNodeAffinity(nowhere).Remote(), kGetTimeoutMs),
      Contains(nowhere));
}
