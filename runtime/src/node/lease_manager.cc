#include "node/lease_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <ranges>

#include "common/node_info.h"
#include "common/task_spec.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/scheduler/placement.h"

namespace rayd::node {

using scheduler::FixedPoint;
using scheduler::ResourceSet;

namespace {

struct LeaseIdTag {};
using LeaseId = UniqueId<LeaseIdTag>;

bool CallerGone(const rpc::Incoming<proto::Method::REQUEST_LEASE>& call) {
  auto connection = call.connection();
  return !connection || connection->closed();
}

void ReplySpillback(const rpc::Incoming<proto::Method::REQUEST_LEASE>& call, const NodeInfo& node) {
  call.Reply([&](proto::RequestLeaseReply::Builder b) {
    auto spill = b.initSpillback();
    spill.setNodeId(node.node_id.Hex());
    spill.setNodeAddress(node.address);
  });
}

// The alive nodes as the placement policies see them, without `skip` (nil: keep all), and the
// NodeInfo behind each.
scheduler::ClusterSnapshot Snapshot(const std::vector<NodeInfo>& nodes, const NodeId& skip,
                                    std::vector<const NodeInfo*>* behind) {
  scheduler::ClusterSnapshot cluster;
  for (const auto& node : nodes) {
    if (!node.alive || node.draining() || node.node_id == skip) continue;
    cluster.nodes.push_back(
        {node.node_id.Hex(), scheduler::NodeResources(node.total, node.available, node.labels)});
    behind->push_back(&node);
  }
  return cluster;
}

// Whether a node with `labels` carries every key=value of `selector`.
bool HasHardAffinity(const internal::SchedulingOptions& s) {
  return !s.node_affinity.empty() && !s.affinity_soft;
}

// The bundles of one group in a map keyed by (group id, index), in index order.
template <typename BundleMap>
auto GroupRange(BundleMap& bundles, const std::string& group_id) {
  using Key = typename std::remove_const_t<BundleMap>::key_type;
  return std::ranges::subrange(bundles.lower_bound(Key{group_id, 0}),
                               bundles.upper_bound(Key{group_id, UINT32_MAX}));
}

}  // namespace

// ---- GpuSlots -------------------------------------------------------------------------------

GpuSlots::GpuSlots(FixedPoint total) {
  const int64_t n = (total.units() + FixedPoint::kScale - 1) / FixedPoint::kScale;
  for (int64_t i = 0; i < n; ++i) {
    devices_.push_back({static_cast<int>(i), FixedPoint::kScale, FixedPoint::kScale});
  }
}

GpuSlots::GpuSlots(const std::vector<int>& ids, FixedPoint amount) {
  const int64_t whole = amount.units() / FixedPoint::kScale;
  const int64_t fraction = amount.units() % FixedPoint::kScale;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t units = static_cast<int64_t>(k) < whole ? FixedPoint::kScale : fraction;
    devices_.push_back({ids[k], units, units});
  }
  std::ranges::sort(devices_, {}, &Device::id);
}

std::optional<std::vector<int>> GpuSlots::Acquire(FixedPoint amount) {
  std::vector<int> ids;
  if (amount.units() <= 0) return ids;
  const int64_t whole = amount.units() / FixedPoint::kScale;
  const int64_t fraction = amount.units() % FixedPoint::kScale;
  std::vector<Device> after = devices_;
  for (auto& device : after) {
    if (static_cast<int64_t>(ids.size()) == whole) break;
    if (device.free == FixedPoint::kScale) {
      device.free = 0;
      ids.push_back(device.id);
    }
  }
  if (static_cast<int64_t>(ids.size()) < whole) return std::nullopt;
  if (fraction > 0) {
    Device* best = nullptr;  // the fullest device that still has room: keeps whole devices free
    for (auto& device : after) {
      if (device.free >= fraction && (!best || device.free < best->free)) best = &device;
    }
    if (!best) return std::nullopt;
    best->free -= fraction;
    ids.push_back(best->id);
  }
  devices_ = std::move(after);
  return ids;
}

void GpuSlots::Release(const std::vector<int>& ids, FixedPoint amount) {
  const int64_t whole = amount.units() / FixedPoint::kScale;
  const int64_t fraction = amount.units() % FixedPoint::kScale;
  for (size_t k = 0; k < ids.size(); ++k) {
    auto device = std::ranges::find(devices_, ids[k], &Device::id);
    if (device == devices_.end()) continue;
    const int64_t give = static_cast<int64_t>(k) < whole ? FixedPoint::kScale : fraction;
    device->free = std::min(device->capacity, device->free + give);
  }
}

// ---- ResourcePool ---------------------------------------------------------------------------

std::optional<std::vector<int>> ResourcePool::TryAllocate(const ResourceSet& demand) {
  if (!resources.TryAllocate(demand)) return std::nullopt;
  auto ids = gpus.Acquire(demand.Get(scheduler::kGPU));
  if (!ids) resources.Release(demand);
  return ids;
}

void ResourcePool::Release(const ResourceSet& demand, const std::vector<int>& gpu_ids) {
  resources.Release(demand);
  gpus.Release(gpu_ids, demand.Get(scheduler::kGPU));
}

// ---- LeaseManager: requests -----------------------------------------------------------------

LeaseManager::LeaseManager(WorkerPool& pool, const NodeId& node_id, LeaseManagerConfig config,
                           NodeLister list_nodes)
    : pool_(pool),
      node_id_(node_id),
      config_(std::move(config)),
      list_nodes_(std::move(list_nodes)),
      node_{scheduler::NodeResources(config_.total, config_.labels),
            GpuSlots(config_.total.Get(scheduler::kGPU))} {}

LeaseManager::~LeaseManager() = default;

void LeaseManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::REQUEST_LEASE>([this](const auto& c) { HandleRequest(c); });
  dispatcher.Handle<proto::Method::RETURN_LEASE>([this](const auto& c) { HandleReturn(c); });
  dispatcher.Handle<proto::Method::JOB_FINISHED>([this](const auto& c) { HandleJobFinished(c); });
  dispatcher.Handle<proto::Method::PREPARE_BUNDLES>(
      [this](const auto& c) { HandlePrepareBundles(c); });
  dispatcher.Handle<proto::Method::COMMIT_BUNDLES>(
      [this](const auto& c) { HandleCommitBundles(c); });
  dispatcher.Handle<proto::Method::CANCEL_BUNDLES>(
      [this](const auto& c) { HandleCancelBundles(c); });
  dispatcher.Handle<proto::Method::SET_WORKER_BLOCKED>(
      [this](const auto& c) { HandleSetWorkerBlocked(c); });
}

void LeaseManager::HandleRequest(const RequestLeaseCall& call) {
  auto params = call.params();
  auto job_id = JobId::FromHex(params.getJobId().cStr());
  if (!job_id.ok()) return call.Fail(job_id.status().WithContext("lease request"));
  auto request = std::make_shared<Request>(Request{.call = call});
  request->job_id = *job_id;
  request->resources = runtime::ResourcesFromProto(params.getResources());
  for (auto arg : params.getLaunch().getArgv()) request->launch.argv.emplace_back(arg.cStr());
  for (auto kv : params.getLaunch().getEnv()) {
    request->launch.env.emplace_back(kv.getKey().cStr(), kv.getValue().cStr());
  }
  request->for_actor = params.getForActor();
  request->grant_or_reject = params.getGrantOrReject();
  request->scheduling = core::FromProto(params.getScheduling());

  if (!request->scheduling.placement_group_id.empty()) return ServeFromBundle(request);
  if (!AllowsThisNode(*request)) {
    if (!request->grant_or_reject) return SpillInfeasible(request);
    return call.Fail(
        Status::ResourceExhausted("infeasible: node " + node_id_.Hex() +
                                  " is excluded by the request's label selector or node affinity"));
  }
  if (!node_.resources.IsFeasible(request->resources)) {
    if (!request->grant_or_reject) return SpillInfeasible(request);
    return call.Fail(Status::ResourceExhausted(
        "infeasible: node " + node_id_.Hex() + " cannot satisfy " + request->resources.ToString() +
        " (its total: " + node_.resources.total().ToString() + ")"));
  }
  // Soft affinity to another node: that node first, when it has room (SpillOrQueue).
  const internal::SchedulingOptions& scheduling = request->scheduling;
  // Draining (`rayd drain`): another node first, this one only when none has room.
  const bool prefers_other =
      !request->grant_or_reject &&
      ((!scheduling.node_affinity.empty() && scheduling.node_affinity != node_id_.Hex()) ||
       (draining_ && !HasHardAffinity(scheduling)));
  if (!prefers_other) {
    if (auto allocation = TryAllocate(*request)) return Grant(request, std::move(*allocation));
  }
  if (request->grant_or_reject || HasHardAffinity(scheduling)) {
    queue_.push_back(request);
    return;
  }
  SpillOrQueue(request);
}

bool LeaseManager::AllowsThisNode(const Request& request) const {
  const internal::SchedulingOptions& s = request.scheduling;
  return scheduler::MatchesLabels(config_.labels, s.label_selector) &&
         (!HasHardAffinity(s) || s.node_affinity == node_id_.Hex());
}

scheduler::PlacementRequest LeaseManager::PlacementFor(const Request& request) {
  scheduler::PlacementRequest placement;
  placement.demand = request.resources;
  placement.label_selector = request.scheduling.label_selector;
  if (!request.scheduling.node_affinity.empty()) {
    placement.affinity =
        scheduler::NodeAffinity{request.scheduling.node_affinity, request.scheduling.affinity_soft};
  }
  return placement;
}

void LeaseManager::SpillInfeasible(const RequestPtr& request) {
  WithNodes([this, request](Result<std::vector<NodeInfo>> nodes) {
    if (CallerGone(request->call)) return;
    const ResourceSet& demand = request->resources;
    if (!nodes.ok()) {
      return request->call.Fail(Status::Unavailable(
          "this node cannot run " + demand.ToString() +
          " and the GCS could not be asked for other nodes: " + nodes.status().message()));
    }
    const NodeInfo* fits_now = PlaceElsewhere(*nodes, *request);
    if (const NodeInfo* fits = fits_now ? fits_now : NodeThatFits(*nodes, *request)) {
      return ReplySpillback(request->call, *fits);
    }
    const internal::SchedulingOptions& scheduling = request->scheduling;
    if (HasHardAffinity(scheduling)) {
      // Only that node may run it and it never will: no other node joining can help.
      const bool alive = std::ranges::any_of(*nodes, [&](const NodeInfo& node) {
        return node.alive && node.node_id.Hex() == scheduling.node_affinity;
      });
      if (!alive) {
        return request->call.Fail(Status::Unavailable("hard node affinity to node " +
                                                      scheduling.node_affinity +
                                                      ": the node is dead or unknown"));
      }
      return request->call.Fail(InfeasibleError(*nodes, *request));
    }
    if (config_.infeasible_timeout.count() <= 0) {
      return request->call.Fail(InfeasibleError(*nodes, *request));
    }
    spdlog::warn("no node can satisfy {} yet; it waits up to {} ms for one to join",
                 demand.ToString(), config_.infeasible_timeout.count());
    infeasible_.push_back({request, Clock::now() + config_.infeasible_timeout, NowUnixMs()});
  });
}

const NodeInfo* LeaseManager::PlaceElsewhere(const std::vector<NodeInfo>& nodes,
                                             const Request& request) const {
  std::vector<const NodeInfo*> candidates;
  const scheduler::ClusterSnapshot cluster = Snapshot(nodes, node_id_, &candidates);
  const scheduler::Placement placement = scheduler::PlaceOne(cluster, PlacementFor(request));
  return placement.outcome == scheduler::Outcome::kPlaced ? candidates[placement.node] : nullptr;
}

const NodeInfo* LeaseManager::NodeThatFits(const std::vector<NodeInfo>& nodes,
                                           const Request& request) const {
  const internal::SchedulingOptions& s = request.scheduling;
  for (const auto& node : nodes) {
    if (node.alive && !node.draining() && node.node_id != node_id_ &&
        scheduler::MatchesLabels(node.labels, s.label_selector) &&
        (!HasHardAffinity(s) || node.node_id.Hex() == s.node_affinity) &&
        request.resources.IsSubsetOf(node.total)) {
      return &node;
    }
  }
  return nullptr;
}

Status LeaseManager::InfeasibleError(const std::vector<NodeInfo>& nodes,
                                     const Request& request) const {
  std::vector<const NodeInfo*> behind;
  const scheduler::ClusterSnapshot cluster = Snapshot(nodes, NodeId(), &behind);
  const ResourceSet& demand = request.resources;
  const scheduler::PlacementRequest placement = PlacementFor(request);
  if (!placement.label_selector.empty() || placement.affinity) {
    // The policy's own reason names the selector or the affinity node.
    const scheduler::Placement verdict = scheduler::PlaceOne(cluster, placement);
    if (verdict.outcome != scheduler::Outcome::kPlaced) {
      return Status::ResourceExhausted("infeasible: " + verdict.reason);
    }
  }
  const auto largest = scheduler::LargestNodeFor(cluster, demand);
  const ResourceSet& total = largest ? behind[*largest]->total : node_.resources.total();
  return Status::ResourceExhausted("infeasible: no node can satisfy " + demand.ToString() +
                                   " (largest node: " + total.ToString() + ")");
}

void LeaseManager::RecheckInfeasible() {
  if (infeasible_.empty()) return;
  nodes_.reset();  // a node that fits may have just joined: ask the GCS afresh
  WithNodes([this](Result<std::vector<NodeInfo>> nodes) {
    if (!nodes.ok()) return;
    const auto now = Clock::now();
    for (auto it = infeasible_.begin(); it != infeasible_.end();) {
      const RequestPtr& request = it->request;
      if (CallerGone(request->call)) {
        it = infeasible_.erase(it);
      } else if (const NodeInfo* fits = NodeThatFits(*nodes, *request)) {
        ReplySpillback(request->call, *fits);
        it = infeasible_.erase(it);
      } else if (now >= it->deadline) {
        request->call.Fail(InfeasibleError(*nodes, *request));
        it = infeasible_.erase(it);
      } else {
        ++it;
      }
    }
  });
}

namespace {

// Adds one request of `resources` waiting since `since_ms` to the demands by shape.
void CountDemand(std::vector<ResourceDemand>& out, const scheduler::ResourceSet& resources,
                 int64_t since_ms) {
  auto same = std::find_if(out.begin(), out.end(),
                           [&](const ResourceDemand& d) { return d.resources == resources; });
  if (same == out.end()) {
    out.push_back({resources, 1, since_ms});
  } else {
    ++same->count;
    same->waiting_since_ms = std::min(same->waiting_since_ms, since_ms);
  }
}

}  // namespace

std::vector<ResourceDemand> LeaseManager::InfeasibleDemands() const {
  std::vector<ResourceDemand> out;
  for (const auto& w : infeasible_) CountDemand(out, w.request->resources, w.since_ms);
  return out;
}

std::vector<ResourceDemand> LeaseManager::QueuedDemands() const {
  std::vector<ResourceDemand> out;
  for (const RequestPtr& r : queue_) {
    if (r->scheduling.placement_group_id.empty()) CountDemand(out, r->resources, r->arrived_ms);
  }
  return out;
}

void LeaseManager::SpillOrQueue(const RequestPtr& request) {
  WithNodes([this, request](Result<std::vector<NodeInfo>> nodes) {
    if (CallerGone(request->call)) return;
    const NodeInfo* elsewhere = nodes.ok() ? PlaceElsewhere(*nodes, *request) : nullptr;
    if (elsewhere && (draining_ || elsewhere->node_id.Hex() == request->scheduling.node_affinity)) {
      return ReplySpillback(request->call, *elsewhere);  // soft affinity: its node has room
    }
    // Resources may have come back while we asked.
    if (auto allocation = TryAllocate(*request)) return Grant(request, std::move(*allocation));
    if (elsewhere) return ReplySpillback(request->call, *elsewhere);
    queue_.push_back(request);
  });
}

std::optional<LeaseManager::Allocation> LeaseManager::TryAllocate(const Request& request) {
  const internal::SchedulingOptions& s = request.scheduling;
  if (s.placement_group_id.empty()) {
    auto ids = node_.TryAllocate(request.resources);
    if (!ids) return std::nullopt;
    return Allocation{std::nullopt, 0, std::move(*ids)};
  }
  for (auto& [key, bundle] : GroupRange(bundles_, s.placement_group_id)) {
    if (!Serves(key, bundle, s)) continue;
    if (auto ids = bundle.pool.TryAllocate(request.resources)) {
      return Allocation{key, bundle.serial, std::move(*ids)};
    }
  }
  return std::nullopt;
}

ResourcePool* LeaseManager::PoolOf(const Allocation& allocation) {
  if (!allocation.bundle) return &node_;
  auto it = bundles_.find(*allocation.bundle);
  return it != bundles_.end() && it->second.serial == allocation.serial ? &it->second.pool
                                                                        : nullptr;
}

void LeaseManager::Release(const ResourceSet& resources, const Allocation& allocation) {
  // A freed bundle took back everything its leases held.
  if (ResourcePool* pool = PoolOf(allocation)) pool->Release(resources, allocation.gpu_ids);
  if (!allocation.bundle) NoteFreed();
}

void LeaseManager::Grant(const RequestPtr& request, Allocation allocation) {
  const std::vector<int>& gpu_ids = allocation.gpu_ids;
  if (Worker* idle = pool_.FindIdle(request->job_id, request->launch, gpu_ids)) {
    return GrantTo(request, *idle, allocation);
  }
  if (!request->for_actor && gpu_ids.empty() && config_.prestart_workers > 0 &&
      prestarted_.insert(request->job_id).second) {
    for (int i = 0; i < config_.prestart_workers; ++i) {
      pool_.StartWorker(request->job_id, request->launch, {}, false, [](Result<Worker*>) {});
    }
  }
  ++starting_grants_[request->job_id];
  pool_.StartWorker(request->job_id, request->launch, gpu_ids, request->for_actor,
                    guard_([this, request, allocation](Result<Worker*> worker) {
                      if (--starting_grants_[request->job_id] <= 0) {
                        starting_grants_.erase(request->job_id);
                      }
                      if (!worker.ok() || CallerGone(request->call)) {
                        // A registered worker nobody wants stays idle in the pool.
                        Release(request->resources, allocation);
                        if (!worker.ok()) request->call.Fail(worker.status());
                        DispatchQueue();
                        return;
                      }
                      if (!PoolOf(allocation)) {
                        const BundleKey& bundle = *allocation.bundle;
                        return request->call.Fail(Status::Cancelled(
                            "bundle " + std::to_string(bundle.index) + " of placement group " +
                            bundle.group_id + " was freed while its worker started"));
                      }
                      GrantTo(request, **worker, allocation);
                    }));
}

void LeaseManager::GrantTo(const RequestPtr& request, Worker& worker,
                           const Allocation& allocation) {
  const std::string lease_id = LeaseId::FromRandom().Hex();
  leases_[lease_id] = Lease{worker.id, request->resources, allocation, request->for_actor};
  ++(request->for_actor ? actor_leases_granted_ : task_leases_granted_);
  pool_.MarkLeased(worker, lease_id, request->for_actor);
  spdlog::debug("lease {}: worker {} for job {} with {}{}", lease_id, worker.id.Hex(),
                request->job_id.Hex(), request->resources.ToString(),
                allocation.bundle ? " from bundle " + std::to_string(allocation.bundle->index) +
                                        " of placement group " + allocation.bundle->group_id
                                  : "");
  const std::vector<int>& gpu_ids = allocation.gpu_ids;
  // Room for another lease of this shape: free resources now, or other grants of the job whose
  // workers are still starting (they hold resources that will be the caller's soon).
  const ResourcePool* pool = PoolOf(allocation);
  const bool more_room = (pool != nullptr && pool->resources.IsAvailable(request->resources)) ||
                         starting_grants_.count(request->job_id) > 0;
  request->call.Reply([&](proto::RequestLeaseReply::Builder b) {
    auto granted = b.initGranted();
    granted.setLeaseId(lease_id);
    granted.setWorkerId(worker.id.Hex());
    granted.setWorkerAddress(worker.address);
    granted.setNodeId(node_id_.Hex());
    auto ids = granted.initGpuIds(static_cast<unsigned>(gpu_ids.size()));
    for (unsigned i = 0; i < gpu_ids.size(); ++i) ids.set(i, gpu_ids[i]);
    granted.setMoreRoom(more_room);
  });
}

void LeaseManager::HandleSetWorkerBlocked(
    const rpc::Incoming<proto::Method::SET_WORKER_BLOCKED>& call) {
  auto params = call.params();
  auto worker_id = WorkerId::FromHex(params.getWorkerId().cStr());
  if (!worker_id.ok()) return call.Fail(worker_id.status());
  Worker* worker = pool_.Find(*worker_id);
  auto it = worker ? leases_.find(worker->lease_id) : leases_.end();
  // A worker without a lease here (an actor's calls, a lease just returned): nothing to lend.
  if (it == leases_.end() || it->second.for_actor) return call.Reply();
  Lease& lease = it->second;
  ResourcePool* pool = PoolOf(lease.allocation);
  const bool blocked = params.getBlocked();
  if (pool == nullptr || blocked == lease.blocked) return call.Reply();
  lease.blocked = blocked;
  scheduler::ResourceSet cpus;
  cpus.Set(scheduler::kCPU, lease.resources.Get(scheduler::kCPU));
  if (blocked) {
    const scheduler::ResourceSet lend = cpus - lease.lent;
    pool->resources.Release(lend);
    lease.lent += lend;
    if (!lease.allocation.bundle) NoteFreed();
    call.Reply();
    return DispatchQueue();
  }
  if (pool->resources.TryAllocate(lease.lent)) lease.lent = {};
  call.Reply();
}

void LeaseManager::HandleReturn(const rpc::Incoming<proto::Method::RETURN_LEASE>& call) {
  auto params = call.params();
  auto it = leases_.find(params.getLeaseId().cStr());
  if (it == leases_.end()) {
    return call.Fail(
        Status::NotFound("no lease " + std::string(params.getLeaseId().cStr()) + " on this node"));
  }
  Lease lease = std::move(it->second);
  leases_.erase(it);
  Release(lease.held(), lease.allocation);
  Worker* worker = pool_.Find(lease.worker_id);
  if (worker && worker->state == WorkerState::kLeased) {
    if (params.getKillWorker()) {
      pool_.Kill(*worker, "its lease was returned with killWorker");
    } else if (lease.for_actor) {
      pool_.Kill(*worker, "its actor's lease was returned");
    } else {
      pool_.ReturnToIdle(*worker);
    }
  }
  call.Reply();
  DispatchQueue();
}

void LeaseManager::HandleJobFinished(const rpc::Incoming<proto::Method::JOB_FINISHED>& call) {
  auto job_id = JobId::FromHex(call.params().getJobId().cStr());
  if (!job_id.ok()) return call.Fail(job_id.status());
  const std::string why = "job " + job_id->Hex() + " finished";
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->job_id == *job_id && !(*it)->for_actor) {
      (*it)->call.Fail(Status::Cancelled(why));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  pool_.KillJobWorkers(*job_id, why);  // their exits release their leases
  call.Reply();
}

void LeaseManager::OnWorkerExit(const Worker& worker) {
  auto it = leases_.find(worker.lease_id);
  if (it == leases_.end() || it->second.worker_id != worker.id) return;
  Release(it->second.held(), it->second.allocation);
  leases_.erase(it);
  DispatchQueue();
}

void LeaseManager::CancelQueued(const Status& why) {
  auto queue = std::move(queue_);
  queue_.clear();
  for (auto& request : queue) request->call.Fail(why);
  auto waiting = std::move(infeasible_);
  infeasible_.clear();
  for (auto& w : waiting) w.request->call.Fail(why);
}

void LeaseManager::Abandon(const Status& why) {
  CancelQueued(why);
  while (!bundles_.empty()) FreeBundle(bundles_.begin(), why.message());
  for (auto& [lease_id, lease] : leases_) {
    Worker* worker = pool_.Find(lease.worker_id);
    if (worker && worker->state == WorkerState::kLeased && worker->lease_id == lease_id) {
      pool_.Kill(*worker, why.message());
    }
    Release(lease.held(), lease.allocation);
  }
  leases_.clear();
}

void LeaseManager::DispatchQueue() {
  // Granting may fail at once (a missing executable) and release resources, which re-enters
  // here: the outer call then goes around again instead.
  if (dispatching_) {
    redispatch_ = true;
    return;
  }
  dispatching_ = true;
  do {
    redispatch_ = false;
    for (auto it = queue_.begin(); it != queue_.end();) {
      RequestPtr request = *it;
      if (CallerGone(request->call)) {
        it = queue_.erase(it);
      } else if (auto allocation = TryAllocate(*request)) {
        it = queue_.erase(it);
        Grant(request, std::move(*allocation));
      } else {
        ++it;
      }
    }
  } while (redispatch_);
  dispatching_ = false;
}

void LeaseManager::WithNodes(NodesFn fn) {
  if (nodes_ && Clock::now() - nodes_time_ < config_.node_cache_ttl) return fn(*nodes_);
  node_waiters_.push_back(std::move(fn));
  if (node_waiters_.size() > 1) return;  // a fetch is in flight
  list_nodes_(guard_([this](Result<std::vector<NodeInfo>> nodes) {
    if (nodes.ok()) {
      nodes_ = *nodes;
      nodes_time_ = Clock::now();
    }
    auto waiters = std::move(node_waiters_);
    node_waiters_.clear();
    for (auto& waiter : waiters) waiter(nodes);
  }));
}

// ---- LeaseManager: placement-group bundles --------------------------------------------------

bool LeaseManager::Serves(const BundleKey& key, const Bundle& bundle,
                          const internal::SchedulingOptions& scheduling) {
  return bundle.committed && (scheduling.bundle_index < 0 ||
                              key.index == static_cast<uint32_t>(scheduling.bundle_index));
}

void LeaseManager::ServeFromBundle(const RequestPtr& request) {
  if (Status s = CheckBundleRequest(*request); !s.ok()) return request->call.Fail(s);
  if (auto allocation = TryAllocate(*request)) return Grant(request, std::move(*allocation));
  queue_.push_back(request);  // until a lease of its bundle ends
}

Status LeaseManager::CheckBundleRequest(const Request& request) const {
  const internal::SchedulingOptions& s = request.scheduling;
  const std::string group = "placement group " + s.placement_group_id;
  std::vector<std::pair<uint32_t, const ResourceSet*>> too_small;
  for (const auto& [key, bundle] : GroupRange(bundles_, s.placement_group_id)) {
    if (!Serves(key, bundle, s)) continue;
    if (request.resources.IsSubsetOf(bundle.reservation)) return Status::Ok();
    too_small.emplace_back(key.index, &bundle.reservation);
  }
  const std::string demand = request.resources.ToString();
  if (too_small.empty()) {
    const std::string which = s.bundle_index < 0
                                  ? "committed bundle"
                                  : "committed bundle " + std::to_string(s.bundle_index);
    return Status::NotFound(group + " has no " + which + " on node " + node_id_.Hex());
  }
  if (s.bundle_index >= 0) {
    return Status::ResourceExhausted(demand + " does not fit bundle " +
                                     std::to_string(s.bundle_index) + " of " + group + ": " +
                                     too_small.front().second->ToString());
  }
  std::string sizes;
  for (const auto& [index, reservation] : too_small) {
    if (!sizes.empty()) sizes += ", ";
    sizes += "bundle " + std::to_string(index) + ": " + reservation->ToString();
  }
  return Status::ResourceExhausted(demand + " does not fit any bundle of " + group + " on node " +
                                   node_id_.Hex() + " (" + sizes + ")");
}

Status LeaseManager::AddressedHere(std::string_view node_id, std::string_view what) const {
  if (node_id.empty() || node_id == node_id_.Hex()) return Status::Ok();
  return Status::NotFound("asked to " + std::string(what) + " bundles as node " +
                          std::string(node_id) + ", which this daemon left when it rejoined " +
                          "as node " + node_id_.Hex());
}

void LeaseManager::HandlePrepareBundles(const rpc::Incoming<proto::Method::PREPARE_BUNDLES>& call) {
  auto params = call.params();
  if (Status mine = AddressedHere(params.getNodeId().cStr(), "reserve"); !mine.ok()) {
    return call.Fail(mine);
  }
  const std::string group_id = params.getPlacementGroupId();
  std::vector<BundleKey> listed;
  std::vector<BundleKey> taken;  // by this request: given back if another does not fit
  Status failed;
  for (auto b : params.getBundles()) {
    BundleKey key{group_id, b.getIndex()};
    listed.push_back(key);
    if (bundles_.contains(key)) continue;  // held already: a repeated prepare
    const ResourceSet demand = runtime::ResourcesFromProto(b.getResources());
    auto ids = node_.TryAllocate(demand);
    if (!ids) {
      failed = Status::ResourceExhausted(
          "bundle " + std::to_string(key.index) + " of placement group " + group_id + " (" +
          demand.ToString() + ") does not fit node " + node_id_.Hex() +
          " now (available: " + node_.resources.available().ToString() + ")");
      break;
    }
    ResourcePool pool{scheduler::NodeResources(demand),
                      GpuSlots(*ids, demand.Get(scheduler::kGPU))};
    bundles_.emplace(
        key, Bundle{next_bundle_serial_++, demand, std::move(*ids), std::move(pool), false});
    taken.push_back(key);
  }
  if (!failed.ok()) {
    for (const auto& key : taken) FreeBundle(bundles_.find(key), "its prepare failed");
    return call.Fail(failed);
  }
  if (params.getCommit()) {
    for (const auto& key : listed) bundles_.at(key).committed = true;
  }
  spdlog::info("{} {} bundle(s) of placement group {}",
               params.getCommit() ? "reserved" : "prepared", listed.size(), group_id);
  call.Reply();
}

void LeaseManager::HandleCommitBundles(const rpc::Incoming<proto::Method::COMMIT_BUNDLES>& call) {
  if (Status mine = AddressedHere(call.params().getNodeId().cStr(), "commit"); !mine.ok()) {
    return call.Fail(mine);
  }
  const std::string group_id = call.params().getPlacementGroupId();
  auto bundles = GroupRange(bundles_, group_id);
  if (bundles.empty()) {
    return call.Fail(Status::NotFound("placement group " + group_id +
                                      " has no prepared bundle on node " + node_id_.Hex()));
  }
  for (auto& [key, bundle] : bundles) bundle.committed = true;
  call.Reply();
}

void LeaseManager::HandleCancelBundles(const rpc::Incoming<proto::Method::CANCEL_BUNDLES>& call) {
  auto params = call.params();
  if (Status mine = AddressedHere(params.getNodeId().cStr(), "cancel"); !mine.ok()) {
    return call.Fail(mine);
  }
  const std::string group_id = params.getPlacementGroupId();
  const std::string why = params.getReason().size() > 0
                              ? std::string(params.getReason().cStr())
                              : "placement group " + group_id + " was removed";
  std::set<uint32_t> indexes;
  for (uint32_t index : params.getIndexes()) indexes.insert(index);
  auto bundles = GroupRange(bundles_, group_id);
  for (auto it = bundles.begin(); it != bundles.end();) {
    auto next = std::next(it);
    if (indexes.empty() || indexes.contains(it->first.index)) FreeBundle(it, why);
    it = next;
  }
  // Queued requests that no bundle left here can serve fail now.
  for (auto it = queue_.begin(); it != queue_.end();) {
    const Request& request = **it;
    if (request.scheduling.placement_group_id == group_id && !CheckBundleRequest(request).ok()) {
      request.call.Fail(Status::Cancelled(why));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  call.Reply();
  DispatchQueue();
}

void LeaseManager::FreeBundle(std::map<BundleKey, Bundle>::iterator it, const std::string& why) {
  const auto& [key, bundle] = *it;
  for (auto lease = leases_.begin(); lease != leases_.end();) {
    const Allocation& allocation = lease->second.allocation;
    if (allocation.bundle != key || allocation.serial != bundle.serial) {
      ++lease;
      continue;
    }
    Worker* worker = pool_.Find(lease->second.worker_id);
    if (worker && worker->state == WorkerState::kLeased && worker->lease_id == lease->first) {
      pool_.Kill(*worker, why);
    }
    lease = leases_.erase(lease);
  }
  node_.Release(bundle.reservation, bundle.gpu_ids);
  NoteFreed();
  spdlog::info("freed bundle {} of placement group {}: {}", key.index, key.group_id, why);
  bundles_.erase(it);
}

}  // namespace rayd::node
