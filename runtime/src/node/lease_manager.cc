#include "node/lease_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/node_info.h"
#include "rayd/scheduler/placement.h"
#include "rayd/protocol/core.capnp.h"

namespace rayd::node {

using scheduler::FixedPoint;
using scheduler::ResourceSet;

namespace {

struct LeaseIdTag {};
using LeaseId = UniqueId<LeaseIdTag>;

bool CallerGone(const rpc::CallPtr& call) {
  auto connection = call->connection();
  return !connection || connection->closed();
}

void ReplySpillback(const rpc::CallPtr& call, const NodeInfo& node) {
  call->Reply([&](capnp::AnyPointer::Builder b) {
    auto spill = b.initAs<proto::RequestLeaseReply>().initSpillback();
    spill.setNodeId(node.node_id.Hex());
    spill.setNodeAddress(node.address);
  });
}

// How much of `demand` a node with `total` covers: the sum over demanded resources of the
// covered fraction (each at most 1). Picks the "largest node" named in infeasibility errors.
// The alive nodes as the placement policies see them, without `skip` (nil: keep all), and the
// NodeInfo behind each.
scheduler::ClusterSnapshot Snapshot(const std::vector<NodeInfo>& nodes, const NodeId& skip,
                                    std::vector<const NodeInfo*>* behind) {
  scheduler::ClusterSnapshot cluster;
  for (const auto& node : nodes) {
    if (!node.alive || node.node_id == skip) continue;
    cluster.nodes.push_back(
        {node.node_id.Hex(), scheduler::NodeResources(node.total, node.available, node.labels)});
    behind->push_back(&node);
  }
  return cluster;
}

}  // namespace

// ---- GpuSlots -------------------------------------------------------------------------------

GpuSlots::GpuSlots(FixedPoint total) {
  const int64_t n = (total.units() + FixedPoint::kScale - 1) / FixedPoint::kScale;
  free_units_.assign(static_cast<size_t>(std::max<int64_t>(0, n)), FixedPoint::kScale);
}

std::optional<std::vector<int>> GpuSlots::Acquire(FixedPoint amount) {
  std::vector<int> ids;
  if (amount.units() <= 0) return ids;
  const int64_t whole = amount.units() / FixedPoint::kScale;
  const int64_t fraction = amount.units() % FixedPoint::kScale;
  std::vector<int64_t> after = free_units_;
  for (size_t i = 0; i < after.size() && static_cast<int64_t>(ids.size()) < whole; ++i) {
    if (after[i] == FixedPoint::kScale) {
      after[i] = 0;
      ids.push_back(static_cast<int>(i));
    }
  }
  if (static_cast<int64_t>(ids.size()) < whole) return std::nullopt;
  if (fraction > 0) {
    int best = -1;  // the fullest device that still has room: keeps whole devices free
    for (size_t i = 0; i < after.size(); ++i) {
      if (after[i] >= fraction && (best < 0 || after[i] < after[best])) best = static_cast<int>(i);
    }
    if (best < 0) return std::nullopt;
    after[best] -= fraction;
    ids.push_back(best);
  }
  free_units_ = std::move(after);
  return ids;
}

void GpuSlots::Release(const std::vector<int>& ids, FixedPoint amount) {
  const int64_t whole = amount.units() / FixedPoint::kScale;
  const int64_t fraction = amount.units() % FixedPoint::kScale;
  for (size_t k = 0; k < ids.size(); ++k) {
    const size_t i = static_cast<size_t>(ids[k]);
    if (i >= free_units_.size()) continue;
    const int64_t give = static_cast<int64_t>(k) < whole ? FixedPoint::kScale : fraction;
    free_units_[i] = std::min(FixedPoint::kScale, free_units_[i] + give);
  }
}

// ---- LeaseManager ---------------------------------------------------------------------------

LeaseManager::LeaseManager(WorkerPool& pool, const NodeId& node_id, LeaseManagerConfig config,
                           NodeLister list_nodes)
    : pool_(pool),
      node_id_(node_id),
      config_(std::move(config)),
      list_nodes_(std::move(list_nodes)),
      resources_(config_.total),
      gpus_(config_.total.Get(scheduler::kGPU)) {}

LeaseManager::~LeaseManager() = default;

void LeaseManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Register(proto::Method::REQUEST_LEASE, [this](auto& c) { HandleRequest(c); });
  dispatcher.Register(proto::Method::RETURN_LEASE, [this](auto& c) { HandleReturn(c); });
  dispatcher.Register(proto::Method::JOB_FINISHED, [this](auto& c) { HandleJobFinished(c); });
}

void LeaseManager::HandleRequest(const rpc::CallPtr& call) {
  auto params = call->Params<proto::RequestLeaseRequest>();
  auto job_id = JobId::FromHex(params.getJobId().cStr());
  if (!job_id.ok()) return call->Fail(job_id.status().WithContext("lease request"));
  auto request = std::make_shared<Request>();
  request->call = call;
  request->job_id = *job_id;
  request->resources = runtime::ResourcesFromProto(params.getResources());
  for (auto arg : params.getLaunch().getArgv()) request->launch.argv.emplace_back(arg.cStr());
  for (auto kv : params.getLaunch().getEnv()) {
    request->launch.env.emplace_back(kv.getKey().cStr(), kv.getValue().cStr());
  }
  request->for_actor = params.getForActor();
  request->grant_or_reject = params.getGrantOrReject();

  if (!resources_.IsFeasible(request->resources)) {
    if (!request->grant_or_reject) return SpillInfeasible(request);
    return call->Fail(Status::ResourceExhausted(
        "infeasible: node " + node_id_.Hex() + " cannot satisfy " + request->resources.ToString() +
        " (its total: " + resources_.total().ToString() + ")"));
  }
  std::vector<int> gpu_ids;
  if (TryAllocate(*request, &gpu_ids)) return Grant(request, std::move(gpu_ids));
  if (request->grant_or_reject) {
    queue_.push_back(request);
    return;
  }
  SpillOrQueue(request);
}

void LeaseManager::SpillInfeasible(const RequestPtr& request) {
  WithNodes([this, request](Result<std::vector<NodeInfo>> nodes) {
    if (CallerGone(request->call)) return;
    const ResourceSet& demand = request->resources;
    if (!nodes.ok()) {
      return request->call->Fail(Status::Unavailable(
          "this node cannot satisfy " + demand.ToString() +
          " and the GCS could not be asked for other nodes: " + nodes.status().message()));
    }
    const NodeInfo* fits_now = PlaceElsewhere(*nodes, demand);
    if (const NodeInfo* fits = fits_now ? fits_now : NodeThatFits(*nodes, demand)) {
      return ReplySpillback(request->call, *fits);
    }
    if (config_.infeasible_timeout.count() <= 0) {
      return request->call->Fail(InfeasibleError(*nodes, demand));
    }
    spdlog::warn("no node can satisfy {} yet; it waits up to {} ms for one to join",
                 demand.ToString(), config_.infeasible_timeout.count());
    infeasible_.push_back({request, Clock::now() + config_.infeasible_timeout, NowUnixMs()});
  });
}

const NodeInfo* LeaseManager::PlaceElsewhere(const std::vector<NodeInfo>& nodes,
                                             const ResourceSet& demand) const {
  std::vector<const NodeInfo*> candidates;
  const scheduler::ClusterSnapshot cluster = Snapshot(nodes, node_id_, &candidates);
  scheduler::PlacementRequest request;
  request.demand = demand;
  const scheduler::Placement placement = scheduler::PlaceOne(cluster, request);
  return placement.outcome == scheduler::Outcome::kPlaced ? candidates[placement.node] : nullptr;
}

const NodeInfo* LeaseManager::NodeThatFits(const std::vector<NodeInfo>& nodes,
                                           const ResourceSet& demand) const {
  for (const auto& node : nodes) {
    if (node.alive && node.node_id != node_id_ && demand.IsSubsetOf(node.total)) return &node;
  }
  return nullptr;
}

Status LeaseManager::InfeasibleError(const std::vector<NodeInfo>& nodes,
                                     const ResourceSet& demand) const {
  std::vector<const NodeInfo*> behind;
  const auto largest = scheduler::LargestNodeFor(Snapshot(nodes, NodeId(), &behind), demand);
  const ResourceSet& total = largest ? behind[*largest]->total : resources_.total();
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
      } else if (const NodeInfo* fits = NodeThatFits(*nodes, request->resources)) {
        ReplySpillback(request->call, *fits);
        it = infeasible_.erase(it);
      } else if (now >= it->deadline) {
        request->call->Fail(InfeasibleError(*nodes, request->resources));
        it = infeasible_.erase(it);
      } else {
        ++it;
      }
    }
  });
}

std::vector<ResourceDemand> LeaseManager::InfeasibleDemands() const {
  std::vector<ResourceDemand> out;
  for (const auto& w : infeasible_) {
    auto same = std::find_if(out.begin(), out.end(), [&](const ResourceDemand& d) {
      return d.resources == w.request->resources;
    });
    if (same == out.end()) {
      out.push_back({w.request->resources, 1, w.since_ms});
    } else {
      ++same->count;
      same->waiting_since_ms = std::min(same->waiting_since_ms, w.since_ms);
    }
  }
  return out;
}

void LeaseManager::SpillOrQueue(const RequestPtr& request) {
  WithNodes([this, request](Result<std::vector<NodeInfo>> nodes) {
    if (CallerGone(request->call)) return;
    std::vector<int> gpu_ids;  // resources may have come back while we asked
    if (TryAllocate(*request, &gpu_ids)) return Grant(request, std::move(gpu_ids));
    if (nodes.ok()) {
      if (const NodeInfo* node = PlaceElsewhere(*nodes, request->resources)) {
        return ReplySpillback(request->call, *node);
      }
    }
    queue_.push_back(request);
  });
}

bool LeaseManager::TryAllocate(const Request& request, std::vector<int>* gpu_ids) {
  if (!resources_.TryAllocate(request.resources)) return false;
  auto ids = gpus_.Acquire(request.resources.Get(scheduler::kGPU));
  if (!ids) {
    resources_.Release(request.resources);
    return false;
  }
  *gpu_ids = std::move(*ids);
  return true;
}

void LeaseManager::Release(const ResourceSet& resources, const std::vector<int>& gpu_ids) {
  resources_.Release(resources);
  gpus_.Release(gpu_ids, resources.Get(scheduler::kGPU));
}

void LeaseManager::Grant(const RequestPtr& request, std::vector<int> gpu_ids) {
  if (Worker* idle = pool_.FindIdle(request->job_id, request->launch, gpu_ids)) {
    return GrantTo(request, *idle, gpu_ids);
  }
  if (!request->for_actor && gpu_ids.empty() && config_.prestart_workers > 0 &&
      prestarted_.insert(request->job_id).second) {
    for (int i = 0; i < config_.prestart_workers; ++i) {
      pool_.StartWorker(request->job_id, request->launch, {}, false, [](Result<Worker*>) {});
    }
  }
  std::weak_ptr<bool> alive = alive_;
  pool_.StartWorker(request->job_id, request->launch, gpu_ids, request->for_actor,
                    [this, alive, request, gpu_ids](Result<Worker*> worker) {
                      if (alive.expired()) return;
                      if (!worker.ok() || CallerGone(request->call)) {
                        // A registered worker nobody wants stays idle in the pool.
                        Release(request->resources, gpu_ids);
                        if (!worker.ok()) request->call->Fail(worker.status());
                        DispatchQueue();
                        return;
                      }
                      GrantTo(request, **worker, gpu_ids);
                    });
}

void LeaseManager::GrantTo(const RequestPtr& request, Worker& worker,
                           const std::vector<int>& gpu_ids) {
  const std::string lease_id = LeaseId::FromRandom().Hex();
  leases_[lease_id] = Lease{worker.id, request->resources, gpu_ids, request->for_actor};
  pool_.MarkLeased(worker, lease_id, request->for_actor);
  spdlog::debug("lease {}: worker {} for job {} with {}", lease_id, worker.id.Hex(),
                request->job_id.Hex(), request->resources.ToString());
  request->call->Reply([&](capnp::AnyPointer::Builder b) {
    auto granted = b.initAs<proto::RequestLeaseReply>().initGranted();
    granted.setLeaseId(lease_id);
    granted.setWorkerId(worker.id.Hex());
    granted.setWorkerAddress(worker.address);
    granted.setNodeId(node_id_.Hex());
    auto ids = granted.initGpuIds(static_cast<unsigned>(gpu_ids.size()));
    for (unsigned i = 0; i < gpu_ids.size(); ++i) ids.set(i, gpu_ids[i]);
  });
}

void LeaseManager::HandleReturn(const rpc::CallPtr& call) {
  auto params = call->Params<proto::ReturnLeaseRequest>();
  auto it = leases_.find(params.getLeaseId().cStr());
  if (it == leases_.end()) {
    return call->Fail(
        Status::NotFound("no lease " + std::string(params.getLeaseId().cStr()) + " on this node"));
  }
  Lease lease = std::move(it->second);
  leases_.erase(it);
  Release(lease.resources, lease.gpu_ids);
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
  call->Reply();
  DispatchQueue();
}

void LeaseManager::HandleJobFinished(const rpc::CallPtr& call) {
  auto job_id = JobId::FromHex(call->Params<proto::JobFinishedRequest>().getJobId().cStr());
  if (!job_id.ok()) return call->Fail(job_id.status());
  const std::string why = "job " + job_id->Hex() + " finished";
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->job_id == *job_id && !(*it)->for_actor) {
      (*it)->call->Fail(Status::Cancelled(why));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  pool_.KillJobWorkers(*job_id, why);  // their exits release their leases
  call->Reply();
}

void LeaseManager::OnWorkerExit(const Worker& worker) {
  auto it = leases_.find(worker.lease_id);
  if (it == leases_.end() || it->second.worker_id != worker.id) return;
  Release(it->second.resources, it->second.gpu_ids);
  leases_.erase(it);
  DispatchQueue();
}

void LeaseManager::CancelQueued(const Status& why) {
  auto queue = std::move(queue_);
  queue_.clear();
  for (auto& request : queue) request->call->Fail(why);
  auto waiting = std::move(infeasible_);
  infeasible_.clear();
  for (auto& w : waiting) w.request->call->Fail(why);
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
      std::vector<int> gpu_ids;
      if (CallerGone(request->call)) {
        it = queue_.erase(it);
      } else if (TryAllocate(*request, &gpu_ids)) {
        it = queue_.erase(it);
        Grant(request, std::move(gpu_ids));
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
  list_nodes_([this, alive = std::weak_ptr<bool>(alive_)](Result<std::vector<NodeInfo>> nodes) {
    if (alive.expired()) return;
    if (nodes.ok()) {
      nodes_ = *nodes;
      nodes_time_ = Clock::now();
    }
    auto waiters = std::move(node_waiters_);
    node_waiters_.clear();
    for (auto& waiter : waiters) waiter(nodes);
  });
}

}  // namespace rayd::node
