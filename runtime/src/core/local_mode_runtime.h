#pragma once
// LocalModeRuntime: RaydConfig::local_mode, Ray's debugging mode. No cluster, no processes, no
// sockets: Remote() runs the task or actor call on the calling thread before it returns, and
// objects live in a map in this process. Semantics kept: errors come back through refs
// (RemoteError, ActorDiedError), named actors and namespaces, ref counting (an object goes
// when its last ObjectRef does), the key-value store. Left out (docs/ray-compat.md): placement
// groups, resources (every request fits), retries and restarts (nothing dies on its own).
//
// Threading: any thread. The tables are under one mutex, never held while user code runs; one
// actor's calls run one at a time (its own mutex), as max_concurrency 1 would run them.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rayd/internal/runtime.h"

namespace rayd::core {

class LocalModeRuntime : public internal::Runtime {
 public:
  explicit LocalModeRuntime(std::string ray_namespace);
  ~LocalModeRuntime() override;

  ObjectId Put(std::string value) override;
  ObjectId SubmitTask(const std::string& function_name, std::vector<internal::TaskArg> args,
                      const internal::TaskOptions& options) override;
  Result<ActorId> CreateActor(const std::string& factory_name, std::vector<internal::TaskArg> args,
                              const internal::ActorOptions& options) override;
  ObjectId SubmitActorTask(const ActorId& actor, const std::string& method_name,
                           std::vector<internal::TaskArg> args) override;
  std::vector<internal::ObjectValue> Get(const std::vector<ObjectId>& ids,
                                         std::chrono::milliseconds timeout) override;
  internal::WaitOutcome Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                             std::chrono::milliseconds timeout) override;
  std::optional<ActorId> GetNamedActor(const std::string& name,
                                       const std::string& ray_namespace) override;
  Status KillActor(const ActorId& actor, bool no_restart) override;
  void AddLocalRef(const ObjectId& id) override;
  void RemoveLocalRef(const ObjectId& id) override;
  std::string OwnerAddress(const ObjectId& id) override;
  void RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) override;
  Result<std::string> CreatePlacementGroup(const internal::PlacementGroupOptions& options) override;
  Result<bool> KvPut(const std::string& ns, const std::string& key, const std::string& value,
                     bool overwrite) override;
  Result<std::optional<std::string>> KvGet(const std::string& ns, const std::string& key) override;
  Result<int> KvDel(const std::string& ns, const std::string& key, bool by_prefix) override;
  std::vector<int> GetGpuIds() override { return {}; }
  std::string GetNodeId() override { return node_id_; }
  std::string GetNamespace() override { return namespace_; }
  bool IsLocalMode() const override { return true; }

 private:
  struct Object {
    internal::ObjectValue value;
    int refs = 0;
  };
  struct ActorState {
    std::string name, ray_namespace;
    std::shared_ptr<void> instance;  // null once dead
    std::string death_cause;
    std::mutex calls;                // one call at a time
  };

  // Runs a registered function (or method, on `self`) with the arguments and returns what it
  // returned or threw; factories hand their instance to `*actor`. `in_actor` marks the call
  // for rayd::ExitActor, which sets `*exit_actor`.
  internal::ObjectValue Invoke(const std::string& function_name,
                               const std::vector<internal::TaskArg>& args, void* self,
                               bool in_actor, std::shared_ptr<void>* actor, bool* exit_actor);
  ObjectId Store(internal::ObjectValue value);
  std::shared_ptr<ActorState> FindActor(const ActorId& id);

  const std::string namespace_;
  const std::string node_id_;
  std::mutex mu_;
  std::unordered_map<ObjectId, Object> objects_;                     // mu_
  std::map<ActorId, std::shared_ptr<ActorState>> actors_;            // mu_
  std::map<std::pair<std::string, std::string>, ActorId> named_;     // (namespace, name); mu_
  std::map<std::pair<std::string, std::string>, std::string> kv_;    // (namespace, key); mu_
};

}  // namespace rayd::core
