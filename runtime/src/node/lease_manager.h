#pragma once
// LeaseManager: this node's resources and the worker leases drawn from them.
//
// How it works
// - REQUEST_LEASE: a demand that exceeds this node's total is infeasible here; unless the
//   request says grantOrReject, the manager asks the GCS for the alive nodes (cached for
//   `node_cache_ttl`) and answers spillback to one whose total fits (preferring one whose
//   reported availability fits), or fails ResourceExhausted "infeasible: no node can satisfy
//   {GPU: 4} (largest node: {...})". A feasible demand that does not fit now is spilled to a
//   node whose reported availability fits (unless grantOrReject), else queued.
// - A grant allocates the resources (and GPU device ids), takes an idle worker of the same job,
//   launch and device ids or starts one, and answers once it has registered. If the worker
//   cannot start the request fails Unavailable and the resources are released.
// - Queued requests are served in arrival order whenever resources are released; a request
//   that does not fit yet does not block later ones that do. Requests whose caller has hung up
//   are dropped.
// - A grant says whether another lease of the same shape would fit right now, or more grants
//   of the job are on their way (their workers are starting): moreRoom. The submitter queues
//   tasks behind busy workers only when neither holds.
// - SET_WORKER_BLOCKED: while the task of a leased worker waits in Get/Wait, the lease's CPUs
//   go back to its pool (Ray's rule, so that the tasks it waits for can run); unblocking takes
//   them back if they are free, else the lease runs on without them (oversubscribed) and holds
//   only what it took back.
// - RETURN_LEASE releases the resources; the worker is killed (asked to, or it held an actor)
//   or goes back to the pool's idle list. A worker that exits releases its lease too.
//
// - Placement-group bundles (two-phase, driven by the GCS): PREPARE_BUNDLES reserves every
//   listed bundle of a group on this node (resources and concrete GPU devices taken from the
//   node's pool), or none (ResourceExhausted naming what did not fit); repeating it for bundles
//   already held is a no-op success; with commit set they are usable at once. COMMIT_BUNDLES
//   makes the group's prepared bundles usable (NotFound when none of them is held here, e.g.
//   this node restarted since the prepare). CANCEL_BUNDLES frees the listed bundles (all of
//   the group's when none are listed), prepared or committed: workers leased from them are
//   killed, queued requests for them fail Cancelled ("placement group X was removed"), and
//   their resources return to the node. Unknown groups and bundles: no-op success.
// - A request whose scheduling names a placement group is served only from that group's
//   committed bundles here (the given index, or with -1 any committed bundle of the group that
//   fits), never spilled: a demand larger than the bundle fails ResourceExhausted ("{CPU: 2}
//   does not fit bundle 0 of placement group X: {CPU: 1}"); a group with no committed bundle of
//   that index here fails NotFound (the caller asks the head where it is now); a bundle without
//   room right now queues the request until a lease of that bundle ends. The lease's GPU ids
//   come from the devices the bundle reserved.
// - A request with a label selector or a hard node affinity is served here only if this node
//   carries the labels (and is the affinity node); otherwise it spills to a node that does
//   (scheduler::PlaceOne with the selector and affinity, among the alive nodes), or when no node
//   could ever hold it, is infeasible as above. Hard affinity to a dead or unknown node fails
//   Unavailable, to a node that can never hold the demand ResourceExhausted at once (no node
//   joining can help). Soft affinity to another node spills there when its last report shows
//   room, else the request is served here like any other. A grantOrReject request this node's
//   labels or affinity exclude fails ResourceExhausted.
//
// Invariants: every entry of `leases_` holds its resources minus what it lent while blocked
// (and all its GPU units) in the pool it was drawn from: the node's (`node_`) or its bundle's; its worker is LEASED with that lease id.
// Every bundle in `bundles_` holds its whole reservation (and the GPU devices its own pool
// hands out) in the node's pool. Queued requests hold nothing.
//
// Threading: the node daemon's loop thread only. `pool` and `node_id` must outlive the manager.

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "node/worker_pool.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/base/rpc.h"
#include "rayd/internal/runtime.h"
#include "rayd/runtime/cluster.h"
#include "rayd/scheduler/placement.h"
#include "rayd/scheduler/resources.h"

namespace rayd::node {

// GPU devices with how much of each is still free. A whole-GPU demand takes free devices; a
// fractional part shares one device that has room (the fullest that fits), so
// CUDA_VISIBLE_DEVICES of fractional leases may name the same device.
class GpuSlots {
 public:
  // The node's devices 0..N-1, N = ceil(total): a node with 1.5 GPUs has devices 0 and 1.
  explicit GpuSlots(scheduler::FixedPoint total);
  // Exactly what Acquire(amount) returned as `ids` (a bundle's reservation): the whole devices
  // in full, and the shared one (the last id) with the fractional part of `amount` only.
  GpuSlots(const std::vector<int>& ids, scheduler::FixedPoint amount);
  // Device ids for `amount` (whole devices in ascending order, then the shared one), or nullopt
  // when the devices are too fragmented right now. Zero amount: no ids.
  std::optional<std::vector<int>> Acquire(scheduler::FixedPoint amount);
  // Gives back what Acquire(amount) returned as `ids`.
  void Release(const std::vector<int>& ids, scheduler::FixedPoint amount);

 private:
  struct Device {
    int id = 0;
    int64_t capacity = 0;  // FixedPoint units this set holds of the device, at most kScale
    int64_t free = 0;      // in [0, capacity]
  };
  std::vector<Device> devices_;  // ascending ids
};

// Resources that leases are drawn from: the node's free resources and devices, or the
// reservation of one placement-group bundle.
struct ResourcePool {
  scheduler::NodeResources resources;
  GpuSlots gpus;

  // Takes `demand` and its GPU ids, or holds nothing and returns nullopt when they don't fit.
  std::optional<std::vector<int>> TryAllocate(const scheduler::ResourceSet& demand);
  void Release(const scheduler::ResourceSet& demand, const std::vector<int>& gpu_ids);
};

struct LeaseManagerConfig {
  scheduler::ResourceSet total;
  scheduler::Labels labels;  // this node's, for label selectors
  Millis node_cache_ttl{1000};
  // Idle workers started ahead of need for a job, the first time it asks for a task lease
  // (they start while the first task runs, so the next leases find them warm).
  int prestart_workers = 0;
  // How long a request that no node can ever satisfy waits for one that can to join before it
  // fails (0: fail at once). While it waits it is reported as an infeasible demand.
  Millis infeasible_timeout{0};
  // Called when the node's free resources grow (a lease or a bundle freed, a blocked worker's
  // CPUs lent): the node reports them at once rather than at its next heartbeat, so that a
  // placement group or actor waiting for them is placed in milliseconds, not up to a period on.
  std::function<void()> on_freed;
};

class LeaseManager {
 public:
  // Asks the GCS for the alive nodes; the callback may run after the manager is gone.
  using NodeLister = std::function<void(std::function<void(Result<std::vector<NodeInfo>>)>)>;

  LeaseManager(WorkerPool& pool, const NodeId& node_id, LeaseManagerConfig config,
               NodeLister list_nodes);
  ~LeaseManager();
  LeaseManager(const LeaseManager&) = delete;
  LeaseManager& operator=(const LeaseManager&) = delete;

  // REQUEST_LEASE, RETURN_LEASE, JOB_FINISHED, PREPARE_BUNDLES, COMMIT_BUNDLES, CANCEL_BUNDLES,
  // SET_WORKER_BLOCKED.
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // The node's free resources: reserved bundles are not part of them.
  const scheduler::ResourceSet& available() const { return node_.resources.available(); }
  size_t num_leases() const { return leases_.size(); }
  // Leases granted since start, for tasks and for actors (a lease runs one or many tasks of
  // one driver on one worker; an actor holds one for its life).
  uint64_t task_leases_granted() const { return task_leases_granted_; }
  uint64_t actor_leases_granted() const { return actor_leases_granted_; }
  size_t num_queued() const { return queue_.size(); }
  size_t num_bundles() const { return bundles_.size(); }
  // `rayd drain`: new requests go to other nodes when one has room.
  void SetDraining(bool draining) { draining_ = draining; }

  // From the pool's exit hook: frees the lease the worker held, if any.
  void OnWorkerExit(const Worker& worker);
  // Fails every queued request with `why` (the node is shutting down).
  void CancelQueued(const Status& why);
  // Forgets everything this node was granted or asked for: fails queued requests with `why`,
  // kills leased workers and frees every lease and bundle (the node was declared dead).
  void Abandon(const Status& why);
  // Runs periodically (with the heartbeat): infeasible requests spill to a node that joined and
  // fits them, or fail once they have waited infeasible_timeout.
  void RecheckInfeasible();
  // Requests waiting for a node that could ever satisfy them, grouped by shape.
  std::vector<ResourceDemand> InfeasibleDemands() const;
  // The requests queued for room here, by shape (those for a placement group's bundle left out:
  // their group holds what they need); for the heartbeat, as an autoscaler's demand.
  std::vector<ResourceDemand> QueuedDemands() const;

 private:
  struct BundleKey {
    std::string group_id;
    uint32_t index = 0;
    friend auto operator<=>(const BundleKey&, const BundleKey&) = default;
  };
  struct Bundle {
    uint64_t serial = 0;  // tells a reservation from a later one with the same key
    scheduler::ResourceSet reservation;
    std::vector<int> gpu_ids;  // the node's devices it holds
    ResourcePool pool;         // what its leases draw from
    bool committed = false;
  };
  // Where a lease's resources come from: the node's pool, or one bundle (by key and serial).
  struct Allocation {
    std::optional<BundleKey> bundle;
    uint64_t serial = 0;
    std::vector<int> gpu_ids;
  };
  using RequestLeaseCall = rpc::Incoming<proto::Method::REQUEST_LEASE>;
  struct Request {
    RequestLeaseCall call;
    JobId job_id;
    scheduler::ResourceSet resources;
    WorkerLaunch launch;
    bool for_actor = false;
    bool grant_or_reject = false;
    internal::SchedulingOptions scheduling;
    int64_t arrived_ms = NowUnixMs();
  };
  using RequestPtr = std::shared_ptr<Request>;
  struct Lease {
    WorkerId worker_id;
    scheduler::ResourceSet resources;
    Allocation allocation;
    bool for_actor = false;
    // The part of `resources` given back while its worker was blocked and not taken back: the
    // lease holds resources - lent.
    scheduler::ResourceSet lent;
    bool blocked = false;
    scheduler::ResourceSet held() const { return resources - lent; }
  };
  using NodesFn = std::function<void(Result<std::vector<NodeInfo>>)>;

  void HandleRequest(const RequestLeaseCall& call);
  void HandleReturn(const rpc::Incoming<proto::Method::RETURN_LEASE>& call);
  void HandleJobFinished(const rpc::Incoming<proto::Method::JOB_FINISHED>& call);
  // A bundle call names the incarnation it is for: one for this daemon's id before it rejoined
  // is refused (NotFound), empty is for any.
  Status AddressedHere(std::string_view node_id, std::string_view what) const;
  void HandlePrepareBundles(const rpc::Incoming<proto::Method::PREPARE_BUNDLES>& call);
  void HandleCommitBundles(const rpc::Incoming<proto::Method::COMMIT_BUNDLES>& call);
  void HandleCancelBundles(const rpc::Incoming<proto::Method::CANCEL_BUNDLES>& call);
  void HandleSetWorkerBlocked(const rpc::Incoming<proto::Method::SET_WORKER_BLOCKED>& call);

  // Whether `bundle` may serve a request with `scheduling`: committed, and the index it names.
  static bool Serves(const BundleKey& key, const Bundle& bundle,
                     const internal::SchedulingOptions& scheduling);
  // Requests that name a placement group: served from its committed bundles here or failed.
  void ServeFromBundle(const RequestPtr& request);
  // Ok if some committed bundle here could ever serve `request`; else NotFound (no committed
  // bundle of that index here) or ResourceExhausted (the demand is larger than the bundle).
  Status CheckBundleRequest(const Request& request) const;
  // Frees one bundle: kills the workers leased from it and returns its reservation to the node.
  void FreeBundle(std::map<BundleKey, Bundle>::iterator it, const std::string& why);

  // Whether the request's label selector and hard node affinity allow this node.
  bool AllowsThisNode(const Request& request) const;
  // The request as the placement policies see it.
  static scheduler::PlacementRequest PlacementFor(const Request& request);
  // For a request this node can never run: spills it to a node that can, or fails it as
  // infeasible (after waiting infeasible_timeout for such a node to join).
  void SpillInfeasible(const RequestPtr& request);
  // Where the hybrid policy (scheduler::PlaceOne) would run `request` now among the other
  // alive nodes, or null.
  const NodeInfo* PlaceElsewhere(const std::vector<NodeInfo>& nodes, const Request& request) const;
  // A node that could ever run `request` (alive, not this one, allowed by its selector and
  // affinity, total large enough), or null.
  const NodeInfo* NodeThatFits(const std::vector<NodeInfo>& nodes, const Request& request) const;
  Status InfeasibleError(const std::vector<NodeInfo>& nodes, const Request& request) const;
  void SpillOrQueue(const RequestPtr& request);
  // Allocates the request's resources and GPU ids from its pool; nullopt (nothing held) if they
  // don't fit.
  std::optional<Allocation> TryAllocate(const Request& request);
  // The pool `allocation` draws from; null once its bundle is gone.
  ResourcePool* PoolOf(const Allocation& allocation);
  void Release(const scheduler::ResourceSet& resources, const Allocation& allocation);
  void NoteFreed() const {
    if (config_.on_freed) config_.on_freed();
  }
  // With the resources allocated: finds or starts a worker and answers the request.
  void Grant(const RequestPtr& request, Allocation allocation);
  void GrantTo(const RequestPtr& request, Worker& worker, const Allocation& allocation);
  void DispatchQueue();
  void WithNodes(NodesFn fn);

  WorkerPool& pool_;
  const NodeId& node_id_;
  LeaseManagerConfig config_;
  NodeLister list_nodes_;
  ResourcePool node_;
  std::map<BundleKey, Bundle> bundles_;
  uint64_t next_bundle_serial_ = 1;
  std::map<std::string, Lease> leases_;  // by lease id
  uint64_t task_leases_granted_ = 0;
  uint64_t actor_leases_granted_ = 0;
  std::set<JobId> prestarted_;           // jobs whose workers were prestarted
  std::map<JobId, int> starting_grants_; // allocated requests whose worker is starting, by job
  std::list<RequestPtr> queue_;          // arrival order
  struct Waiting {
    RequestPtr request;
    Clock::time_point deadline;
    int64_t since_ms = 0;
  };
  std::list<Waiting> infeasible_;        // arrival order
  bool dispatching_ = false;
  bool redispatch_ = false;
  bool draining_ = false;

  std::optional<std::vector<NodeInfo>> nodes_;  // the last GET_ALL_NODES answer
  Clock::time_point nodes_time_;
  std::vector<NodesFn> node_waiters_;  // non-empty while a fetch is in flight
  LifetimeGuard guard_;  // for late GCS and worker-start callbacks
};

}  // namespace rayd::node
