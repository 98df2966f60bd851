#include "core/local_mode_runtime.h"

#include <algorithm>
#include <cstdint>

#include "common/task_spec.h"
#include "rayd/internal/function_registry.h"
#include "rayd/internal/type_names.h"

namespace rayd::core {

using internal::ErrorKind;
using internal::ObjectValue;

namespace {

// What the cluster's GCS records as the cause of a group its user removed.
constexpr char kRemovedByUser[] = "removed by its user";

ObjectValue ShutDownError(const std::string& what) {
  return ErrorValue(ErrorKind::kSystem, "rayd shut down before " + what + " ran (local mode)");
}

}  // namespace

LocalModeRuntime::LocalModeRuntime(std::string ray_namespace)
    : namespace_(std::move(ray_namespace)),
      node_id_(NodeId::FromRandom().Hex()),
      pool_(kIdleThreadTimeout) {}

LocalModeRuntime::~LocalModeRuntime() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  // Queued work now fails without running user code; running user code is waited for.
  pool_.Shutdown();
}

// ---- Objects -----------------------------------------------------------------------------------

ObjectId LocalModeRuntime::NewObject(const ObjectValue* value) {
  const ObjectId id = ObjectId::FromRandom();
  std::lock_guard lock(mu_);
  Object& object = objects_[id];
  if (value != nullptr) {
    object.value = *value;
    object.ready = true;
    PinNestedLocked(object);
  }
  return id;
}

void LocalModeRuntime::Complete(const ObjectId& id, ObjectValue value) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return;  // cannot happen: pending objects stay until now
    Object& object = it->second;
    object.value = std::move(value);
    object.ready = true;
    PinNestedLocked(object);
    callbacks.swap(object.when_ready);
    // Every handle went while it was pending: nobody can read it any more.
    if (object.counted && object.refs <= 0) EraseLocked(it);
  }
  ready_cv_.notify_all();
  for (auto& callback : callbacks) callback();
}

ObjectId LocalModeRuntime::Put(std::string value) {
  ObjectValue v;
  v.data = std::move(value);
  return NewObject(&v);
}

ObjectId LocalModeRuntime::PutWithRefs(std::string value,
                                       const std::vector<internal::NestedRef>& nested) {
  ObjectValue v;
  v.data = std::move(value);
  v.nested = nested;
  return NewObject(&v);
}

void LocalModeRuntime::PinLocked(const ObjectId& id) {
  if (auto it = objects_.find(id); it != objects_.end()) {
    it->second.refs++;
    it->second.counted = true;
  }
}

void LocalModeRuntime::UnpinLocked(const ObjectId& id) {
  auto it = objects_.find(id);
  // A pending object stays until its task ends (Complete frees it then).
  if (it != objects_.end() && --it->second.refs <= 0 && it->second.ready) EraseLocked(it);
}

void LocalModeRuntime::PinNestedLocked(Object& object) {
  for (const auto& ref : object.value.nested) PinLocked(ref.id);
}

void LocalModeRuntime::EraseLocked(std::unordered_map<ObjectId, Object>::iterator it) {
  const std::vector<internal::NestedRef> nested = std::move(it->second.value.nested);
  objects_.erase(it);
  for (const auto& ref : nested) UnpinLocked(ref.id);
}

void LocalModeRuntime::CountLocked(const ObjectId& id, size_t Object::*count, int delta) {
  if (auto it = objects_.find(id); it != objects_.end()) it->second.*count += delta;
}

void LocalModeRuntime::PinArgsLocked(const std::vector<internal::TaskArg>& args) {
  for (const auto& a : args) {
    if (a.kind != internal::TaskArg::Kind::kValue) {
      PinLocked(a.ref);
      CountLocked(a.ref, &Object::for_tasks, 1);
    }
    for (const auto& ref : a.nested) {
      PinLocked(ref.id);
      CountLocked(ref.id, &Object::for_tasks, 1);
    }
  }
}

void LocalModeRuntime::UnpinArgs(const std::vector<internal::TaskArg>& args) {
  std::lock_guard lock(mu_);
  for (const auto& a : args) {
    if (a.kind != internal::TaskArg::Kind::kValue) {
      CountLocked(a.ref, &Object::for_tasks, -1);
      UnpinLocked(a.ref);
    }
    for (const auto& ref : a.nested) {
      CountLocked(ref.id, &Object::for_tasks, -1);
      UnpinLocked(ref.id);
    }
  }
}

std::vector<ObjectValue> LocalModeRuntime::Get(const std::vector<ObjectId>& ids,
                                               std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  // Unknown objects (freed, or never made here) settle at once: they are lost.
  auto settled = [&] {
    return std::all_of(ids.begin(), ids.end(), [&](const ObjectId& id) {
      auto it = objects_.find(id);
      return it == objects_.end() || it->second.ready;
    });
  };
  if (timeout.count() < 0) {
    ready_cv_.wait(lock, settled);
  } else {
    ready_cv_.wait_until(lock, std::chrono::steady_clock::now() + timeout, settled);
  }
  std::vector<ObjectValue> out;
  out.reserve(ids.size());
  for (const auto& id : ids) {
    auto it = objects_.find(id);
    if (it == objects_.end()) {
      out.push_back(ErrorValue(ErrorKind::kObjectLost,
                               "object " + id.Hex() + " does not exist (local mode)"));
    } else if (!it->second.ready) {
      out.push_back(ErrorValue(ErrorKind::kTimeout, "object " + id.Hex() +
                                                        " was not ready within " +
                                                        std::to_string(timeout.count()) + " ms"));
    } else {
      out.push_back(it->second.value);
    }
  }
  return out;
}

internal::WaitOutcome LocalModeRuntime::Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                                             std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  // Ready, or unknown (its Get answers at once, with ObjectLost).
  auto is_ready = [&](const ObjectId& id) {
    auto it = objects_.find(id);
    return it == objects_.end() || it->second.ready;
  };
  const size_t wanted = std::min(num_returns, ids.size());
  auto enough = [&] {
    return static_cast<size_t>(std::count_if(ids.begin(), ids.end(), is_ready)) >= wanted;
  };
  if (timeout.count() < 0) {
    ready_cv_.wait(lock, enough);
  } else {
    ready_cv_.wait_until(lock, std::chrono::steady_clock::now() + timeout, enough);
  }
  internal::WaitOutcome outcome;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (is_ready(ids[i]) && outcome.ready.size() < num_returns) {
      outcome.ready.push_back(i);
    } else {
      outcome.not_ready.push_back(i);
    }
  }
  return outcome;
}

void LocalModeRuntime::WhenReady(const ObjectId& id, std::function<void()> ready) {
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(id);
    if (it != objects_.end() && !it->second.ready) {
      it->second.when_ready.push_back(std::move(ready));
      return;
    }
  }
  ready();
}

void LocalModeRuntime::AddLocalRef(const ObjectId& id) {
  std::lock_guard lock(mu_);
  PinLocked(id);
  CountLocked(id, &Object::handles, 1);
}

void LocalModeRuntime::RemoveLocalRef(const ObjectId& id) {
  std::lock_guard lock(mu_);
  CountLocked(id, &Object::handles, -1);
  UnpinLocked(id);
}

std::unordered_map<ObjectId, std::pair<size_t, size_t>> LocalModeRuntime::ReferenceCounts() {
  std::lock_guard lock(mu_);
  std::unordered_map<ObjectId, std::pair<size_t, size_t>> counts;
  for (const auto& [id, object] : objects_) {
    if (object.handles + object.for_tasks > 0) {
      counts.emplace(id, std::make_pair(object.handles, object.for_tasks));
    }
  }
  return counts;
}

std::string LocalModeRuntime::OwnerAddress(const ObjectId& id) {
  (void)id;
  return "local";
}

void LocalModeRuntime::RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) {
  (void)id, (void)owner_address;  // every object is this process's
}

// ---- Running calls -----------------------------------------------------------------------------

ObjectValue LocalModeRuntime::Invoke(const std::string& function_name,
                                     const std::vector<internal::TaskArg>& args, void* self,
                                     bool in_actor, std::shared_ptr<void>* actor, bool* exit_actor,
                                     std::shared_ptr<const void>* nested_handles) {
  const internal::FunctionEntry* entry = internal::FunctionRegistry::Global().Find(function_name);
  if (entry == nullptr) {
    return ErrorValue(ErrorKind::kSystem,
                      "function '" + function_name + "' is not registered with RAYD_REMOTE");
  }
  std::vector<internal::InvocationArg> invocation;
  invocation.reserve(args.size());
  for (const auto& a : args) {
    internal::InvocationArg arg;
    switch (a.kind) {
      case internal::TaskArg::Kind::kValue:
        arg.value = a.value;
        break;
      case internal::TaskArg::Kind::kRef: {
        // Pinned by the submitter: it exists until this call ends; wait for its task.
        std::vector<ObjectValue> got = Get({a.ref}, std::chrono::milliseconds(-1));
        if (got[0].error != ErrorKind::kNone) return got[0];
        arg.value = std::move(got[0].data);
        break;
      }
      case internal::TaskArg::Kind::kRefAsRef:
        arg.is_ref = true;
        arg.ref = a.ref;
        break;
    }
    invocation.push_back(std::move(arg));
  }
  // Thread-local: marks this pool thread only, for the length of the call.
  const bool was_in_actor = internal::InActorCall();
  internal::SetInActorCall(in_actor);
  ObjectValue out;
  try {
    internal::InvocationResult result = entry->invoke(self, invocation);
    if (actor != nullptr) *actor = std::move(result.actor);
    out.data = std::move(result.value);
    out.nested = std::move(result.nested);
    if (nested_handles != nullptr) *nested_handles = std::move(result.nested_handles);
  } catch (const internal::ActorExitRequest&) {
    *exit_actor = true;
    out = ErrorValue(ErrorKind::kActorDied,
                     "the actor exited: " + function_name + " called rayd::ExitActor");
  } catch (const internal::ArgumentError& e) {
    out = ErrorValue(ErrorKind::kSystem, e.what(), "ArgumentError");
  } catch (const std::exception& e) {
    out = ErrorValue(ErrorKind::kRemote, e.what(), internal::DemangledTypeName(e));
  } catch (...) {
    out = ErrorValue(ErrorKind::kRemote, "a non-standard exception was thrown", "unknown");
  }
  internal::SetInActorCall(was_in_actor);
  return out;
}

ObjectId LocalModeRuntime::SubmitTask(const std::string& function_name,
                                      std::vector<internal::TaskArg> args,
                                      const internal::TaskOptions& options) {
  const ObjectId id = NewObject(nullptr);
  {
    std::lock_guard lock(mu_);
    PinArgsLocked(args);
  }
  pool_.Post([this, id, function_name, args = std::move(args), options] {
    RunTask(id, function_name, args, options);
  });
  return id;
}

void LocalModeRuntime::RunTask(const ObjectId& result, const std::string& function_name,
                               const std::vector<internal::TaskArg>& args,
                               const internal::TaskOptions& options) {
  bool stopping = false;
  Status group;
  {
    std::lock_guard lock(mu_);
    stopping = stopping_;
    group = CheckGroupLocked(options.scheduling);
  }
  ObjectValue value;
  std::shared_ptr<const void> nested_handles;  // ObjectRefs: released outside the lock
  if (stopping) {
    value = ShutDownError("the task " + function_name);
  } else if (!group.ok()) {
    value = ErrorValue(ErrorKind::kSystem, group.message());  // as the cluster's submitter does
  } else {
    bool exit_actor = false;
    value = Invoke(function_name, args, nullptr, false, nullptr, &exit_actor, &nested_handles);
  }
  UnpinArgs(args);
  Complete(result, std::move(value));  // pins the refs inside it: their handles may go now
}

// ---- Actors ------------------------------------------------------------------------------------

Result<ActorId> LocalModeRuntime::CreateActor(const std::string& factory_name,
                                              std::vector<internal::TaskArg> args,
                                              const internal::ActorOptions& options) {
  auto state = std::make_shared<ActorState>();
  state->id = ActorId::FromRandom();
  state->name = options.name;
  state->ray_namespace = options.ray_namespace.empty() ? namespace_ : options.ray_namespace;
  state->max_concurrency = std::max(1, options.max_concurrency);
  state->placement_group_id = options.scheduling.placement_group_id;
  std::lock_guard lock(mu_);
  if (!state->name.empty()) {
    // Registered now, before the factory runs: GetActor finds the actor once this returns.
    auto key = std::make_pair(state->ray_namespace, state->name);
    auto it = named_.find(key);
    if (it != named_.end() && !actors_.at(it->second)->dead) {
      return Status::AlreadyExists("an actor named '" + state->name + "' already exists in " +
                                   "namespace '" + state->ray_namespace + "'");
    }
    named_[key] = state->id;
  }
  actors_[state->id] = state;
  PinArgsLocked(args);
  state->queue.push_back(
      {[this, state, factory_name, args = std::move(args), scheduling = options.scheduling] {
         RunFactory(state, factory_name, args, scheduling);
         UnpinArgs(args);
       },
       /*exclusive=*/true});
  PumpActorLocked(state);
  return state->id;
}

std::shared_ptr<void> LocalModeRuntime::MarkDeadLocked(ActorState& actor, std::string cause) {
  if (!actor.dead) {
    actor.dead = true;
    actor.death_cause = std::move(cause);
  }
  return std::move(actor.instance);
}

void LocalModeRuntime::PumpActorLocked(const std::shared_ptr<ActorState>& actor) {
  ActorState& a = *actor;
  while (!a.queue.empty() && !a.exclusive_running) {
    const bool exclusive = a.queue.front().exclusive;
    if (exclusive ? a.running > 0 : a.running >= a.max_concurrency) return;
    std::function<void()> run = std::move(a.queue.front().run);
    a.queue.pop_front();
    a.running++;
    a.exclusive_running = exclusive;
    // The pool's lock is taken under ours, never the other way round.
    pool_.Post([this, actor, run = std::move(run)]() mutable {
      run();
      run = nullptr;  // the arguments it held go before the next call starts
      std::lock_guard lock(mu_);
      actor->running--;
      actor->exclusive_running = false;
      PumpActorLocked(actor);
    });
  }
}

void LocalModeRuntime::RunFactory(const std::shared_ptr<ActorState>& actor,
                                  const std::string& factory_name,
                                  const std::vector<internal::TaskArg>& args,
                                  const internal::SchedulingOptions& scheduling) {
  bool run = false;
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      MarkDeadLocked(*actor, "rayd shut down before its factory ran");
    } else if (Status group = CheckGroupLocked(scheduling); !group.ok()) {
      MarkDeadLocked(*actor, group.message());
    } else {
      run = !actor->dead;  // else killed before it started
    }
  }
  std::shared_ptr<void> instance;
  ObjectValue created;
  bool exit_actor = false;
  if (run) created = Invoke(factory_name, args, nullptr, true, &instance, &exit_actor, nullptr);
  if (!run) return;
  std::shared_ptr<void> drop;  // an instance nobody may use: destroyed outside the lock
  {
    std::lock_guard lock(mu_);
    if (created.error != ErrorKind::kNone) {
      drop = MarkDeadLocked(*actor,
                            "its factory " + factory_name + " failed: " + created.error_message);
    } else if (actor->dead) {
      drop = std::move(instance);  // killed, or its group removed, while the factory ran
    } else {
      actor->instance = std::move(instance);
    }
  }
}

std::optional<ActorId> LocalModeRuntime::GetNamedActor(const std::string& name,
                                                       const std::string& ray_namespace) {
  std::lock_guard lock(mu_);
  auto it = named_.find({ray_namespace.empty() ? namespace_ : ray_namespace, name});
  if (it == named_.end() || actors_.at(it->second)->dead) return std::nullopt;
  return it->second;
}

ObjectId LocalModeRuntime::SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                           std::vector<internal::TaskArg> args) {
  const ObjectId id = NewObject(nullptr);
  std::shared_ptr<ActorState> state;
  std::string dead;
  {
    std::lock_guard lock(mu_);
    auto it = actors_.find(actor);
    if (it == actors_.end()) {
      dead = "no actor " + actor.Hex();
    } else if (it->second->dead) {
      dead = "the actor is dead: " + it->second->death_cause;
    } else {
      state = it->second;
    }
  }
  if (!state) {
    Complete(id, ErrorValue(ErrorKind::kActorDied, dead));
    return id;
  }
  std::lock_guard lock(mu_);
  PinArgsLocked(args);
  state->queue.push_back({[this, state, id, method_name, args = std::move(args)] {
                            RunActorCall(state, id, method_name, args);
                          },
                          /*exclusive=*/false});
  PumpActorLocked(state);
  return id;
}

void LocalModeRuntime::RunActorCall(const std::shared_ptr<ActorState>& actor,
                                    const ObjectId& result, const std::string& method_name,
                                    const std::vector<internal::TaskArg>& args) {
  // A copy: a kill while the call runs leaves this call its instance until it returns.
  std::shared_ptr<void> instance;
  ObjectValue value;
  std::shared_ptr<const void> nested_handles;  // ObjectRefs: released outside the lock
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      value = ShutDownError("the call " + method_name);
    } else if (actor->dead) {
      value = ErrorValue(ErrorKind::kActorDied, "the actor is dead: " + actor->death_cause);
    } else {
      instance = actor->instance;
    }
  }
  if (instance) {
    bool exit_actor = false;
    value = Invoke(method_name, args, instance.get(), true, nullptr, &exit_actor, &nested_handles);
    if (exit_actor) {
      std::shared_ptr<void> drop;
      {
        std::lock_guard lock(mu_);
        drop = MarkDeadLocked(*actor, method_name + " called rayd::ExitActor");
      }
    }
    instance.reset();  // outside the lock: may be the last owner, running the destructor
  }
  UnpinArgs(args);
  Complete(result, std::move(value));  // pins the refs inside it: their handles may go now
}

Status LocalModeRuntime::KillActor(const ActorId& actor, bool no_restart) {
  (void)no_restart;            // nothing restarts in local mode
  std::shared_ptr<void> drop;  // destroyed outside the lock (unless a call still runs on it)
  std::lock_guard lock(mu_);
  auto it = actors_.find(actor);
  if (it == actors_.end()) return Status::NotFound("no actor " + actor.Hex());
  drop = MarkDeadLocked(*it->second, "the actor was killed by its handle");
  return Status::Ok();
}

// ---- Placement groups --------------------------------------------------------------------------

Status LocalModeRuntime::CheckGroupLocked(const internal::SchedulingOptions& scheduling) const {
  const std::string& id = scheduling.placement_group_id;
  if (id.empty()) return Status::Ok();
  auto it = groups_.find(id);
  if (it == groups_.end()) return Status::NotFound("there is no placement group " + id);
  const internal::PlacementGroupInfo& group = it->second;
  if (group.state == "REMOVED") return Status::Cancelled("placement group " + id + " was removed");
  const int index = scheduling.bundle_index;
  if (index >= 0 && static_cast<size_t>(index) >= group.bundles.size()) {
    return Status::InvalidArgument("placement group " + id + " has no bundle " +
                                   std::to_string(index) + " (it has " +
                                   std::to_string(group.bundles.size()) + ")");
  }
  return Status::Ok();
}

Result<std::string> LocalModeRuntime::CreatePlacementGroup(
    const internal::PlacementGroupOptions& options) {
  RAYD_RETURN_IF_ERROR(ValidatePlacementGroup(options));
  internal::PlacementGroupInfo info;
  info.id = PlacementGroupId::FromRandom().Hex();
  info.name = options.name;
  info.ray_namespace = options.ray_namespace.empty() ? namespace_ : options.ray_namespace;
  info.strategy = options.strategy;
  // Local mode checks no resources: every bundle is "reserved" here at once.
  info.state = "CREATED";
  info.bundles = options.bundles;
  info.bundle_nodes.assign(options.bundles.size(), node_id_);
  info.detached = options.detached;
  std::lock_guard lock(mu_);
  if (!info.name.empty()) {
    auto key = std::make_pair(info.ray_namespace, info.name);
    if (group_names_.contains(key)) {
      return Status::AlreadyExists("a placement group named '" + info.name +
                                   "' already exists in namespace '" + info.ray_namespace + "'");
    }
    group_names_[key] = info.id;
  }
  group_order_.push_back(info.id);
  const std::string id = info.id;
  groups_[id] = std::move(info);
  return id;
}

Status LocalModeRuntime::RemovePlacementGroup(const std::string& id) {
  std::vector<std::shared_ptr<void>> drop;  // instances of its actors: destroyed unlocked
  std::lock_guard lock(mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) return Status::NotFound("no placement group " + id);
  internal::PlacementGroupInfo& group = it->second;
  if (group.state == "REMOVED") return Status::Ok();
  group.state = "REMOVED";
  group.cause = kRemovedByUser;
  group.bundle_nodes.assign(group.bundles.size(), "");
  if (!group.name.empty()) group_names_.erase({group.ray_namespace, group.name});
  // As the cluster does, the actors placed in it die (a call running now runs to its end).
  for (auto& [actor_id, actor] : actors_) {
    if (actor->placement_group_id == id && !actor->dead) {
      drop.push_back(MarkDeadLocked(*actor, "its placement group " + id + " was removed"));
    }
  }
  return Status::Ok();
}

Result<bool> LocalModeRuntime::WaitPlacementGroupReady(const std::string& id,
                                                       std::chrono::milliseconds timeout) {
  (void)timeout;  // a group is CREATED or REMOVED from the start: nothing to wait for
  std::lock_guard lock(mu_);
  auto it = groups_.find(id);
  if (it == groups_.end()) return Status::NotFound("no placement group " + id);
  if (it->second.state == "REMOVED") {
    return Status::Cancelled("placement group " + id + " was removed: " + it->second.cause);
  }
  return true;
}

void LocalModeRuntime::WhenPlacementGroupReady(const std::string& id,
                                               std::chrono::milliseconds timeout,
                                               std::function<void(Result<bool>)> ready) {
  pool_.Post(
      [answer = WaitPlacementGroupReady(id, timeout), ready = std::move(ready)] { ready(answer); });
}

Result<std::optional<internal::PlacementGroupInfo>> LocalModeRuntime::GetPlacementGroup(
    const std::string& id, const std::string& name, const std::string& ray_namespace) {
  std::lock_guard lock(mu_);
  std::string found = id;
  if (found.empty()) {
    auto named = group_names_.find({ray_namespace.empty() ? namespace_ : ray_namespace, name});
    if (named == group_names_.end()) return std::optional<internal::PlacementGroupInfo>();
    found = named->second;
  }
  auto it = groups_.find(found);
  if (it == groups_.end()) return std::optional<internal::PlacementGroupInfo>();
  return std::optional<internal::PlacementGroupInfo>(it->second);
}

Result<std::vector<internal::PlacementGroupInfo>> LocalModeRuntime::GetAllPlacementGroups() {
  std::lock_guard lock(mu_);
  std::vector<internal::PlacementGroupInfo> out;
  out.reserve(group_order_.size());
  for (const auto& id : group_order_) out.push_back(groups_.at(id));
  return out;
}

// ---- Key-value store ---------------------------------------------------------------------------

Result<bool> LocalModeRuntime::KvPut(const std::string& ns, const std::string& key,
                                     const std::string& value, bool overwrite) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = kv_.try_emplace({ns, key}, value);
  if (!fresh && overwrite) it->second = value;
  return fresh;
}

Result<std::optional<std::string>> LocalModeRuntime::KvGet(const std::string& ns,
                                                           const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = kv_.find({ns, key});
  if (it == kv_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Result<int> LocalModeRuntime::KvDel(const std::string& ns, const std::string& key, bool by_prefix) {
  std::lock_guard lock(mu_);
  int deleted = 0;
  for (auto it = kv_.lower_bound({ns, key}); it != kv_.end() && it->first.first == ns;) {
    const bool match = by_prefix ? it->first.second.rfind(key, 0) == 0 : it->first.second == key;
    if (!match) break;
    it = kv_.erase(it);
    ++deleted;
  }
  return deleted;
}

}  // namespace rayd::core
