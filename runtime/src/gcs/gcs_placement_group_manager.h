#pragma once
// The GCS placement-group table: reserves each group's bundles on nodes, all or nothing, keeps
// them reserved across node deaths, and frees them on removal.
//
// How it works
// - CREATE_PLACEMENT_GROUP validates the group (bundles present, none empty; a name unique in
//   its namespace among groups not REMOVED), records it PENDING, stores it, answers with its
//   id, then schedules it.
// - Scheduling runs scheduler::PlaceGroup on the ledger's snapshot (reported availability less
//   pending placements). kPlaced: the group's bundles are prepared on their nodes
//   (PREPARE_BUNDLES); a group that lies on one node is prepared with commit set (one phase:
//   the node's reservation is already atomic); otherwise, once every node has prepared, each
//   is told COMMIT_BUNDLES and the group is CREATED when all have answered. A prepare that
//   fails (the node was fuller than it said, or died) cancels the bundles prepared elsewhere
//   (CANCEL_BUNDLES) and the group is placed again after kRetryPeriod: no partial hold outlives
//   an attempt, so competing groups never deadlock. kNotNow: the group waits and is retried
//   every kRetryPeriod, whenever a group is removed and whenever a node reports other free
//   resources (nodes report as soon as they free some). kInfeasible: it waits for a node that
//   fits to join, listed with its reason, and is FAILED after `infeasible_timeout` (0: at
//   once).
// - Groups are scheduled in creation order, several in flight at once; each in-flight and
//   created-but-unreported reservation is in the shared ledger, so they do not double-book.
// - REMOVE_PLACEMENT_GROUP marks the group REMOVED (stored), tells the removal listeners (the
//   actor manager kills the group's actors), sends CANCEL_BUNDLES to every node holding or
//   preparing its bundles, and answers without waiting for the nodes. Removing twice is Ok.
// - A node dying: bundles reserved there become unplaced; a CREATED group goes RESCHEDULING
//   and only those bundles are placed again (STRICT_SPREAD avoids the nodes its other bundles
//   use; STRICT_PACK places the whole group again); an attempt preparing there is abandoned
//   (cancelled elsewhere) and retried.
// - A job ending removes its groups that are not detached.
// - GET_PLACEMENT_GROUP with waitUntilReady holds the reply while the group is PENDING or
//   RESCHEDULING (callers that hang up are dropped).
// - Start() reloads the table: CREATED groups stay CREATED (node daemons keep their bundles
//   across a head restart); the others are scheduled again after cancelling whatever their
//   interrupted attempt may have prepared.
//
// Invariants
// - Every attempt has a number (Group::attempt); replies of an abandoned attempt are stale and
//   only trigger a CANCEL_BUNDLES of what they reserved.
// - A bundle has a node only once committed there (or prepared in the current attempt).
// - names_ holds exactly the named groups that are not REMOVED or FAILED.
//
// Threading: the GCS event loop only; no locks.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gcs/gcs_node_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/pending_placements.h"
#include "gcs/placement_group.h"
#include "gcs/table_store.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/base/rpc.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/scheduler/placement.h"

namespace rayd::gcs {

class GcsPlacementGroupManager {
 public:
  static constexpr Millis kRetryPeriod{100};

  // `loop`, `store`, `nodes`, `node_clients` and `ledger` must outlive the manager. Registers a
  // node-death listener on `nodes`.
  GcsPlacementGroupManager(EventLoop& loop, TableStore& store, GcsNodeManager& nodes,
                           NodeClientPool& node_clients, PendingPlacements& ledger,
                           Millis infeasible_timeout = Millis(0));
  ~GcsPlacementGroupManager();
  GcsPlacementGroupManager(const GcsPlacementGroupManager&) = delete;
  GcsPlacementGroupManager& operator=(const GcsPlacementGroupManager&) = delete;

  // Loads the table from the store (a head restart); then `done`.
  void Start(std::function<void(Status)> done);
  // CREATE_PLACEMENT_GROUP, REMOVE_PLACEMENT_GROUP, GET_PLACEMENT_GROUP,
  // GET_ALL_PLACEMENT_GROUPS.
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // Removes the job's groups that are not detached ("its job ended").
  void OnJobFinished(const std::string& job_id);

  // Where work of group `group_id` that needs `demand` may run: bundle `index`, or with index
  // -1 the next ready bundle (round robin) whose resources cover `demand`.
  struct BundleSlot {
    enum class Kind {
      kReady,  // `node` holds the bundle (committed)
      kWait,   // the group (or that bundle) is being reserved: ask again later
      kGone,   // it never will be: `why` says so (group removed or failed, unknown group, no
               // such bundle)
      kTooSmall,  // `demand` is larger than the bundle (or than every bundle, for index -1):
                  // infeasible, as a request no node could hold (`why` says which)
    };
    Kind kind = Kind::kWait;
    NodeId node;
    uint32_t index = 0;
    std::string why;
  };
  BundleSlot FindBundle(const std::string& group_id, int index,
                        const scheduler::ResourceSet& demand);

  // Runs `listener(group_id, why)` when a group is removed or fails (after its state says so).
  using RemovalListener = std::function<void(const std::string&, const std::string&)>;
  void AddRemovalListener(RemovalListener listener) {
    removal_listeners_.push_back(std::move(listener));
  }
  // Runs `listener(group_id)` each time a group becomes CREATED (also after rescheduling).
  using ReadyListener = std::function<void(const std::string&)>;
  void AddReadyListener(ReadyListener listener) { ready_listeners_.push_back(std::move(listener)); }

  size_t num_groups() const { return groups_.size(); }

  // The groups waiting for room or for a node that fits (not being reserved now), in creation
  // order, each with the bundles it still needs (STRICT_PACK: all of them): the autoscaler's
  // demand.
  struct WaitingGroup {
    std::string id;
    std::string name;
    scheduler::GroupRequest request;
  };
  std::vector<WaitingGroup> WaitingGroups() const;

 private:
  // Implementation notes
  // - Every state change is written to the store (table "placement_groups", one JSON record per
  //   group, bundles with their committed nodes), best effort; held GET_PLACEMENT_GROUP replies
  //   go out once the settled state is written.
  // - The newest kMaxEndedGroups REMOVED or FAILED groups are kept for lookups and listings;
  //   older ones are forgotten (memory and store), so that long runs of create/remove cycles
  //   do not grow the head without bound.
  // - At most one attempt per group is in flight (Group::in_flight); a group is in waiting_
  //   only while it has none and is neither REMOVED nor FAILED.
  // - The ledger holds "<group id>/<node id>" for the nodes of the attempt in flight and of
  //   committed bundles, of groups that are neither REMOVED nor FAILED.
  static constexpr size_t kMaxEndedGroups = 10000;
  using Group = PlacementGroup;

  // A group loaded by Start(): its bundles on nodes that are gone are lost, and what is not
  // placed is scheduled again.
  void Resume(Group& group);
  using GetGroupCall = rpc::Incoming<proto::Method::GET_PLACEMENT_GROUP>;

  void HandleCreate(const rpc::Incoming<proto::Method::CREATE_PLACEMENT_GROUP>& call);
  void HandleRemove(const rpc::Incoming<proto::Method::REMOVE_PLACEMENT_GROUP>& call);
  void HandleGet(const GetGroupCall& call);
  void HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_PLACEMENT_GROUPS>& call);

  // The cluster as one scheduling pass sees it: each group the pass places is applied to it, so
  // the next group sees what is left, and a pass over many waiting groups builds one snapshot.
  struct Pass {
    scheduler::ClusterSnapshot cluster;
    std::vector<NodeId> ids;  // per snapshot node
  };
  Pass NewPass() const;
  // Scheduling: places the group's unplaced bundles and starts an attempt, or makes it wait.
  // `pass`: the snapshot to place on (and update); null: a fresh one.
  void Schedule(Group& group, Pass* pass = nullptr);
  void Wait(Group& group);
  void RetryWaiting();
  // Sends PREPARE_BUNDLES for the bundles `plan` puts on each node (bundle index -> node).
  void StartAttempt(Group& group, const std::map<NodeId, std::vector<uint32_t>>& plan);
  void OnPrepareReply(const std::string& group_id, uint64_t attempt, const NodeId& node,
                      const std::vector<uint32_t>& indexes, const Status& status);
  void OnCommitReply(const std::string& group_id, uint64_t attempt, const NodeId& node,
                     const Status& status);
  // Gives up the attempt in flight: its bundles are unplaced and cancelled on its nodes.
  void AbandonAttempt(Group& group, const std::string& why);
  // Unplaces the group's bundles on `node` (it died, or the head found it gone).
  void LoseNode(Group& group, const NodeId& node);

  // State changes.
  void MarkCreated(Group& group);
  // REMOVED or FAILED with `cause`: frees everything the group holds and tells the listeners.
  void End(Group& group, proto::PlacementGroupState state, const std::string& cause);
  void OnNodeDied(const NodeId& node);
  // Stores the group's record (best effort: failures are logged), then runs `then`.
  void Persist(const Group& group, std::function<void()> then = nullptr);
  // Answers the held GET_PLACEMENT_GROUP calls once the group's settled state is stored.
  void SettleOnceStored(Group& group);
  // Drops the oldest ended groups past kMaxEndedGroups, from memory and from the store.
  void ForgetOldEnded();

  void CancelBundles(const NodeId& node, const std::string& group_id,
                     const std::vector<uint32_t>& indexes, const std::string& reason);
  void ToProto(const Group& group, proto::PlacementGroupInfo::Builder out) const;
  Group* Find(const std::string& group_id);
  static bool BySeq(const Group* a, const Group* b);

  const Millis infeasible_timeout_;
  TableStore& store_;
  GcsNodeManager& nodes_;
  NodeClientPool& node_clients_;
  PendingPlacements& ledger_;
  std::vector<RemovalListener> removal_listeners_;
  std::vector<ReadyListener> ready_listeners_;
  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;    // by id
  std::map<std::pair<std::string, std::string>, std::string> names_;  // (namespace, name) -> id
  std::set<std::pair<uint64_t, std::string>> waiting_;  // (Group::seq, id): creation order
  std::deque<std::string> ended_;                       // REMOVED and FAILED groups, oldest first
  uint64_t next_seq_ = 0;
  Timer retry_timer_;
  LifetimeGuard guard_;
};

}  // namespace rayd::gcs
