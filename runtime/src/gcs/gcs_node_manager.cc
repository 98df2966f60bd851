#include "gcs/gcs_node_manager.h"

#include <spdlog/spdlog.h>

#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {
namespace {
constexpr char kNodeTable[] = "nodes";
}

GcsNodeManager::GcsNodeManager(EventLoop& loop, TableStore& store, FailureDetectorConfig config)
    : loop_(loop), store_(store), config_(config), check_timer_(loop) {}

void GcsNodeManager::Start(std::function<void(Status)> done) {
  store_.GetAll(kNodeTable, [this, done = std::move(done)](
                                Result<std::map<std::string, std::string>> rows) {
    if (!rows.ok()) {
      done(rows.status().WithContext("loading the node table"));
      return;
    }
    const auto grace_deadline = Clock::now() + config_.recovery_grace;
    for (const auto& [key, value] : *rows) {
      auto info = runtime::NodeInfoFromJson(value);
      if (!info.ok()) {
        spdlog::error("skipping node {}: {}", key, info.status().ToString());
        continue;
      }
      if (info->alive && info->is_head) {
        // That head's process is gone (we replace it); its node daemon went with it, and the
        // new head joins as a new node.
        info->alive = false;
        info->end_time_ms = NowUnixMs();
        info->death_reason = "its head daemon was restarted";
        info->available = scheduler::ResourceSet();
        Persist(*info, nullptr);
      }
      if (info->alive) last_seen_[info->node_id] = grace_deadline;
      const NodeId id = info->node_id;
      nodes_[id] = std::move(*info);
      Changed(id, NodeChange::kJoined);
    }
    if (!nodes_.empty()) {
      spdlog::info("recovered {} nodes ({} alive) from {}", nodes_.size(), last_seen_.size(),
                   store_.Describe());
    }
    check_timer_.Start(config_.heartbeat_period, config_.heartbeat_period,
                       [this] { CheckHeartbeats(); });
    done(Status::Ok());
  });
}

void GcsNodeManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::REGISTER_NODE>([this](const auto& c) { HandleRegister(c); });
  dispatcher.Handle<proto::Method::HEARTBEAT>([this](const auto& c) { HandleHeartbeat(c); });
  dispatcher.Handle<proto::Method::GET_ALL_NODES>([this](const auto& c) { HandleGetAll(c); });
  dispatcher.Handle<proto::Method::UNREGISTER_NODE>([this](const auto& c) { HandleUnregister(c); });
  dispatcher.Handle<proto::Method::DRAIN_NODE>([this](const auto& c) { HandleDrain(c); });
}

void GcsNodeManager::Persist(const runtime::NodeInfo& info, std::function<void(Status)> done) {
  store_.Put(kNodeTable, info.node_id.Hex(), runtime::NodeInfoToJson(info), /*overwrite=*/true,
             [done = std::move(done)](Result<bool> r) {
               if (done) done(r.status());
             });
}

void GcsNodeManager::HandleRegister(const rpc::Incoming<proto::Method::REGISTER_NODE>& call) {
  auto request = call.params();
  auto info = runtime::NodeInfoFromProto(request.getNode());
  if (!info.ok()) {
    call.Fail(info.status());
    return;
  }
  auto it = nodes_.find(info->node_id);
  if (it != nodes_.end() && !it->second.alive) {
    call.Fail(Status::AlreadyExists("node " + info->node_id.Hex() +
                                    " was declared dead; it must rejoin as a new node"));
    return;
  }
  const bool known = it != nodes_.end();
  info->alive = true;
  info->last_heartbeat_ms = NowUnixMs();
  if (known) {
    info->start_time_ms = it->second.start_time_ms;
    if (info->drain_deadline_ms == 0) {  // a drain the node had not heard of yet stays
      info->drain_deadline_ms = it->second.drain_deadline_ms;
      info->drain_reason = it->second.drain_reason;
    }
  }
  spdlog::info("{} node {} at {} ({}) with {}", known ? "re-registered" : "registered",
               info->node_id.Hex(), info->address, info->hostname, info->total.ToString());
  last_seen_[info->node_id] = Clock::now();
  nodes_[info->node_id] = *info;
  Changed(info->node_id, NodeChange::kJoined);
  Persist(*info, [call](Status s) {
    if (s.ok()) {
      call.Reply();
    } else {
      call.Fail(s.WithContext("storing the node"));
    }
  });
}

void GcsNodeManager::HandleHeartbeat(const rpc::Incoming<proto::Method::HEARTBEAT>& call) {
  auto request = call.params();
  auto id = NodeId::FromHex(request.getNodeId().cStr());
  if (!id.ok()) {
    call.Fail(id.status());
    return;
  }
  auto status = proto::HeartbeatReply::Status::OK;
  int64_t drain_deadline_ms = 0;
  std::string drain_reason;
  auto it = nodes_.find(*id);
  if (it == nodes_.end()) {
    status = proto::HeartbeatReply::Status::UNKNOWN;
  } else if (!it->second.alive) {
    status = proto::HeartbeatReply::Status::DEAD;
  } else {
    last_seen_[*id] = Clock::now();
    it->second.last_heartbeat_ms = NowUnixMs();
    it->second.infeasible = runtime::DemandsFromProto(request.getInfeasible());
    it->second.queued = runtime::DemandsFromProto(request.getQueued());
    it->second.primary_objects = request.getPrimaryObjects();
    scheduler::ResourceSet available = runtime::ResourcesFromProto(request.getAvailable());
    if (available != it->second.available) {
      it->second.available = std::move(available);
      Changed(*id, NodeChange::kResources);
    }
    drain_deadline_ms = it->second.drain_deadline_ms;
    drain_reason = it->second.drain_reason;
  }
  call.Reply([&](proto::HeartbeatReply::Builder b) {
    b.setStatus(status);
    b.setDrainDeadlineMs(drain_deadline_ms);
    b.setDrainReason(drain_reason);
  });
}

void GcsNodeManager::HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_NODES>& call) {
  const bool only_alive = call.params().getOnlyAlive();
  call.Reply([&](proto::GetAllNodesReply::Builder b) {
    unsigned n = 0;
    for (const auto& [id, info] : nodes_) n += (!only_alive || info.alive);
    auto list = b.initNodes(n);
    unsigned i = 0;
    for (const auto& [id, info] : nodes_) {
      if (only_alive && !info.alive) continue;
      runtime::NodeInfoToProto(info, list[i++]);
    }
  });
}

void GcsNodeManager::HandleUnregister(const rpc::Incoming<proto::Method::UNREGISTER_NODE>& call) {
  auto request = call.params();
  auto id = NodeId::FromHex(request.getNodeId().cStr());
  if (!id.ok()) {
    call.Fail(id.status());
    return;
  }
  if (!nodes_.contains(*id)) {
    call.Fail(Status::NotFound("no node " + id->Hex()));
    return;
  }
  MarkDead(*id, request.getReason().size() ? std::string(request.getReason().cStr())
                                           : "unregistered");
  call.Reply();
}

void GcsNodeManager::HandleDrain(const rpc::Incoming<proto::Method::DRAIN_NODE>& call) {
  auto request = call.params();
  auto id = NodeId::FromHex(request.getNodeId().cStr());
  if (!id.ok()) return call.Fail(id.status());
  Status s = Drain(*id, request.getDeadlineMs(), request.getReason(), [call](Status stored) {
    if (stored.ok()) {
      call.Reply();
    } else {
      call.Fail(stored.WithContext("storing the drain"));
    }
  });
  if (!s.ok()) call.Fail(s);
}

Status GcsNodeManager::Drain(const NodeId& id, int64_t deadline_ms, const std::string& reason,
                             std::function<void(Status)> stored) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return Status::NotFound("no node " + id.Hex());
  runtime::NodeInfo& info = it->second;
  if (!info.alive) {
    return Status::InvalidArgument("node " + id.Hex() + " is already dead (" +
                                   info.death_reason + ")");
  }
  if (info.is_head) {
    return Status::InvalidArgument("node " + id.Hex() +
                                   " is the head's own node and cannot be drained (rayd stop "
                                   "ends the cluster)");
  }
  // Drained again: the new deadline and reason replace the old (a sooner notice, say).
  info.drain_deadline_ms = std::max<int64_t>(deadline_ms, 1);
  info.drain_reason = reason;
  spdlog::warn("node {} ({}) is draining: {} (deadline in {} ms)", id.Hex(), info.address,
               info.drain_reason.empty() ? "no reason given" : info.drain_reason,
               info.drain_deadline_ms - NowUnixMs());
  Changed(id, NodeChange::kResources);  // placement views drop it
  Persist(info, stored ? std::move(stored) : [](Status) {});
  return Status::Ok();
}

void GcsNodeManager::CheckHeartbeats() {
  const auto now = Clock::now();
  const int64_t now_ms = NowUnixMs();
  std::vector<std::pair<NodeId, std::string>> dead;
  for (const auto& [id, seen] : last_seen_) {
    const runtime::NodeInfo& info = nodes_.at(id);
    if (now - seen > config_.timeout()) {
      dead.emplace_back(id, "missed " + std::to_string(config_.missed_heartbeats) +
                                " heartbeats (none for " +
                                std::to_string(config_.timeout().count()) + " ms)");
    } else if (info.draining() && now_ms > info.drain_deadline_ms + config_.timeout().count()) {
      dead.emplace_back(id, "drained (" + info.drain_reason + "), but still there " +
                                std::to_string(config_.timeout().count()) +
                                " ms after its deadline");
    }
  }
  for (const auto& [id, reason] : dead) MarkDead(id, reason);
}

void GcsNodeManager::MarkDead(const NodeId& id, const std::string& reason) {
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !it->second.alive) return;
  last_seen_.erase(id);
  auto& info = it->second;
  info.alive = false;
  info.end_time_ms = NowUnixMs();
  info.death_reason = reason;
  info.available = scheduler::ResourceSet();
  spdlog::warn("node {} ({}) is dead: {}", id.Hex(), info.address, reason);
  Persist(info, [id](Status s) {
    if (!s.ok()) spdlog::error("could not store the death of node {}: {}", id.Hex(), s.ToString());
  });
  Changed(id, NodeChange::kDied);
  for (const auto& listener : death_listeners_) listener(info);
}

void GcsNodeManager::Changed(const NodeId& id, NodeChange change) const {
  for (const auto& listener : change_listeners_) listener(id, change);
}

std::vector<const runtime::NodeInfo*> GcsNodeManager::AliveNodes() const {
  std::vector<const runtime::NodeInfo*> alive;
  for (const auto& [id, info] : nodes_) {
    if (info.alive) alive.push_back(&info);
  }
  return alive;
}

const runtime::NodeInfo* GcsNodeManager::FindAlive(const NodeId& id) const {
  auto it = nodes_.find(id);
  return it != nodes_.end() && it->second.alive ? &it->second : nullptr;
}

}  // namespace rayd::gcs
