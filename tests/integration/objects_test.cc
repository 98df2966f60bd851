// The shared-memory object store on real clusters: large values read in place from the node's
// arena (the address checked against this process's own mappings), task arguments and results
// through the store, reference counting freeing memory, spilling and restoring under memory
// pressure, transfers between two node daemons, and ObjectLostError when the only node that
// held an object dies.
//
// Part of the runtime_test binary (its main re-runs the binary as the workers).

#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <rayd/api.h>
#include <rayd/runtime/cluster.h>
#include <sstream>
#include <string>
#include <vector>

#include "runtime_harness.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using rayd_runtime_test::CliCluster;
using rayd_runtime_test::EmbeddedRayd;
using rayd_runtime_test::json;
using rayd::testing::WaitFor;

constexpr int64_t kMiB = 1 << 20;

// The name of the mapping that holds `p` in this process ("" if none): the node's arena is a
// memfd named "rayd-objects-<node>".
std::string MappingOf(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in, path);
    const auto dash = range.find('-');
    const uintptr_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= start && addr < end) return path;
  }
  return "";
}

bool InArena(const void* p) { return MappingOf(p).find("memfd:rayd-objects") != std::string::npos; }

// Distinct contents per seed, and a checksum that notices any misplaced element.
std::vector<float> Pattern(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 31 + seed * 7919) % 65521);
  return v;
}
template <typename Range>
uint64_t Checksum(const Range& r) {
  uint64_t sum = 0, i = 1;
  for (float x : r) sum += static_cast<uint64_t>(x) * (i++ % 1000003);
  return sum;
}

// ---- Remote functions -------------------------------------------------------------------------

// In a worker: reads the array in place and says where it lay and what it held.
struct ViewReport {
  bool in_shared_memory = false;
  bool in_arena = false;
  uint64_t checksum = 0;
  MSGPACK_DEFINE(in_shared_memory, in_arena, checksum);
};
ViewReport InspectInWorker(rayd::ObjectRef<std::vector<float>> ref) {
  rayd::ArrayView<float> view = rayd::GetView(ref);
  return ViewReport{view.in_shared_memory(), InArena(view.data()), Checksum(view)};
}

// A large argument by value (the driver's Put, or promoted by Remote()).
uint64_t ChecksumOf(std::vector<float> v) { return Checksum(v); }

std::vector<float> MakePattern(int64_t n, int seed) { return Pattern(static_cast<size_t>(n), seed); }

std::string NodeOfWorker() { return rayd::GetNodeId(); }

// Keeps a ref it was given past the call that gave it (a borrower).
class Keeper {
 public:
  static Keeper* Create() { return new Keeper(); }
  int Keep(rayd::ObjectRef<std::vector<float>> ref) {
    kept_ = std::move(ref);
    return 0;
  }
  uint64_t ChecksumKept() { return Checksum(rayd::GetView(kept_)); }
  int Drop() {
    kept_ = rayd::ObjectRef<std::vector<float>>();
    return 0;
  }
  // Puts an object of its own (this worker owns it) and keeps it; returns its id.
  std::string PutOwn(int64_t n) {
    kept_ = rayd::Put(Pattern(static_cast<size_t>(n), 13));
    return kept_.ID();
  }

 private:
  rayd::ObjectRef<std::vector<float>> kept_;
};

RAYD_REMOTE(InspectInWorker, ChecksumOf, MakePattern, NodeOfWorker, Keeper::Create, &Keeper::Keep,
            &Keeper::ChecksumKept, &Keeper::Drop, &Keeper::PutOwn);

// Objects in the cluster's stores, by object id.
std::map<std::string, std::vector<rayd::ObjectSummary>> StoredObjects() {
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  auto view = rayd::FetchObjects(endpoint.gcs_address, endpoint.token, rayd::Millis(5000));
  REQUIRE(view.ok());
  std::map<std::string, std::vector<rayd::ObjectSummary>> out;
  for (const auto& o : view->objects) out[o.object_id].push_back(o);
  return out;
}

// The primary copies the nodes' heartbeats report to the GCS, over every alive node.
uint32_t ReportedPrimaryObjects() {
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  auto view = rayd::FetchClusterView(endpoint.gcs_address, endpoint.token, rayd::Millis(5000));
  REQUIRE(view.ok());
  uint32_t n = 0;
  for (const auto& node : view->nodes) n += node.alive ? node.primary_objects : 0;
  return n;
}

rayd::NodeStoreSummary StoreOf(const std::string& node_id = "") {
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  auto view = rayd::FetchObjects(endpoint.gcs_address, endpoint.token, rayd::Millis(5000));
  REQUIRE(view.ok());
  REQUIRE(!view->stores.empty());
  for (const auto& s : view->stores) {
    if (node_id.empty() || s.node_id == node_id) return s;
  }
  FAIL("no store on node " << node_id);
  return {};
}


// A head and two more nodes (resources at_x, at_y) on this host, and a driver attached to one
// of them: `far` is a node that is neither the head nor the driver's, `far_resource` its own.
struct ThreeNodes {
  explicit ThreeNodes(CliCluster& cluster) {
    cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "1",
                   "--object-store-memory", "128MiB"});
    x = cluster.Start({"--address", cluster.address(), "--num-cpus", "1", "--resources",
                       R"({"at_x":1})", "--object-store-memory", "128MiB"});
    y = cluster.Start({"--address", cluster.address(), "--num-cpus", "1", "--resources",
                       R"({"at_y":1})", "--object-store-memory", "128MiB"});
    cluster.InitDriver();
    far = rayd::GetNodeId() == x ? y : x;
    far_resource = far == x ? "at_x" : "at_y";
  }
  // SIGKILLs the far node's daemon (its workers follow).
  void KillFar(CliCluster& cluster) const {
    pid_t pid = 0;
    for (const auto& n : cluster.Json({"list", "nodes"})) {
      if (n.at("node_id") == far) pid = n.at("pid").get<pid_t>();
    }
    REQUIRE(pid > 1);
    REQUIRE(::kill(pid, SIGKILL) == 0);
    REQUIRE(WaitFor([&] { return rayd::testing::ProcessGone(pid); }, 10s));
  }
  std::string x, y, far, far_resource;
};

}  // namespace

TEST_CASE("objects: a large Put is read in place from the arena, here and in a worker",
          "[integration]") {
  EmbeddedRayd rayd(256 * kMiB);
  const auto data = Pattern(16 * kMiB, 1);  // 64 MiB
  const uint64_t expected = Checksum(data);
  auto ref = rayd::Put(data);

  rayd::ArrayView<float> view = rayd::GetView(ref);
  REQUIRE(view.size() == data.size());
  CHECK(view.in_shared_memory());
  INFO("mapping: " << MappingOf(view.data()));
  CHECK(InArena(view.data()));
  CHECK(Checksum(view) == expected);
  CHECK(*rayd::Get(ref) == data);  // Get decodes a private copy from the same bytes

  ViewReport report = *rayd::Get(rayd::Task(InspectInWorker).Remote(ref), 60000);
  CHECK(report.in_shared_memory);
  CHECK(report.in_arena);
  CHECK(report.checksum == expected);

  // Small values stay inline: a view of one is a private copy.
  auto small = rayd::Put(std::vector<float>(100, 1.0f));
  CHECK_FALSE(rayd::GetView(small).in_shared_memory());
}

TEST_CASE("objects: large arguments and results go through the store", "[integration]") {
  EmbeddedRayd rayd(256 * kMiB);
  const auto data = Pattern(4 * kMiB, 2);  // 16 MiB
  // By value: Remote() puts it in the store and the worker reads it there.
  CHECK(*rayd::Get(rayd::Task(ChecksumOf).Remote(data), 60000) == Checksum(data));
  // By ref to a by-value parameter.
  auto ref = rayd::Put(data);
  CHECK(*rayd::Get(rayd::Task(ChecksumOf).Remote(ref), 60000) == Checksum(data));
  // A large result stays in the worker's node store; the driver reads it in place.
  auto made = rayd::Task(MakePattern).Remote(int64_t{4 * kMiB}, 3);
  auto view = rayd::GetView(made, 60000);
  CHECK(view.in_shared_memory());
  CHECK(Checksum(view) == Checksum(Pattern(4 * kMiB, 3)));
}

TEST_CASE("objects: memory is freed once no reference remains", "[integration]") {
  EmbeddedRayd rayd(256 * kMiB);
  std::string id;
  {
    auto ref = rayd::Put(Pattern(8 * kMiB, 4));  // 32 MiB
    id = ref.ID();
    auto objects = StoredObjects();
    REQUIRE(objects.count(id) == 1);
    CHECK(objects[id].front().primary);
    CHECK(objects[id].front().state == "SEALED");
    CHECK(objects[id].front().size >= static_cast<uint64_t>(32 * kMiB));
    CHECK(StoreOf().used >= static_cast<uint64_t>(32 * kMiB));
    // Its node tells the GCS it holds a primary copy (what keeps an autoscaler from draining it).
    CHECK(WaitFor([&] { return ReportedPrimaryObjects() >= 1; }, 10s));
    // A copy of the ref keeps it; a view keeps it pinned while it lives.
    auto copy = ref;
    auto view = rayd::GetView(copy);
    CHECK(StoredObjects()[id].front().pins >= 1);
  }
  // All handles gone: the owner frees it on its node.
  CHECK(WaitFor([&] { return StoredObjects().count(id) == 0; }, 10s));
  CHECK(StoreOf().used < static_cast<uint64_t>(32 * kMiB));
  CHECK(WaitFor([&] { return ReportedPrimaryObjects() == 0; }, 10s));
}

TEST_CASE("objects: a borrower that keeps a ref keeps the object until it lets go",
          "[integration]") {
  EmbeddedRayd rayd(256 * kMiB);
  auto keeper = rayd::Actor(Keeper::Create).Remote();
  const auto data = Pattern(4 * kMiB, 11);
  std::string id;
  {
    auto ref = rayd::Put(data);
    id = ref.ID();
    REQUIRE(*rayd::Get(keeper.Task(&Keeper::Keep).Remote(ref), 60000) == 0);
  }
  // The driver's free, if it were sent, goes to the node before this Get does.
  auto other = rayd::Put(Pattern(kMiB, 12));
  rayd::GetView(other);
  CHECK(StoredObjects().count(id) == 1);
  CHECK(*rayd::Get(keeper.Task(&Keeper::ChecksumKept).Remote(), 60000) == Checksum(data));
  // Once the borrower lets go, the owner frees it.
  REQUIRE(*rayd::Get(keeper.Task(&Keeper::Drop).Remote(), 60000) == 0);
  CHECK(WaitFor([&] { return StoredObjects().count(id) == 0; }, 10s));
}

TEST_CASE("objects: objects owned by a worker are deleted when it exits", "[integration]") {
  EmbeddedRayd rayd(256 * kMiB);
  auto keeper = rayd::Actor(Keeper::Create).Remote();
  const std::string id = *rayd::Get(keeper.Task(&Keeper::PutOwn).Remote(int64_t{4 * kMiB}), 60000);
  auto stored = StoredObjects();
  REQUIRE(stored.count(id) == 1);
  keeper.Kill();
  CHECK(WaitFor([&] { return StoredObjects().count(id) == 0; }, 10s));
}

TEST_CASE("objects: under memory pressure objects spill to disk and come back intact",
          "[integration]") {
  EmbeddedRayd rayd(64 * kMiB);
  std::vector<rayd::ObjectRef<std::vector<float>>> refs;
  std::vector<uint64_t> sums;
  for (int i = 0; i < 6; ++i) {  // 6 x 16 MiB into a 64 MiB store
    auto v = Pattern(4 * kMiB, 10 + i);
    sums.push_back(Checksum(v));
    refs.push_back(rayd::Put(v));
  }
  auto store = StoreOf();
  CHECK(store.total_spilled >= 2);
  CHECK(store.used <= static_cast<uint64_t>(64 * kMiB));
  size_t spilled = 0;
  for (const auto& [id, copies] : StoredObjects()) spilled += copies.front().state == "SPILLED";
  CHECK(spilled >= 2);
  // Every one reads back intact, restored on demand (evicting or spilling others).
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < refs.size(); ++i) {
      INFO("object " << i << " round " << round);
      CHECK(Checksum(rayd::GetView(refs[i])) == sums[i]);
    }
  }
  CHECK(StoreOf().total_restored >= 2);
}

TEST_CASE("objects: a Put that can never fit fails at once with ObjectStoreFullError",
          "[integration]") {
  EmbeddedRayd rayd(32 * kMiB);
  try {
    rayd::Put(std::vector<float>(16 * kMiB));  // 64 MiB
    FAIL("the Put succeeded");
  } catch (const rayd::ObjectStoreFullError& e) {
    CHECK_THAT(e.what(), Contains("never fit"));
  }
  // The store still works.
  auto ok = rayd::Put(Pattern(kMiB, 5));
  CHECK(Checksum(rayd::GetView(ok)) == Checksum(Pattern(kMiB, 5)));
}

TEST_CASE("objects: two node daemons move objects between their stores", "[integration]") {
  CliCluster cluster;
  const std::string head =
      cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "1",
                     "--resources", R"({"at_head":1})", "--object-store-memory", "256MiB"});
  const std::string other =
      cluster.Start({"--address", cluster.address(), "--num-cpus", "1", "--resources",
                     R"({"at_other":1})", "--object-store-memory", "256MiB"});
  cluster.InitDriver();
  // Both daemons run on this host: the driver attaches to one of them; work goes to the other.
  const std::string local = rayd::GetNodeId();
  REQUIRE((local == head || local == other));
  const std::string far = local == head ? other : head;
  const std::string far_resource = local == head ? "at_other" : "at_head";
  REQUIRE(*rayd::Get(rayd::Task(NodeOfWorker).SetResource(far_resource, 1).Remote(), 60000) ==
          far);

  // Made on the far node, read here: pulled into the local store.
  auto made =
      rayd::Task(MakePattern).SetResource(far_resource, 1).Remote(int64_t{8 * kMiB}, 6);
  auto view = rayd::GetView(made, 60000);
  CHECK(view.in_shared_memory());
  CHECK(InArena(view.data()));
  CHECK(Checksum(view) == Checksum(Pattern(8 * kMiB, 6)));
  std::set<std::string> copies;
  auto stored = StoredObjects();
  for (const auto& c : stored[made.ID()]) {
    copies.insert(c.node_id + (c.primary ? ":primary" : ":copy"));
  }
  CHECK(copies == std::set<std::string>{far + ":primary", local + ":copy"});

  // Put here, read there.
  const auto data = Pattern(8 * kMiB, 7);
  auto put = rayd::Put(data);
  CHECK(*rayd::Get(rayd::Task(ChecksumOf).SetResource(far_resource, 1).Remote(put), 60000) ==
        Checksum(data));

  // Dropping the refs frees every copy on both nodes.
  const std::string made_id = made.ID(), put_id = put.ID();
  view = rayd::ArrayView<float>();
  made = rayd::ObjectRef<std::vector<float>>();
  put = rayd::ObjectRef<std::vector<float>>();
  std::map<std::string, std::vector<rayd::ObjectSummary>> left;
  CHECK(WaitFor(
      [&] {
        left = StoredObjects();
        return left.count(made_id) == 0 && left.count(put_id) == 0;
      },
      10s));
}

TEST_CASE("objects: losing the only node that held an object raises ObjectLostError",
          "[integration]") {
  CliCluster cluster;
  ThreeNodes nodes(cluster);
  auto made = rayd::Task(MakePattern).SetResource(nodes.far_resource, 1).SetMaxRetries(0).Remote(
      int64_t{kMiB}, 8);
  REQUIRE(rayd::Wait(std::vector{made}, 1, 60000).ready.size() == 1);
  nodes.KillFar(cluster);
  try {
    rayd::GetView(made, 60000);
    FAIL("Get of a lost object succeeded");
  } catch (const rayd::ObjectLostError& e) {
    CHECK_THAT(e.what(), Contains(made.ID()));
  }
}

TEST_CASE("objects: a lost result whose task can run again is reconstructed", "[integration]") {
  CliCluster cluster;
  ThreeNodes nodes(cluster);
  // Retryable (the default), with plain values for arguments: its lineage is kept.
  auto made = rayd::Task(MakePattern).SetResource(nodes.far_resource, 1).Remote(int64_t{kMiB}, 9);
  REQUIRE(rayd::Wait(std::vector{made}, 1, 60000).ready.size() == 1);
  nodes.KillFar(cluster);
  // Once the cluster knows the node is dead, a replacement with the same resource joins.
  REQUIRE(WaitFor(
      [&] {
        auto list = cluster.TryJson({"list", "nodes"});
        if (!list) return false;
        for (const auto& n : *list) {
          if (n.at("node_id") == nodes.far) return n.at("state") == "DEAD";
        }
        return false;
      },
      30s));
  const std::string replacement =
      cluster.Start({"--address", cluster.address(), "--num-cpus", "1", "--resources",
                     "{\"" + nodes.far_resource + "\":1}", "--object-store-memory", "128MiB"});

  auto view = rayd::GetView(made, 60000);
  CHECK(Checksum(view) == Checksum(Pattern(kMiB, 9)));
  auto stored = StoredObjects();
  std::set<std::string> primaries;
  for (const auto& c : stored[made.ID()]) {
    if (c.primary) primaries.insert(c.node_id);
  }
  CHECK(primaries == std::set<std::string>{replacement});
}

TEST_CASE("objects: a driver's objects are deleted when it ends", "[integration]") {
  CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "1",
                 "--object-store-memory", "128MiB"});
  cluster.InitDriver();
  auto ref = rayd::Put(Pattern(4 * kMiB, 14));
  const std::string id = ref.ID();
  auto listed = [&] {
    for (const auto& o : cluster.Json({"list", "objects"})) {
      if (o.at("object_id") == id) return true;
    }
    return false;
  };
  CHECK(listed());
  rayd::Shutdown();  // the ref outlives the runtime: nothing frees it but the node
  CHECK(WaitFor([&] { return !listed(); }, 10s));
}
