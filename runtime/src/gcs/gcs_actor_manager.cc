#include "gcs/gcs_actor_manager.h"

#include <capnp/serialize.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "common/node_info.h"

namespace rayd::gcs {
namespace {

constexpr char kActorTable[] = "actors";

const char* StateName(proto::ActorState state) { return runtime::ActorStateName(state); }

proto::ActorState StateFromName(const std::string& name) {
  if (name == "PENDING_CREATION") return proto::ActorState::PENDING_CREATION;
  if (name == "ALIVE") return proto::ActorState::ALIVE;
  if (name == "RESTARTING") return proto::ActorState::RESTARTING;
  return proto::ActorState::DEAD;
}

bool Settled(proto::ActorState state) {
  return state == proto::ActorState::ALIVE || state == proto::ActorState::DEAD;
}

}  // namespace

// One actor: what GET_ACTOR reports, plus what creating it again needs.
struct GcsActorManager::Actor {
  std::string id;
  std::string job_id;
  std::string name;
  std::string ray_namespace;
  std::string class_name;  // the factory's name
  proto::ActorState state = proto::ActorState::PENDING_CREATION;
  std::string address;    // its worker's core worker service, while ALIVE
  NodeId node_id;         // where it lives or is being created; nil while unplaced
  std::string worker_id;  // its worker, once a lease is granted
  std::string lease_id;
  int num_restarts = 0;
  int max_restarts = 0;  // -1: unlimited
  bool detached = false;
  std::string death_cause;
  int pid = 0;
  scheduler::ResourceSet demand;
  std::string placement_group_id;                     // from its creation spec; empty: none
  std::optional<Clock::time_point> infeasible_since;  // while no node could ever hold it
  // The CreateActorRequest (creation spec and launch), sized to it, and serialised as stored.
  // Both go when the actor dies for good: a dead actor is never created again.
  std::unique_ptr<capnp::MallocMessageBuilder> request;
  std::string request_hex;

  // The creation in progress.
  uint64_t attempt = 0;
  std::string creating_address;                   // the leased worker's address
  std::unique_ptr<rpc::RpcClient> worker_client;  // carries the creation push
  std::vector<GetActorCall> waiters;              // GET_ACTOR calls waiting for a settled state

  proto::CreateActorRequest::Reader Request() {
    return request ? request->getRoot<proto::CreateActorRequest>().asReader()
                   : proto::CreateActorRequest::Reader();
  }
  void SetRequest(proto::CreateActorRequest::Reader from) {
    request = std::make_unique<capnp::MallocMessageBuilder>(from.totalSize().wordCount + 1);
    request->setRoot(from);
  }
  proto::SchedulingOptions::Reader Scheduling() { return Request().getSpec().getScheduling(); }
  // Sets what derives from `request`.
  void ReadRequest() {
    demand = runtime::ResourcesFromProto(Request().getSpec().getResources());
    placement_group_id = Scheduling().getPlacementGroupId();
  }

  void ToProto(proto::ActorInfo::Builder out) const {
    out.setActorId(id);
    out.setJobId(job_id);
    out.setName(name);
    out.setNamespace(ray_namespace);
    out.setClassName(class_name);
    out.setState(state);
    out.setAddress(address);
    out.setNodeId(node_id.IsNil() ? "" : node_id.Hex());
    out.setWorkerId(worker_id);
    out.setNumRestarts(num_restarts);
    out.setMaxRestarts(max_restarts);
    out.setDetached(detached);
    out.setDeathCause(death_cause);
    out.setPid(pid);
  }

  std::string ToJson() const {
    nlohmann::json j = {{"actor_id", id},
                        {"job_id", job_id},
                        {"name", name},
                        {"namespace", ray_namespace},
                        {"class_name", class_name},
                        {"state", StateName(state)},
                        {"address", address},
                        {"node_id", node_id.IsNil() ? "" : node_id.Hex()},
                        {"worker_id", worker_id},
                        {"lease_id", lease_id},
                        {"num_restarts", num_restarts},
                        {"max_restarts", max_restarts},
                        {"detached", detached},
                        {"death_cause", death_cause},
                        {"pid", pid},
                        {"request", request_hex}};
    return j.dump();
  }

  static Result<std::unique_ptr<Actor>> FromJson(const std::string& text) {
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return Status::Internal("not a JSON object");
    auto actor = std::make_unique<Actor>();
    try {
      actor->id = j.at("actor_id").get<std::string>();
      actor->job_id = j.value("job_id", "");
      actor->name = j.value("name", "");
      actor->ray_namespace = j.value("namespace", "");
      actor->class_name = j.value("class_name", "");
      actor->state = StateFromName(j.value("state", "DEAD"));
      actor->address = j.value("address", "");
      if (auto node = NodeId::FromHex(j.value("node_id", "")); node.ok()) actor->node_id = *node;
      actor->worker_id = j.value("worker_id", "");
      actor->lease_id = j.value("lease_id", "");
      actor->num_restarts = j.value("num_restarts", 0);
      actor->max_restarts = j.value("max_restarts", 0);
      actor->detached = j.value("detached", false);
      actor->death_cause = j.value("death_cause", "");
      actor->pid = j.value("pid", 0);
      const std::string hex = j.value("request", "");
      if (hex.empty() && actor->state == proto::ActorState::DEAD) return actor;  // dropped
      if (hex.empty() || hex.size() % 16 != 0) return Status::Internal("no creation request");
      kj::Array<capnp::word> words = kj::heapArray<capnp::word>(hex.size() / 16);
      if (!internal::FromHex(hex, reinterpret_cast<uint8_t*>(words.begin()), hex.size() / 2)) {
        return Status::Internal("creation request is not hex");
      }
      capnp::FlatArrayMessageReader reader(words);
      actor->SetRequest(reader.getRoot<proto::CreateActorRequest>());
      actor->request_hex = hex;
      actor->ReadRequest();
    } catch (const std::exception& e) {
      return Status::Internal(e.what());
    } catch (const kj::Exception& e) {
      return Status::Internal(e.getDescription().cStr());
    }
    return actor;
  }
};

GcsActorManager::GcsActorManager(EventLoop& loop, TableStore& store, GcsNodeManager& nodes,
                                 NodeClientPool& node_clients, PendingPlacements& ledger,
                                 GcsPlacementGroupManager& placement_groups,
                                 Millis infeasible_timeout)
    : infeasible_timeout_(infeasible_timeout),
      loop_(loop),
      store_(store),
      nodes_(nodes),
      node_clients_(node_clients),
      ledger_(ledger),
      placement_groups_(placement_groups),
      retry_timer_(loop),
      reaper_(loop) {
  nodes_.AddNodeDeathListener(
      guard_([this](const runtime::NodeInfo& info) { OnNodeDied(info.node_id); }));
  placement_groups_.AddReadyListener(
      guard_([this](const std::string& group_id) { OnGroupReady(group_id); }));
  placement_groups_.AddRemovalListener(
      guard_([this](const std::string& group_id, const std::string& why) {
        OnGroupRemoved(group_id, why);
      }));
}

GcsActorManager::~GcsActorManager() {
  guard_.Invalidate();  // callbacks run by the clients destroyed below do nothing
  retry_timer_.Stop();
  reaper_.Stop();
  retired_.clear();
  for (auto& [id, actor] : actors_) actor->worker_client.reset();
}

void GcsActorManager::Start(std::function<void(Status)> done) {
  store_.GetAll(kActorTable, guard_([this, done](Result<std::map<std::string, std::string>> rows) {
                  if (!rows.ok()) return done(rows.status().WithContext("loading the actor table"));
                  for (const auto& [key, text] : *rows) {
                    auto actor = Actor::FromJson(text);
                    if (!actor.ok()) {
                      spdlog::error("skipping actor {}: {}", key, actor.status().ToString());
                      continue;
                    }
                    Actor& a = **actor;
                    if (a.state != proto::ActorState::DEAD && !a.name.empty()) {
                      names_[{a.ray_namespace, a.name}] = a.id;
                    }
                    if (a.state != proto::ActorState::DEAD && !a.placement_group_id.empty()) {
                      group_actors_[a.placement_group_id].insert(a.id);
                    }
                    if (a.state == proto::ActorState::DEAD) dead_.push_back(a.id);
                    actors_[a.id] = std::move(*actor);
                  }
                  std::vector<std::string> unsettled;
                  for (auto& [id, actor] : actors_) {
                    if (actor->state != proto::ActorState::DEAD) unsettled.push_back(id);
                  }
                  if (!actors_.empty()) {
                    spdlog::info("recovered {} actors ({} not dead) from {}", actors_.size(),
                                 unsettled.size(), store_.Describe());
                  }
                  for (const auto& id : unsettled) {
                    Actor& a = *actors_[id];
                    if (a.state == proto::ActorState::ALIVE) {
                      if (!a.node_id.IsNil() && nodes_.FindAlive(a.node_id) == nullptr) {
                        OnWorkerDied(a, "its node " + a.node_id.Hex() + " died");
                      }
                      continue;
                    }
                    // Its creation was under way when the old head stopped: start it again, ending
                    // the worker the old attempt may have left running.
                    if (!a.worker_id.empty() && !a.node_id.IsNil()) {
                      KillWorker(a.node_id, a.worker_id,
                                 "the head restarted during the actor's creation");
                    }
                    Schedule(a);
                  }
                  done(Status::Ok());
                }));
}

void GcsActorManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::CREATE_ACTOR>([this](const auto& c) { HandleCreate(c); });
  dispatcher.Handle<proto::Method::GET_ACTOR>([this](const auto& c) { HandleGet(c); });
  dispatcher.Handle<proto::Method::KILL_ACTOR>([this](const auto& c) { HandleKill(c); });
  dispatcher.Handle<proto::Method::GET_ALL_ACTORS>([this](const auto& c) { HandleGetAll(c); });
  dispatcher.Handle<proto::Method::WORKER_FAILED>([this](const auto& c) { HandleWorkerFailed(c); });
}

GcsActorManager::Actor* GcsActorManager::Find(const std::string& actor_id) {
  auto it = actors_.find(actor_id);
  return it == actors_.end() ? nullptr : it->second.get();
}

GcsActorManager::Actor* GcsActorManager::FindByName(const std::string& ray_namespace,
                                                    const std::string& name) {
  auto it = names_.find({ray_namespace, name});
  return it == names_.end() ? nullptr : Find(it->second);
}

// ---- Handlers ----------------------------------------------------------------------------------

void GcsActorManager::HandleCreate(const rpc::Incoming<proto::Method::CREATE_ACTOR>& call) {
  auto request = call.params();
  auto spec = request.getSpec();
  const std::string id = spec.getActorId();
  if (id.empty()) return call.Fail(Status::InvalidArgument("CREATE_ACTOR needs spec.actorId"));
  auto reply = [call, id] {
    call.Reply([&](proto::CreateActorReply::Builder b) { b.setActorId(id); });
  };
  // A request sent again (a caller retrying after a reconnect) finds its actor.
  if (Find(id) != nullptr) return reply();
  if (request.getMaxRestarts() < -1) {
    return call.Fail(Status::InvalidArgument("maxRestarts must be -1 (unlimited) or >= 0, not " +
                                             std::to_string(request.getMaxRestarts())));
  }
  const std::string name = request.getName();
  const std::string ns = request.getNamespace();
  if (!name.empty() && names_.contains({ns, name})) {
    return call.Fail(Status::AlreadyExists("an actor named '" + name +
                                           "' already exists in namespace '" + ns + "'"));
  }
  auto actor = std::make_unique<Actor>();
  actor->id = id;
  actor->job_id = spec.getJobId();
  actor->name = name;
  actor->ray_namespace = ns;
  actor->class_name = spec.getFunctionName();
  actor->max_restarts = request.getMaxRestarts();
  actor->detached = request.getDetached();
  actor->SetRequest(request);
  actor->ReadRequest();
  auto words = capnp::messageToFlatArray(*actor->request);
  actor->request_hex = internal::ToHex(words.asBytes().begin(), words.asBytes().size());
  Actor& a = *actor;
  ForgetOldestDead();
  actors_[id] = std::move(actor);
  if (!name.empty()) names_[{ns, name}] = id;
  if (!a.placement_group_id.empty()) group_actors_[a.placement_group_id].insert(id);
  spdlog::info("creating actor {} ({}{}) of job {} needing {}", id, a.class_name,
               name.empty() ? "" : ", named '" + name + "'", a.job_id, a.demand.ToString());
  Persist(a);
  reply();
  Schedule(a);
}

void GcsActorManager::HandleGet(const GetActorCall& call) {
  auto request = call.params();
  Actor* actor = request.getActorId().size() > 0
                     ? Find(request.getActorId())
                     : FindByName(request.getNamespace(), request.getName());
  if (actor == nullptr) {
    return call.Reply([](proto::GetActorReply::Builder b) { b.setFound(false); });
  }
  if (request.getWaitUntilSettled() && !Settled(actor->state)) {
    // Callers that gave up (closed connections) need no answer.
    std::erase_if(actor->waiters, [](const GetActorCall& c) { return c.connection() == nullptr; });
    actor->waiters.push_back(call);
    return;
  }
  call.Reply([&](proto::GetActorReply::Builder reply) {
    reply.setFound(true);
    actor->ToProto(reply.initActor());
  });
}

void GcsActorManager::HandleKill(const rpc::Incoming<proto::Method::KILL_ACTOR>& call) {
  auto request = call.params();
  Actor* actor = Find(request.getActorId());
  if (actor == nullptr) {
    return call.Fail(Status::NotFound("no actor " + std::string(request.getActorId().cStr())));
  }
  if (request.getNoRestart()) {
    MarkDead(*actor, "killed by its handle", /*kill_worker=*/true);
  } else if (actor->state != proto::ActorState::DEAD && !actor->worker_id.empty()) {
    // Its node reports the worker's death, which restarts the actor if it may.
    KillWorker(actor->node_id, actor->worker_id, "its actor was killed by its handle");
  }
  call.Reply();
}

void GcsActorManager::HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_ACTORS>& call) {
  call.Reply([&](proto::GetAllActorsReply::Builder b) {
    auto list = b.initActors(static_cast<unsigned>(actors_.size()));
    unsigned i = 0;
    for (const auto& [id, actor] : actors_) actor->ToProto(list[i++]);
  });
}

void GcsActorManager::HandleWorkerFailed(const rpc::Incoming<proto::Method::WORKER_FAILED>& call) {
  auto request = call.params();
  const std::string worker_id = request.getWorkerId();
  std::string reason = request.getReason();
  if (reason.empty()) reason = "worker " + worker_id + " exited";
  call.Reply();
  if (worker_id.empty()) return;
  for (auto& [id, actor] : actors_) {
    if (actor->state == proto::ActorState::DEAD || actor->worker_id != worker_id) continue;
    spdlog::info("the worker {} of actor {} died: {}", worker_id, id, reason);
    OnWorkerDied(*actor, reason);
    return;
  }
}

// ---- Creation ----------------------------------------------------------------------------------

// The hybrid placement policy (rayd/scheduler/placement.h) over the ledger's snapshot, with the
// label selector and node affinity of the actor's creation spec.
scheduler::Placement GcsActorManager::PickNode(Actor& actor, NodeId* node) const {
  const std::vector<NodeId>* ids = nullptr;
  const scheduler::ClusterSnapshot& cluster = ledger_.View(&ids, actor.id);
  auto scheduling = actor.Scheduling();
  scheduler::PlacementRequest request;
  request.demand = actor.demand;
  request.label_selector = runtime::LabelsFromProto(scheduling.getLabelSelector());
  if (scheduling.getNodeAffinity().size() > 0) {
    request.affinity =
        scheduler::NodeAffinity{scheduling.getNodeAffinity(), scheduling.getAffinitySoft()};
  }
  scheduler::Placement placement = scheduler::PlaceOne(cluster, request);
  if (placement.outcome == scheduler::Outcome::kPlaced) *node = (*ids)[placement.node];
  return placement;
}

void GcsActorManager::Schedule(Actor& actor) {
  actor.node_id = NodeId();
  actor.worker_id.clear();
  actor.lease_id.clear();
  actor.address.clear();
  if (!actor.placement_group_id.empty()) return ScheduleInGroup(actor);
  auto scheduling = actor.Scheduling();
  if (scheduling.getNodeAffinity().size() > 0 && !scheduling.getAffinitySoft()) {
    const std::string affinity = scheduling.getNodeAffinity();
    auto node = NodeId::FromHex(affinity);
    if (!node.ok() || nodes_.FindAlive(*node) == nullptr) {
      MarkDead(actor, "its node affinity names node " + affinity + ", which is not alive",
               /*kill_worker=*/false);
      return;
    }
  }
  NodeId node;
  const scheduler::Placement placement = PickNode(actor, &node);
  if (placement.outcome != scheduler::Outcome::kInfeasible) actor.infeasible_since.reset();
  switch (placement.outcome) {
    case scheduler::Outcome::kPlaced:
      return RequestLease(actor, node, std::nullopt);
    case scheduler::Outcome::kNotNow:
      return Wait(actor);
    case scheduler::Outcome::kInfeasible:
      return WaitInfeasible(actor, placement.reason);
  }
}

void GcsActorManager::WaitInfeasible(Actor& actor, const std::string& reason) {
  const auto now = Clock::now();
  if (!actor.infeasible_since) {
    actor.infeasible_since = now;
    if (infeasible_timeout_.count() > 0) {
      spdlog::warn("actor {} ({}) cannot be placed: {}; it waits up to {} ms", actor.id,
                   actor.demand.ToString(), reason, infeasible_timeout_.count());
    }
  }
  if (now - *actor.infeasible_since >= infeasible_timeout_) {
    return MarkDead(actor, "infeasible: " + reason, /*kill_worker=*/false);
  }
  Wait(actor);
}

void GcsActorManager::ScheduleInGroup(Actor& actor) {
  using Kind = GcsPlacementGroupManager::BundleSlot::Kind;
  const auto slot = placement_groups_.FindBundle(actor.placement_group_id,
                                                 actor.Scheduling().getBundleIndex(), actor.demand);
  if (slot.kind != Kind::kTooSmall) actor.infeasible_since.reset();
  switch (slot.kind) {
    case Kind::kReady:
      return RequestLease(actor, slot.node, slot.index);
    case Kind::kWait:
      return Wait(actor);
    case Kind::kTooSmall:
      // As in Ray, the actor stays pending (its calls unready) rather than failing at once; it
      // fails as infeasible after the timeout, like any request no node could hold.
      return WaitInfeasible(actor, slot.why);
    case Kind::kGone:
      return MarkDead(actor, slot.why, /*kill_worker=*/false);
  }
}

void GcsActorManager::Wait(Actor& actor) {
  waiting_.insert(actor.id);
  if (!retry_timer_.active()) {
    retry_timer_.Start(kRetryPeriod, kRetryPeriod, [this] { RetryWaiting(); });
  }
}

void GcsActorManager::RetryWaiting() {
  auto ids = std::move(waiting_);
  waiting_.clear();
  for (const auto& id : ids) {
    Actor* actor = Find(id);
    if (actor != nullptr && actor->state != proto::ActorState::DEAD) Schedule(*actor);
  }
  if (waiting_.empty()) retry_timer_.Stop();
}

void GcsActorManager::RequestLease(Actor& actor, const NodeId& node,
                                   std::optional<uint32_t> bundle) {
  const uint64_t attempt = ++actor.attempt;
  actor.node_id = node;
  // Work in a bundle uses the bundle's reservation, which the ledger already counted.
  if (!bundle) ledger_.Add(actor.id, node, actor.demand);
  node_clients_.Call<proto::Method::REQUEST_LEASE>(
      node,
      [&](proto::RequestLeaseRequest::Builder lease) {
        auto spec = actor.Request().getSpec();
        lease.setJobId(spec.getJobId());
        lease.setResources(spec.getResources());
        lease.setLaunch(actor.Request().getLaunch());
        lease.setForActor(true);
        lease.setGrantOrReject(true);
        lease.setScheduling(spec.getScheduling());
        if (bundle) lease.getScheduling().setBundleIndex(static_cast<int32_t>(*bundle));
      },
      Millis(0),
      guard_([this, id = actor.id, attempt, node](const Status& s,
                                                  proto::RequestLeaseReply::Reader r) {
        OnLeaseReply(id, attempt, node, s, r);
      }));
}

void GcsActorManager::OnLeaseReply(const std::string& actor_id, uint64_t attempt,
                                   const NodeId& node, const Status& status,
                                   proto::RequestLeaseReply::Reader reply) {
  Actor* actor = Find(actor_id);
  const bool stale =
      actor == nullptr || actor->attempt != attempt || actor->state == proto::ActorState::DEAD;
  const bool granted = status.ok() && reply.isGranted();
  if (stale) {
    if (granted) {
      // Nobody wants this worker any more (the actor died or moved on meanwhile).
      ReturnLease(node, reply.getGranted().getLeaseId(), /*kill_worker=*/true);
    }
    return;
  }
  if (granted) {
    auto lease = reply.getGranted();
    actor->worker_id = lease.getWorkerId();
    actor->lease_id = lease.getLeaseId();
    actor->creating_address = lease.getWorkerAddress();
    ledger_.Confirm(actor_id);
    Persist(*actor);  // a head restarted from here knows which worker to end
    PushCreationTask(*actor);
    return;
  }
  ledger_.Remove(actor_id);
  actor->node_id = NodeId();
  // The node was fuller than it last said, or it is going away, or its bundle moved or was
  // cancelled since (asking the group again tells whether it is gone): place the actor again.
  const bool try_again =
      status.ok() /* spillback */ || status.code() == StatusCode::kResourceExhausted ||
      nodes_.FindAlive(node) == nullptr ||
      (!actor->placement_group_id.empty() &&
       (status.code() == StatusCode::kNotFound || status.code() == StatusCode::kCancelled)) ||
      (!node_clients_.Connected(node) &&
       (status.code() == StatusCode::kUnavailable ||
        status.code() == StatusCode::kDeadlineExceeded || status.code() == StatusCode::kCancelled));
  if (try_again) {
    spdlog::debug("node {} could not take actor {} now ({}); retrying", node.Hex(), actor_id,
                  status.ok() ? "spillback" : status.ToString());
    return Wait(*actor);
  }
  MarkDead(*actor, "the actor's worker could not be started: " + status.message(),
           /*kill_worker=*/false);
}

void GcsActorManager::PushCreationTask(Actor& actor) {
  actor.worker_client = std::make_unique<rpc::RpcClient>(
      loop_, actor.creating_address, rpc::Options{node_clients_.token(), "gcs"});
  actor.worker_client->Connect();
  // No deadline: a constructor may take long; a dead worker fails the call (or is reported).
  actor.worker_client->Call<proto::Method::PUSH_TASK>(
      [&](proto::PushTaskRequest::Builder push) {
        push.setSpec(actor.Request().getSpec());
        push.getSpec().setAttempt(actor.num_restarts);
      },
      Millis(0),
      guard_([this, id = actor.id, attempt = actor.attempt](const Status& s,
                                                            proto::PushTaskReply::Reader r) {
        OnCreationReply(id, attempt, s, r);
      }));
}

void GcsActorManager::OnCreationReply(const std::string& actor_id, uint64_t attempt,
                                      const Status& status, proto::PushTaskReply::Reader reply) {
  Actor* actor = Find(actor_id);
  if (actor == nullptr || actor->attempt != attempt || actor->state == proto::ActorState::DEAD) {
    return;  // abandoned: whoever abandoned it dealt with the worker
  }
  Retire(std::move(actor->worker_client));
  const NodeId node = actor->node_id;
  const std::string lease_id = actor->lease_id;
  if (!status.ok()) {
    ReturnLease(node, lease_id, /*kill_worker=*/true);
    if (status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kCancelled) {
      OnWorkerDied(*actor, status.message());  // it went away during construction
    } else {
      MarkDead(*actor, "the actor's constructor could not run: " + status.message(),
               /*kill_worker=*/false);
    }
    return;
  }
  auto value = reply.getValue();
  if (value.getErrorKind() != 0) {
    const std::string type = value.getErrorType();
    const std::string message = value.getErrorMessage();
    ReturnLease(node, lease_id, /*kill_worker=*/true);
    MarkDead(*actor,
             type.empty() ? "the actor's constructor failed: " + message
                          : "the actor's constructor raised " + type + ": " + message,
             /*kill_worker=*/false);
    return;
  }
  actor->state = proto::ActorState::ALIVE;
  actor->address = actor->creating_address;
  spdlog::info(
      "actor {} is alive at {} (worker {}, node {}){}", actor_id, actor->address, actor->worker_id,
      node.Hex(),
      actor->num_restarts > 0 ? " after " + std::to_string(actor->num_restarts) + " restarts" : "");
  SettleOnceStored(*actor);
}

// ---- State changes -----------------------------------------------------------------------------

void GcsActorManager::AbandonAttempt(Actor& actor) {
  ++actor.attempt;
  Retire(std::move(actor.worker_client));
  ledger_.Remove(actor.id);
  waiting_.erase(actor.id);
}

void GcsActorManager::OnWorkerDied(Actor& actor, const std::string& reason) {
  if (actor.state == proto::ActorState::DEAD) return;
  if (actor.max_restarts != -1 && actor.num_restarts >= actor.max_restarts) {
    MarkDead(actor, "the actor's worker died: " + reason, /*kill_worker=*/false);
    return;
  }
  AbandonAttempt(actor);
  ++actor.num_restarts;
  actor.state = proto::ActorState::RESTARTING;
  spdlog::info("restarting actor {} (restart {} of {}): its worker died: {}", actor.id,
               actor.num_restarts,
               actor.max_restarts == -1 ? "unlimited" : std::to_string(actor.max_restarts), reason);
  actor.node_id = NodeId();
  actor.worker_id.clear();
  actor.lease_id.clear();
  actor.address.clear();
  Persist(actor);
  Schedule(actor);
}

void GcsActorManager::MarkDead(Actor& actor, const std::string& cause, bool kill_worker) {
  if (actor.state == proto::ActorState::DEAD) return;
  AbandonAttempt(actor);
  actor.state = proto::ActorState::DEAD;
  actor.death_cause = cause;
  actor.address.clear();
  if (!actor.name.empty()) {
    auto it = names_.find({actor.ray_namespace, actor.name});
    if (it != names_.end() && it->second == actor.id) names_.erase(it);
  }
  if (auto it = group_actors_.find(actor.placement_group_id); it != group_actors_.end()) {
    it->second.erase(actor.id);
    if (it->second.empty()) group_actors_.erase(it);
  }
  spdlog::info("actor {} is dead: {}", actor.id, cause);
  actor.request.reset();
  actor.request_hex.clear();
  dead_.push_back(actor.id);
  if (kill_worker && !actor.worker_id.empty() && !actor.node_id.IsNil()) {
    KillWorker(actor.node_id, actor.worker_id, "its actor is dead: " + cause);
  }
  SettleOnceStored(actor);
}

void GcsActorManager::ForgetOldestDead() {
  while (dead_.size() > kMaxDeadActors) {
    const std::string id = std::move(dead_.front());
    dead_.pop_front();
    auto it = actors_.find(id);
    if (it == actors_.end() || it->second->state != proto::ActorState::DEAD) continue;
    actors_.erase(it);
    store_.Delete(kActorTable, id, guard_([id](Result<bool> r) {
                    if (!r.ok()) spdlog::warn("could not forget dead actor {}: {}", id,
                                              r.status().ToString());
                  }));
  }
}

void GcsActorManager::Settle(Actor& actor) {
  if (!Settled(actor.state)) return;
  auto waiters = std::move(actor.waiters);
  actor.waiters.clear();
  for (const auto& call : waiters) {
    call.Reply([&](proto::GetActorReply::Builder reply) {
      reply.setFound(true);
      actor.ToProto(reply.initActor());
    });
  }
}

void GcsActorManager::Persist(const Actor& actor, std::function<void()> then) {
  store_.Put(kActorTable, actor.id, actor.ToJson(), /*overwrite=*/true,
             guard_([id = actor.id, then = std::move(then)](Result<bool> r) {
               if (!r.ok())
                 spdlog::error("could not store actor {}: {}", id, r.status().ToString());
               if (then) then();
             }));
}

// Waiters hear of a settled state only once it is stored (or storing it failed), so a head
// restarted on the same store never reports an older state than they saw.
void GcsActorManager::SettleOnceStored(Actor& actor) {
  Persist(actor, [this, id = actor.id] {
    if (Actor* a = Find(id)) Settle(*a);
  });
}

void GcsActorManager::OnNodeDied(const NodeId& node) {
  std::vector<std::string> affected;
  for (const auto& [id, actor] : actors_) {
    if (actor->state != proto::ActorState::DEAD && actor->node_id == node) affected.push_back(id);
  }
  for (const auto& id : affected) {
    Actor& actor = *actors_[id];
    if (actor.node_id != node || actor.state == proto::ActorState::DEAD) continue;
    if (actor.worker_id.empty()) {
      // Only a lease was asked of that node: place the actor elsewhere; no restart spent.
      AbandonAttempt(actor);
      Schedule(actor);
    } else {
      OnWorkerDied(actor, "its node " + node.Hex() + " died");
    }
  }
}

void GcsActorManager::OnGroupReady(const std::string& group_id) {
  auto it = group_actors_.find(group_id);
  if (it == group_actors_.end()) return;
  // Copied: scheduling may make some of them DEAD, which edits the set.
  const std::set<std::string> members = it->second;
  for (const auto& id : members) {
    Actor* actor = Find(id);
    if (actor != nullptr && waiting_.erase(id) > 0) Schedule(*actor);
  }
}

void GcsActorManager::OnGroupRemoved(const std::string& group_id, const std::string& why) {
  auto it = group_actors_.find(group_id);
  if (it == group_actors_.end()) return;
  const std::set<std::string> members = std::move(it->second);
  group_actors_.erase(it);
  for (const auto& id : members) {
    if (Actor* actor = Find(id)) MarkDead(*actor, "its " + why, /*kill_worker=*/true);
  }
}

void GcsActorManager::OnJobFinished(const std::string& job_id) {
  std::vector<std::string> affected;
  for (const auto& [id, actor] : actors_) {
    if (actor->job_id == job_id && !actor->detached && actor->state != proto::ActorState::DEAD) {
      affected.push_back(id);
    }
  }
  for (const auto& id : affected) MarkDead(*actors_[id], "its driver exited", /*kill_worker=*/true);
}

// ---- Calls to nodes ----------------------------------------------------------------------------

void GcsActorManager::KillWorker(const NodeId& node, const std::string& worker_id,
                                 const std::string& reason) {
  node_clients_.Call<proto::Method::KILL_WORKER>(
      node,
      [&](proto::KillWorkerRequest::Builder r) {
        r.setWorkerId(worker_id);
        r.setReason(reason);
      },
      kNodeCallTimeout,
      [node, worker_id](const Status& s) {
        if (!s.ok()) {
          spdlog::warn("could not kill worker {} on node {}: {}", worker_id, node.Hex(),
                       s.ToString());
        }
      });
}

void GcsActorManager::ReturnLease(const NodeId& node, const std::string& lease_id,
                                  bool kill_worker) {
  if (lease_id.empty() || node.IsNil()) return;
  node_clients_.Call<proto::Method::RETURN_LEASE>(
      node,
      [&](proto::ReturnLeaseRequest::Builder r) {
        r.setLeaseId(lease_id);
        r.setKillWorker(kill_worker);
      },
      kNodeCallTimeout,
      [node, lease_id](const Status& s) {
        if (!s.ok()) {
          spdlog::debug("could not return lease {} to node {}: {}", lease_id, node.Hex(),
                        s.ToString());
        }
      });
}

void GcsActorManager::Retire(std::unique_ptr<rpc::RpcClient> client) {
  if (!client) return;
  retired_.push_back(std::move(client));
  reaper_.Start(Millis(0), Millis(0), [this] {
    auto retired = std::move(retired_);
    retired_.clear();
    retired.clear();  // their queued calls fail now; those callbacks see stale attempts
  });
}

std::vector<GcsActorManager::WaitingActor> GcsActorManager::WaitingActors() const {
  std::vector<WaitingActor> out;
  for (const std::string& id : waiting_) {
    auto it = actors_.find(id);
    if (it == actors_.end() || !it->second->placement_group_id.empty()) continue;
    Actor& actor = *it->second;
    if (actor.state == proto::ActorState::DEAD) continue;
    out.push_back({actor.id, actor.name, actor.class_name,
                   {actor.demand, runtime::LabelsFromProto(actor.Scheduling().getLabelSelector())}});
  }
  return out;
}

}  // namespace rayd::gcs
