#pragma once
// The GCS actor table: creates actors on nodes, restarts them when their worker or node dies,
// kills them, and answers lookups by id or by name.
//
// How it works
// - CREATE_ACTOR records the actor (PENDING_CREATION), stores it, answers with its id, then
//   schedules it with the hybrid policy (scheduler::PlaceOne) over the shared ledger's snapshot
//   (reported availability less what the head placed since the node's last heartbeat),
//   honouring the label selector and node affinity of its creation spec. When no node fits
//   now but one could, it retries every kRetryPeriod; when none ever could, it waits
//   `infeasible_timeout` for one to join, then is DEAD ("infeasible: ..."). Hard affinity to a
//   node that is not alive makes it DEAD at once.
// - An actor in a placement group is placed on its bundle's node (FindBundle): it waits while
//   the group is being reserved (retried when the group becomes ready, and every
//   kRetryPeriod), is infeasible (as above) when it is larger than its bundle, is DEAD when the
//   group is gone, and its lease request carries the group and bundle index (its resources
//   come from the bundle, so the ledger does not count it). A
//   group removed or failed makes its actors DEAD ("its placement group X was removed") and
//   kills their workers.
// - Creation asks that node for a worker lease (REQUEST_LEASE, forActor, grantOrReject) and
//   pushes the creation task to the leased worker (PUSH_TASK, attempt = restarts so far). A
//   value makes the actor ALIVE at that worker; an error value makes it DEAD (the constructor
//   raised) and the worker is ended (RETURN_LEASE with killWorker).
// - A dead worker (WORKER_FAILED, or the creation push losing its connection) or a dead node
//   restarts the actor while restarts remain (RESTARTING, numRestarts + 1, scheduled again),
//   else makes it DEAD. A node dying while a lease was only requested there reschedules the
//   actor without counting a restart.
// - KILL_ACTOR with noRestart makes the actor DEAD and kills its worker (KILL_WORKER); without
//   it only kills the worker, and the failure report restarts the actor.
// - When a job ends, its non-detached actors become DEAD and their workers are killed.
// - GET_ACTOR with waitUntilSettled holds the reply while the actor is PENDING_CREATION or
//   RESTARTING.
//
// Invariants
// - Every creation attempt has a number (Actor::attempt); abandoning an attempt (death,
//   restart, kill) bumps it, so replies of abandoned leases and pushes are recognised as stale.
//   A stale granted lease is returned with killWorker, so no worker leaks.
// - names_ holds exactly the named actors that are not DEAD.
// - Every state change (and each granted lease) is written to the store (table "actors",
//   JSON) best effort; held GET_ACTOR replies go out once ALIVE or DEAD is written. Start()
//   reloads the table: ALIVE actors stay ALIVE; pending and restarting ones are scheduled
//   again, ending the worker a lease had already given them.
//
// Threading: the GCS event loop only; no locks.

#include <capnp/message.h>

#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gcs/gcs_node_manager.h"
#include "gcs/gcs_placement_group_manager.h"
#include "rayd/base/lifetime_guard.h"
#include "gcs/node_client_pool.h"
#include "gcs/pending_placements.h"
#include "gcs/table_store.h"
#include "rayd/base/rpc.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/scheduler/placement.h"

namespace rayd::gcs {

class GcsActorManager {
 public:
  static constexpr Millis kRetryPeriod{200};

  // `loop`, `store`, `nodes`, `node_clients`, `ledger` and `placement_groups` must outlive the
  // manager. Registers a node-death listener on `nodes` and ready and removal listeners on
  // `placement_groups`.
  // An actor no alive node could ever hold waits `infeasible_timeout` for one to join (0: it
  // is DEAD at once).
  GcsActorManager(EventLoop& loop, TableStore& store, GcsNodeManager& nodes,
                  NodeClientPool& node_clients, PendingPlacements& ledger,
                  GcsPlacementGroupManager& placement_groups,
                  Millis infeasible_timeout = Millis(0));
  ~GcsActorManager();
  GcsActorManager(const GcsActorManager&) = delete;
  GcsActorManager& operator=(const GcsActorManager&) = delete;

  // Loads the actor table from the store (a head restart); then `done`.
  void Start(std::function<void(Status)> done);
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // The job ended: its non-detached actors die ("its driver exited") and their workers are
  // killed.
  void OnJobFinished(const std::string& job_id);

  size_t num_actors() const { return actors_.size(); }

  // The actors waiting for a node with room or one that fits, outside placement groups (those
  // wait on their group): the autoscaler's demand.
  struct WaitingActor {
    std::string id;
    std::string name;
    std::string class_name;
    scheduler::Bundle bundle;  // its resources and label selector
  };
  std::vector<WaitingActor> WaitingActors() const;

 private:
  struct Actor;

  using GetActorCall = rpc::Incoming<proto::Method::GET_ACTOR>;

  void HandleCreate(const rpc::Incoming<proto::Method::CREATE_ACTOR>& call);
  void HandleGet(const GetActorCall& call);
  void HandleKill(const rpc::Incoming<proto::Method::KILL_ACTOR>& call);
  void HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_ACTORS>& call);
  void HandleWorkerFailed(const rpc::Incoming<proto::Method::WORKER_FAILED>& call);

  // Creation.
  void Schedule(Actor& actor);
  // Places an actor that is in a placement group on its bundle.
  void ScheduleInGroup(Actor& actor);
  // An actor that cannot be placed (`reason`) waits infeasible_timeout_ from the first time,
  // retried like one waiting for room, then is DEAD ("infeasible: <reason>").
  void WaitInfeasible(Actor& actor, const std::string& reason);
  void Wait(Actor& actor);
  void RetryWaiting();
  // Asks `node` for the actor's worker; `bundle`: the index of its group's bundle there.
  void RequestLease(Actor& actor, const NodeId& node, std::optional<uint32_t> bundle);
  void OnLeaseReply(const std::string& actor_id, uint64_t attempt, const NodeId& node,
                    const Status& status, proto::RequestLeaseReply::Reader reply);
  void PushCreationTask(Actor& actor);
  void OnCreationReply(const std::string& actor_id, uint64_t attempt, const Status& status,
                       proto::PushTaskReply::Reader reply);

  // State changes.
  void AbandonAttempt(Actor& actor);
  void OnWorkerDied(Actor& actor, const std::string& reason);
  void MarkDead(Actor& actor, const std::string& cause, bool kill_worker);
  // Forgets the oldest dead actors beyond kMaxDeadActors (called where no iteration is under
  // way: before a new actor is added).
  void ForgetOldestDead();
  void Settle(Actor& actor);
  void SettleOnceStored(Actor& actor);
  // Stores the actor's record (best effort: failures are logged), then runs `then`.
  void Persist(const Actor& actor, std::function<void()> then = nullptr);
  void OnNodeDied(const NodeId& node);
  void OnGroupReady(const std::string& group_id);
  void OnGroupRemoved(const std::string& group_id, const std::string& why);

  // Calls to nodes.
  void KillWorker(const NodeId& node, const std::string& worker_id, const std::string& reason);
  void ReturnLease(const NodeId& node, const std::string& lease_id, bool kill_worker);
  void Retire(std::unique_ptr<rpc::RpcClient> client);

  // Placement (the hybrid policy; scheduler::PlaceOne's reason when not kPlaced); sets *node
  // when placed.
  scheduler::Placement PickNode(Actor& actor, NodeId* node) const;

  Actor* Find(const std::string& actor_id);
  Actor* FindByName(const std::string& ray_namespace, const std::string& name);

  const Millis infeasible_timeout_;
  EventLoop& loop_;
  TableStore& store_;
  GcsNodeManager& nodes_;
  NodeClientPool& node_clients_;
  // Shared with the placement-group manager: what the head placed that heartbeats may not show
  // yet (keyed by actor id here).
  PendingPlacements& ledger_;
  GcsPlacementGroupManager& placement_groups_;
  std::map<std::string, std::unique_ptr<Actor>> actors_;              // by actor id
  // Dead actors in the order they died. Their records stay listable (`rayd list actors`) up to
  // kMaxDeadActors, as Ray keeps a bounded cache of destroyed actors; older ones are forgotten
  // (here and in the store) when new actors are created, so a long sweep's thousands of trial
  // ranks do not grow the head without bound.
  static constexpr size_t kMaxDeadActors = 10000;
  std::deque<std::string> dead_;
  std::map<std::pair<std::string, std::string>, std::string> names_;  // (namespace, name) -> id
  std::set<std::string> waiting_;  // actors waiting for a node with room, or for their bundle
  // Actors that are not DEAD, by the placement group they run in.
  std::map<std::string, std::set<std::string>> group_actors_;
  // Worker clients of abandoned creation pushes, destroyed on the next loop turn.
  std::vector<std::unique_ptr<rpc::RpcClient>> retired_;
  Timer retry_timer_;
  Timer reaper_;
  // Callbacks of the store and of RPC clients that outlive this manager do nothing after it.
  LifetimeGuard guard_;
};

}  // namespace rayd::gcs
