// The GCS actor manager and job cleanup over real RPC: a GcsServer on its own thread, fake node
// daemons that grant leases and record what the GCS asks of them, and fake core workers that
// answer the actor creation task (with a value or with a constructor error).

#include "gcs_harness.h"
#include "redis_server.h"

namespace rayd::gcs {
namespace {

TEST_CASE("an actor is created on a node and becomes ALIVE at its worker", "[gcs][actors]") {
  GcsThread gcs;
  FakeNode node("a", 4);
  Client client(gcs.address());
  client.Register(node.info());
  const std::string job = client.AddJob();
  auto id = client.Create({.job_id = job});
  REQUIRE(id.ok());
  // Held until settled: the reply is the ALIVE actor.
  ActorView v = client.Get(*id, /*wait=*/true);
  REQUIRE(v.found);
  CHECK(v.state == proto::ActorState::ALIVE);
  CHECK(v.address == node.worker_address());
  CHECK(v.node_id == node.id());
  CHECK(v.worker_id.size() == 32);
  CHECK(v.job_id == job);
  CHECK(v.num_restarts == 0);
  node.record().Locked([&] {
    CHECK(node.record().lease_jobs == std::vector<std::string>{job});
    CHECK(node.record().pushes == std::vector<std::pair<std::string, int>>{{*id, 0}});
    CHECK(node.record().malformed == 0);
  });
  CHECK_FALSE(client.Get("0123456789abcdef0123456789abcdef").found);
  auto all = client.All();
  REQUIRE(all.size() == 1);
  CHECK(all[0].id == *id);
}

TEST_CASE("named actors are found by name and names are unique per namespace", "[gcs][actors]") {
  GcsThread gcs;
  FakeNode node("a", 8);
  Client client(gcs.address());
  client.Register(node.info());
  const std::string job = client.AddJob();
  auto id = client.Create({.job_id = job, .name = "c", .ray_namespace = "ns"});
  REQUIRE(id.ok());
  ActorView byname = client.GetByName("ns", "c");
  REQUIRE(byname.found);
  CHECK(byname.id == *id);
  CHECK_FALSE(client.GetByName("other", "c").found);

  auto dup = client.Create({.job_id = job, .name = "c", .ray_namespace = "ns"});
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.status().code() == StatusCode::kAlreadyExists);
  CHECK(dup.status().message() == "an actor named 'c' already exists in namespace 'ns'");
  // The same name in another namespace is another actor.
  auto other = client.Create({.job_id = job, .name = "c", .ray_namespace = "other"});
  REQUIRE(other.ok());
  CHECK(client.GetByName("other", "c").id == *other);

  // Once dead, the name is free again.
  REQUIRE(client.Kill(*id, /*no_restart=*/true).ok());
  CHECK_FALSE(client.GetByName("ns", "c").found);
  auto again = client.Create({.job_id = job, .name = "c", .ray_namespace = "ns"});
  REQUIRE(again.ok());
  CHECK(client.GetByName("ns", "c").id == *again);
}

TEST_CASE("a constructor that raises makes the actor DEAD and ends its worker", "[gcs][actors]") {
  GcsThread gcs;
  FakeNode node("a", 4);
  node.record().Locked([&] { node.record().constructor_raises = true; });
  Client client(gcs.address());
  client.Register(node.info());
  auto id = client.Create({.job_id = client.AddJob(), .max_restarts = 3});
  REQUIRE(id.ok());
  ActorView v = client.Get(*id, /*wait=*/true);
  CHECK(v.state == proto::ActorState::DEAD);
  CHECK(v.death_cause == "the actor's constructor raised std::runtime_error: boom");
  CHECK(v.num_restarts == 0);  // a raising constructor is not retried
  REQUIRE(WaitFor(
      [&] { return node.record().Locked([&] { return node.record().returned.size(); }) == 1; },
      10000ms));
  node.record().Locked([&] { CHECK(node.record().returned[0].second); });
}

TEST_CASE("a worker that can't start makes the actor DEAD with the node's reason",
          "[gcs][actors]") {
  GcsThread gcs;
  FakeNode node("a", 4);
  node.record().Locked([&] { node.record().lease_error = "worker failed to start: exec failed"; });
  Client client(gcs.address());
  client.Register(node.info());
  auto id = client.Create({.job_id = client.AddJob(), .max_restarts = -1});
  REQUIRE(id.ok());
  ActorView v = client.Get(*id, /*wait=*/true);
  CHECK(v.state == proto::ActorState::DEAD);
  CHECK(Contains(v.death_cause, "worker failed to start: exec failed"));
}

TEST_CASE("a dead worker restarts its actor until max_restarts, then the actor is DEAD",
          "[gcs][actors][restart]") {
  GcsThread gcs;
  FakeNode node("a", 4);
  Client client(gcs.address());
  client.Register(node.info());
  auto id = client.Create({.job_id = client.AddJob(), .max_restarts = 1});
  REQUIRE(id.ok());
  ActorView first = client.Get(*id, true);
  REQUIRE(first.state == proto::ActorState::ALIVE);

  // A report about some other worker changes nothing.
  client.WorkerFailed(WorkerId::FromRandom().Hex(), node.id(), "exit code 1");
  CHECK(client.Get(*id).state == proto::ActorState::ALIVE);

  client.WorkerFailed(first.worker_id, node.id(), "killed by signal 9");
  ActorView second;
  REQUIRE(WaitFor(
      [&] {
        second = client.Get(*id, /*wait=*/true);
        return second.state == proto::ActorState::ALIVE && second.num_restarts == 1;
      },
      10000ms));
  CHECK(second.worker_id != first.worker_id);
  node.record().Locked([&] {
    CHECK(node.record().pushes == std::vector<std::pair<std::string, int>>{{*id, 0}, {*id, 1}});
  });

  client.WorkerFailed(second.worker_id, node.id(), "killed by signal 9");
  ActorView dead = client.WaitState(*id, proto::ActorState::DEAD);
  CHECK(dead.state == proto::ActorState::DEAD);
  CHECK(dead.death_cause == "the actor's worker died: killed by signal 9");
  CHECK(dead.num_restarts == 1);
}

TEST_CASE("an actor whose node dies is restarted on another node", "[gcs][actors][restart]") {
  GcsThread gcs;
  FakeNode a("a", 4), b("b", 4);
  Client client(gcs.address());
  client.Register(a.info());
  client.Register(b.info());
  auto id = client.Create({.job_id = client.AddJob(), .max_restarts = -1});
  REQUIRE(id.ok());
  ActorView first = client.Get(*id, true);
  REQUIRE(first.state == proto::ActorState::ALIVE);
  FakeNode& home = first.node_id == a.id() ? a : b;
  FakeNode& other = first.node_id == a.id() ? b : a;

  client.Unregister(home.info().node_id);
  ActorView moved;
  REQUIRE(WaitFor(
      [&] {
        moved = client.Get(*id, true);
        return moved.state == proto::ActorState::ALIVE && moved.node_id == other.id();
      },
      10000ms));
  CHECK(moved.num_restarts == 1);
  CHECK(moved.address == other.worker_address());
  other.record().Locked([&] {
    CHECK(other.record().pushes == std::vector<std::pair<std::string, int>>{{*id, 1}});
  });
}

TEST_CASE("an actor whose only node dies and may not restart is DEAD", "[gcs][actors]") {
  GcsThread gcs;
  FakeNode a("a", 4);
  Client client(gcs.address());
  client.Register(a.info());
  auto id = client.Create({.job_id = client.AddJob()});
  REQUIRE(id.ok());
  REQUIRE(client.Get(*id, true).state == proto::ActorState::ALIVE);
  client.Unregister(a.info().node_id);
  ActorView dead = client.WaitState(*id, proto::ActorState::DEAD);
  CHECK(dead.death_cause == "the actor's worker died: its node " + a.id() + " died");
}

TEST_CASE("KILL_ACTOR ends the worker, and with noRestart the actor", "[gcs][actors][kill]") {
  GcsThread gcs;
  FakeNode node("a", 4);
  Client client(gcs.address());
  client.Register(node.info());
  const std::string job = client.AddJob();
  auto restartable = client.Create({.job_id = job, .max_restarts = 5});
  auto doomed = client.Create({.job_id = job, .max_restarts = 5});
  REQUIRE(restartable.ok());
  REQUIRE(doomed.ok());
  ActorView r = client.Get(*restartable, true), d = client.Get(*doomed, true);
  REQUIRE(r.state == proto::ActorState::ALIVE);
  REQUIRE(d.state == proto::ActorState::ALIVE);

  REQUIRE(client.Kill(*doomed, /*no_restart=*/true).ok());
  ActorView dead = client.Get(*doomed);
  CHECK(dead.state == proto::ActorState::DEAD);
  CHECK(dead.death_cause == "killed by its handle");
  REQUIRE(WaitFor(
      [&] {
        return node.record().Locked(
            [&] { return Contains(node.record().killed_workers, d.worker_id); });
      },
      10000ms));
  // Its worker's death report comes later and changes nothing.
  client.WorkerFailed(d.worker_id, node.id(), "killed");
  CHECK(client.Get(*doomed).state == proto::ActorState::DEAD);

  // Without noRestart only the worker is killed; its failure report restarts the actor.
  REQUIRE(client.Kill(*restartable, /*no_restart=*/false).ok());
  REQUIRE(WaitFor(
      [&] {
        return node.record().Locked(
            [&] { return Contains(node.record().killed_workers, r.worker_id); });
      },
      10000ms));
  CHECK(client.Get(*restartable).state == proto::ActorState::ALIVE);
  client.WorkerFailed(r.worker_id, node.id(), "killed");
  REQUIRE(WaitFor(
      [&] {
        ActorView v = client.Get(*restartable, true);
        return v.state == proto::ActorState::ALIVE && v.num_restarts == 1;
      },
      10000ms));

  CHECK(client.Kill("0123456789abcdef0123456789abcdef", true).code() == StatusCode::kNotFound);
}

TEST_CASE("a driver disconnecting ends its job: non-detached actors die, nodes are told",
          "[gcs][actors][jobs]") {
  GcsThread gcs;
  FakeNode node("a", 8);
  Client observer(gcs.address());
  observer.Register(node.info());
  std::string job, plain, detached;
  ActorView plain_view;
  {
    Client driver(gcs.address());
    job = driver.AddJob();
    auto p = driver.Create({.job_id = job});
    auto d = driver.Create({.job_id = job, .name = "keeper", .detached = true});
    REQUIRE(p.ok());
    REQUIRE(d.ok());
    plain = *p;
    detached = *d;
    plain_view = driver.Get(plain, true);
    REQUIRE(plain_view.state == proto::ActorState::ALIVE);
    REQUIRE(driver.Get(detached, true).state == proto::ActorState::ALIVE);
  }  // the driver's connection closes here
  ActorView dead = observer.WaitState(plain, proto::ActorState::DEAD);
  CHECK(dead.death_cause == "its driver exited");
  REQUIRE(WaitFor(
      [&] {
        return node.record().Locked([&] {
          return Contains(node.record().killed_workers, plain_view.worker_id) &&
                 Contains(node.record().finished_jobs, job);
        });
      },
      10000ms));
  ActorView keeper = observer.Get(detached);
  CHECK(keeper.state == proto::ActorState::ALIVE);
  CHECK(observer.GetByName("", "keeper").id == detached);
  bool finished = false;
  auto read_jobs = [&](proto::GetAllJobsReply::Reader r) {
    for (auto j : r.getJobs()) {
      if (j.getJobId() == job) finished = j.getIsDead();
    }
  };
  REQUIRE(observer.Call<proto::Method::GET_ALL_JOBS>(nullptr, read_jobs).ok());
  CHECK(finished);
}

TEST_CASE("JOB_DRIVER_EXITED ends the job once", "[gcs][actors][jobs]") {
  GcsThread gcs;
  FakeNode node("a", 8);
  Client driver(gcs.address());
  driver.Register(node.info());
  const std::string job = driver.AddJob();
  auto id = driver.Create({.job_id = job});
  REQUIRE(id.ok());
  REQUIRE(driver.Get(*id, true).state == proto::ActorState::ALIVE);
  auto exited = [&] {
    return driver.Call<proto::Method::JOB_DRIVER_EXITED>(
        [&](proto::JobDriverRequest::Builder r) { r.setJobId(job); });
  };
  REQUIRE(exited().ok());
  // Answered after the cleanup: the actor is already dead.
  CHECK(driver.Get(*id).state == proto::ActorState::DEAD);
  REQUIRE(exited().ok());
  REQUIRE(WaitFor(
      [&] {
        return node.record().Locked([&] { return Contains(node.record().finished_jobs, job); });
      },
      10000ms));
  // Told once, though the exit was reported twice.
  node.record().Locked([&] {
    CHECK(std::count(node.record().finished_jobs.begin(), node.record().finished_jobs.end(), job) ==
          1);
  });
}

TEST_CASE("an actor no node could ever hold is DEAD as infeasible", "[gcs][actors]") {
  GcsThread gcs;
  FakeNode node("a", 4);
  Client client(gcs.address());
  client.Register(node.info());
  auto id = client.Create({.job_id = client.AddJob(), .resources = {{"CPU", 64}}});
  REQUIRE(id.ok());
  ActorView v = client.Get(*id, true);
  CHECK(v.state == proto::ActorState::DEAD);
  CHECK(Contains(v.death_cause, "infeasible"));
  CHECK(Contains(v.death_cause, "CPU: 64"));
  node.record().Locked([&] { CHECK(node.record().lease_jobs.empty()); });
}

TEST_CASE("an actor waits for room on a full node and is placed once it frees", "[gcs][actors]") {
  GcsThread gcs;
  FakeNode node("a", 1);
  Client client(gcs.address());
  client.Register(node.info());
  const std::string job = client.AddJob();
  auto first = client.Create({.job_id = job});
  REQUIRE(first.ok());
  REQUIRE(client.Get(*first, true).state == proto::ActorState::ALIVE);
  auto second = client.Create({.job_id = job});
  REQUIRE(second.ok());
  // The node has no heartbeat since the first actor took its CPU: the GCS counts it as used.
  CHECK_FALSE(WaitFor(
      [&] { return client.Get(*second).state != proto::ActorState::PENDING_CREATION; }, 600ms));
  REQUIRE(client.Kill(*first, true).ok());
  CHECK(client.WaitState(*second, proto::ActorState::ALIVE).state == proto::ActorState::ALIVE);
}

// The head keeps its view of the cluster between decisions; every heartbeat that changes a
// node's availability must reach it.
TEST_CASE("placement follows heartbeats: a node that reports itself full is passed over until "
          "it reports room",
          "[gcs][actors]") {
  GcsThread gcs;
  FakeNode a("a", 2);
  FakeNode b("b", 2);
  Client client(gcs.address());
  client.Register(a.info());
  client.Register(b.info());
  const std::string job = client.AddJob();
  client.Heartbeat(a.info().node_id, scheduler::ResourceSet{{"CPU", 0}});
  auto first = client.Create({.job_id = job});
  REQUIRE(first.ok());
  const ActorView on_b = client.Get(*first, true);
  REQUIRE(on_b.state == proto::ActorState::ALIVE);
  CHECK(on_b.node_id == b.id());
  // Now b is full (it runs the first actor and something else) and a has room again.
  client.Heartbeat(b.info().node_id, scheduler::ResourceSet{{"CPU", 0}});
  client.Heartbeat(a.info().node_id, scheduler::ResourceSet{{"CPU", 2}});
  auto second = client.Create({.job_id = job});
  REQUIRE(second.ok());
  const ActorView on_a = client.Get(*second, true);
  REQUIRE(on_a.state == proto::ActorState::ALIVE);
  CHECK(on_a.node_id == a.id());
  // And a node that dies leaves the view: with a gone and b full, the third waits.
  client.Unregister(a.info().node_id);
  auto third = client.Create({.job_id = job});
  REQUIRE(third.ok());
  CHECK_FALSE(WaitFor(
      [&] { return client.Get(*third).state != proto::ActorState::PENDING_CREATION; }, 600ms));
  client.Heartbeat(b.info().node_id, scheduler::ResourceSet{{"CPU", 1}});
  const ActorView third_on_b = client.WaitState(*third, proto::ActorState::ALIVE);
  CHECK(third_on_b.node_id == b.id());
}

// Creates a detached named actor through one GCS, then starts a second GCS on the same tables
// and checks that the actor is still ALIVE at its worker, found by name, and restartable.
void CheckActorRecovery(const GcsThread::MakeStore& make_store) {
  FakeNode node("a", 4);
  std::string id;
  ActorView before;
  {
    GcsThread gcs(make_store);
    Client client(gcs.address());
    client.Register(node.info());
    auto created = client.Create(
        {.job_id = client.AddJob(), .name = "svc", .max_restarts = 1, .detached = true});
    REQUIRE(created.ok());
    id = *created;
    before = client.Get(id, true);
    REQUIRE(before.state == proto::ActorState::ALIVE);
  }
  GcsThread gcs(make_store);
  Client client(gcs.address());
  ActorView after = client.Get(id);
  CHECK(after.state == proto::ActorState::ALIVE);
  CHECK(after.address == before.address);
  CHECK(after.worker_id == before.worker_id);
  CHECK(client.GetByName("", "svc").id == id);
  // Not created again.
  node.record().Locked([&] { CHECK(node.record().pushes.size() == 1); });
  // And it still restarts from its stored creation spec.
  client.Register(node.info());
  client.Kill(id, false).IgnoreError();
  client.WorkerFailed(before.worker_id, node.id(), "gone");
  ActorView restarted;
  REQUIRE(WaitFor(
      [&] {
        restarted = client.Get(id, true);
        return restarted.state == proto::ActorState::ALIVE && restarted.num_restarts == 1;
      },
      10000ms));
  node.record().Locked([&] {
    CHECK(node.record().pushes == std::vector<std::pair<std::string, int>>{{id, 0}, {id, 1}});
  });
}

TEST_CASE("a new GCS on the same in-memory store keeps ALIVE actors and their names",
          "[gcs][actors][recovery]") {
  auto store = MakeInMemoryTableStore();
  CheckActorRecovery([&](EventLoop&, std::unique_ptr<TableStore>&) { return store.get(); });
}

TEST_CASE("a restarted GCS keeps ALIVE actors recovered from a real Redis",
          "[gcs][actors][recovery][redis]") {
  testing::RedisServer redis;
  CheckActorRecovery(
      [port = redis.port()](EventLoop& loop, std::unique_ptr<TableStore>& owned) -> TableStore* {
        RedisOptions options;
        options.port = port;
        std::optional<Result<std::unique_ptr<TableStore>>> client;
        ConnectRedisTableStore(loop, options, [&](auto r) { client.emplace(std::move(r)); });
        if (!loop.RunUntil([&] { return client.has_value(); }, 10000ms) || !client->ok()) {
          return nullptr;
        }
        owned = std::move(**client);
        return owned.get();
      });
}

}  // namespace
}  // namespace rayd::gcs
