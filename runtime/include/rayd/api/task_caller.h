#pragma once
// rayd::Task(f): builds a call of a remote function.
//
//   rayd::ObjectRef<int> sum = rayd::Task(Plus).SetResource("CPU", 2).Remote(1, 2);
//
// The builder is a plain value: options may be set on a temporary, as above, or on a named
// TaskCaller that is then used for many Remote() calls. Task(f) throws RaydError when `f` was
// not registered with RAYD_REMOTE, Remote() when rayd is not initialised, the resources break
// rayd/api/task_options.h's rule, or the runtime env is bad (RuntimeEnvError); errors of the
// call itself arrive through the returned ref (Get rethrows them).

#include <map>
#include <string>
#include <utility>

#include "rayd/api/errors.h"
#include "rayd/api/function_traits.h"
#include "rayd/api/object_ref.h"
#include "rayd/api/placement_group.h"
#include "rayd/api/runtime_env.h"
#include "rayd/api/task_options.h"
#include "rayd/internal/runtime.h"

namespace rayd {

template <typename F>
class TaskCaller {
  using Traits = internal::FunctionTraits<F>;
  static_assert(Traits::kIsFunction && !Traits::kIsMethod,
                "rayd::Task takes a free or static function registered with RAYD_REMOTE; call "
                "actor methods through ActorHandle::Task");
  static_assert(!Traits::kIsFactory,
                "rayd::Task: a function returning a pointer is an actor factory; use rayd::Actor");

 public:
  using ReturnType = typename Traits::Return;

  // Throws RaydError when `f` is not registered with RAYD_REMOTE.
  explicit TaskCaller(F f) : name_(&internal::RemoteName(f)) {}

  // Adds (or replaces) one resource requirement; without any the task needs {"CPU": 1}.
  TaskCaller& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  // Adds (or replaces) each of `resources`: a std::map, Ray's std::unordered_map, or a braced
  // list {{"CPU", 2}}.
  template <typename Map = std::map<std::string, double>>
    requires internal::ResourceMap<Map>
  TaskCaller& SetResources(const Map& resources) {
    for (const auto& [name, amount] : resources) options_.resources[name] = amount;
    return *this;
  }
  // Retries when the executing worker dies (not when the function throws); 0 = none.
  TaskCaller& SetMaxRetries(int max_retries) {
    options_.max_retries = max_retries;
    return *this;
  }
  // Runs the task inside bundle `bundle_index` of `pg` (-1: any of its bundles); its resources
  // come from that bundle's reservation and must fit it.
  TaskCaller& SetPlacementGroup(const PlacementGroup& pg, int bundle_index = -1) {
    options_.scheduling.placement_group_id = pg.GetID();
    options_.scheduling.bundle_index = bundle_index;
    return *this;
  }
  // Only nodes carrying every key=value (`rayd start --labels`) may run the task.
  TaskCaller& SetLabelSelector(const std::map<std::string, std::string>& selector) {
    options_.scheduling.label_selector = selector;
    return *this;
  }
  // Runs the task on the node `node_id` (hex, as rayd::GetNodeId() gives it); when `soft`,
  // prefers it and falls back to the others when it is gone or cannot fit the task.
  TaskCaller& SetNodeAffinity(const std::string& node_id, bool soft = false) {
    options_.scheduling.node_affinity = node_id;
    options_.scheduling.affinity_soft = soft;
    return *this;
  }
  // A name for logs and `rayd list`.
  TaskCaller& SetName(std::string name) {
    options_.name = std::move(name);
    return *this;
  }
  // The worker's environment variables (rayd/api/runtime_env.h), on top of the job's. Checked
  // at Remote(): RuntimeEnvError for what rayd cannot honour.
  TaskCaller& SetRuntimeEnv(const RuntimeEnv& env) {
    runtime_env_ = env;
    return *this;
  }

  // Submits the call and returns a ref to its result (ObjectRef<void> for void functions).
  template <typename... Args>
  ObjectRef<ReturnType> Remote(Args&&... args) {
    internal::CheckTaskOptions(options_.resources);
    internal::Runtime& runtime = internal::RequireRuntime();
    if (!runtime_env_.Empty()) options_.env = internal::EnvVarsOf(runtime_env_);
    std::vector<internal::TaskArg> packed = internal::PackArgs<F>(std::forward<Args>(args)...);
    return ObjectRef<ReturnType>(runtime.SubmitTask(*name_, std::move(packed), options_),
                                 std::string());
  }

  const internal::TaskOptions& options() const { return options_; }

 private:
  const std::string* name_;  // the registry's, which is never destroyed
  internal::TaskOptions options_;
  RuntimeEnv runtime_env_;
};

// `f` must be registered with RAYD_REMOTE (RaydError here otherwise).
template <typename F>
TaskCaller<F> Task(F f) {
  return TaskCaller<F>(f);
}

}  // namespace rayd
