#pragma once
// LocalModeRuntime: RaydConfig::local_mode, Ray's debugging mode. No cluster, no processes, no
// sockets: tasks, actors, objects and placement groups all live in this process.
//
// How it works:
//  - Submit* records the result as a pending object, queues the call and returns at once.
//    Calls run on a GrowingThreadPool: a new thread starts whenever every thread is busy, so a
//    task blocked in Get of another task's result never deadlocks it; a thread idle for
//    kIdleThreadTimeout ends. A task first waits, on its own thread, for the objects its
//    by-value ref arguments name, then runs; what it returns or throws makes its object ready,
//    which wakes Get and Wait (one condition variable) and runs WhenReady's callbacks.
//  - An actor is a queue: its factory first, alone, then its calls in submission order, each
//    posted to the pool when the one before it has returned. With max_concurrency > 1 up to
//    that many calls run at once (started in submission order). Its name is registered before
//    CreateActor returns, so GetActor finds it at once. A dead actor (killed, ExitActor, a
//    factory that threw, its group removed) fails later calls with kActorDied; a call running
//    when it died runs to its end (a thread cannot be stopped) and keeps the instance alive.
//  - Placement groups are records: CREATED as soon as they are created (local mode checks no
//    resources, for groups as for tasks), every bundle on this "node". Work naming a live
//    group just runs; work naming a removed or unknown group, or a bundle it lacks, fails as on
//    a cluster (kSystem: "placement group X was removed"), checked when the work starts.
//    Removing a group kills the actors created in it; tasks already running in it finish.
// Left out (docs/ray-compat.md): resources (every request fits), retries and restarts
// (nothing dies on its own), label selectors and node affinity (there is one node).
//
// Invariants:
//  - An object is freed when its count has been positive and drops to zero, except that a
//    pending one stays until its task ends (waiters are woken, then it goes if still unheld).
//    Counts come from ObjectRef handles, from objects whose values hold refs inside (nested
//    refs of Put values and results: as long as the value lives), and from queued work.
//  - Queued work pins the objects its arguments name (ref arguments, and refs inside values,
//    which it deserializes only when it runs) until it has run.
//  - At most max_concurrency calls of one actor run at once, and never beside its factory.
//
// Threading: every method may be called from any thread, tasks' threads included. One mutex
// guards the tables and is never held while user code runs (instances are also destroyed
// outside it). Destruction fails work that has not started yet (kSystem), waits for running
// user code to return, and joins every thread; it must not run on one of the pool's threads.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/growing_thread_pool.h"
#include "rayd/internal/runtime.h"

namespace rayd::core {

class LocalModeRuntime : public internal::Runtime {
 public:
  static constexpr std::chrono::milliseconds kIdleThreadTimeout{10000};

  explicit LocalModeRuntime(std::string ray_namespace);
  ~LocalModeRuntime() override;

  ObjectId Put(std::string value) override;
  ObjectId PutWithRefs(std::string value, const std::vector<internal::NestedRef>& nested) override;
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
  // `ready` runs on the thread that finished the object's task, or at once on the caller's
  // when the object is ready or unknown.
  void WhenReady(const ObjectId& id, std::function<void()> ready) override;
  std::optional<ActorId> GetNamedActor(const std::string& name,
                                       const std::string& ray_namespace) override;
  Status KillActor(const ActorId& actor, bool no_restart) override;
  void AddLocalRef(const ObjectId& id) override;
  void RemoveLocalRef(const ObjectId& id) override;
  std::unordered_map<ObjectId, std::pair<size_t, size_t>> ReferenceCounts() override;
  std::string OwnerAddress(const ObjectId& id) override;
  void RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) override;

  Result<std::string> CreatePlacementGroup(const internal::PlacementGroupOptions& options) override;
  Status RemovePlacementGroup(const std::string& id) override;
  Result<bool> WaitPlacementGroupReady(const std::string& id,
                                       std::chrono::milliseconds timeout) override;
  // Answers on a thread of the pool.
  void WhenPlacementGroupReady(const std::string& id, std::chrono::milliseconds timeout,
                               std::function<void(Result<bool>)> ready) override;
  Result<std::optional<internal::PlacementGroupInfo>> GetPlacementGroup(
      const std::string& id, const std::string& name, const std::string& ray_namespace) override;
  Result<std::vector<internal::PlacementGroupInfo>> GetAllPlacementGroups() override;

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
    internal::ObjectValue value;  // once ready
    bool ready = false;
    int refs = 0;
    bool counted = false;  // refs has been positive: dropping to zero frees it
    // Of refs: held by ObjectRef handles, and for tasks and actors that take it as an argument.
    size_t handles = 0;
    size_t for_tasks = 0;
    std::vector<std::function<void()>> when_ready;  // until ready
  };
  // One entry of an actor's queue.
  struct ActorCall {
    std::function<void()> run;
    bool exclusive = false;  // the factory: runs alone
  };
  struct ActorState {
    ActorId id;
    std::string name, ray_namespace;
    int max_concurrency = 1;
    std::string placement_group_id;  // empty: none
    std::shared_ptr<void> instance;  // set by the factory; null before and once dead
    bool dead = false;
    std::string death_cause;
    std::deque<ActorCall> queue;  // not started yet
    int running = 0;
    bool exclusive_running = false;
  };

  // Runs a registered function (or method, on `self`) with the arguments, waiting for the
  // objects that by-value ref arguments name, and returns what it returned or threw;
  // factories hand their instance to `*actor`. `in_actor` marks the call for
  // rayd::ExitActor, which sets `*exit_actor`. The handles on the refs inside the returned
  // value go to `*nested_handles` (when not null), to keep until the result is Completed.
  internal::ObjectValue Invoke(const std::string& function_name,
                               const std::vector<internal::TaskArg>& args, void* self,
                               bool in_actor, std::shared_ptr<void>* actor, bool* exit_actor,
                               std::shared_ptr<const void>* nested_handles);
  // A new object: ready with `value`, or (nullptr) pending until Complete.
  ObjectId NewObject(const internal::ObjectValue* value);
  // Makes the pending object ready, wakes its waiters and runs its WhenReady callbacks.
  void Complete(const ObjectId& id, internal::ObjectValue value);
  // One more (Pin) or one less (Unpin) count on an object; at zero a ready one is erased.
  void PinLocked(const ObjectId& id);
  void UnpinLocked(const ObjectId& id);
  // An object holds a count on each ref inside its value while it lives.
  void PinNestedLocked(Object& object);
  void EraseLocked(std::unordered_map<ObjectId, Object>::iterator it);
  // Queued work counts the objects its arguments name (ref arguments, refs inside values)
  // from its submission until it has run.
  void PinArgsLocked(const std::vector<internal::TaskArg>& args);
  // Adds `delta` to one of the reference table's counts of `id` (if it is known).
  void CountLocked(const ObjectId& id, size_t Object::*count, int delta);
  void UnpinArgs(const std::vector<internal::TaskArg>& args);
  // Why work with these scheduling options cannot run now (its group is removed or unknown,
  // or lacks the bundle); Ok otherwise. Needs mu_.
  Status CheckGroupLocked(const internal::SchedulingOptions& scheduling) const;

  void RunTask(const ObjectId& result, const std::string& function_name,
               const std::vector<internal::TaskArg>& args, const internal::TaskOptions& options);
  void RunFactory(const std::shared_ptr<ActorState>& actor, const std::string& factory_name,
                  const std::vector<internal::TaskArg>& args,
                  const internal::SchedulingOptions& scheduling);
  void RunActorCall(const std::shared_ptr<ActorState>& actor, const ObjectId& result,
                    const std::string& method_name, const std::vector<internal::TaskArg>& args);
  // Posts the actor's next calls that may start now. Needs mu_.
  void PumpActorLocked(const std::shared_ptr<ActorState>& actor);
  // Marks the actor dead and returns its instance, for the caller to drop outside mu_.
  static std::shared_ptr<void> MarkDeadLocked(ActorState& actor, std::string cause);

  const std::string namespace_;
  const std::string node_id_;
  std::mutex mu_;
  std::condition_variable ready_cv_;              // notified whenever an object becomes ready
  bool stopping_ = false;                         // mu_: the destructor runs; nothing new starts
  std::unordered_map<ObjectId, Object> objects_;  // mu_
  std::map<ActorId, std::shared_ptr<ActorState>> actors_;          // mu_
  std::map<std::pair<std::string, std::string>, ActorId> named_;   // (namespace, name); mu_
  std::map<std::pair<std::string, std::string>, std::string> kv_;  // (namespace, key); mu_
  std::map<std::string, internal::PlacementGroupInfo> groups_;     // by id; mu_
  std::vector<std::string> group_order_;                           // creation order; mu_
  std::map<std::pair<std::string, std::string>, std::string> group_names_;  // live only; mu_
  // Its threads use everything above: the destructor shuts it down before anything goes.
  GrowingThreadPool pool_;
};

}  // namespace rayd::core
