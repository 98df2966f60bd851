// The GCS actor manager and job cleanup over real RPC: a GcsServer on its own thread, fake node
// daemons that grant leases and record what the GCS asks of them, and fake core workers that
// answer the actor creation task (with a value or with a constructor error).

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <future>
#include <mutex>
#include <thread>

#include "common/node_info.h"
#include "gcs/gcs_server.h"
#include "gcs/store_client.h"
#include "redis_server.h"
#include "server_thread.h"
#include "test_util.h"

namespace rayd::gcs {
namespace {

using namespace std::chrono_literals;
using testing::ServerThread;
using testing::WaitFor;

// Nodes in these tests never heartbeat: they only die when a test unregisters them.
const FailureDetectorConfig kNoFailureDetection{Millis(1000), 1000000, Millis(0)};

// True while a TCP or Unix socket on `loop` is open and not closing.
bool HasOpenStreams(EventLoop& loop) {
  bool open = false;
  uv_walk(
      loop.uv(),
      [](uv_handle_t* h, void* arg) {
        if ((h->type == UV_TCP || h->type == UV_NAMED_PIPE) && !uv_is_closing(h)) {
          *static_cast<bool*>(arg) = true;
        }
      },
      &open);
  return open;
}

// A GcsServer served on its own thread, with driver disconnects wired as the head daemon does.
class GcsThread {
 public:
  // Makes the GCS's store on the GCS thread; the store may be kept in `owned` (destroyed after
  // the GCS) or borrowed. Null: a fresh in-memory store.
  using MakeStore = std::function<StoreClient*(EventLoop&, std::unique_ptr<StoreClient>& owned)>;

  explicit GcsThread(MakeStore make_store = nullptr) {
    // As in the head daemon: a peer (a fake node going away) that closes mid-write is an error
    // value, not a signal.
    ::signal(SIGPIPE, SIG_IGN);
    std::promise<Result<std::string>> bound;
    thread_ = std::thread([this, make_store, &bound] {
      EventLoop loop;
      loop_ = &loop;
      std::unique_ptr<StoreClient> owned;
      StoreClient* store =
          make_store ? make_store(loop, owned) : (owned = MakeInMemoryStoreClient()).get();
      if (store == nullptr) {
        bound.set_value(Status::Unavailable("no store for the GCS"));
        return;
      }
      {
        GcsServer gcs(loop, *store, GcsConfig{kNoFailureDetection, "test", testing::kTestToken});
        std::optional<Status> started;
        gcs.Start([&](Status s) { started = s; });
        if (!loop.RunUntil([&] { return started.has_value(); }, 10000ms) || !started->ok()) {
          bound.set_value(started.value_or(Status::DeadlineExceeded("GCS start")));
          return;
        }
        rpc::Dispatcher dispatcher;
        gcs.RegisterMethods(dispatcher);
        rpc::RpcServer server(loop, rpc::Options{testing::kTestToken, "gcs", {}}, dispatcher);
        server.SetOnConnectionClosed(
            [&gcs](rpc::Connection& c, const Status&) { gcs.OnConnectionClosed(c); });
        Status s = server.Listen("127.0.0.1:0");
        if (!s.ok()) {
          bound.set_value(s);
          return;
        }
        bound.set_value(server.bound_addresses().at(0));
        loop.Run();
        server.SetOnConnectionClosed(nullptr);
        server.Close();
      }
      // Clients the GCS dropped may still be connecting; their sockets close when the attempt
      // ends. Destroying the loop before that trips libuv (see RpcClient's connect callback).
      loop.RunUntil([&] { return !HasOpenStreams(loop); }, 5000ms);
    });
    auto result = bound.get_future().get();
    if (!result.ok()) {
      thread_.join();
      throw std::runtime_error(result.status().ToString());
    }
    address_ = *result;
  }
  ~GcsThread() {
    // Stop from inside the loop: EventLoop::Run() forgets a Stop() that came before it started.
    loop_->Post([loop = loop_] { loop->Stop(); });
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  std::thread thread_;
  EventLoop* loop_ = nullptr;
  std::string address_;
};

// What a fake node daemon and its fake worker were asked. Shared with their server threads.
struct Record {
  std::mutex mu;
  int leases_granted = 0;
  std::vector<std::string> lease_jobs;
  std::vector<std::pair<std::string, bool>> returned;  // lease id, killWorker
  std::vector<std::string> killed_workers;
  std::vector<std::string> finished_jobs;
  std::vector<std::pair<std::string, int>> pushes;  // actor id, attempt
  int malformed = 0;  // lease requests not for an actor, pushes not of a creation task
  // Behaviour, set by the test.
  bool constructor_raises = false;
  std::string lease_error;  // non-empty: REQUEST_LEASE fails Unavailable with it

  template <typename F>
  auto Locked(F fn) {
    std::lock_guard<std::mutex> lock(mu);
    return fn();
  }
};

template <typename T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A node daemon that grants every lease with a new worker id at its one fake core worker.
class FakeNode {
 public:
  explicit FakeNode(const std::string& name, double cpus) : record_(std::make_shared<Record>()) {
    info_.node_id = NodeId::FromRandom();
    worker_ = std::make_unique<ServerThread>(
        [record = record_](rpc::Dispatcher& d, EventLoop&, ServerThread::Keep&) {
          d.Register(proto::Method::PUSH_TASK, [record](const rpc::CallPtr& call) {
            auto spec = call->Params<proto::PushTaskRequest>().getSpec();
            const bool raise = record->Locked([&] {
              if (spec.getKind() != proto::TaskSpec::Kind::ACTOR_CREATION) ++record->malformed;
              record->pushes.emplace_back(spec.getActorId().cStr(), spec.getAttempt());
              return record->constructor_raises;
            });
            call->Reply([raise](capnp::AnyPointer::Builder b) {
              auto value = b.initAs<proto::PushTaskReply>().initValue();
              if (raise) {
                value.setErrorKind(1);
                value.setErrorType("std::runtime_error");
                value.setErrorMessage("boom");
              }
            });
          });
        });
    node_ = std::make_unique<ServerThread>(
        [record = record_, node_id = info_.node_id.Hex(), worker_address = worker_->address()](
            rpc::Dispatcher& d, EventLoop&, ServerThread::Keep&) {
          d.Register(proto::Method::REQUEST_LEASE, [=](const rpc::CallPtr& call) {
            auto request = call->Params<proto::RequestLeaseRequest>();
            std::string error;
            int n = record->Locked([&] {
              if (!request.getForActor() || !request.getGrantOrReject() ||
                  request.getLaunch().getArgv().size() != 1) {
                ++record->malformed;
              }
              record->lease_jobs.emplace_back(request.getJobId().cStr());
              error = record->lease_error;
              return error.empty() ? ++record->leases_granted : 0;
            });
            if (!error.empty()) return call->Fail(Status::Unavailable(error));
            call->Reply([&](capnp::AnyPointer::Builder b) {
              auto lease = b.initAs<proto::RequestLeaseReply>().initGranted();
              lease.setLeaseId(node_id.substr(0, 8) + "-lease-" + std::to_string(n));
              lease.setWorkerId(WorkerId::FromRandom().Hex());
              lease.setWorkerAddress(worker_address);
              lease.setNodeId(node_id);
            });
          });
          d.Register(proto::Method::RETURN_LEASE, [record](const rpc::CallPtr& call) {
            auto r = call->Params<proto::ReturnLeaseRequest>();
            record->Locked(
                [&] { record->returned.emplace_back(r.getLeaseId(), r.getKillWorker()); });
            call->Reply();
          });
          d.Register(proto::Method::KILL_WORKER, [record](const rpc::CallPtr& call) {
            auto r = call->Params<proto::KillWorkerRequest>();
            record->Locked([&] { record->killed_workers.emplace_back(r.getWorkerId()); });
            call->Reply();
          });
          d.Register(proto::Method::JOB_FINISHED, [record](const rpc::CallPtr& call) {
            auto r = call->Params<proto::JobFinishedRequest>();
            record->Locked([&] { record->finished_jobs.emplace_back(r.getJobId()); });
            call->Reply();
          });
        });
    // Wait until both loops run: ServerThread's destructor stops its loop with a Stop() that
    // EventLoop::Run() would forget if it came first.
    worker_->RunOnLoop([] {});
    node_->RunOnLoop([] {});
    info_.address = node_->address();
    info_.hostname = name;
    info_.ip = "127.0.0.1";
    info_.total = scheduler::ResourceSet{{"CPU", cpus}};
    info_.available = info_.total;
  }

  const NodeInfo& info() const { return info_; }
  std::string id() const { return info_.node_id.Hex(); }
  std::string worker_address() const { return worker_->address(); }
  Record& record() { return *record_; }

 private:
  std::shared_ptr<Record> record_;
  NodeInfo info_;
  std::unique_ptr<ServerThread> worker_;
  std::unique_ptr<ServerThread> node_;
};

struct ActorView {
  bool found = false;
  proto::ActorState state = proto::ActorState::DEAD;
  std::string id, name, job_id, address, node_id, worker_id, death_cause;
  int num_restarts = 0;
  bool detached = false;
};

ActorView ReadActor(proto::ActorInfo::Reader a) {
  ActorView v;
  v.found = true;
  v.state = a.getState();
  v.id = a.getActorId();
  v.name = a.getName();
  v.job_id = a.getJobId();
  v.address = a.getAddress();
  v.node_id = a.getNodeId();
  v.worker_id = a.getWorkerId();
  v.death_cause = a.getDeathCause();
  v.num_restarts = a.getNumRestarts();
  v.detached = a.getDetached();
  return v;
}

struct CreateOptions {
  std::string job_id;
  std::string name;
  std::string ray_namespace;
  int max_restarts = 0;
  bool detached = false;
  scheduler::ResourceSet resources{{"CPU", 1}};
};

// A synchronous client on the test thread: a driver, a node reporting, or a CLI.
class Client {
 public:
  explicit Client(const std::string& address)
      : rpc_(loop_, address, rpc::Options{testing::kTestToken, "test", {}}) {
    rpc_.Connect();
  }

  Status Call(proto::Method method, const rpc::FillFn& fill,
              const std::function<void(capnp::AnyPointer::Reader)>& read = nullptr) {
    return rpc::CallAndWait(loop_, rpc_, method, fill, 10000ms, read);
  }

  void Register(const NodeInfo& info) {
    REQUIRE(Call(proto::Method::REGISTER_NODE, [&](capnp::AnyPointer::Builder b) {
              runtime::NodeInfoToProto(info, b.initAs<proto::RegisterNodeRequest>().initNode());
            }).ok());
  }
  void Unregister(const NodeId& id) {
    REQUIRE(Call(proto::Method::UNREGISTER_NODE, [&](capnp::AnyPointer::Builder b) {
              auto r = b.initAs<proto::UnregisterNodeRequest>();
              r.setNodeId(id.Hex());
              r.setReason("test");
            }).ok());
  }
  std::string AddJob() {
    std::string job_id = JobId::FromRandom().Hex();
    REQUIRE(Call(proto::Method::ADD_JOB, [&](capnp::AnyPointer::Builder b) {
              auto job = b.initAs<proto::AddJobRequest>().initJob();
              job.setJobId(job_id);
              job.setDriverPid(1234);
            }).ok());
    return job_id;
  }

  // Creates an actor; yields its id or the GCS's refusal.
  Result<std::string> Create(const CreateOptions& o) {
    const std::string actor_id = JobId::FromRandom().Hex();
    std::string replied;
    Status s = Call(
        proto::Method::CREATE_ACTOR,
        [&](capnp::AnyPointer::Builder b) {
          auto r = b.initAs<proto::CreateActorRequest>();
          auto spec = r.initSpec();
          spec.setTaskId(JobId::FromRandom().Hex());
          spec.setJobId(o.job_id);
          spec.setFunctionName("Counter::FactoryCreate");
          spec.setKind(proto::TaskSpec::Kind::ACTOR_CREATION);
          spec.setActorId(actor_id);
          spec.setMaxConcurrency(1);
          runtime::FillResources(o.resources, [&](unsigned n) { return spec.initResources(n); });
          r.setName(o.name);
          r.setNamespace(o.ray_namespace);
          r.setMaxRestarts(o.max_restarts);
          r.setDetached(o.detached);
          r.initLaunch().initArgv(1).set(0, "/bin/true");
        },
        [&](capnp::AnyPointer::Reader r) {
          replied = r.getAs<proto::CreateActorReply>().getActorId();
        });
    if (!s.ok()) return s;
    CHECK(replied == actor_id);
    return replied;
  }

  ActorView Get(const std::string& actor_id, bool wait = false) {
    return GetBy([&](proto::GetActorRequest::Builder r) {
      r.setActorId(actor_id);
      r.setWaitUntilSettled(wait);
    });
  }
  ActorView GetByName(const std::string& ns, const std::string& name) {
    return GetBy([&](proto::GetActorRequest::Builder r) {
      r.setName(name);
      r.setNamespace(ns);
    });
  }
  // Polls until the actor is in `state` (10 s at most).
  ActorView WaitState(const std::string& actor_id, proto::ActorState state) {
    ActorView v;
    WaitFor(
        [&] {
          v = Get(actor_id);
          return v.state == state;
        },
        10000ms);
    return v;
  }

  Status Kill(const std::string& actor_id, bool no_restart) {
    return Call(proto::Method::KILL_ACTOR, [&](capnp::AnyPointer::Builder b) {
      auto r = b.initAs<proto::KillActorRequest>();
      r.setActorId(actor_id);
      r.setNoRestart(no_restart);
    });
  }
  void WorkerFailed(const std::string& worker_id, const std::string& node_id,
                    const std::string& reason) {
    REQUIRE(Call(proto::Method::WORKER_FAILED, [&](capnp::AnyPointer::Builder b) {
              auto r = b.initAs<proto::WorkerFailedRequest>();
              r.setWorkerId(worker_id);
              r.setNodeId(node_id);
              r.setReason(reason);
            }).ok());
  }
  std::vector<ActorView> All() {
    std::vector<ActorView> all;
    REQUIRE(Call(proto::Method::GET_ALL_ACTORS, nullptr, [&](capnp::AnyPointer::Reader r) {
              for (auto a : r.getAs<proto::GetAllActorsReply>().getActors()) {
                all.push_back(ReadActor(a));
              }
            }).ok());
    return all;
  }

 private:
  ActorView GetBy(const std::function<void(proto::GetActorRequest::Builder)>& fill) {
    ActorView v;
    REQUIRE(Call(
                proto::Method::GET_ACTOR,
                [&](capnp::AnyPointer::Builder b) { fill(b.initAs<proto::GetActorRequest>()); },
                [&](capnp::AnyPointer::Reader r) {
                  auto reply = r.getAs<proto::GetActorReply>();
                  if (reply.getFound()) v = ReadActor(reply.getActor());
                })
                .ok());
    return v;
  }

  EventLoop loop_;
  rpc::RpcClient rpc_;
};

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

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
  REQUIRE(observer
              .Call(proto::Method::GET_ALL_JOBS, nullptr,
                    [&](capnp::AnyPointer::Reader r) {
                      for (auto j : r.getAs<proto::GetAllJobsReply>().getJobs()) {
                        if (j.getJobId() == job) finished = j.getIsDead();
                      }
                    })
              .ok());
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
    return driver.Call(proto::Method::JOB_DRIVER_EXITED, [&](capnp::AnyPointer::Builder b) {
      b.initAs<proto::JobDriverRequest>().setJobId(job);
    });
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
  auto store = MakeInMemoryStoreClient();
  CheckActorRecovery([&](EventLoop&, std::unique_ptr<StoreClient>&) { return store.get(); });
}

TEST_CASE("a restarted GCS keeps ALIVE actors recovered from a real Redis",
          "[gcs][actors][recovery][redis]") {
  testing::RedisServer redis;
  CheckActorRecovery(
      [port = redis.port()](EventLoop& loop, std::unique_ptr<StoreClient>& owned) -> StoreClient* {
        RedisOptions options;
        options.port = port;
        std::optional<Result<std::unique_ptr<StoreClient>>> client;
        ConnectRedisStoreClient(loop, options, [&](auto r) { client.emplace(std::move(r)); });
        if (!loop.RunUntil([&] { return client.has_value(); }, 10000ms) || !client->ok()) {
          return nullptr;
        }
        owned = std::move(**client);
        return owned.get();
      });
}

}  // namespace
}  // namespace rayd::gcs
