#pragma once
// A hand-written, in-process Runtime for the API's unit tests: tasks and actor calls run
// synchronously on the calling thread through the FunctionRegistry, objects live in a map, and
// every call the API makes is recorded so tests can check it. Not a model of the real core
// worker: nothing is ever pending unless a test makes it so (NewPendingObject).
//
// Constructing a FakeRuntime installs it as the current runtime; destroying it uninstalls it.

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rayd/internal/function_registry.h"
#include "rayd/internal/runtime.h"
#include "rayd/internal/type_names.h"

namespace rayd::testing {

class FakeRuntime : public internal::Runtime {
 public:
  static constexpr const char* kOwner = "fake-owner:1";

  FakeRuntime() { internal::SetCurrentRuntime(this); }
  ~FakeRuntime() override { internal::SetCurrentRuntime(nullptr); }
  FakeRuntime(const FakeRuntime&) = delete;
  FakeRuntime& operator=(const FakeRuntime&) = delete;

  ObjectId Put(std::string value) override {
    internal::ObjectValue object;
    object.data = std::move(value);
    return Store(std::move(object));
  }

  ObjectId SubmitTask(const std::string& function_name, std::vector<internal::TaskArg> args,
                      const internal::TaskOptions& options) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_task_options = options;
      last_task_args = args;
    }
    return Store(Run(function_name, internal::FunctionKind::kFunction, nullptr, args));
  }

  Result<ActorId> CreateActor(const std::string& factory_name, std::vector<internal::TaskArg> args,
                              const internal::ActorOptions& options) override {
    auto gpus = options.resources.find("GPU");
    if (gpus != options.resources.end() && gpus->second > num_gpus) {
      return Status::ResourceExhausted("infeasible: no node has " + std::to_string(gpus->second) +
                                       " GPU");
    }
    ActorId id = ActorId::FromRandom();
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_actor_options = options;
      if (!options.name.empty()) {
        auto key = std::make_pair(options.ray_namespace, options.name);
        if (named_.count(key) != 0) {
          return Status::AlreadyExists("actor name '" + options.name + "' is taken");
        }
        named_[key] = id;
      }
    }
    std::shared_ptr<void> instance;
    internal::ObjectValue outcome =
        Run(factory_name, internal::FunctionKind::kActorFactory, nullptr, args, &instance);
    std::lock_guard<std::mutex> lock(mu_);
    Actor& actor = actors_[id];
    actor.instance = std::move(instance);
    if (outcome.error != internal::ErrorKind::kNone) {
      actor.death = "the actor's constructor failed: " + outcome.error_message;
    }
    return id;
  }

  ObjectId SubmitActorTask(const ActorId& actor_id, const std::string& method_name,
                           std::vector<internal::TaskArg> args) override {
    std::shared_ptr<void> instance;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = actors_.find(actor_id);
      if (it == actors_.end() || !it->second.death.empty()) {
        internal::ObjectValue died;
        died.error = internal::ErrorKind::kActorDied;
        died.error_message = it == actors_.end() ? "no such actor" : it->second.death;
        return StoreLocked(std::move(died));
      }
      instance = it->second.instance;  // co-owned for the length of the call
    }
    return Store(Run(method_name, internal::FunctionKind::kActorMethod, instance.get(), args));
  }

  std::vector<internal::ObjectValue> Get(const std::vector<ObjectId>& ids,
                                         std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_get_timeout = timeout;
    std::vector<internal::ObjectValue> out;
    for (const ObjectId& id : ids) out.push_back(LookupLocked(id, timeout));
    return out;
  }

  internal::WaitOutcome Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                             std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    internal::WaitOutcome outcome;
    for (size_t i = 0; i < ids.size(); ++i) {
      bool ready = objects_.count(ids[i]) != 0 && outcome.ready.size() < num_returns;
      (ready ? outcome.ready : outcome.not_ready).push_back(i);
    }
    return outcome;
  }

  std::optional<ActorId> GetNamedActor(const std::string& name,
                                       const std::string& ray_namespace) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = named_.find({ray_namespace, name});
    if (it == named_.end() || !actors_.at(it->second).death.empty()) return std::nullopt;
    return it->second;
  }

  Status KillActor(const ActorId& actor, bool no_restart) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = actors_.find(actor);
    if (it == actors_.end()) return Status::NotFound("no such actor");
    it->second.death = "the actor was killed";
    it->second.instance.reset();
    last_kill_no_restart = no_restart;
    return Status::Ok();
  }

  void AddLocalRef(const ObjectId& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++ref_counts_[id];
    released_.erase(id);
    ++adds;
  }
  // Like the real store, an object whose count has been positive and drops to zero is
  // released; the fake keeps its value but notes any later use (used_after_release).
  void RemoveLocalRef(const ObjectId& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    int count = --ref_counts_[id];
    if (count < 0) went_negative = true;
    if (count == 0) released_.insert(id);
    ++removes;
  }
  // The fake's handles only: it pins nothing for tasks.
  std::unordered_map<ObjectId, std::pair<size_t, size_t>> ReferenceCounts() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::unordered_map<ObjectId, std::pair<size_t, size_t>> counts;
    for (const auto& [id, count] : ref_counts_) {
      if (count > 0) counts.emplace(id, std::make_pair(static_cast<size_t>(count), size_t{0}));
    }
    return counts;
  }
  std::string OwnerAddress(const ObjectId& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return objects_.count(id) != 0 || pending_.count(id) != 0 ? kOwner : "";
  }
  void RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) override {
    std::lock_guard<std::mutex> lock(mu_);
    borrowed.emplace_back(id, owner_address);
  }
  std::vector<int> GetGpuIds() override { return {3}; }
  std::string GetNodeId() override { return "fake-node"; }
  std::string GetNamespace() override { return "fake-namespace"; }

  // An object that never becomes ready.
  ObjectId NewPendingObject() {
    std::lock_guard<std::mutex> lock(mu_);
    ObjectId id = ObjectId::FromRandom();
    pending_.insert(id);
    return id;
  }

  // Live local refs per object; 0 for objects nobody holds.
  int RefCount(const ObjectId& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ref_counts_.find(id);
    return it == ref_counts_.end() ? 0 : it->second;
  }
  int TotalRefCount() {
    std::lock_guard<std::mutex> lock(mu_);
    int total = 0;
    for (const auto& [id, count] : ref_counts_) total += count;
    return total;
  }

  // What the API sent; read by tests after the call (single-threaded).
  internal::TaskOptions last_task_options;
  std::vector<internal::TaskArg> last_task_args;
  internal::ActorOptions last_actor_options;
  std::chrono::milliseconds last_get_timeout{0};
  bool last_kill_no_restart = false;
  std::vector<std::pair<ObjectId, std::string>> borrowed;
  int adds = 0;
  int removes = 0;
  bool went_negative = false;
  bool used_after_release = false;
  double num_gpus = 0;

 private:
  struct Actor {
    std::shared_ptr<void> instance;  // co-owned by calls in progress
    std::string death;               // non-empty once dead: why
  };

  // Runs a registered function synchronously; user exceptions become kRemote values.
  internal::ObjectValue Run(const std::string& name, internal::FunctionKind kind, void* self,
                            const std::vector<internal::TaskArg>& args,
                            std::shared_ptr<void>* instance = nullptr) {
    internal::ObjectValue result;
    const internal::FunctionEntry* entry = internal::FunctionRegistry::Global().Find(name);
    if (entry == nullptr || entry->kind != kind) {
      result.error = internal::ErrorKind::kSystem;
      result.error_message = "function '" + name + "' not found";
      return result;
    }
    std::vector<internal::InvocationArg> resolved;
    for (const internal::TaskArg& arg : args) {
      internal::InvocationArg out;
      if (arg.kind == internal::TaskArg::Kind::kValue) {
        out.value = arg.value;
      } else if (arg.kind == internal::TaskArg::Kind::kRef) {
        std::lock_guard<std::mutex> lock(mu_);
        internal::ObjectValue dependency = LookupLocked(arg.ref, std::chrono::milliseconds(0));
        if (dependency.error != internal::ErrorKind::kNone) return dependency;
        out.value = dependency.data;
      } else {
        out.is_ref = true;
        out.ref = arg.ref;
        out.owner_address = arg.owner_address;
      }
      resolved.push_back(std::move(out));
    }
    try {
      internal::InvocationResult invoked = entry->invoke(self, resolved);
      result.data = std::move(invoked.value);
      if (instance != nullptr) *instance = std::move(invoked.actor);
    } catch (const std::exception& e) {
      result.error = internal::ErrorKind::kRemote;
      result.error_type = internal::DemangledTypeName(e);
      result.error_message = e.what();
    }
    return result;
  }

  ObjectId Store(internal::ObjectValue value) {
    std::lock_guard<std::mutex> lock(mu_);
    return StoreLocked(std::move(value));
  }
  // A new object with no local ref yet: the caller's ObjectRef takes the first (the contract of
  // Put and Submit*).
  ObjectId StoreLocked(internal::ObjectValue value) {
    ObjectId id = ObjectId::FromRandom();
    objects_[id] = std::move(value);
    return id;
  }

  internal::ObjectValue LookupLocked(const ObjectId& id, std::chrono::milliseconds timeout) {
    if (released_.count(id) != 0) used_after_release = true;
    auto it = objects_.find(id);
    if (it != objects_.end()) return it->second;
    internal::ObjectValue missing;
    // The fake cannot block: a missing object "times out" even without a timeout.
    missing.error = pending_.count(id) != 0 || timeout.count() >= 0
                        ? internal::ErrorKind::kTimeout
                        : internal::ErrorKind::kObjectLost;
    missing.error_message = "fake: object " + id.Short() + " is not ready";
    return missing;
  }

  std::mutex mu_;
  std::map<ObjectId, internal::ObjectValue> objects_;
  std::set<ObjectId> pending_;
  std::set<ObjectId> released_;
  std::map<ObjectId, int> ref_counts_;
  std::map<ActorId, Actor> actors_;
  std::map<std::pair<std::string, std::string>, ActorId> named_;
};

}  // namespace rayd::testing
