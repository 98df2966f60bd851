#pragma once
// The GCS node table: registration, heartbeats, failure detection.
//
// Invariants: every node in nodes_ is also in the store (written before the reply to its
// registration); a node is declared dead after `missed_heartbeats` periods without a
// heartbeat and never comes back alive under the same id (it rejoins as a new node).
// After a head restart, nodes loaded from the store get a grace period to reconnect. A drained
// node leaves by itself at its deadline; one still heard from a heartbeat timeout after it is
// declared dead.

#include <functional>
#include <map>
#include <vector>

#include "common/node_info.h"
#include "gcs/table_store.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

struct FailureDetectorConfig {
  Millis heartbeat_period{1000};
  int missed_heartbeats = 5;
  // Extra time given to nodes loaded from the store after a head restart.
  Millis recovery_grace{10000};
  Millis timeout() const { return heartbeat_period * missed_heartbeats; }
};

class GcsNodeManager {
 public:
  // `loop` and `store` must outlive the manager.
  GcsNodeManager(EventLoop& loop, TableStore& store, FailureDetectorConfig config);

  // Loads the node table from the store (a head restart) and starts failure detection.
  void Start(std::function<void(Status)> done);
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  const std::map<NodeId, runtime::NodeInfo>& nodes() const { return nodes_; }
  // The alive nodes in id order (a stable order for placement). The pointers stay valid for
  // the manager's life (nodes are never erased) but their contents change with heartbeats.
  std::vector<const runtime::NodeInfo*> AliveNodes() const;
  // The node if it is known and alive, else null.
  const runtime::NodeInfo* FindAlive(const NodeId& id) const;

  // `rayd drain`: marks an alive node (not the head's) as leaving; its heartbeats' replies tell
  // it, and placement views see it as taking nothing new (PendingPlacements). NotFound or
  // InvalidArgument (dead, the head) change nothing; else `stored` once the store has it.
  Status Drain(const NodeId& id, int64_t deadline_ms, const std::string& reason,
               std::function<void(Status)> stored = nullptr);

  // Runs `listener` (on the loop thread) each time a node is declared dead, after its entry
  // says so. Listeners are called in the order they were added; they must not add listeners.
  using NodeDeathListener = std::function<void(const runtime::NodeInfo&)>;
  void AddNodeDeathListener(NodeDeathListener listener) {
    death_listeners_.push_back(std::move(listener));
  }

  // Runs `listener` (on the loop thread) after each change a placement policy would see: a node
  // joined or re-registered, died, or reported different available resources. Heartbeats that
  // change nothing are not reported, so a cache of the alive nodes stays valid between them.
  enum class NodeChange { kJoined, kResources, kDied };
  using NodeChangeListener = std::function<void(const NodeId&, NodeChange)>;
  void AddNodeChangeListener(NodeChangeListener listener) {
    change_listeners_.push_back(std::move(listener));
  }

 private:
  void HandleRegister(const rpc::Incoming<proto::Method::REGISTER_NODE>& call);
  void HandleHeartbeat(const rpc::Incoming<proto::Method::HEARTBEAT>& call);
  void HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_NODES>& call);
  void HandleUnregister(const rpc::Incoming<proto::Method::UNREGISTER_NODE>& call);
  void HandleDrain(const rpc::Incoming<proto::Method::DRAIN_NODE>& call);
  void CheckHeartbeats();
  void MarkDead(const NodeId& id, const std::string& reason);
  void Persist(const runtime::NodeInfo& info, std::function<void(Status)> done);
  void Changed(const NodeId& id, NodeChange change) const;

  EventLoop& loop_;
  TableStore& store_;
  FailureDetectorConfig config_;
  std::map<NodeId, runtime::NodeInfo> nodes_;
  std::map<NodeId, Clock::time_point> last_seen_;  // alive nodes only
  Timer check_timer_;
  std::vector<NodeDeathListener> death_listeners_;
  std::vector<NodeChangeListener> change_listeners_;
};

}  // namespace rayd::gcs
