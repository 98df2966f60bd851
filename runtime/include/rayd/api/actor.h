#pragma once
// Actors: instances of a user class living in a worker, created through a registered factory
// and called through registered methods.
//
//   rayd::ActorHandle<Counter> counter =
//       rayd::Actor(Counter::FactoryCreate).SetName("c").SetMaxRestarts(2).Remote(0);
//   rayd::ObjectRef<int> five = counter.Task(&Counter::Add).Remote(5);
//   std::optional<rayd::ActorHandle<Counter>> again = rayd::GetActor<Counter>("c");
//   counter.Kill();
//
// An ActorHandle is a plain value (the actor's id): copy it freely, pass it to tasks and other
// actors as an argument or inside a value (it serialises). Calls from one caller to one actor
// run in submission order. Errors of a call arrive through its ref: ActorDiedError when the
// actor is gone, RemoteError when the method threw.

#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "rayd/api/errors.h"
#include "rayd/api/function_traits.h"
#include "rayd/api/object_ref.h"
#include "rayd/api/placement_group.h"
#include "rayd/api/runtime_env.h"
#include "rayd/api/serializer.h"
#include "rayd/api/task_options.h"
#include "rayd/internal/runtime.h"

namespace rayd {

// One call of an actor method; returned by ActorHandle::Task.
template <typename M>
class ActorTaskCaller {
  using Traits = internal::FunctionTraits<M>;

 public:
  using ReturnType = typename Traits::Return;

  // Throws RaydError when `method` is not registered with RAYD_REMOTE.
  ActorTaskCaller(ActorId actor, M method)
      : actor_(std::move(actor)), name_(&internal::RemoteName(method)) {}

  // Ray's call options. A call runs on its actor's reservation, so resources asked for one call
  // are accepted and not reserved again (docs/ray-compat.md); the name is for logs.
  ActorTaskCaller& SetName(std::string name) {
    call_name_ = std::move(name);
    return *this;
  }
  // They are checked as a task's are (rayd/api/task_options.h): RaydError here.
  ActorTaskCaller& SetResource(const std::string& name, double amount) {
    internal::CheckTaskOptions(std::map<std::string, double>{{name, amount}});
    return *this;
  }
  template <typename Map = std::map<std::string, double>>
    requires internal::ResourceMap<Map>
  ActorTaskCaller& SetResources(const Map& resources) {
      internal::CheckTaskOptions(resources);
      return *this;
  }

  // Submits the call; throws RaydError when rayd is not initialised or the handle is nil.
  template <typename... Args>
  ObjectRef<ReturnType> Remote(Args&&... args) {
    internal::Runtime& runtime = internal::RequireRuntime();
    if (actor_.IsNil()) throw RaydError("call on a nil ActorHandle");
    std::vector<internal::TaskArg> packed = internal::PackArgs<M>(std::forward<Args>(args)...);
    return ObjectRef<ReturnType>(runtime.SubmitActorTask(actor_, *name_, std::move(packed)),
                                 std::string());
  }

 private:
  ActorId actor_;
  const std::string* name_;  // the registry's, which is never destroyed
  std::string call_name_;
};

template <typename T>
class ActorHandle {
 public:
  // A nil handle: refers to no actor.
  ActorHandle() = default;
  explicit ActorHandle(ActorId id) : id_(std::move(id)) {}

  // A call of `method`, a member function of T registered with RAYD_REMOTE.
  template <typename M>
  ActorTaskCaller<M> Task(M method) const {
    using Traits = internal::FunctionTraits<M>;
    static_assert(Traits::kIsMethod, "ActorHandle::Task takes a member function pointer");
    if constexpr (Traits::kIsMethod) {
      static_assert(std::is_base_of_v<typename Traits::Class, T>,
                    "ActorHandle<T>::Task takes a method of T");
    }
    return ActorTaskCaller<M>(id_, method);
  }

  // Kills the actor; with no_restart it is not restarted whatever its max_restarts. Pending
  // and later calls fail with ActorDiedError. Throws RaydError if the runtime refuses.
  void Kill(bool no_restart = true) const {
    internal::ThrowIfError(internal::RequireRuntime().KillActor(id_, no_restart));
  }

  // The actor id as 32 hex digits.
  std::string ID() const { return id_.Hex(); }
  const ActorId& id() const { return id_; }
  bool IsNil() const { return id_.IsNil(); }

  friend bool operator==(const ActorHandle& a, const ActorHandle& b) { return a.id_ == b.id_; }

 private:
  ActorId id_;
};

// Builds the creation of an actor from a factory `T* F(Args...)`; returned by rayd::Actor.
template <typename F>
class ActorCreator {
  using Traits = internal::FunctionTraits<F>;
  static_assert(Traits::kIsFactory,
                "rayd::Actor takes a factory function returning T* (e.g. a static "
                "T* T::FactoryCreate(...)) registered with RAYD_REMOTE");

 public:
  using ActorType = std::remove_pointer_t<typename Traits::Return>;

  // Throws RaydError when `factory` is not registered with RAYD_REMOTE.
  explicit ActorCreator(F factory) : name_(&internal::RemoteName(factory)) {}

  // A name makes the actor findable with GetActor; it must be unique in its namespace.
  ActorCreator& SetName(std::string name) {
    options_.name = std::move(name);
    return *this;
  }
  ActorCreator& SetName(std::string name, std::string ray_namespace) {
    options_.name = std::move(name);
    options_.ray_namespace = std::move(ray_namespace);
    return *this;
  }
  // Empty: the job's namespace.
  ActorCreator& SetNamespace(std::string ray_namespace) {
    options_.ray_namespace = std::move(ray_namespace);
    return *this;
  }
  // Restarts after the actor's process dies (-1: unlimited). State is rebuilt by the factory.
  ActorCreator& SetMaxRestarts(int max_restarts) {
    options_.max_restarts = max_restarts;
    return *this;
  }
  // Retries of a method call interrupted by a restart (-1: unlimited).
  ActorCreator& SetMaxTaskRetries(int max_task_retries) {
    options_.max_task_retries = max_task_retries;
    return *this;
  }
  // Calls run one at a time unless this is above 1.
  ActorCreator& SetMaxConcurrency(int max_concurrency) {
    options_.max_concurrency = max_concurrency;
    return *this;
  }
  // Resources held for the actor's whole life; none: {"CPU": 0}.
  ActorCreator& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  // A std::map, Ray's std::unordered_map, or a braced list {{"CPU", 1}}.
  template <typename Map = std::map<std::string, double>>
    requires internal::ResourceMap<Map>
  ActorCreator& SetResources(const Map& resources) {
    for (const auto& [name, amount] : resources) options_.resources[name] = amount;
    return *this;
  }
  // Creates the actor inside bundle `bundle_index` of `pg` (-1: any of its bundles); its resources
  // (held for its whole life) come from that bundle's reservation and must fit it.
  ActorCreator& SetPlacementGroup(const PlacementGroup& pg, int bundle_index = -1) {
    options_.scheduling.placement_group_id = pg.GetID();
    options_.scheduling.bundle_index = bundle_index;
    return *this;
  }
  // Only nodes carrying every key=value (`rayd start --labels`) may host the actor.
  ActorCreator& SetLabelSelector(const std::map<std::string, std::string>& selector) {
    options_.scheduling.label_selector = selector;
    return *this;
  }
  // Places the actor on the node `node_id` (hex, as rayd::GetNodeId() gives it); when `soft`,
  // prefers it and falls back to the others when it is gone or cannot fit the actor.
  ActorCreator& SetNodeAffinity(const std::string& node_id, bool soft = false) {
    options_.scheduling.node_affinity = node_id;
    options_.scheduling.affinity_soft = soft;
    return *this;
  }
  // A detached actor outlives its driver until killed. Unset: RaydConfig::default_actor_lifetime.
  ActorCreator& SetDetached(bool detached = true) {
    options_.detached = detached;
    return *this;
  }
  // The actor's worker environment variables (rayd/api/runtime_env.h), on top of the job's.
  ActorCreator& SetRuntimeEnv(const RuntimeEnv& env) {
    runtime_env_ = env;
    return *this;
  }

  // Submits the creation and returns the handle at once (calls queue until the actor is up).
  // Throws InfeasibleError when no node could ever host it, RaydError for a taken name, bad
  // resources (rayd/api/task_options.h) and other refusals.
  template <typename... Args>
  ActorHandle<ActorType> Remote(Args&&... args) {
    internal::CheckTaskOptions(options_.resources);
    internal::Runtime& runtime = internal::RequireRuntime();
    if (!runtime_env_.Empty()) options_.env = internal::EnvVarsOf(runtime_env_);
    std::vector<internal::TaskArg> packed = internal::PackArgs<F>(std::forward<Args>(args)...);
    Result<ActorId> created = runtime.CreateActor(*name_, std::move(packed), options_);
    internal::ThrowIfError(created.status());
    return ActorHandle<ActorType>(std::move(created).value());
  }

  const internal::ActorOptions& options() const { return options_; }

 private:
  const std::string* name_;  // the registry's, which is never destroyed
  internal::ActorOptions options_;
  RuntimeEnv runtime_env_;
};

template <typename F>
ActorCreator<F> Actor(F factory) {
  return ActorCreator<F>(factory);
}

// The live actor named `name` in `ray_namespace` (empty: the job's), if any. T is trusted: the
// caller must know the actor's class.
template <typename T>
std::optional<ActorHandle<T>> GetActor(const std::string& name,
                                       const std::string& ray_namespace = "") {
  std::optional<ActorId> id = internal::RequireRuntime().GetNamedActor(name, ray_namespace);
  if (!id) return std::nullopt;
  return ActorHandle<T>(*id);
}

}  // namespace rayd

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  // An ActorHandle packs as its id's hex ("" for nil).
  template <typename T>
  struct pack<rayd::ActorHandle<T>> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& out, const rayd::ActorHandle<T>& handle) const {
      out.pack(handle.IsNil() ? std::string() : handle.ID());
      return out;
    }
  };

  template <typename T>
  struct convert<rayd::ActorHandle<T>> {
    const msgpack::object& operator()(const msgpack::object& o,
                                      rayd::ActorHandle<T>& handle) const {
      auto hex = o.as<std::string>();
      if (hex.empty()) {
        handle = rayd::ActorHandle<T>();
        return o;
      }
      auto id = rayd::ActorId::FromHex(hex);
      if (!id.ok()) throw msgpack::type_error();
      handle = rayd::ActorHandle<T>(*id);
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack
