#pragma once
// The harness of the GCS tests that run a real GcsServer over real RPC: the GCS on its own
// thread, fake node daemons (each with a fake core worker) that grant leases, hold bundles and
// record what the GCS asks of them, and a synchronous client on the test thread.

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/node_info.h"
#include "gcs/gcs_server.h"
#include "gcs/table_store.h"
#include "server_thread.h"
#include "test_util.h"

namespace rayd::gcs {

using namespace std::chrono_literals;
using testing::ServerThread;
using testing::WaitFor;

// Nodes in these tests never heartbeat: they only die when a test unregisters them.
const FailureDetectorConfig kNoFailureDetection{Millis(1000), 1000000, Millis(0)};

// True while a TCP or Unix socket on `loop` is open and not closing.
inline bool HasOpenStreams(EventLoop& loop) {
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
  using MakeStore = std::function<TableStore*(EventLoop&, std::unique_ptr<TableStore>& owned)>;

  explicit GcsThread(MakeStore make_store = nullptr, Millis infeasible_timeout = Millis(0)) {
    // As in the head daemon: a peer (a fake node going away) that closes mid-write is an error
    // value, not a signal.
    ::signal(SIGPIPE, SIG_IGN);
    std::promise<Result<std::string>> bound;
    thread_ = std::thread([this, make_store, infeasible_timeout, &bound] {
      EventLoop loop;
      loop_ = &loop;
      std::unique_ptr<TableStore> owned;
      TableStore* store =
          make_store ? make_store(loop, owned) : (owned = MakeInMemoryTableStore()).get();
      if (store == nullptr) {
        bound.set_value(Status::Unavailable("no store for the GCS"));
        return;
      }
      {
        GcsServer gcs(
            loop, *store,
            GcsConfig{kNoFailureDetection, "test", testing::kTestToken, infeasible_timeout});
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
  // Per lease request: the placement group and bundle index it names ("", -1: none).
  std::vector<std::pair<std::string, int>> lease_bundles;
  // The bundle calls in arrival order, and the bundles held (prepared or committed) by group.
  struct BundleCall {
    proto::Method method;
    std::string group;
    std::vector<uint32_t> indexes;  // PREPARE: the bundles; CANCEL: as sent (empty: all)
    bool commit = false;            // PREPARE only
    std::string node_id;            // the node incarnation the call names
  };
  std::vector<BundleCall> bundle_calls;
  std::map<std::string, std::set<uint32_t>> held;
  // Behaviour, set by the test.
  bool constructor_raises = false;
  std::string lease_error;    // non-empty: REQUEST_LEASE fails Unavailable with it
  std::string prepare_error;  // non-empty: PREPARE_BUNDLES fails ResourceExhausted with it
  // Non-empty: PREPARE_BUNDLES reserves, then fails Unavailable with it (a reply lost after
  // the reservation, as a timeout or a dropped connection leaves it).
  std::string prepare_lost_reply;

  // The calls of one method.
  std::vector<BundleCall> Calls(proto::Method method) const {
    std::vector<BundleCall> out;
    for (const auto& call : bundle_calls) {
      if (call.method == method) out.push_back(call);
    }
    return out;
  }

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

// A node daemon that grants every lease with a new worker id at its one fake core worker, and
// holds whatever bundles it is asked to (unless told to refuse).
class FakeNode {
 public:
  explicit FakeNode(const std::string& name, double cpus, scheduler::Labels labels = {})
      : record_(std::make_shared<Record>()) {
    info_.node_id = NodeId::FromRandom();
    worker_ = std::make_unique<ServerThread>(
        [record = record_](rpc::Dispatcher& d, EventLoop&, ServerThread::Keep&) {
          d.Handle<proto::Method::PUSH_TASK>([record](const auto& call) {
            auto spec = call.params().getSpec();
            const bool raise = record->Locked([&] {
              if (spec.getKind() != proto::TaskSpec::Kind::ACTOR_CREATION) ++record->malformed;
              record->pushes.emplace_back(spec.getActorId().cStr(), spec.getAttempt());
              return record->constructor_raises;
            });
            call.Reply([raise](proto::PushTaskReply::Builder b) {
              auto value = b.initValue();
              if (raise) {
                value.setErrorKind(1);
                value.setErrorType("std::runtime_error");
                value.setErrorMessage("boom");
              }
            });
          });
        });
    node_ = std::make_unique<ServerThread>([record = record_, node_id = info_.node_id.Hex(),
                                            worker_address = worker_->address()](
                                               rpc::Dispatcher& d, EventLoop&,
                                               ServerThread::Keep&) {
      d.Handle<proto::Method::REQUEST_LEASE>([=](const auto& call) {
        auto request = call.params();
        std::string error;
        int n = record->Locked([&] {
          if (!request.getForActor() || !request.getGrantOrReject() ||
              request.getLaunch().getArgv().size() != 1) {
            ++record->malformed;
          }
          record->lease_jobs.emplace_back(request.getJobId().cStr());
          record->lease_bundles.emplace_back(request.getScheduling().getPlacementGroupId().cStr(),
                                             request.getScheduling().getBundleIndex());
          error = record->lease_error;
          return error.empty() ? ++record->leases_granted : 0;
        });
        if (!error.empty()) return call.Fail(Status::Unavailable(error));
        call.Reply([&](proto::RequestLeaseReply::Builder b) {
          auto lease = b.initGranted();
          lease.setLeaseId(node_id.substr(0, 8) + "-lease-" + std::to_string(n));
          lease.setWorkerId(WorkerId::FromRandom().Hex());
          lease.setWorkerAddress(worker_address);
          lease.setNodeId(node_id);
        });
      });
      d.Handle<proto::Method::RETURN_LEASE>([record](const auto& call) {
        auto r = call.params();
        record->Locked([&] { record->returned.emplace_back(r.getLeaseId(), r.getKillWorker()); });
        call.Reply();
      });
      d.Handle<proto::Method::KILL_WORKER>([record](const auto& call) {
        auto r = call.params();
        record->Locked([&] { record->killed_workers.emplace_back(r.getWorkerId()); });
        call.Reply();
      });
      d.Handle<proto::Method::JOB_FINISHED>([record](const auto& call) {
        auto r = call.params();
        record->Locked([&] { record->finished_jobs.emplace_back(r.getJobId()); });
        call.Reply();
      });
      d.Handle<proto::Method::PREPARE_BUNDLES>([record](const auto& call) {
        auto r = call.params();
        Record::BundleCall c{proto::Method::PREPARE_BUNDLES, r.getPlacementGroupId(), {},
                             r.getCommit(), r.getNodeId()};
        for (auto b : r.getBundles()) c.indexes.push_back(b.getIndex());
        std::string lost;
        const std::string error = record->Locked([&] {
          record->bundle_calls.push_back(c);
          if (record->prepare_error.empty()) {
            record->held[c.group].insert(c.indexes.begin(), c.indexes.end());
          }
          lost = record->prepare_lost_reply;
          return record->prepare_error;
        });
        if (!error.empty()) return call.Fail(Status::ResourceExhausted(error));
        if (!lost.empty()) return call.Fail(Status::Unavailable(lost));
        call.Reply();
      });
      d.Handle<proto::Method::COMMIT_BUNDLES>([record](const auto& call) {
        auto r = call.params();
        record->Locked([&] {
          record->bundle_calls.push_back(
              {proto::Method::COMMIT_BUNDLES, r.getPlacementGroupId(), {}, false, r.getNodeId()});
        });
        call.Reply();
      });
      d.Handle<proto::Method::CANCEL_BUNDLES>([record](const auto& call) {
        auto r = call.params();
        Record::BundleCall c{
            proto::Method::CANCEL_BUNDLES, r.getPlacementGroupId(), {}, false, r.getNodeId()};
        for (uint32_t i : r.getIndexes()) c.indexes.push_back(i);
        record->Locked([&] {
          record->bundle_calls.push_back(c);
          auto& held = record->held[c.group];
          if (c.indexes.empty()) held.clear();
          for (uint32_t i : c.indexes) held.erase(i);
          if (held.empty()) record->held.erase(c.group);
        });
        call.Reply();
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
    info_.labels = std::move(labels);
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

inline ActorView ReadActor(proto::ActorInfo::Reader a) {
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
  // Scheduling options of the creation spec.
  std::string placement_group_id;
  int bundle_index = -1;
  std::string node_affinity;
  bool affinity_soft = false;
  scheduler::Labels label_selector;
};

struct GroupView {
  bool found = false;
  proto::PlacementGroupState state = proto::PlacementGroupState::FAILED;
  std::string id, name, job_id, cause;
  proto::PlacementStrategy strategy = proto::PlacementStrategy::PACK;
  std::vector<std::string> nodes;      // per bundle, "" while unplaced
  std::vector<std::string> addresses;  // per bundle
  std::vector<scheduler::ResourceSet> bundles;
  int64_t ready_time_ms = 0;
};

inline GroupView ReadGroup(proto::PlacementGroupInfo::Reader g) {
  GroupView v;
  v.found = true;
  v.state = g.getState();
  v.id = g.getPlacementGroupId();
  v.name = g.getName();
  v.job_id = g.getJobId();
  v.cause = g.getCause();
  v.strategy = g.getStrategy();
  v.ready_time_ms = g.getReadyTimeMs();
  for (auto b : g.getBundles()) {
    v.nodes.emplace_back(b.getNodeId().cStr());
    v.addresses.emplace_back(b.getNodeAddress().cStr());
    v.bundles.push_back(runtime::ResourcesFromProto(b.getResources()));
  }
  return v;
}

struct GroupOptions {
  std::string job_id;
  std::vector<scheduler::ResourceSet> bundles;
  proto::PlacementStrategy strategy = proto::PlacementStrategy::PACK;
  std::string name;
  std::string ray_namespace;
  bool detached = false;
};

// A synchronous client on the test thread: a driver, a node reporting, or a CLI.
class Client {
 public:
  explicit Client(const std::string& address)
      : rpc_(loop_, address, rpc::Options{testing::kTestToken, "test", {}}) {
    rpc_.Connect();
  }

  // Calls method M and waits for its reply (10 s at most): `fill` takes M's request builder
  // (nullptr: an empty request), `read` M's reply reader.
  template <proto::Method M, typename Fill = std::nullptr_t, typename Read = std::nullptr_t>
  Status Call(Fill&& fill = nullptr, Read&& read = nullptr) {
    return rpc::CallAndWait<M>(loop_, rpc_, fill, 10000ms, read);
  }

  void Register(const NodeInfo& info) {
    REQUIRE(Call<proto::Method::REGISTER_NODE>([&](proto::RegisterNodeRequest::Builder r) {
              runtime::NodeInfoToProto(info, r.initNode());
            }).ok());
  }
  // A heartbeat from `node` that reports `available`.
  void Heartbeat(const NodeId& node, const scheduler::ResourceSet& available) {
    REQUIRE(Call<proto::Method::HEARTBEAT>([&](proto::HeartbeatRequest::Builder r) {
              r.setNodeId(node.Hex());
              runtime::FillResources(available, [&](unsigned n) { return r.initAvailable(n); });
            }).ok());
  }
  void Unregister(const NodeId& id) {
    REQUIRE(Call<proto::Method::UNREGISTER_NODE>([&](proto::UnregisterNodeRequest::Builder r) {
              r.setNodeId(id.Hex());
              r.setReason("test");
            }).ok());
  }
  std::string AddJob() {
    std::string job_id = JobId::FromRandom().Hex();
    REQUIRE(Call<proto::Method::ADD_JOB>([&](proto::AddJobRequest::Builder r) {
              auto job = r.initJob();
              job.setJobId(job_id);
              job.setDriverPid(1234);
            }).ok());
    return job_id;
  }

  // Creates an actor; yields its id or the GCS's refusal.
  Result<std::string> Create(const CreateOptions& o) {
    const std::string actor_id = JobId::FromRandom().Hex();
    std::string replied;
    Status s = Call<proto::Method::CREATE_ACTOR>(
        [&](proto::CreateActorRequest::Builder r) {
          auto spec = r.initSpec();
          spec.setTaskId(JobId::FromRandom().Hex());
          spec.setJobId(o.job_id);
          spec.setFunctionName("Counter::FactoryCreate");
          spec.setKind(proto::TaskSpec::Kind::ACTOR_CREATION);
          spec.setActorId(actor_id);
          spec.setMaxConcurrency(1);
          runtime::FillResources(o.resources, [&](unsigned n) { return spec.initResources(n); });
          auto scheduling = spec.initScheduling();
          scheduling.setPlacementGroupId(o.placement_group_id);
          scheduling.setBundleIndex(o.bundle_index);
          scheduling.setNodeAffinity(o.node_affinity);
          scheduling.setAffinitySoft(o.affinity_soft);
          auto labels =
              scheduling.initLabelSelector(static_cast<unsigned>(o.label_selector.size()));
          unsigned l = 0;
          for (const auto& [key, value] : o.label_selector) {
            labels[l].setKey(key);
            labels[l++].setValue(value);
          }
          r.setName(o.name);
          r.setNamespace(o.ray_namespace);
          r.setMaxRestarts(o.max_restarts);
          r.setDetached(o.detached);
          r.initLaunch().initArgv(1).set(0, "/bin/true");
        },
        [&](proto::CreateActorReply::Reader r) { replied = r.getActorId(); });
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
    return Call<proto::Method::KILL_ACTOR>([&](proto::KillActorRequest::Builder r) {
      r.setActorId(actor_id);
      r.setNoRestart(no_restart);
    });
  }
  void WorkerFailed(const std::string& worker_id, const std::string& node_id,
                    const std::string& reason) {
    REQUIRE(Call<proto::Method::WORKER_FAILED>([&](proto::WorkerFailedRequest::Builder r) {
              r.setWorkerId(worker_id);
              r.setNodeId(node_id);
              r.setReason(reason);
            }).ok());
  }
  std::vector<ActorView> All() {
    std::vector<ActorView> all;
    REQUIRE(Call<proto::Method::GET_ALL_ACTORS>(nullptr, [&](proto::GetAllActorsReply::Reader r) {
              for (auto a : r.getActors()) all.push_back(ReadActor(a));
            }).ok());
    return all;
  }

  // Placement groups. Creates a group with a fresh id; yields its id or the GCS's refusal.
  Result<std::string> CreateGroup(const GroupOptions& o,
                                  std::string id = JobId::FromRandom().Hex()) {
    std::string replied;
    Status s = Call<proto::Method::CREATE_PLACEMENT_GROUP>(
        [&](proto::CreatePlacementGroupRequest::Builder r) {
          auto g = r.initGroup();
          g.setPlacementGroupId(id);
          g.setName(o.name);
          g.setNamespace(o.ray_namespace);
          g.setJobId(o.job_id);
          g.setStrategy(o.strategy);
          g.setDetached(o.detached);
          auto bundles = g.initBundles(static_cast<unsigned>(o.bundles.size()));
          for (unsigned i = 0; i < o.bundles.size(); ++i) {
            bundles[i].setIndex(i);
            runtime::FillResources(o.bundles[i],
                                   [&](unsigned n) { return bundles[i].initResources(n); });
          }
        },
        [&](proto::CreatePlacementGroupReply::Reader r) { replied = r.getPlacementGroupId(); });
    if (!s.ok()) return s;
    CHECK(replied == id);
    return replied;
  }
  Status RemoveGroup(const std::string& id) {
    return Call<proto::Method::REMOVE_PLACEMENT_GROUP>(
        [&](proto::RemovePlacementGroupRequest::Builder r) { r.setPlacementGroupId(id); });
  }
  GroupView GetGroup(const std::string& id, bool wait = false) {
    return GetGroupBy([&](proto::GetPlacementGroupRequest::Builder r) {
      r.setPlacementGroupId(id);
      r.setWaitUntilReady(wait);
    });
  }
  GroupView GetGroupByName(const std::string& ns, const std::string& name) {
    return GetGroupBy([&](proto::GetPlacementGroupRequest::Builder r) {
      r.setName(name);
      r.setNamespace(ns);
    });
  }
  // Polls until the group is in `state` (10 s at most).
  GroupView WaitGroupState(const std::string& id, proto::PlacementGroupState state) {
    GroupView v;
    WaitFor(
        [&] {
          v = GetGroup(id);
          return v.state == state;
        },
        10000ms);
    return v;
  }
  std::vector<GroupView> AllGroups() {
    std::vector<GroupView> all;
    auto read = [&](proto::GetAllPlacementGroupsReply::Reader r) {
      for (auto g : r.getGroups()) all.push_back(ReadGroup(g));
    };
    REQUIRE(Call<proto::Method::GET_ALL_PLACEMENT_GROUPS>(nullptr, read).ok());
    return all;
  }

 private:
  GroupView GetGroupBy(const std::function<void(proto::GetPlacementGroupRequest::Builder)>& fill) {
    GroupView v;
    auto read = [&](proto::GetPlacementGroupReply::Reader reply) {
      if (reply.getFound()) v = ReadGroup(reply.getGroup());
    };
    REQUIRE(Call<proto::Method::GET_PLACEMENT_GROUP>(fill, read).ok());
    return v;
  }
  ActorView GetBy(const std::function<void(proto::GetActorRequest::Builder)>& fill) {
    ActorView v;
    auto read = [&](proto::GetActorReply::Reader reply) {
      if (reply.getFound()) v = ReadActor(reply.getActor());
    };
    REQUIRE(Call<proto::Method::GET_ACTOR>(fill, read).ok());
    return v;
  }

  EventLoop loop_;
  rpc::RpcClient rpc_;
};

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace rayd::gcs
