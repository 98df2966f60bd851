#pragma once
// The GCS actor table: creates actors on nodes, restarts them when their worker or node dies,
// kills them, and answers lookups by id or by name.
//
// How it works
// - CREATE_ACTOR records the actor (PENDING_CREATION), stores it, answers with its id, then
//   schedules it: the first alive node (in id order) whose reported availability, less what
//   this manager placed there since the node's last heartbeat, fits the actor's resources.
//   When none fits now but some node's total would, it retries every kRetryPeriod; when no
//   node's total fits, the actor is DEAD ("infeasible: ...").
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
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gcs/gcs_node_manager.h"
#include "rayd/scheduler/placement.h"
#include "gcs/node_client_pool.h"
#include "gcs/store_client.h"
#include "rayd/base/rpc.h"
#include "rayd/protocol/core.capnp.h"

namespace rayd::gcs {

class GcsActorManager {
 public:
  static constexpr Millis kRetryPeriod{200};

  // `loop`, `store`, `nodes` and `node_clients` must outlive the manager. Registers a
  // node-death listener on `nodes`.
  // An actor no alive node could ever hold waits `infeasible_timeout` for one to join (0: it
  // is DEAD at once).
  GcsActorManager(EventLoop& loop, StoreClient& store, GcsNodeManager& nodes,
                  NodeClientPool& node_clients, Millis infeasible_timeout = Millis(0));
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

 private:
  struct Actor;

  void HandleCreate(const rpc::CallPtr& call);
  void HandleGet(const rpc::CallPtr& call);
  void HandleKill(const rpc::CallPtr& call);
  void HandleGetAll(const rpc::CallPtr& call);
  void HandleWorkerFailed(const rpc::CallPtr& call);

  // Creation.
  void Schedule(Actor& actor);
  void RetryWaiting();
  std::string InfeasibleCause(const Actor& actor) const;
  scheduler::ClusterSnapshot Snapshot(const std::string& actor_id, std::vector<NodeId>* ids) const;
  void RequestLease(Actor& actor, const NodeId& node);
  void OnLeaseReply(const std::string& actor_id, uint64_t attempt, const NodeId& node,
                    const Status& status, capnp::AnyPointer::Reader reply);
  void PushCreationTask(Actor& actor);
  void OnCreationReply(const std::string& actor_id, uint64_t attempt, const Status& status,
                       capnp::AnyPointer::Reader reply);

  // State changes.
  void AbandonAttempt(Actor& actor);
  void OnWorkerDied(Actor& actor, const std::string& reason);
  void MarkDead(Actor& actor, const std::string& cause, bool kill_worker);
  void Settle(Actor& actor);
  void SettleOnceStored(Actor& actor);
  // Stores the actor's record (best effort: failures are logged), then runs `then`.
  void Persist(const Actor& actor, std::function<void()> then = nullptr);
  void OnNodeDied(const NodeId& node);

  // Calls to nodes.
  void KillWorker(const NodeId& node, const std::string& worker_id, const std::string& reason);
  void ReturnLease(const NodeId& node, const std::string& lease_id, bool kill_worker);
  void Retire(std::unique_ptr<rpc::RpcClient> client);

  // Placement.
  enum class Fit { kNow, kLater, kNever };
  std::pair<Fit, NodeId> PickNode(const std::string& actor_id,
                                  const scheduler::ResourceSet& demand) const;

  Actor* Find(const std::string& actor_id);
  Actor* FindByName(const std::string& ray_namespace, const std::string& name);
  // Wraps a callback so that it does nothing once this manager is destroyed.
  template <typename F>
  auto Guarded(F fn);

  const Millis infeasible_timeout_;
  EventLoop& loop_;
  StoreClient& store_;
  GcsNodeManager& nodes_;
  NodeClientPool& node_clients_;
  std::map<std::string, std::unique_ptr<Actor>> actors_;              // by actor id
  std::map<std::pair<std::string, std::string>, std::string> names_;  // (namespace, name) -> id
  std::set<std::string> waiting_;  // actors waiting for a node with room
  // What this manager placed on each node, by actor: counted against the node's reported
  // availability until a heartbeat newer than the placement arrives (`since_ms`; in-flight
  // lease requests count until answered).
  struct Placement {
    NodeId node;
    scheduler::ResourceSet resources;
    int64_t since_ms;
  };
  std::map<std::string, Placement> placements_;
  // Worker clients of abandoned creation pushes, destroyed on the next loop turn.
  std::vector<std::unique_ptr<rpc::RpcClient>> retired_;
  Timer retry_timer_;
  Timer reaper_;
  // False once destroyed; callbacks of the store and of RPC clients that outlive this manager
  // check it first.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rayd::gcs
