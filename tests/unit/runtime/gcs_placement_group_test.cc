// The GCS placement-group manager over real RPC: a GcsServer on its own thread reserving bundles
// on fake node daemons (which record every PREPARE, COMMIT and CANCEL and hold what they are
// asked to), with retries, infeasible groups, node death, job end, a restarted GCS, and actors
// placed in bundles or by node affinity and labels.

#include "gcs_harness.h"

namespace rayd::gcs {
namespace {

using Method = proto::Method;
using State = proto::PlacementGroupState;
using Strategy = proto::PlacementStrategy;

const scheduler::ResourceSet kOneCpu{{"CPU", 1}};

// What `node` holds of group `id` (prepared or committed).
std::set<uint32_t> Held(FakeNode& node, const std::string& id) {
  return node.record().Locked([&] {
    auto it = node.record().held.find(id);
    return it == node.record().held.end() ? std::set<uint32_t>() : it->second;
  });
}

// The bundle calls `node` got for group `id`, in arrival order.
std::vector<Record::BundleCall> CallsFor(FakeNode& node, const std::string& id) {
  return node.record().Locked([&] {
    std::vector<Record::BundleCall> out;
    for (const auto& call : node.record().bundle_calls) {
      if (call.group == id) out.push_back(call);
    }
    return out;
  });
}

size_t Count(const std::vector<Record::BundleCall>& calls, Method method) {
  return std::count_if(calls.begin(), calls.end(),
                       [&](const Record::BundleCall& c) { return c.method == method; });
}

TEST_CASE("a STRICT_SPREAD group over three nodes is prepared everywhere, then committed",
          "[gcs][placement]") {
  GcsThread gcs;
  FakeNode a("a", 2), b("b", 2), c("c", 2);
  Client client(gcs.address());
  for (FakeNode* n : {&a, &b, &c}) client.Register(n->info());
  auto id = client.CreateGroup({.job_id = client.AddJob(),
                                .bundles = {kOneCpu, kOneCpu, kOneCpu},
                                .strategy = Strategy::STRICT_SPREAD,
                                .name = "spread"});
  REQUIRE(id.ok());
  // Held until settled: the reply is the CREATED group.
  GroupView v = client.GetGroup(*id, /*wait=*/true);
  REQUIRE(v.state == State::CREATED);
  CHECK(v.cause.empty());
  CHECK(v.ready_time_ms > 0);
  CHECK(std::set<std::string>(v.nodes.begin(), v.nodes.end()) ==
        std::set<std::string>{a.id(), b.id(), c.id()});
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    for (FakeNode* n : {&a, &b, &c}) {
      if (n->id() != v.nodes[i]) continue;
      CHECK(v.addresses[i] == n->info().address);
      CHECK(Held(*n, *id) == std::set<uint32_t>{static_cast<uint32_t>(i)});
      // Two phases: a prepare without commit, then the commit.
      const auto calls = CallsFor(*n, *id);
      REQUIRE(calls.size() == 2);
      CHECK(calls[0].method == Method::PREPARE_BUNDLES);
      CHECK_FALSE(calls[0].commit);
      CHECK(calls[0].indexes == std::vector<uint32_t>{static_cast<uint32_t>(i)});
      CHECK(calls[1].method == Method::COMMIT_BUNDLES);
      // Each names the incarnation it is for (a node that rejoined since refuses it).
      for (const auto& call : calls) CHECK(call.node_id == n->id());
    }
  }
  CHECK(client.GetGroupByName("", "spread").id == *id);
  auto all = client.AllGroups();
  REQUIRE(all.size() == 1);
  CHECK(all[0].strategy == Strategy::STRICT_SPREAD);
  CHECK_FALSE(client.GetGroup(JobId::FromRandom().Hex()).found);
}

TEST_CASE("groups are placed around draining nodes, and wait when only those could hold them",
          "[gcs][placement][drain]") {
  GcsThread gcs;
  FakeNode a("a", 2), b("b", 2), c("c", 2);
  Client client(gcs.address());
  for (FakeNode* n : {&a, &b, &c}) client.Register(n->info());
  auto drain = [&](const FakeNode& n) {
    REQUIRE(client
                .Call<Method::DRAIN_NODE>([&](proto::DrainNodeRequest::Builder r) {
                  r.setNodeId(n.id());
                  r.setDeadlineMs(NowUnixMs() + 60'000);
                  r.setReason("spot preemption");
                })
                .ok());
  };
  auto spread = [&](const std::string& name, int bundles) {
    auto id = client.CreateGroup({.job_id = client.AddJob(),
                                  .bundles = std::vector(bundles, kOneCpu),
                                  .strategy = Strategy::STRICT_SPREAD,
                                  .name = name});
    REQUIRE(id.ok());
    return *id;
  };
  drain(a);
  const std::string around = spread("around", 2);
  GroupView v = client.GetGroup(around, /*wait=*/true);
  REQUIRE(v.state == State::CREATED);
  CHECK(std::set<std::string>(v.nodes.begin(), v.nodes.end()) ==
        std::set<std::string>{b.id(), c.id()});
  CHECK(CallsFor(a, around).empty());

  // b drains too: two bundles on two nodes no longer fit anywhere; one does, on c.
  drain(b);
  const std::string two = spread("two", 2);
  CHECK(client.GetGroup(two, /*wait=*/true).state != State::CREATED);
  CHECK(CallsFor(a, two).empty());
  CHECK(CallsFor(b, two).empty());
  const std::string one = spread("one", 1);
  GroupView w = client.GetGroup(one, /*wait=*/true);
  REQUIRE(w.state == State::CREATED);
  CHECK(w.nodes == std::vector<std::string>{c.id()});
}

TEST_CASE("a group that lies on one node is reserved with one PREPARE that commits",
          "[gcs][placement]") {
  GcsThread gcs;
  FakeNode a("a", 4);
  Client client(gcs.address());
  client.Register(a.info());
  auto id = client.CreateGroup({.job_id = client.AddJob(), .bundles = {kOneCpu, kOneCpu}});
  REQUIRE(id.ok());
  GroupView v = client.GetGroup(*id, true);
  REQUIRE(v.state == State::CREATED);
  CHECK(v.nodes == std::vector<std::string>{a.id(), a.id()});
  const auto calls = CallsFor(a, *id);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].method == Method::PREPARE_BUNDLES);
  CHECK(calls[0].commit);
  CHECK(calls[0].indexes == std::vector<uint32_t>{0, 1});
}

TEST_CASE("CREATE_PLACEMENT_GROUP refuses malformed groups and taken names", "[gcs][placement]") {
  GcsThread gcs;
  FakeNode a("a", 4);
  Client client(gcs.address());
  client.Register(a.info());
  const std::string job = client.AddJob();

  auto none = client.CreateGroup({.job_id = job});
  CHECK(none.status().code() == StatusCode::kInvalidArgument);
  CHECK(none.status().message() == "placement group needs at least one bundle");
  auto empty = client.CreateGroup({.job_id = job, .bundles = {kOneCpu, {}}});
  CHECK(empty.status().code() == StatusCode::kInvalidArgument);
  CHECK(empty.status().message() ==
        "bundle 1 is empty: every bundle needs a positive amount of some resource");
  Status negative = client.Call<Method::CREATE_PLACEMENT_GROUP>(
      [&](proto::CreatePlacementGroupRequest::Builder r) {
        auto g = r.initGroup();
        g.setPlacementGroupId(JobId::FromRandom().Hex());
        auto amount = g.initBundles(1)[0].initResources(1)[0];
        amount.setName("CPU");
        amount.setUnits(-10000);
      });
  CHECK(negative.code() == StatusCode::kInvalidArgument);
  CHECK(negative.message() == "bundle 0 asks for a negative amount of CPU");
  auto bad_id = client.CreateGroup({.job_id = job, .bundles = {kOneCpu}}, "not-an-id");
  CHECK(bad_id.status().code() == StatusCode::kInvalidArgument);

  auto first =
      client.CreateGroup({.job_id = job, .bundles = {kOneCpu}, .name = "g", .ray_namespace = "ns"});
  REQUIRE(first.ok());
  auto taken =
      client.CreateGroup({.job_id = job, .bundles = {kOneCpu}, .name = "g", .ray_namespace = "ns"});
  CHECK(taken.status().code() == StatusCode::kAlreadyExists);
  CHECK(taken.status().message() == "a placement group named 'g' already exists in namespace 'ns'");
  // The same request again (a caller retrying) finds its group.
  auto again = client.CreateGroup(
      {.job_id = job, .bundles = {kOneCpu}, .name = "g", .ray_namespace = "ns"}, *first);
  CHECK(again.ok());
  CHECK(client.AllGroups().size() == 1);
}

// Registers nodes `a` and `b` and adds a job; the job's id.
std::string RegisterTwoAndJob(Client& client, FakeNode& a, FakeNode& b) {
  client.Register(a.info());
  client.Register(b.info());
  return client.AddJob();
}

// A STRICT_SPREAD group of two 1-CPU bundles for `job`: one bundle on each of two nodes.
auto SpreadOverTwo(Client& client, const std::string& job) {
  return client.CreateGroup(
      {.job_id = job, .bundles = {kOneCpu, kOneCpu}, .strategy = Strategy::STRICT_SPREAD});
}

TEST_CASE("a node that refuses a prepare gets the others cancelled, and the group is retried",
          "[gcs][placement]") {
  GcsThread gcs;
  FakeNode a("a", 1), b("b", 1);
  a.record().Locked([&] { a.record().prepare_error = "no room for {CPU: 1}"; });
  Client client(gcs.address());
  const std::string job = RegisterTwoAndJob(client, a, b);
  auto id = SpreadOverTwo(client, job);
  REQUIRE(id.ok());
  // An actor of the group waits for it.
  auto actor = client.Create({.job_id = job, .placement_group_id = *id, .bundle_index = 1});
  REQUIRE(actor.ok());
  // b's part of each failed attempt is cancelled, and the group is tried again.
  REQUIRE(WaitFor(
      [&] {
        const auto calls = CallsFor(b, *id);
        return Count(CallsFor(a, *id), Method::PREPARE_BUNDLES) >= 2 &&
               Count(calls, Method::CANCEL_BUNDLES) >= 1;
      },
      10000ms));
  for (const auto& call : CallsFor(b, *id)) {
    if (call.method == Method::CANCEL_BUNDLES) CHECK_FALSE(call.indexes.empty());
    CHECK(call.method != Method::COMMIT_BUNDLES);
  }
  CHECK(client.GetGroup(*id).state == State::PENDING);
  CHECK(client.Get(*actor).state == proto::ActorState::PENDING_CREATION);

  a.record().Locked([&] { a.record().prepare_error.clear(); });
  GroupView v = client.WaitGroupState(*id, State::CREATED);
  REQUIRE(v.state == State::CREATED);
  CHECK(Held(a, *id).size() == 1);
  CHECK(Held(b, *id).size() == 1);
  // The group becoming ready places the waiting actor on its bundle's node.
  ActorView placed = client.WaitState(*actor, proto::ActorState::ALIVE);
  CHECK(placed.node_id == v.nodes[1]);
}

TEST_CASE("a prepare whose reply is lost is cancelled on its node, so nothing stays held there",
          "[gcs][placement]") {
  GcsThread gcs;
  FakeNode a("a", 1), b("b", 1);
  // a reserves, but the GCS hears a failure (a timeout, a dropped connection), not a refusal.
  a.record().Locked([&] { a.record().prepare_lost_reply = "connection reset"; });
  Client client(gcs.address());
  auto id = SpreadOverTwo(client, RegisterTwoAndJob(client, a, b));
  REQUIRE(id.ok());
  // The attempt is abandoned and cancelled on a as well as on b: a holds nothing of it.
  REQUIRE(WaitFor(
      [&] {
        return Count(CallsFor(a, *id), Method::PREPARE_BUNDLES) >= 2 &&
               Count(CallsFor(a, *id), Method::CANCEL_BUNDLES) >= 1;
      },
      10000ms));
  a.record().Locked([&] { a.record().prepare_lost_reply.clear(); });
  GroupView v = client.WaitGroupState(*id, State::CREATED);
  REQUIRE(v.state == State::CREATED);
  // Each node holds its one bundle of the group, and nothing left from the failed attempts.
  CHECK(Held(a, *id).size() == 1);
  CHECK(Held(b, *id).size() == 1);
  CHECK(client.RemoveGroup(*id).ok());
  CHECK(WaitFor([&] { return Held(a, *id).empty() && Held(b, *id).empty(); }, 10000ms));
}

TEST_CASE("an infeasible group waits with its reason, then fails after the infeasible timeout",
          "[gcs][placement][infeasible]") {
  GcsThread gcs(nullptr, Millis(1500));
  FakeNode a("a", 4);
  Client client(gcs.address());
  client.Register(a.info());
  const std::string job = client.AddJob();
  auto id = client.CreateGroup({.job_id = job, .bundles = {{{"CPU", 8}}}, .name = "big"});
  REQUIRE(id.ok());
  GroupView pending = client.GetGroup(*id);
  CHECK(pending.state == State::PENDING);
  CHECK(pending.cause.rfind("infeasible: ", 0) == 0);
  CHECK(Contains(pending.cause, "CPU: 8"));
  CHECK(Contains(pending.cause, "largest node"));
  // Held until the timeout settles it.
  GroupView failed = client.GetGroup(*id, /*wait=*/true);
  CHECK(failed.state == State::FAILED);
  CHECK(failed.cause == pending.cause);
  CHECK_FALSE(client.GetGroupByName("", "big").found);
  CHECK(CallsFor(a, *id).empty());
  // Work aimed at it fails with its reason instead of waiting.
  auto actor = client.Create({.job_id = job, .placement_group_id = *id, .bundle_index = 0});
  REQUIRE(actor.ok());
  ActorView dead = client.Get(*actor, true);
  CHECK(dead.state == proto::ActorState::DEAD);
  CHECK(dead.death_cause == "placement group " + *id + " failed: " + pending.cause);
}

TEST_CASE("an infeasible group is created once a node that fits registers in time",
          "[gcs][placement][infeasible]") {
  GcsThread gcs(nullptr, Millis(30000));
  FakeNode small("small", 2), joining("joining", 2);
  Client client(gcs.address());
  client.Register(small.info());
  auto id = client.CreateGroup({.job_id = client.AddJob(),
                                .bundles = {kOneCpu, kOneCpu},
                                .strategy = Strategy::STRICT_SPREAD});
  REQUIRE(id.ok());
  GroupView pending = client.GetGroup(*id);
  CHECK(pending.state == State::PENDING);
  CHECK(pending.cause.rfind("infeasible: STRICT_SPREAD", 0) == 0);
  client.Register(joining.info());
  GroupView v = client.GetGroup(*id, true);
  CHECK(v.state == State::CREATED);
  CHECK(std::set<std::string>(v.nodes.begin(), v.nodes.end()) ==
        std::set<std::string>{small.id(), joining.id()});
}

TEST_CASE("removing a group cancels its bundles and kills its actors, and twice is fine",
          "[gcs][placement][actors]") {
  GcsThread gcs;
  FakeNode a("a", 4);
  Client client(gcs.address());
  client.Register(a.info());
  const std::string job = client.AddJob();
  auto id = client.CreateGroup({.job_id = job, .bundles = {kOneCpu, kOneCpu}, .name = "g"});
  REQUIRE(id.ok());
  REQUIRE(client.GetGroup(*id, true).state == State::CREATED);

  // An actor in bundle 1 is leased from that bundle, on its node.
  auto member = client.Create({.job_id = job, .placement_group_id = *id, .bundle_index = 1});
  REQUIRE(member.ok());
  ActorView alive = client.Get(*member, true);
  REQUIRE(alive.state == proto::ActorState::ALIVE);
  CHECK(alive.node_id == a.id());
  a.record().Locked([&] {
    CHECK(a.record().lease_bundles == std::vector<std::pair<std::string, int>>{{*id, 1}});
  });
  // Any bundle (-1) that fits: the lease names the one chosen.
  auto any = client.Create({.job_id = job, .placement_group_id = *id});
  REQUIRE(any.ok());
  REQUIRE(client.Get(*any, true).state == proto::ActorState::ALIVE);
  a.record().Locked([&] {
    REQUIRE(a.record().lease_bundles.size() == 2);
    CHECK(a.record().lease_bundles[1].first == *id);
    CHECK(a.record().lease_bundles[1].second >= 0);
  });
  // Work that can never run in the group is DEAD with the reason.
  auto no_such = client.Create({.job_id = job, .placement_group_id = *id, .bundle_index = 5});
  auto too_big = client.Create(
      {.job_id = job, .resources = {{"CPU", 2}}, .placement_group_id = *id, .bundle_index = 0});
  REQUIRE(no_such.ok());
  REQUIRE(too_big.ok());
  CHECK(Contains(client.Get(*no_such, true).death_cause, "has no bundle 5"));
  // Too big for its bundle: infeasible (after the manager's infeasible timeout, 0 here).
  CHECK(Contains(client.Get(*too_big, true).death_cause,
                 "infeasible: {CPU: 2} does not fit bundle 0"));

  REQUIRE(client.RemoveGroup(*id).ok());
  GroupView removed = client.GetGroup(*id);
  CHECK(removed.state == State::REMOVED);
  CHECK(removed.nodes == std::vector<std::string>{"", ""});
  CHECK_FALSE(client.GetGroupByName("", "g").found);
  ActorView dead = client.Get(*member);
  CHECK(dead.state == proto::ActorState::DEAD);
  CHECK(dead.death_cause == "its placement group " + *id + " was removed");
  REQUIRE(WaitFor(
      [&] {
        return Held(a, *id).empty() && a.record().Locked([&] {
          return Contains(a.record().killed_workers, alive.worker_id);
        });
      },
      10000ms));
  const auto cancels = CallsFor(a, *id);
  CHECK(cancels.back().method == Method::CANCEL_BUNDLES);
  CHECK(cancels.back().indexes.empty());  // all of them
  CHECK(cancels.back().node_id == a.id());

  CHECK(client.RemoveGroup(*id).ok());
  CHECK(client.RemoveGroup(JobId::FromRandom().Hex()).code() == StatusCode::kNotFound);
  // The name is free again.
  CHECK(client.CreateGroup({.job_id = job, .bundles = {kOneCpu}, .name = "g"}).ok());
}

TEST_CASE("a dead node's bundles alone are placed again, away from the surviving bundles",
          "[gcs][placement][restart]") {
  GcsThread gcs;
  FakeNode a("a", 2), b("b", 2), c("c", 2);
  std::vector<FakeNode*> nodes{&a, &b, &c};
  Client client(gcs.address());
  for (FakeNode* n : nodes) client.Register(n->info());
  const std::string job = client.AddJob();
  auto id = client.CreateGroup(
      {.job_id = job, .bundles = {kOneCpu, kOneCpu}, .strategy = Strategy::STRICT_SPREAD});
  REQUIRE(id.ok());
  GroupView before = client.GetGroup(*id, true);
  REQUIRE(before.state == State::CREATED);
  auto by_id = [&](const std::string& node_id) {
    return *std::find_if(nodes.begin(), nodes.end(),
                         [&](FakeNode* n) { return n->id() == node_id; });
  };
  FakeNode& survivor = *by_id(before.nodes[0]);
  FakeNode& victim = *by_id(before.nodes[1]);
  FakeNode& spare = **std::find_if(nodes.begin(), nodes.end(),
                                   [&](FakeNode* n) { return n != &survivor && n != &victim; });
  auto member = client.Create(
      {.job_id = job, .max_restarts = 1, .placement_group_id = *id, .bundle_index = 1});
  REQUIRE(member.ok());
  REQUIRE(client.Get(*member, true).node_id == victim.id());

  client.Unregister(victim.info().node_id);
  GroupView after;
  REQUIRE(WaitFor(
      [&] {
        after = client.GetGroup(*id);
        return after.state == State::CREATED && after.nodes[1] == spare.id();
      },
      10000ms));
  // The surviving bundle never moved: its node was neither cancelled nor asked again, and
  // STRICT_SPREAD kept the lost bundle off it although it had room.
  CHECK(after.nodes[0] == survivor.id());
  CHECK(Count(CallsFor(survivor, *id), Method::CANCEL_BUNDLES) == 0);
  CHECK(Count(CallsFor(survivor, *id), Method::PREPARE_BUNDLES) == 1);
  const auto moved = CallsFor(spare, *id);
  REQUIRE(moved.size() == 1);
  CHECK(moved[0].indexes == std::vector<uint32_t>{1});
  CHECK(moved[0].commit);  // one node: one phase
  // The actor of the lost bundle restarts on the bundle's new node.
  ActorView restarted;
  REQUIRE(WaitFor(
      [&] {
        restarted = client.Get(*member, true);
        return restarted.state == proto::ActorState::ALIVE && restarted.num_restarts == 1;
      },
      10000ms));
  CHECK(restarted.node_id == spare.id());
}

TEST_CASE("a job that ends removes its groups that are not detached", "[gcs][placement][jobs]") {
  GcsThread gcs;
  FakeNode a("a", 4);
  Client observer(gcs.address());
  observer.Register(a.info());
  std::string plain, detached;
  {
    Client driver(gcs.address());
    const std::string job = driver.AddJob();
    auto p = driver.CreateGroup({.job_id = job, .bundles = {kOneCpu}});
    auto d = driver.CreateGroup(
        {.job_id = job, .bundles = {kOneCpu}, .name = "keeper", .detached = true});
    REQUIRE(p.ok());
    REQUIRE(d.ok());
    plain = *p;
    detached = *d;
    REQUIRE(driver.GetGroup(plain, true).state == State::CREATED);
    REQUIRE(driver.GetGroup(detached, true).state == State::CREATED);
  }  // the driver's connection closes here
  GroupView removed = observer.WaitGroupState(plain, State::REMOVED);
  CHECK(removed.cause == "its job ended");
  REQUIRE(WaitFor([&] { return Held(a, plain).empty(); }, 10000ms));
  CHECK(observer.GetGroup(detached).state == State::CREATED);
  CHECK(observer.GetGroupByName("", "keeper").id == detached);
  CHECK(Held(a, detached) == std::set<uint32_t>{0});
}

TEST_CASE("a new GCS on the same in-memory store keeps CREATED groups and redoes pending ones",
          "[gcs][placement][recovery]") {
  auto store = MakeInMemoryTableStore();
  GcsThread::MakeStore same = [&](EventLoop&, std::unique_ptr<TableStore>&) {
    return store.get();
  };
  FakeNode a("a", 2);
  std::string kept, waiting;
  GroupView before;
  {
    GcsThread gcs(same);
    Client client(gcs.address());
    client.Register(a.info());
    const std::string job = client.AddJob();
    auto k = client.CreateGroup(
        {.job_id = job, .bundles = {{{"CPU", 2}}}, .name = "kept", .detached = true});
    REQUIRE(k.ok());
    kept = *k;
    before = client.GetGroup(kept, true);
    REQUIRE(before.state == State::CREATED);
    // The node is full (as far as this head knows): this one waits.
    auto w = client.CreateGroup({.job_id = job, .bundles = {{{"CPU", 2}}}, .detached = true});
    REQUIRE(w.ok());
    waiting = *w;
    CHECK(client.GetGroup(waiting).state == State::PENDING);
  }
  GcsThread gcs(same);
  Client client(gcs.address());
  GroupView after = client.GetGroup(kept);
  CHECK(after.state == State::CREATED);
  CHECK(after.nodes == before.nodes);
  CHECK(after.addresses == before.addresses);
  CHECK(client.GetGroupByName("", "kept").id == kept);
  CHECK(Count(CallsFor(a, kept), Method::PREPARE_BUNDLES) == 1);  // not reserved again
  // The pending one is scheduled again, after a cancel of whatever its interrupted attempt
  // may have prepared (this node reports nothing, so the new head sees room and places it).
  GroupView redone = client.WaitGroupState(waiting, State::CREATED);
  REQUIRE(redone.state == State::CREATED);
  const auto calls = CallsFor(a, waiting);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].method == Method::CANCEL_BUNDLES);
  CHECK(calls[0].indexes == std::vector<uint32_t>{0});
  CHECK(calls[1].method == Method::PREPARE_BUNDLES);
}

TEST_CASE("node affinity and label selectors choose an actor's node", "[gcs][actors][affinity]") {
  GcsThread gcs;
  FakeNode a("a", 4), b("b", 4), zoned("zoned", 4, {{"zone", "b"}});
  Client client(gcs.address());
  for (FakeNode* n : {&a, &b, &zoned}) client.Register(n->info());
  const std::string job = client.AddJob();
  for (FakeNode* target : {&a, &b}) {
    auto pinned = client.Create({.job_id = job, .node_affinity = target->id()});
    REQUIRE(pinned.ok());
    ActorView v = client.Get(*pinned, true);
    CHECK(v.state == proto::ActorState::ALIVE);
    CHECK(v.node_id == target->id());
  }
  auto labelled = client.Create({.job_id = job, .label_selector = {{"zone", "b"}}});
  REQUIRE(labelled.ok());
  CHECK(client.Get(*labelled, true).node_id == zoned.id());

  const std::string nowhere = NodeId::FromRandom().Hex();
  auto hard = client.Create({.job_id = job, .node_affinity = nowhere});
  REQUIRE(hard.ok());
  ActorView dead = client.Get(*hard, true);
  CHECK(dead.state == proto::ActorState::DEAD);
  CHECK(dead.death_cause == "its node affinity names node " + nowhere + ", which is not alive");
  auto soft = client.Create({.job_id = job, .node_affinity = nowhere, .affinity_soft = true});
  REQUIRE(soft.ok());
  CHECK(client.Get(*soft, true).state == proto::ActorState::ALIVE);
}

}  // namespace
}  // namespace rayd::gcs
