#include "core/local_mode_runtime.h"

#include "common/task_spec.h"
#include "rayd/internal/function_registry.h"
#include "rayd/internal/type_names.h"

namespace rayd::core {

using internal::ErrorKind;
using internal::ObjectValue;

struct NodeIdTag {};

LocalModeRuntime::LocalModeRuntime(std::string ray_namespace)
    : namespace_(std::move(ray_namespace)), node_id_(UniqueId<NodeIdTag>::FromRandom().Hex()) {}

LocalModeRuntime::~LocalModeRuntime() = default;

ObjectId LocalModeRuntime::Store(ObjectValue value) {
  const ObjectId id = ObjectId::FromRandom();
  std::lock_guard lock(mu_);
  objects_[id].value = std::move(value);
  return id;
}

ObjectId LocalModeRuntime::Put(std::string value) {
  ObjectValue v;
  v.data = std::move(value);
  return Store(std::move(v));
}

ObjectValue LocalModeRuntime::Invoke(const std::string& function_name,
                                     const std::vector<internal::TaskArg>& args, void* self,
                                     bool in_actor, std::shared_ptr<void>* actor,
                                     bool* exit_actor) {
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
        // Every object exists once its Remote() returned: local mode runs calls eagerly.
        std::vector<ObjectValue> got = Get({a.ref}, std::chrono::milliseconds(0));
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
  const bool was_in_actor = internal::InActorCall();
  internal::SetInActorCall(in_actor);
  ObjectValue out;
  try {
    internal::InvocationResult result = entry->invoke(self, invocation);
    if (actor != nullptr) *actor = std::move(result.actor);
    out.data = std::move(result.value);
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
  (void)options;  // every request fits: there are no resources to hold
  bool exit_actor = false;
  return Store(Invoke(function_name, args, nullptr, false, nullptr, &exit_actor));
}

Result<ActorId> LocalModeRuntime::CreateActor(const std::string& factory_name,
                                              std::vector<internal::TaskArg> args,
                                              const internal::ActorOptions& options) {
  auto state = std::make_shared<ActorState>();
  state->name = options.name;
  state->ray_namespace = options.ray_namespace.empty() ? namespace_ : options.ray_namespace;
  const ActorId id = ActorId::FromRandom();
  {
    std::lock_guard lock(mu_);
    if (!state->name.empty()) {
      auto key = std::make_pair(state->ray_namespace, state->name);
      auto it = named_.find(key);
      if (it != named_.end() && actors_.at(it->second)->instance) {
        return Status::AlreadyExists("an actor named '" + state->name + "' already exists in " +
                                     "namespace '" + state->ray_namespace + "'");
      }
      named_[key] = id;
    }
    actors_[id] = state;
  }
  bool exit_actor = false;
  std::lock_guard calls(state->calls);
  ObjectValue created = Invoke(factory_name, args, nullptr, true, &state->instance, &exit_actor);
  if (created.error != ErrorKind::kNone) {
    state->instance.reset();
    state->death_cause = "its factory " + factory_name + " failed: " + created.error_message;
  }
  return id;
}

std::shared_ptr<LocalModeRuntime::ActorState> LocalModeRuntime::FindActor(const ActorId& id) {
  std::lock_guard lock(mu_);
  auto it = actors_.find(id);
  return it == actors_.end() ? nullptr : it->second;
}

ObjectId LocalModeRuntime::SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                           std::vector<internal::TaskArg> args) {
  std::shared_ptr<ActorState> state = FindActor(actor);
  if (!state) return Store(ErrorValue(ErrorKind::kActorDied, "no actor " + actor.Hex()));
  std::lock_guard calls(state->calls);
  if (!state->instance) {
    return Store(ErrorValue(ErrorKind::kActorDied, "the actor is dead: " + state->death_cause));
  }
  bool exit_actor = false;
  ObjectValue value = Invoke(method_name, args, state->instance.get(), true, nullptr, &exit_actor);
  if (exit_actor) {
    state->instance.reset();
    state->death_cause = method_name + " called rayd::ExitActor";
  }
  return Store(std::move(value));
}

std::vector<ObjectValue> LocalModeRuntime::Get(const std::vector<ObjectId>& ids,
                                               std::chrono::milliseconds timeout) {
  (void)timeout;  // everything that will ever exist exists already
  std::lock_guard lock(mu_);
  std::vector<ObjectValue> out;
  out.reserve(ids.size());
  for (const auto& id : ids) {
    auto it = objects_.find(id);
    out.push_back(it == objects_.end()
                      ? ErrorValue(ErrorKind::kObjectLost, "object " + id.Hex() +
                                                               " does not exist (local mode)")
                      : it->second.value);
  }
  return out;
}

internal::WaitOutcome LocalModeRuntime::Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                                             std::chrono::milliseconds timeout) {
  (void)timeout;
  internal::WaitOutcome outcome;
  for (size_t i = 0; i < ids.size(); ++i) {
    (outcome.ready.size() < num_returns ? outcome.ready : outcome.not_ready).push_back(i);
  }
  return outcome;
}

std::optional<ActorId> LocalModeRuntime::GetNamedActor(const std::string& name,
                                                       const std::string& ray_namespace) {
  std::lock_guard lock(mu_);
  auto it = named_.find({ray_namespace.empty() ? namespace_ : ray_namespace, name});
  if (it == named_.end() || !actors_.at(it->second)->instance) return std::nullopt;
  return it->second;
}

Status LocalModeRuntime::KillActor(const ActorId& actor, bool no_restart) {
  (void)no_restart;  // nothing restarts in local mode
  std::shared_ptr<ActorState> state = FindActor(actor);
  if (!state) return Status::NotFound("no actor " + actor.Hex());
  std::lock_guard calls(state->calls);
  state->instance.reset();
  state->death_cause = "the actor was killed by its handle";
  return Status::Ok();
}

void LocalModeRuntime::AddLocalRef(const ObjectId& id) {
  std::lock_guard lock(mu_);
  if (auto it = objects_.find(id); it != objects_.end()) it->second.refs++;
}

void LocalModeRuntime::RemoveLocalRef(const ObjectId& id) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(id);
  if (it != objects_.end() && --it->second.refs <= 0) objects_.erase(it);
}

std::string LocalModeRuntime::OwnerAddress(const ObjectId& id) {
  (void)id;
  return "local";
}

void LocalModeRuntime::RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) {
  (void)id, (void)owner_address;  // every object is this process's
}

Result<std::string> LocalModeRuntime::CreatePlacementGroup(
    const internal::PlacementGroupOptions& options) {
  (void)options;
  return Status::Unimplemented(
      "placement groups need a cluster: local mode has none (RaydConfig::local_mode)");
}

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

Result<int> LocalModeRuntime::KvDel(const std::string& ns, const std::string& key,
                                    bool by_prefix) {
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
