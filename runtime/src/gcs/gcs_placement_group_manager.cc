#include "gcs/gcs_placement_group_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "common/node_info.h"
#include "gcs/placement_group.h"

namespace rayd::gcs {
namespace {

using State = proto::PlacementGroupState;

constexpr char kGroupTable[] = "placement_groups";

bool IsHexId(const std::string& id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

// The ledger key of a group's bundles on one node.
std::string LedgerKey(const std::string& group_id, const NodeId& node) {
  return group_id + "/" + node.Hex();
}

}  // namespace

// Creation order.
bool GcsPlacementGroupManager::BySeq(const Group* a, const Group* b) { return a->seq < b->seq; }

GcsPlacementGroupManager::GcsPlacementGroupManager(EventLoop& loop, TableStore& store,
                                                   GcsNodeManager& nodes,
                                                   NodeClientPool& node_clients,
                                                   PendingPlacements& ledger,
                                                   Millis infeasible_timeout)
    : infeasible_timeout_(infeasible_timeout),
      store_(store),
      nodes_(nodes),
      node_clients_(node_clients),
      ledger_(ledger),
      retry_timer_(loop) {
  nodes_.AddNodeDeathListener(
      guard_([this](const runtime::NodeInfo& info) { OnNodeDied(info.node_id); }));
  // A node reporting other free resources (it reports at once when some are freed) may let a
  // waiting group in: try them on the next loop turn rather than at the next period.
  nodes_.AddNodeChangeListener(guard_([this](const NodeId&, GcsNodeManager::NodeChange change) {
    if (change == GcsNodeManager::NodeChange::kResources && !waiting_.empty()) {
      retry_timer_.Start(Millis(0), kRetryPeriod, [this] { RetryWaiting(); });
    }
  }));
}

GcsPlacementGroupManager::~GcsPlacementGroupManager() {
  guard_.Invalidate();  // replies to calls that fail as the node clients go do nothing
  retry_timer_.Stop();
}

void GcsPlacementGroupManager::Start(std::function<void(Status)> done) {
  store_.GetAll(kGroupTable, guard_([this, done](Result<std::map<std::string, std::string>> rows) {
                  if (!rows.ok()) {
                    return done(rows.status().WithContext("loading the placement group table"));
                  }
                  std::vector<Group*> loaded;
                  for (const auto& [key, text] : *rows) {
                    auto group = Group::FromJson(text);
                    if (!group.ok()) {
                      spdlog::error("skipping placement group {}: {}", key,
                                    group.status().ToString());
                      continue;
                    }
                    loaded.push_back(group->get());
                    groups_[(*group)->id] = std::move(*group);
                  }
                  std::sort(loaded.begin(), loaded.end(), [](const Group* a, const Group* b) {
                    return std::tie(a->create_time_ms, a->id) < std::tie(b->create_time_ms, b->id);
                  });
                  std::vector<std::string> live;
                  for (Group* g : loaded) {
                    g->seq = next_seq_++;
                    if (Ended(g->state)) {
                      ended_.push_back(g->id);
                      continue;
                    }
                    if (!g->name.empty()) names_[{g->ray_namespace, g->name}] = g->id;
                    live.push_back(g->id);
                  }
                  ForgetOldEnded();
                  if (!loaded.empty()) {
                    spdlog::info("recovered {} placement groups ({} not removed) from {}",
                                 loaded.size(), live.size(), store_.Describe());
                  }
                  for (const auto& id : live) Resume(*groups_[id]);
                  done(Status::Ok());
                }));
}

void GcsPlacementGroupManager::Resume(Group& group) {
  std::set<NodeId> gone;
  for (const auto& bundle : group.bundles) {
    if (!bundle.node.IsNil() && nodes_.FindAlive(bundle.node) == nullptr) gone.insert(bundle.node);
  }
  for (const NodeId& node : gone) LoseNode(group, node);
  const std::vector<uint32_t> unplaced = group.Unplaced();
  if (unplaced.empty()) return;
  // A reservation may have been under way when the old head stopped: whatever it prepared is
  // cancelled (on each node before the new attempt's prepare, which the same connection
  // carries later).
  for (const runtime::NodeInfo* node : nodes_.AliveNodes()) {
    CancelBundles(node->node_id, group.id, unplaced, "the head restarted while reserving them");
  }
  Schedule(group);
}

void GcsPlacementGroupManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::CREATE_PLACEMENT_GROUP>(
      [this](const auto& c) { HandleCreate(c); });
  dispatcher.Handle<proto::Method::REMOVE_PLACEMENT_GROUP>(
      [this](const auto& c) { HandleRemove(c); });
  dispatcher.Handle<proto::Method::GET_PLACEMENT_GROUP>([this](const auto& c) { HandleGet(c); });
  dispatcher.Handle<proto::Method::GET_ALL_PLACEMENT_GROUPS>(
      [this](const auto& c) { HandleGetAll(c); });
}

GcsPlacementGroupManager::Group* GcsPlacementGroupManager::Find(const std::string& group_id) {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : it->second.get();
}

// ---- Handlers ----------------------------------------------------------------------------------

void GcsPlacementGroupManager::HandleCreate(
    const rpc::Incoming<proto::Method::CREATE_PLACEMENT_GROUP>& call) {
  auto in = call.params().getGroup();
  const std::string id = in.getPlacementGroupId();
  if (!IsHexId(id)) {
    return call.Fail(
        Status::InvalidArgument("a placement group id is 32 hex digits, not '" + id + "'"));
  }
  auto reply = [call, id] {
    call.Reply([&](proto::CreatePlacementGroupReply::Builder b) { b.setPlacementGroupId(id); });
  };
  // A request sent again (a caller retrying after a reconnect) finds its group.
  if (Find(id) != nullptr) return reply();
  auto group = std::make_unique<Group>();
  auto bundles = Group::BundlesFromProto(in.getBundles());
  if (!bundles.ok()) return call.Fail(bundles.status());
  group->bundles = std::move(*bundles);
  if (!KnownStrategy(in.getStrategy())) {
    return call.Fail(Status::InvalidArgument("unknown placement strategy " +
                                             std::to_string(static_cast<int>(in.getStrategy()))));
  }
  const std::string name = in.getName();
  const std::string ns = in.getNamespace();
  if (!name.empty() && names_.contains({ns, name})) {
    return call.Fail(Status::AlreadyExists("a placement group named '" + name +
                                           "' already exists in namespace '" + ns + "'"));
  }
  group->id = id;
  group->name = name;
  group->ray_namespace = ns;
  group->job_id = in.getJobId();
  group->strategy = in.getStrategy();
  group->detached = in.getDetached();
  group->create_time_ms = NowUnixMs();
  group->seq = next_seq_++;
  Group& g = *group;
  groups_[id] = std::move(group);
  if (!name.empty()) names_[{ns, name}] = id;
  spdlog::debug("creating placement group {} ({} bundles, {}) of job {}", id, g.bundles.size(),
                runtime::PlacementStrategyName(g.strategy), g.job_id);
  Persist(g);
  reply();
  Schedule(g);
}

void GcsPlacementGroupManager::HandleRemove(
    const rpc::Incoming<proto::Method::REMOVE_PLACEMENT_GROUP>& call) {
  const std::string id = call.params().getPlacementGroupId();
  Group* group = Find(id);
  if (group == nullptr) return call.Fail(Status::NotFound("no placement group " + id));
  End(*group, State::REMOVED, kRemovedByUser);
  call.Reply();
}

void GcsPlacementGroupManager::HandleGet(const GetGroupCall& call) {
  auto request = call.params();
  Group* group = nullptr;
  if (request.getPlacementGroupId().size() > 0) {
    group = Find(request.getPlacementGroupId());
  } else if (auto it = names_.find({request.getNamespace(), request.getName()});
             it != names_.end()) {
    group = Find(it->second);
  }
  if (group == nullptr) {
    return call.Reply([](proto::GetPlacementGroupReply::Builder b) { b.setFound(false); });
  }
  if (request.getWaitUntilReady() && !Settled(group->state)) {
    // Callers that gave up (closed connections) need no answer.
    std::erase_if(group->waiters, [](const GetGroupCall& c) { return c.connection() == nullptr; });
    group->waiters.push_back(call);
    return;
  }
  call.Reply([&](proto::GetPlacementGroupReply::Builder reply) {
    reply.setFound(true);
    ToProto(*group, reply.initGroup());
  });
}

void GcsPlacementGroupManager::HandleGetAll(
    const rpc::Incoming<proto::Method::GET_ALL_PLACEMENT_GROUPS>& call) {
  std::vector<const Group*> ordered;
  ordered.reserve(groups_.size());
  for (const auto& [id, group] : groups_) ordered.push_back(group.get());
  std::sort(ordered.begin(), ordered.end(), BySeq);
  call.Reply([&](proto::GetAllPlacementGroupsReply::Builder b) {
    auto list = b.initGroups(static_cast<unsigned>(ordered.size()));
    for (unsigned i = 0; i < ordered.size(); ++i) ToProto(*ordered[i], list[i]);
  });
}

void GcsPlacementGroupManager::ToProto(const Group& group,
                                       proto::PlacementGroupInfo::Builder out) const {
  out.setPlacementGroupId(group.id);
  out.setName(group.name);
  out.setNamespace(group.ray_namespace);
  out.setJobId(group.job_id);
  out.setStrategy(group.strategy);
  out.setState(group.state);
  out.setDetached(group.detached);
  out.setCreateTimeMs(group.create_time_ms);
  out.setReadyTimeMs(group.ready_time_ms);
  out.setCause(group.cause);
  auto bundles = out.initBundles(static_cast<unsigned>(group.bundles.size()));
  for (unsigned i = 0; i < group.bundles.size(); ++i) {
    const Group::Bundle& bundle = group.bundles[i];
    auto b = bundles[i];
    b.setIndex(i);
    runtime::FillResources(bundle.resources, [&](unsigned n) { return b.initResources(n); });
    runtime::FillLabels(bundle.label_selector, [&](unsigned n) { return b.initLabelSelector(n); });
    if (!bundle.committed) continue;
    b.setNodeId(bundle.node.Hex());
    if (auto node = nodes_.nodes().find(bundle.node); node != nodes_.nodes().end()) {
      b.setNodeAddress(node->second.address);
    }
  }
}

// ---- Where work of a group runs ----------------------------------------------------------------

GcsPlacementGroupManager::BundleSlot GcsPlacementGroupManager::FindBundle(
    const std::string& group_id, int index, const scheduler::ResourceSet& demand) {
  using Kind = BundleSlot::Kind;
  Group* group = Find(group_id);
  if (group == nullptr) return {Kind::kGone, NodeId(), 0, "no placement group " + group_id};
  if (Ended(group->state)) return {Kind::kGone, NodeId(), 0, group->Ending()};
  const auto count = static_cast<uint32_t>(group->bundles.size());
  if (index >= 0) {
    const auto i = static_cast<uint32_t>(index);
    if (i >= count) {
      return {Kind::kGone, NodeId(), i,
              "placement group " + group_id + " has no bundle " + std::to_string(i) + " (it has " +
                  std::to_string(count) + ")"};
    }
    const Group::Bundle& bundle = group->bundles[i];
    if (!demand.IsSubsetOf(bundle.resources)) {
      return {Kind::kTooSmall, NodeId(), i,
              demand.ToString() + " does not fit bundle " + std::to_string(i) +
                  " of placement group " + group_id + ": " + bundle.resources.ToString()};
    }
    if (!bundle.committed) return {Kind::kWait, NodeId(), i, ""};
    return {Kind::kReady, bundle.node, i, ""};
  }
  bool fits_one = false;
  for (uint32_t step = 0; step < count; ++step) {
    const uint32_t i = (group->next_bundle + step) % count;
    const Group::Bundle& bundle = group->bundles[i];
    if (!demand.IsSubsetOf(bundle.resources)) continue;
    fits_one = true;
    if (!bundle.committed) continue;
    group->next_bundle = (i + 1) % count;
    return {Kind::kReady, bundle.node, i, ""};
  }
  if (!fits_one) {
    return {Kind::kTooSmall, NodeId(), 0,
            demand.ToString() + " does not fit any bundle of placement group " + group_id};
  }
  return {Kind::kWait, NodeId(), 0, ""};
}

// ---- Scheduling --------------------------------------------------------------------------------

GcsPlacementGroupManager::Pass GcsPlacementGroupManager::NewPass() const {
  Pass pass;
  pass.cluster = ledger_.Snapshot(&pass.ids);
  return pass;
}

void GcsPlacementGroupManager::Schedule(Group& group, Pass* pass) {
  const std::vector<uint32_t> unplaced = group.Unplaced();
  if (unplaced.empty()) return MarkCreated(group);
  // One group alone places on the ledger's view as it is; a pass over many applies each
  // placement to its own copy, so the next group sees what is left.
  const scheduler::ClusterSnapshot* cluster = nullptr;
  const std::vector<NodeId>* ids = nullptr;
  if (pass != nullptr) {
    cluster = &pass->cluster;
    ids = &pass->ids;
  } else {
    cluster = &ledger_.View(&ids);
  }
  // The bundles placed again by STRICT_SPREAD must avoid the nodes the group's other bundles
  // hold: hidden, in a copy, for this group only.
  std::optional<scheduler::ClusterSnapshot> hiding;
  if (group.strategy == proto::PlacementStrategy::STRICT_SPREAD) {
    for (size_t n = 0; n < ids->size(); ++n) {
      const bool used = std::any_of(group.bundles.begin(), group.bundles.end(),
                                    [&](const Group::Bundle& b) { return b.node == (*ids)[n]; });
      if (used && cluster->nodes[n].alive) {
        if (!hiding) hiding = *cluster;
        hiding->nodes[n].alive = false;
      }
    }
  }
  scheduler::GroupRequest request;
  request.strategy = group.Strategy();
  for (uint32_t i : unplaced) {
    request.bundles.push_back({group.bundles[i].resources, group.bundles[i].label_selector});
  }
  const scheduler::GroupPlacement placement =
      scheduler::PlaceGroup(hiding ? *hiding : *cluster, request);
  switch (placement.outcome) {
    case scheduler::Outcome::kPlaced: {
      // The rest of the pass sees these bundles taken.
      if (pass != nullptr) {
        if (Status applied = scheduler::Apply(pass->cluster, request, placement); !applied.ok()) {
          spdlog::error("placement group {}: its own plan does not apply: {}", group.id,
                        applied.ToString());
        }
      }
      group.infeasible_since.reset();
      group.cause.clear();
      std::map<NodeId, std::vector<uint32_t>> plan;
      for (size_t k = 0; k < unplaced.size(); ++k) {
        plan[(*ids)[placement.bundle_nodes[k]]].push_back(unplaced[k]);
      }
      return StartAttempt(group, plan);
    }
    case scheduler::Outcome::kNotNow:
      group.infeasible_since.reset();
      group.cause = placement.reason;
      return Wait(group);
    case scheduler::Outcome::kInfeasible: {
      group.cause = "infeasible: " + placement.reason;
      const auto now = Clock::now();
      if (!group.infeasible_since) {
        group.infeasible_since = now;
        if (infeasible_timeout_.count() > 0) {
          spdlog::warn("placement group {} waits up to {} ms for a node that fits: {}", group.id,
                       infeasible_timeout_.count(), group.cause);
        }
      }
      if (now - *group.infeasible_since >= infeasible_timeout_) {
        return End(group, State::FAILED, group.cause);
      }
      return Wait(group);
    }
  }
}

void GcsPlacementGroupManager::Wait(Group& group) {
  waiting_.insert({group.seq, group.id});
  if (!retry_timer_.active()) {
    retry_timer_.Start(kRetryPeriod, kRetryPeriod, [this] { RetryWaiting(); });
  }
}

void GcsPlacementGroupManager::RetryWaiting() {
  auto waiting = std::move(waiting_);
  waiting_.clear();
  Pass pass = NewPass();
  for (const auto& [seq, id] : waiting) {
    Group* group = Find(id);
    if (group != nullptr && !Ended(group->state) && group->in_flight.empty()) {
      Schedule(*group, &pass);
    }
  }
  if (waiting_.empty()) retry_timer_.Stop();
}

void GcsPlacementGroupManager::StartAttempt(Group& group,
                                            const std::map<NodeId, std::vector<uint32_t>>& plan) {
  const uint64_t attempt = ++group.attempt;
  const std::string id = group.id;
  group.in_flight.clear();
  group.unanswered = plan.size();
  for (const auto& [node, indexes] : plan) {
    group.in_flight[node].indexes = indexes;
    for (uint32_t i : indexes) {
      group.bundles[i].node = node;
      group.bundles[i].committed = false;
    }
  }
  for (const auto& [node, indexes] : plan) {
    ledger_.Add(LedgerKey(id, node), node, group.SumOn(node));
  }
  // Bundles on one node are reserved atomically by that node: no second phase.
  const bool commit = plan.size() == 1;
  for (const auto& [node, indexes] : plan) {
    std::vector<std::pair<uint32_t, scheduler::ResourceSet>> reservations;
    for (uint32_t i : indexes) reservations.emplace_back(i, group.bundles[i].resources);
    node_clients_.Call<proto::Method::PREPARE_BUNDLES>(
        node,
        [&](proto::PrepareBundlesRequest::Builder r) {
          r.setPlacementGroupId(id);
          r.setNodeId(node.Hex());
          r.setCommit(commit);
          auto list = r.initBundles(static_cast<unsigned>(reservations.size()));
          for (unsigned k = 0; k < reservations.size(); ++k) {
            list[k].setIndex(reservations[k].first);
            runtime::FillResources(reservations[k].second,
                                   [&](unsigned n) { return list[k].initResources(n); });
          }
        },
        kNodeCallTimeout, guard_([this, id, attempt, node, indexes](const Status& s) {
          OnPrepareReply(id, attempt, node, indexes, s);
        }));
    // A node that is gone answers at once, which may have abandoned this attempt already.
    const Group* current = Find(id);
    if (current == nullptr || current->attempt != attempt) return;
  }
}

void GcsPlacementGroupManager::OnPrepareReply(const std::string& group_id, uint64_t attempt,
                                              const NodeId& node,
                                              const std::vector<uint32_t>& indexes,
                                              const Status& status) {
  Group* group = Find(group_id);
  if (group == nullptr || Ended(group->state) || group->attempt != attempt) {
    if (!status.ok()) return;
    // Stale: give back what it reserved, except bundles that a newer attempt prepared on the
    // same node since (the node got that prepare after the cancel of the abandoned one).
    std::vector<uint32_t> stale;
    for (uint32_t i : indexes) {
      if (group == nullptr || Ended(group->state) || group->bundles[i].node != node) {
        stale.push_back(i);
      }
    }
    if (!stale.empty()) CancelBundles(node, group_id, stale, "an abandoned reservation attempt");
    return;
  }
  if (!status.ok()) {
    // Only the node's own refusal (it lacked the resources) says that it reserved nothing. A
    // timeout or a dropped connection may have come after it reserved: the abandon cancels there
    // too, or the bundles would stay held there for good.
    group->in_flight[node].refused = status.code() == StatusCode::kResourceExhausted;
    AbandonAttempt(*group,
                   "node " + node.Hex() + " could not reserve bundles: " + status.message());
    return Wait(*group);
  }
  if (--group->unanswered > 0) return;
  if (group->in_flight.size() == 1) return MarkCreated(*group);
  // Every node holds its part: make them usable.
  std::vector<NodeId> parts;
  for (const auto& [n, reservation] : group->in_flight) parts.push_back(n);
  group->unanswered = parts.size();
  for (const NodeId& n : parts) {
    node_clients_.Call<proto::Method::COMMIT_BUNDLES>(
        n,
        [&](proto::CommitBundlesRequest::Builder b) {
          b.setPlacementGroupId(group_id);
          b.setNodeId(n.Hex());
        },
        kNodeCallTimeout, guard_([this, group_id, attempt, n](const Status& s) {
          OnCommitReply(group_id, attempt, n, s);
        }));
    const Group* current = Find(group_id);
    if (current == nullptr || current->attempt != attempt) return;
  }
}

void GcsPlacementGroupManager::OnCommitReply(const std::string& group_id, uint64_t attempt,
                                             const NodeId& node, const Status& status) {
  Group* group = Find(group_id);
  // Stale: whoever abandoned the attempt (or ended the group) cancelled it on this node.
  if (group == nullptr || Ended(group->state) || group->attempt != attempt) return;
  if (!status.ok()) {
    AbandonAttempt(*group, "node " + node.Hex() + " could not commit bundles: " + status.message());
    return Wait(*group);
  }
  if (--group->unanswered == 0) MarkCreated(*group);
}

void GcsPlacementGroupManager::AbandonAttempt(Group& group, const std::string& why) {
  ++group.attempt;
  for (const auto& [node, reservation] : group.in_flight) {
    ledger_.Remove(LedgerKey(group.id, node));
    // Sent even to nodes that have not answered: the cancel follows the prepare on the same
    // connection, so it frees whatever that prepare reserved.
    if (!reservation.refused) CancelBundles(node, group.id, reservation.indexes, why);
    for (uint32_t i : reservation.indexes) {
      group.bundles[i].node = NodeId();
      group.bundles[i].committed = false;
    }
  }
  group.in_flight.clear();
  group.unanswered = 0;
  spdlog::debug("placement group {}: reservation attempt {} abandoned: {}", group.id,
                group.attempt - 1, why);
}

void GcsPlacementGroupManager::LoseNode(Group& group, const NodeId& node) {
  ledger_.Remove(LedgerKey(group.id, node));
  bool lost = false;
  for (Group::Bundle& bundle : group.bundles) {
    if (bundle.node != node || !bundle.committed) continue;
    bundle.node = NodeId();
    bundle.committed = false;
    lost = true;
  }
  if (!lost) return;
  if (group.strategy == proto::PlacementStrategy::STRICT_PACK) {
    // The group lives on one node or not at all: give back the survivors and place it whole.
    std::map<NodeId, std::vector<uint32_t>> survivors;
    for (uint32_t i = 0; i < group.bundles.size(); ++i) {
      Group::Bundle& bundle = group.bundles[i];
      if (bundle.node.IsNil()) continue;
      survivors[bundle.node].push_back(i);
      bundle.node = NodeId();
      bundle.committed = false;
    }
    for (const auto& [survivor, indexes] : survivors) {
      ledger_.Remove(LedgerKey(group.id, survivor));
      CancelBundles(survivor, group.id, indexes,
                    "its STRICT_PACK group lost node " + node.Hex() + " and moves whole");
    }
  }
  spdlog::info("placement group {} lost its bundles on node {}; placing them again", group.id,
               node.Hex());
  if (group.state == State::CREATED) {
    group.state = State::RESCHEDULING;
    Persist(group);
  }
}

// ---- State changes -----------------------------------------------------------------------------

void GcsPlacementGroupManager::MarkCreated(Group& group) {
  for (const auto& [node, reservation] : group.in_flight) {
    for (uint32_t i : reservation.indexes) group.bundles[i].committed = true;
    ledger_.Confirm(LedgerKey(group.id, node));
  }
  group.in_flight.clear();
  group.unanswered = 0;
  group.state = State::CREATED;
  group.ready_time_ms = NowUnixMs();
  group.cause.clear();
  group.infeasible_since.reset();
  spdlog::debug("placement group {} is created", group.id);
  const std::string id = group.id;
  SettleOnceStored(group);
  for (const auto& listener : ready_listeners_) listener(id);
}

void GcsPlacementGroupManager::End(Group& group, State state, const std::string& cause) {
  if (Ended(group.state)) return;
  ++group.attempt;  // replies still on their way are stale
  std::set<NodeId> holding;
  for (const auto& [node, reservation] : group.in_flight) holding.insert(node);
  for (Group::Bundle& bundle : group.bundles) {
    if (!bundle.node.IsNil()) holding.insert(bundle.node);
    bundle.node = NodeId();
    bundle.committed = false;
  }
  group.in_flight.clear();
  group.unanswered = 0;
  waiting_.erase({group.seq, group.id});
  if (!group.name.empty()) {
    auto it = names_.find({group.ray_namespace, group.name});
    if (it != names_.end() && it->second == group.id) names_.erase(it);
  }
  group.state = state;
  group.cause = cause;
  const std::string id = group.id;
  const std::string why = group.Ending();
  if (state == State::FAILED) {
    spdlog::warn("{}", why);
  } else {
    spdlog::debug("{}", why);
  }
  SettleOnceStored(group);
  for (const auto& listener : removal_listeners_) listener(id, why);
  for (const NodeId& node : holding) {
    ledger_.Remove(LedgerKey(id, node));
    CancelBundles(node, id, {}, why);
  }
  ended_.push_back(id);
  ForgetOldEnded();
  // What the group held may let a waiting one in: try them on the next loop turn.
  if (state == State::REMOVED && !waiting_.empty()) {
    retry_timer_.Start(Millis(0), kRetryPeriod, [this] { RetryWaiting(); });
  }
}

void GcsPlacementGroupManager::OnNodeDied(const NodeId& node) {
  std::vector<Group*> affected;
  for (const auto& [id, group] : groups_) {
    if (Ended(group->state)) continue;
    const bool holds = std::any_of(group->bundles.begin(), group->bundles.end(),
                                   [&](const Group::Bundle& b) { return b.node == node; });
    if (holds || group->in_flight.contains(node)) affected.push_back(group.get());
  }
  std::sort(affected.begin(), affected.end(), BySeq);  // placed again in creation order
  for (Group* group : affected) {
    // An attempt in flight was planned with the node (or without the bundles it held): redo it.
    if (!group->in_flight.empty()) {
      AbandonAttempt(*group, "node " + node.Hex() + " died during the reservation");
    }
    LoseNode(*group, node);
    waiting_.erase({group->seq, group->id});
    Schedule(*group);
  }
}

void GcsPlacementGroupManager::OnJobFinished(const std::string& job_id) {
  std::vector<Group*> affected;
  for (const auto& [id, group] : groups_) {
    if (group->job_id == job_id && !group->detached && !Ended(group->state)) {
      affected.push_back(group.get());
    }
  }
  for (Group* group : affected) End(*group, State::REMOVED, "its job ended");
}

void GcsPlacementGroupManager::Persist(const Group& group, std::function<void()> then) {
  store_.Put(kGroupTable, group.id, group.ToJson(), /*overwrite=*/true,
             guard_([id = group.id, then = std::move(then)](Result<bool> r) {
               if (!r.ok()) {
                 spdlog::error("could not store placement group {}: {}", id, r.status().ToString());
               }
               if (then) then();
             }));
}

// Waiters hear of a settled state only once it is stored (or storing it failed), so a head
// restarted on the same store never reports an older state than they saw.
void GcsPlacementGroupManager::SettleOnceStored(Group& group) {
  Persist(group, [this, id = group.id] {
    Group* g = Find(id);
    if (g == nullptr || !Settled(g->state)) return;
    auto waiters = std::move(g->waiters);
    g->waiters.clear();
    for (const auto& call : waiters) {
      call.Reply([&](proto::GetPlacementGroupReply::Builder reply) {
        reply.setFound(true);
        ToProto(*g, reply.initGroup());
      });
    }
  });
}

void GcsPlacementGroupManager::ForgetOldEnded() {
  for (; ended_.size() > kMaxEndedGroups; ended_.pop_front()) {
    const std::string& id = ended_.front();
    groups_.erase(id);
    store_.Delete(kGroupTable, id, [id](Result<bool> r) {
      if (!r.ok()) {
        spdlog::warn("could not delete placement group {} from the store: {}", id,
                     r.status().ToString());
      }
    });
  }
}

void GcsPlacementGroupManager::CancelBundles(const NodeId& node, const std::string& group_id,
                                             const std::vector<uint32_t>& indexes,
                                             const std::string& reason) {
  node_clients_.Call<proto::Method::CANCEL_BUNDLES>(
      node,
      [&](proto::CancelBundlesRequest::Builder r) {
        r.setPlacementGroupId(group_id);
        r.setNodeId(node.Hex());
        auto list = r.initIndexes(static_cast<unsigned>(indexes.size()));
        for (unsigned k = 0; k < indexes.size(); ++k) list.set(k, indexes[k]);
        r.setReason(reason);
      },
      kNodeCallTimeout,
      [node, group_id](const Status& s) {
        if (!s.ok()) {
          spdlog::debug("could not cancel bundles of placement group {} on node {}: {}", group_id,
                        node.Hex(), s.ToString());
        }
      });
}

std::vector<GcsPlacementGroupManager::WaitingGroup> GcsPlacementGroupManager::WaitingGroups()
    const {
  std::vector<WaitingGroup> out;
  for (const auto& [seq, id] : waiting_) {
    auto it = groups_.find(id);
    if (it == groups_.end()) continue;
    const Group& group = *it->second;
    WaitingGroup w{group.id, group.name, {{}, group.Strategy()}};
    const bool whole = group.Strategy() == scheduler::GroupStrategy::kStrictPack;
    for (const Group::Bundle& b : group.bundles) {
      if (whole || b.node.IsNil()) w.request.bundles.push_back({b.resources, b.label_selector});
    }
    if (!w.request.bundles.empty()) out.push_back(std::move(w));
  }
  return out;
}

}  // namespace rayd::gcs
