#include "common/cluster_reader.h"

#include <memory>

namespace rayd::runtime {
namespace {

WorkerSummary WorkerFromProto(proto::WorkerInfo::Reader w, const NodeInfo& node) {
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
  return ws;
}

void AddStore(proto::StoreListReply::Reader reply, const NodeInfo& node, ObjectsView& view) {
  NodeStoreSummary store;
  store.node_id = node.node_id.Hex();
  store.capacity = reply.getCapacity();
  store.used = reply.getUsed();
  store.peak_used = reply.getPeakUsed();
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
}

// Calls method M (an empty request) on every alive node at once; each answer goes to
// `on_reply(node, reply, view)`, each node that does not answer to view.unreachable; `done`
// gets the view once every node answered.
template <proto::Method M, typename View, typename OnReply>
void CallEveryNode(GcsClient& gcs, core::ClientPool& nodes, Millis timeout, OnReply on_reply,
                   Done<View> done) {
  gcs.GetNodes(/*only_alive=*/true, [&nodes, timeout, on_reply,
                                     done](Result<std::vector<NodeInfo>> alive) {
    if (!alive.ok()) return done(alive.status());
    if (alive->empty()) return done(View());
    struct Gather {
      View view;
      size_t pending;
    };
    auto gather = std::make_shared<Gather>(Gather{View(), alive->size()});
    for (const NodeInfo& node : *alive) {
      rpc::RpcClient& client = nodes.Get(node.address);
      client.Call<M>(timeout, [gather, node, on_reply, done, &client](
                                  const Status& s, typename rpc::ReplyOf<M>::Reader reply) {
        if (s.ok()) {
          on_reply(reply, node, gather->view);
        } else {
          const Status why = s.code() == StatusCode::kDeadlineExceeded && !client.last_error().ok()
                                 ? client.last_error()
                                 : s;
          gather->view.unreachable.push_back("node " + node.node_id.Hex() + " at " +
                                             node.address + ": " + why.message());
        }
        if (--gather->pending == 0) done(std::move(gather->view));
      });
    }
  });
}

}  // namespace

ClusterReader::ClusterReader(EventLoop& loop, const std::string& gcs_address,
                             const std::string& token, const std::string& role, Millis timeout)
    : timeout_(timeout),
      gcs_(loop, gcs_address, rpc::Options{token, role}, timeout),
      nodes_(loop, rpc::Options{token, role}) {}

void ClusterReader::GetWorkers(Done<WorkersView> done) {
  CallEveryNode<proto::Method::GET_WORKERS, WorkersView>(
      gcs_, nodes_, timeout_,
      [](proto::GetWorkersReply::Reader reply, const NodeInfo& node, WorkersView& view) {
        for (auto w : reply.getWorkers()) view.workers.push_back(WorkerFromProto(w, node));
      },
      std::move(done));
}

void ClusterReader::GetObjects(Done<ObjectsView> done) {
  CallEveryNode<proto::Method::STORE_LIST, ObjectsView>(
      gcs_, nodes_, timeout_,
      [](proto::StoreListReply::Reader reply, const NodeInfo& node, ObjectsView& view) {
        AddStore(reply, node, view);
      },
      std::move(done));
}

}  // namespace rayd::runtime
