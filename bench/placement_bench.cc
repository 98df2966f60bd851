// The head's placement throughput with simulated nodes: starts a real head (`rayd start
// --head --num-cpus 0`), registers N simulated node daemons served from this process (each a
// real RPC server that grants leases and bundle reservations against its own resource
// accounting, and heartbeats what it has left), and one simulated worker that answers every
// actor-creation push at once. Then measures, through the GCS's public methods:
//
//   actors_placed        1,000 actors (1 CPU each) created at once until every one is ALIVE
//   pg_create_removal    groups created, waited for and removed one after another (Ray's
//                        placement_group_create/removal loop, sequential)
//   pg_pipelined         1,000 groups of 4 bundles (SPREAD, 0.01 CPU each) created at once
//                        until all are CREATED
//
//   placement_bench [nodes=100] [actors=1000] [groups=1000]
//
// Real daemons spawn a worker process per actor, which this leaves out on purpose: the figures
// are the head's own cost of placing work.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/node_info.h"
#include "rayd/base/rpc.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/runtime/session.h"

using namespace rayd;
using namespace std::chrono_literals;

namespace {

int Run(const std::string& cmd) { return std::system(cmd.c_str()); }

std::string RandomHex() { return NodeId::FromRandom().Hex(); }

// One simulated node daemon: grants what fits its resources, holds it until returned.
class SimNode {
 public:
  SimNode(EventLoop& loop, const std::string& token, const std::string& gcs,
          const std::string& worker_address, int index)
      : worker_address_(worker_address), gcs_(loop, gcs, rpc::Options{token, "node"}) {
    info_.node_id = NodeId::FromRandom();
    info_.hostname = "sim-" + std::to_string(index);
    info_.ip = "127.0.0.1";
    info_.total = scheduler::ResourceSet{{"CPU", 16}, {"GPU", 8}, {"memory", 64e9}};
    info_.available = info_.total;
    dispatcher_.Handle<proto::Method::REQUEST_LEASE>([this](const auto& c) { Lease(c); });
    dispatcher_.Handle<proto::Method::RETURN_LEASE>([this](const auto& c) { Return(c); });
    dispatcher_.Handle<proto::Method::PREPARE_BUNDLES>([this](const auto& c) { Prepare(c); });
    dispatcher_.Handle<proto::Method::CANCEL_BUNDLES>([this](const auto& c) { Cancel(c); });
    auto ack = [](const auto& c) { c.Reply(); };
    dispatcher_.Handle<proto::Method::PING>(ack);
    dispatcher_.Handle<proto::Method::COMMIT_BUNDLES>(ack);
    dispatcher_.Handle<proto::Method::KILL_WORKER>(ack);
    dispatcher_.Handle<proto::Method::JOB_FINISHED>(ack);
    server_ = std::make_unique<rpc::RpcServer>(loop, rpc::Options{token, "node"}, dispatcher_);
    if (Status s = server_->Listen("127.0.0.1:0"); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
    info_.address = server_->bound_addresses().front();
    gcs_.Connect();
  }

  void Register(int* registered) {
    gcs_.Call<proto::Method::REGISTER_NODE>(
        [this](proto::RegisterNodeRequest::Builder r) {
          runtime::NodeInfoToProto(info_, r.initNode());
        },
        10000ms, [registered](const Status& s) { *registered += s.ok(); });
  }

  void Heartbeat() {
    gcs_.Call<proto::Method::HEARTBEAT>(
        [this](proto::HeartbeatRequest::Builder hb) {
          hb.setNodeId(info_.node_id.Hex());
          runtime::FillResources(info_.available, [&](unsigned n) { return hb.initAvailable(n); });
        },
        1000ms, [](const Status&) {});
  }

 private:
  void Lease(const rpc::Incoming<proto::Method::REQUEST_LEASE>& call) {
    auto demand = runtime::ResourcesFromProto(call.params().getResources());
    if (!demand.IsSubsetOf(info_.available)) {
      return call.Fail(Status::ResourceExhausted("simulated node is full"));
    }
    info_.available -= demand;
    const std::string lease = RandomHex();
    leases_[lease] = demand;
    call.Reply([&](proto::RequestLeaseReply::Builder b) {
      auto g = b.initGranted();
      g.setLeaseId(lease);
      g.setWorkerId(RandomHex());
      g.setWorkerAddress(worker_address_);
      g.setNodeId(info_.node_id.Hex());
    });
  }
  void Return(const rpc::Incoming<proto::Method::RETURN_LEASE>& call) {
    auto it = leases_.find(call.params().getLeaseId().cStr());
    if (it != leases_.end()) {
      info_.available += it->second;
      leases_.erase(it);
    }
    call.Reply();
  }
  void Prepare(const rpc::Incoming<proto::Method::PREPARE_BUNDLES>& call) {
    auto params = call.params();
    const std::string group = params.getPlacementGroupId();
    scheduler::ResourceSet sum;
    for (auto b : params.getBundles()) {
      if (!bundles_.contains({group, b.getIndex()})) sum += runtime::ResourcesFromProto(b.getResources());
    }
    if (!sum.IsSubsetOf(info_.available)) {
      return call.Fail(Status::ResourceExhausted("simulated node is full"));
    }
    info_.available -= sum;
    for (auto b : params.getBundles()) {
      bundles_.try_emplace({group, b.getIndex()}, runtime::ResourcesFromProto(b.getResources()));
    }
    call.Reply();
  }
  void Cancel(const rpc::Incoming<proto::Method::CANCEL_BUNDLES>& call) {
    auto params = call.params();
    const std::string group = params.getPlacementGroupId();
    std::vector<uint32_t> indexes;
    for (uint32_t i : params.getIndexes()) indexes.push_back(i);
    for (auto it = bundles_.lower_bound({group, 0}); it != bundles_.end() && it->first.first == group;) {
      if (indexes.empty() || std::find(indexes.begin(), indexes.end(), it->first.second) != indexes.end()) {
        info_.available += it->second;
        it = bundles_.erase(it);
      } else {
        ++it;
      }
    }
    call.Reply();
  }

  std::string worker_address_;
  NodeInfo info_;
  rpc::Dispatcher dispatcher_;
  std::unique_ptr<rpc::RpcServer> server_;
  rpc::RpcClient gcs_;
  std::map<std::string, scheduler::ResourceSet> leases_;
  std::map<std::pair<std::string, uint32_t>, scheduler::ResourceSet> bundles_;
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void FillGroup(proto::PlacementGroupInfo::Builder g, const std::string& id, const JobId& job,
               int bundles, double cpus, proto::PlacementStrategy strategy) {
  g.setPlacementGroupId(id);
  g.setJobId(job.Hex());
  g.setStrategy(strategy);
  auto list = g.initBundles(static_cast<unsigned>(bundles));
  for (int i = 0; i < bundles; ++i) {
    list[i].setIndex(static_cast<uint32_t>(i));
    runtime::FillResources(scheduler::ResourceSet{{"CPU", cpus}},
                           [&](unsigned n) { return list[i].initResources(n); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int num_nodes = argc > 1 ? std::stoi(argv[1]) : 100;
  const int num_actors = argc > 2 ? std::stoi(argv[2]) : 1000;
  const int num_groups = argc > 3 ? std::stoi(argv[3]) : 1000;
  char dir[] = "/tmp/rayd-placement-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string root = dir;
  // Port 0: any free port; the head writes the one it bound into its session directory.
  if (Run(std::string(RAYD_BINARY) + " start --head --num-cpus 0 --port 0 --temp-dir " + root +
          " > /dev/null") != 0) {
    std::fprintf(stderr, "could not start the head\n");
    return 1;
  }
  const std::string session = session::LatestHeadSession(root);
  const std::string token = *session::ReadTrimmed(session + "/token");
  const std::string gcs_address = *session::ReadTrimmed(session + "/gcs_address");

  EventLoop loop;
  // The one simulated worker: every actor's constructor "runs" here and succeeds at once.
  rpc::Dispatcher worker_dispatcher;
  worker_dispatcher.Handle<proto::Method::PUSH_TASK>(
      [](const auto& c) { c.Reply([](proto::PushTaskReply::Builder b) { b.initValue(); }); });
  rpc::RpcServer worker(loop, rpc::Options{token, "worker"}, worker_dispatcher);
  if (!worker.Listen("127.0.0.1:0").ok()) return 1;

  std::vector<std::unique_ptr<SimNode>> nodes;
  int registered = 0;
  for (int i = 0; i < num_nodes; ++i) {
    nodes.push_back(std::make_unique<SimNode>(loop, token, gcs_address,
                                              worker.bound_addresses().front(), i));
    nodes.back()->Register(&registered);
  }
  if (!loop.RunUntil([&] { return registered == num_nodes; }, 60000ms)) {
    std::fprintf(stderr, "only %d of %d simulated nodes registered\n", registered, num_nodes);
    return 1;
  }
  Timer beat(loop);
  beat.Start(1000ms, 1000ms, [&] {
    for (auto& n : nodes) n->Heartbeat();
  });

  rpc::RpcClient driver(loop, gcs_address, rpc::Options{token, "driver"});
  driver.Connect();
  const JobId job = JobId::FromRandom();
  std::printf("simulated nodes: %d (16 CPU, 8 GPU each)\n", num_nodes);

  // ---- Actors: all created at once, until every one is ALIVE.
  int settled = 0, alive = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < num_actors; ++i) {
    const std::string id = RandomHex();
    driver.Call<proto::Method::CREATE_ACTOR>(
        [&](proto::CreateActorRequest::Builder r) {
          auto spec = r.initSpec();
          spec.setTaskId(RandomHex());
          spec.setJobId(job.Hex());
          spec.setFunctionName("Sim::Create");
          spec.setKind(proto::TaskSpec::Kind::ACTOR_CREATION);
          spec.setActorId(id);
          runtime::FillResources(scheduler::ResourceSet{{"CPU", 1}},
                                 [&](unsigned n) { return spec.initResources(n); });
        },
        30000ms, [](const Status&) {});
    driver.Call<proto::Method::GET_ACTOR>(
        [&](proto::GetActorRequest::Builder r) {
          r.setActorId(id);
          r.setWaitUntilSettled(true);
        },
        120000ms,
        [&](const Status& s, proto::GetActorReply::Reader r) {
          ++settled;
          alive += s.ok() && r.getActor().getState() == proto::ActorState::ALIVE;
        });
  }
  loop.RunUntil([&] { return settled == num_actors; }, 120000ms);
  const double actor_s = Seconds(t0);
  std::printf("actors_placed: %d of %d ALIVE in %.3f s = %.0f actors/s\n", alive, num_actors,
              actor_s, alive / actor_s);

  // Creates a group and asks to hear once it is settled: `created(true)` when CREATED.
  auto create_and_await = [&](int bundles, double cpus, proto::PlacementStrategy strategy,
                              std::function<void(bool)> created) {
    const std::string id = RandomHex();
    driver.Call<proto::Method::CREATE_PLACEMENT_GROUP>(
        [&](proto::CreatePlacementGroupRequest::Builder r) {
          FillGroup(r.initGroup(), id, job, bundles, cpus, strategy);
        },
        30000ms, [](const Status&) {});
    driver.Call<proto::Method::GET_PLACEMENT_GROUP>(
        [&](proto::GetPlacementGroupRequest::Builder r) {
          r.setPlacementGroupId(id);
          r.setWaitUntilReady(true);
        },
        120000ms,
        [created](const Status& st, proto::GetPlacementGroupReply::Reader r) {
          created(st.ok() && r.getGroup().getState() == proto::PlacementGroupState::CREATED);
        });
    return id;
  };

  // ---- Groups one after another: create, wait until CREATED, remove.
  auto one_group = [&](int bundles, proto::PlacementStrategy strategy, bool* ok) {
    int steps = 0;
    const std::string id = create_and_await(bundles, 1, strategy, [&](bool created) {
      *ok &= created;
      ++steps;
    });
    loop.RunUntil([&] { return steps == 1; }, 30000ms);
    driver.Call<proto::Method::REMOVE_PLACEMENT_GROUP>(
        [&](proto::RemovePlacementGroupRequest::Builder r) { r.setPlacementGroupId(id); }, 30000ms,
        [&](const Status& s) { *ok &= s.ok(), ++steps; });
    loop.RunUntil([&] { return steps == 2; }, 30000ms);
  };
  bool ok = true;
  t0 = Clock::now();
  for (int i = 0; i < num_groups && ok; ++i) one_group(1, proto::PlacementStrategy::PACK, &ok);
  double s = Seconds(t0);
  std::printf("pg_create_removal (1 bundle, sequential): %d in %.3f s = %.0f/s%s\n", num_groups, s,
              num_groups / s, ok ? "" : " (FAILURES)");
  ok = true;
  t0 = Clock::now();
  for (int i = 0; i < num_groups / 4 && ok; ++i) {
    one_group(4, proto::PlacementStrategy::STRICT_SPREAD, &ok);
  }
  s = Seconds(t0);
  std::printf("pg_create_removal (4 bundles STRICT_SPREAD, two-phase, sequential): %d in %.3f s = "
              "%.0f/s%s\n",
              num_groups / 4, s, num_groups / 4 / s, ok ? "" : " (FAILURES)");

  // ---- Groups all at once, until every one is CREATED.
  int ready = 0, answered = 0;
  t0 = Clock::now();
  for (int i = 0; i < num_groups; ++i) {
    create_and_await(4, 0.01, proto::PlacementStrategy::SPREAD, [&](bool created) {
      ++answered;
      ready += created;
    });
  }
  loop.RunUntil([&] { return answered == num_groups; }, 120000ms);
  s = Seconds(t0);
  std::printf("pg_pipelined (4 bundles SPREAD, all at once): %d of %d CREATED in %.3f s = %.0f/s\n",
              ready, num_groups, s, ready / s);

  beat.Stop();
  nodes.clear();
  Run(std::string(RAYD_BINARY) + " stop --temp-dir " + root + " > /dev/null");
  Run("rm -rf " + root);
  return 0;
}
