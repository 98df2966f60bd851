// Reading the cluster's state for the CLI and embedding programs: short-lived clients on a
// private event loop, run until the answers arrive.

#include "rayd/runtime/cluster.h"

#include <functional>
#include <memory>

#include "common/node_info.h"
#include "rayd/base/rpc.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/protocol/gcs.capnp.h"
#include "rayd/runtime/cluster.h"

namespace rayd {
namespace {

// A call that timed out while the client never connected says why it could not connect.
Status Explain(const Status& status, const rpc::RpcClient& client) {
  if (status.code() == StatusCode::kDeadlineExceeded && !client.last_error().ok()) {
    return client.last_error();
  }
  return status;
}

// Connects once: a one-shot command should say at once that nothing listens there, not retry
// until its deadline.
Status ConnectOnce(EventLoop& loop, rpc::RpcClient& client, Millis timeout) {
  std::optional<Status> first;
  client.SetOnStateChange([&first](const Status& s) {
    if (!first) first = s;
  });
  client.Connect();
  loop.RunUntil([&] { return first.has_value(); }, timeout);
  client.SetOnStateChange(nullptr);
  return first.value_or(Status::DeadlineExceeded("no answer from " + client.address()));
}

// One call of method M to the GCS on a fresh connection: `fill` takes M's request builder
// (nullptr: an empty request), `read` M's reply reader.
template <proto::Method M, typename Fill, typename Read>
Status CallGcs(const std::string& address, const std::string& token, Millis timeout, Fill&& fill,
               Read&& read) {
  EventLoop loop;
  rpc::RpcClient client(loop, address, rpc::Options{token, "cli"});
  RAYD_RETURN_IF_ERROR(ConnectOnce(loop, client, timeout));
  return Explain(rpc::CallAndWait<M>(loop, client, fill, timeout, read), client);
}

}  // namespace

Result<ClusterView> FetchClusterView(const std::string& address, const std::string& token,
                                     Millis timeout) {
  EventLoop loop;
  ClusterView view;
  Status status;
  {
    rpc::RpcClient client(loop, address, rpc::Options{token, "cli"});
    status = ConnectOnce(loop, client, timeout);
    if (status.ok()) {
      status = rpc::CallAndWait<proto::Method::GET_CLUSTER_INFO>(
          loop, client, nullptr, timeout, [&](proto::ClusterInfo::Reader info) {
            view.cluster_id = info.getClusterId();
            view.gcs_address = info.getGcsAddress();
            view.storage = info.getStorage();
            view.start_time_ms = info.getStartTimeMs();
          });
    }
    if (status.ok()) {
      status = rpc::CallAndWait<proto::Method::GET_ALL_NODES>(
          loop, client, [](proto::GetAllNodesRequest::Builder) {}, timeout,
          [&](proto::GetAllNodesReply::Reader r) {
            for (auto n : r.getNodes()) {
              auto info = runtime::NodeInfoFromProto(n);
              if (info.ok()) view.nodes.push_back(std::move(*info));
            }
          });
    }
    status = Explain(status, client);
  }
  if (!status.ok()) return status;
  return view;
}

Result<std::vector<ActorSummary>> FetchActors(const std::string& address, const std::string& token,
                                              Millis timeout) {
  std::vector<ActorSummary> actors;
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::GET_ALL_ACTORS>(
      address, token, timeout, nullptr, [&](proto::GetAllActorsReply::Reader r) {
        for (auto a : r.getActors()) {
          ActorSummary s;
          s.actor_id = a.getActorId();
          s.job_id = a.getJobId();
          s.name = a.getName();
          s.ray_namespace = a.getNamespace();
          s.class_name = a.getClassName();
          s.state = runtime::ActorStateName(a.getState());
          s.address = a.getAddress();
          s.node_id = a.getNodeId();
          s.worker_id = a.getWorkerId();
          s.num_restarts = a.getNumRestarts();
          s.max_restarts = a.getMaxRestarts();
          s.detached = a.getDetached();
          s.death_cause = a.getDeathCause();
          s.pid = a.getPid();
          actors.push_back(std::move(s));
        }
      }));
  return actors;
}

Result<std::vector<JobSummary>> FetchJobs(const std::string& address, const std::string& token,
                                          Millis timeout) {
  std::vector<JobSummary> jobs;
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::GET_ALL_JOBS>(
      address, token, timeout, nullptr, [&](proto::GetAllJobsReply::Reader r) {
        for (auto j : r.getJobs()) {
          JobSummary s;
          s.job_id = j.getJobId();
          s.driver_pid = j.getDriverPid();
          s.driver_host = j.getDriverHost();
          s.entrypoint = j.getEntrypoint();
          s.start_time_ms = j.getStartTimeMs();
          s.end_time_ms = j.getEndTimeMs();
          s.is_dead = j.getIsDead();
          jobs.push_back(std::move(s));
        }
      }));
  return jobs;
}

Result<std::vector<internal::PlacementGroupInfo>> FetchPlacementGroups(const std::string& address,
                                                                       const std::string& token,
                                                                       Millis timeout) {
  std::vector<internal::PlacementGroupInfo> groups;
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::GET_ALL_PLACEMENT_GROUPS>(
      address, token, timeout, nullptr, [&](proto::GetAllPlacementGroupsReply::Reader r) {
        for (auto g : r.getGroups()) {
          groups.push_back(runtime::PlacementGroupFromProto(g));
        }
      }));
  return groups;
}

namespace {
// Calls method M (an empty request) on every alive node at once (one loop) and hands each
// answer to `on_reply`; nodes that don't answer are listed in `unreachable`.
template <proto::Method M>
Status CallEveryNode(
    const std::string& address, const std::string& token, Millis timeout,
    const std::function<void(const NodeInfo&, typename rpc::ReplyOf<M>::Reader)>& on_reply,
    std::vector<std::string>& unreachable) {
  std::vector<NodeInfo> nodes;
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::GET_ALL_NODES>(
      address, token, timeout, [](proto::GetAllNodesRequest::Builder r) { r.setOnlyAlive(true); },
      [&](proto::GetAllNodesReply::Reader r) {
        for (auto n : r.getNodes()) {
          auto info = runtime::NodeInfoFromProto(n);
          if (info.ok()) nodes.push_back(std::move(*info));
        }
      }));
  EventLoop loop;
  std::vector<std::unique_ptr<rpc::RpcClient>> clients;
  size_t pending = nodes.size();
  for (const auto& node : nodes) {
    clients.push_back(
        std::make_unique<rpc::RpcClient>(loop, node.address, rpc::Options{token, "cli"}));
    rpc::RpcClient* client = clients.back().get();
    client->Connect();
    client->Call<M>(timeout,
                    [&, client, node = node](const Status& s, typename rpc::ReplyOf<M>::Reader r) {
                      --pending;
                      if (!s.ok()) {
                        unreachable.push_back("node " + node.node_id.Hex() + " at " + node.address +
                                              ": " + Explain(s, *client).message());
                        return;
                      }
                      on_reply(node, r);
                    });
  }
  loop.RunUntil([&] { return pending == 0; }, timeout + Millis(1000));
  clients.clear();
  return Status::Ok();
}
}  // namespace

Result<WorkersView> FetchWorkers(const std::string& address, const std::string& token,
                                 Millis timeout) {
  WorkersView view;
  auto on_reply = [&](const NodeInfo& node, proto::GetWorkersReply::Reader r) {
    for (auto w : r.getWorkers()) {
      WorkerSummary ws;
      ws.worker_id = w.getWorkerId();
      ws.job_id = w.getJobId();
      ws.node_id = w.getNodeId();
      if (ws.node_id.empty()) ws.node_id = node.node_id.Hex();
      ws.pid = w.getPid();
      ws.address = w.getAddress();
      ws.state = w.getState();
      ws.actor_id = w.getActorId();
      ws.exit_reason = w.getExitReason();
      view.workers.push_back(std::move(ws));
    }
  };
  RAYD_RETURN_IF_ERROR(CallEveryNode<proto::Method::GET_WORKERS>(address, token, timeout, on_reply,
                                                                 view.unreachable));
  return view;
}

Result<ObjectsView> FetchObjects(const std::string& address, const std::string& token,
                                 Millis timeout) {
  ObjectsView view;
  auto on_reply = [&](const NodeInfo& node, proto::StoreListReply::Reader reply) {
    NodeStoreSummary store;
    store.node_id = node.node_id.Hex();
    store.capacity = reply.getCapacity();
    store.used = reply.getUsed();
    store.spilled_bytes = reply.getSpilledBytes();
    store.total_evicted = reply.getTotalEvicted();
    store.total_spilled = reply.getTotalSpilled();
    store.total_restored = reply.getTotalRestored();
    view.stores.push_back(store);
    for (auto o : reply.getObjects()) {
      ObjectSummary os;
      os.object_id = o.getObjectId();
      os.node_id = store.node_id;
      os.size = o.getSize();
      os.state = o.getState();
      os.primary = o.getPrimary();
      os.pins = o.getPins();
      os.owner = o.getOwner();
      os.spill_path = o.getSpillPath();
      view.objects.push_back(std::move(os));
    }
  };
  RAYD_RETURN_IF_ERROR(CallEveryNode<proto::Method::STORE_LIST>(address, token, timeout, on_reply,
                                                                view.unreachable));
  return view;
}

}  // namespace rayd

namespace rayd {

Result<std::map<std::string, std::string>> FetchKvPrefix(const std::string& address,
                                                         const std::string& token,
                                                         const std::string& ns,
                                                         const std::string& prefix,
                                                         Millis timeout) {
  EventLoop loop;
  rpc::RpcClient client(loop, address, rpc::Options{token, "cli"});
  RAYD_RETURN_IF_ERROR(ConnectOnce(loop, client, timeout));
  std::vector<std::string> keys;
  Status listed = rpc::CallAndWait<proto::Method::KV_KEYS>(
      loop, client,
      [&](proto::KvKeysRequest::Builder r) {
        r.setNamespace(ns);
        r.setPrefix(prefix);
      },
      timeout,
      [&](proto::KvKeysReply::Reader r) {
        for (auto key : r.getKeys()) keys.emplace_back(key);
      });
  RAYD_RETURN_IF_ERROR(Explain(listed, client));
  // Every get in flight at once on the one connection.
  std::map<std::string, std::string> values;
  size_t answered = 0;
  Status failed;
  for (const std::string& key : keys) {
    client.Call<proto::Method::KV_GET>(
        [&](proto::KvGetRequest::Builder r) {
          r.setNamespace(ns);
          r.setKey(key);
        },
        timeout,
        [&, key](const Status& s, proto::KvGetReply::Reader reply) {
          ++answered;
          if (!s.ok()) {
            failed = s;
            return;
          }
          if (!reply.getFound()) return;  // deleted since the listing
          auto value = reply.getValue();
          values.emplace(key, std::string(reinterpret_cast<const char*>(value.begin()),
                                          value.size()));
        });
  }
  if (!loop.RunUntil([&] { return answered == keys.size(); }, timeout)) {
    return Status::DeadlineExceeded("reading " + std::to_string(keys.size()) + " keys of " + ns +
                                    " from " + address);
  }
  RAYD_RETURN_IF_ERROR(failed);
  return values;
}

}  // namespace rayd
