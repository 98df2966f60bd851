#pragma once
// The seam between the public C++ API (rayd/api.h: templates that serialize arguments with
// msgpack and name functions through the registry) and the core worker that moves tasks,
// actors and objects between processes. The API only ever talks to this interface; the core
// worker implements it. Everything here is type-erased: values are msgpack bytes.
//
// Threading: every method may be called from any user thread, concurrently. Blocking methods
// (Get, Wait, CreateActor's wait for a name) block only the calling thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rayd/base/ids.h"
#include "rayd/base/status.h"

namespace rayd {

struct ActorIdTag {};
struct TaskIdTag {};
struct PlacementGroupIdTag {};
using ActorId = UniqueId<ActorIdTag>;
using TaskId = UniqueId<TaskIdTag>;
using PlacementGroupId = UniqueId<PlacementGroupIdTag>;

namespace internal {

// Values of at least this many serialized bytes live in the node's shared-memory object store;
// smaller ones travel inline in messages.
inline constexpr size_t kMaxInlineBytes = 100 * 1024;

// Bytes read in place (an object in the node's shared memory), readable while this lives.
class SharedBytes {
 public:
  virtual ~SharedBytes() = default;
  virtual std::string_view view() const = 0;
  // True when the bytes lie in the node's shared-memory arena (not a private copy).
  virtual bool in_shared_memory() const = 0;
};

// An ObjectRef serialised inside a value (an argument, a Put value, a return value): the
// runtime keeps it alive as long as the value holding it, as Ray does for nested refs.
struct NestedRef {
  ObjectId id;
  std::string owner_address;  // the ref's owner ("" only for refs of a runtime without one)
};

// One argument of a task, as submitted.
struct TaskArg {
  enum class Kind {
    kValue,      // `value` holds the msgpack bytes of the argument
    kRef,        // an ObjectRef<T> passed where the function takes T: resolved before the call
    kRefAsRef,   // an ObjectRef<T> passed where the function takes ObjectRef<T>: passed as is
  };
  // kRef, kRefAsRef: the caller's ObjectRef may be dropped as soon as Submit* returns, so the
  // runtime keeps argument objects alive until the task no longer needs them.
  Kind kind = Kind::kValue;
  std::string value;
  ObjectId ref;                // kRef, kRefAsRef
  std::string owner_address;   // kRef, kRefAsRef: the RPC address of the ref's owner
  // kValue: the refs inside `value`, kept alive (like ref arguments) until the task's result
  // arrives. The caller's handles on them live through Submit*.
  std::vector<NestedRef> nested;
};

// One argument as the executing worker sees it.
struct InvocationArg {
  bool is_ref = false;         // true: only for parameters of type ObjectRef<T>
  std::string value;           // msgpack bytes (resolved refs included)...
  std::shared_ptr<const SharedBytes> shared;  // ...or, for large objects, read in place
  std::string_view bytes() const { return shared ? shared->view() : std::string_view(value); }
  ObjectId ref;                // is_ref
  std::string owner_address;   // is_ref
};

// Why an object holds an error instead of a value. Get turns these into the public exceptions.
enum class ErrorKind {
  kNone = 0,
  kRemote,       // user code threw: RemoteError(type, message)
  kActorDied,    // ActorDiedError
  kObjectLost,   // ObjectLostError
  kTimeout,      // TimeoutError (Get with a timeout)
  kInfeasible,   // InfeasibleError
  kSystem,       // anything else the runtime could not do (function not found, ...): RaydError
  kObjectStoreFull,  // no room in the node's store, nor on its spill disk: ObjectStoreFullError
  kOwnerDied,  // a borrowed object whose owner (process or host) is gone: OwnerDiedError
};

// A node holding a copy of an object in its shared-memory store.
struct ObjectLocation {
  std::string node_id;
  std::string node_address;      // the node daemon's RPC address
  std::string transfer_address;  // its object transfer channel
};

// The content of an object: msgpack bytes, or an error.
struct ObjectValue {
  std::string data;                     // msgpack bytes when error == kNone...
  std::shared_ptr<const SharedBytes> shared;  // ...or the bytes read in place (Get of a large one)
  ErrorKind error = ErrorKind::kNone;
  std::string error_type;               // kRemote: the remote exception's type name
  std::string error_message;
  // Inside the runtime only: the value lives in node object stores, not here (Get resolves it
  // into `shared` before the API sees it).
  bool in_store = false;
  uint64_t size = 0;
  std::vector<ObjectLocation> locations;  // the first: the primary copy
  // The refs inside the value. The value's owner keeps them alive while the value lives; for a
  // task's result, the worker that ran it registered the owner as their borrower.
  std::vector<NestedRef> nested;

  std::string_view bytes() const { return shared ? shared->view() : std::string_view(data); }
};

// Where a task or actor may run, beyond its resources (core.capnp SchedulingOptions).
struct SchedulingOptions {
  // Run inside this placement group (32 hex digits; empty: none). The task's or actor's
  // resources are taken from the bundle's reservation, not from the node's free resources.
  std::string placement_group_id;
  int bundle_index = -1;  // -1: any bundle of the group
  std::map<std::string, std::string> label_selector;  // the node must carry every key=value
  std::string node_affinity;  // a node id (hex): run only there, or prefer it when soft
  bool affinity_soft = false;

  bool empty() const {
    return placement_group_id.empty() && label_selector.empty() && node_affinity.empty();
  }
};

struct TaskOptions {
  std::map<std::string, double> resources;  // empty: {"CPU": 1}
  int max_retries = 3;                      // retries when the worker dies; 0 = none
  std::string name;                         // for logs and `rayd list`
  SchedulingOptions scheduling;
  // Environment variables of the worker that runs it (its runtime env's env_vars), on top of
  // the job's and the submitting task's.
  std::map<std::string, std::string> env;
};

struct ActorOptions {
  std::string name;                         // empty: anonymous
  std::string ray_namespace;                // empty: the job's namespace
  std::map<std::string, double> resources;  // empty: {"CPU": 0} (placed anywhere with a slot)
  int max_restarts = 0;                     // -1: unlimited
  int max_task_retries = 0;                 // -1: unlimited
  int max_concurrency = 1;
  // Outlives its driver. Unset: the job's default (RaydConfig::default_actor_lifetime).
  std::optional<bool> detached;
  SchedulingOptions scheduling;
  std::map<std::string, std::string> env;   // as TaskOptions::env
};

// A placement group as the API creates it (strategy: 0 PACK, 1 SPREAD, 2 STRICT_PACK,
// 3 STRICT_SPREAD, the order of rayd::PlacementStrategy and of proto::PlacementStrategy).
struct PlacementGroupOptions {
  std::string name;            // empty: anonymous; else unique in its namespace while alive
  std::string ray_namespace;   // empty: the job's namespace
  std::vector<std::map<std::string, double>> bundles;
  std::vector<std::map<std::string, std::string>> bundle_label_selector;  // empty or per bundle
  int strategy = 0;
  bool detached = false;       // outlives its job until removed
};

// A placement group as the GCS reports it.
struct PlacementGroupInfo {
  std::string id;              // 32 hex digits
  std::string name;
  std::string ray_namespace;
  std::string job_id;
  int strategy = 0;
  std::string state;           // PENDING, CREATED, RESCHEDULING, REMOVED, FAILED
  std::vector<std::map<std::string, double>> bundles;
  std::vector<std::string> bundle_nodes;  // per bundle: node id hex, "" while unplaced
  bool detached = false;
  std::string cause;           // why it is pending, removed or failed
};

struct WaitOutcome {
  std::vector<size_t> ready;      // indices into the ids given to Wait, in order
  std::vector<size_t> not_ready;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // Put, SubmitTask and SubmitActorTask return a new id that holds no local ref yet: the API
  // wraps it in an ObjectRef at once, whose constructor calls AddLocalRef. The object is freed
  // when its count has been positive and drops to zero, never before.

  // Stores `value` (msgpack bytes) owned by this process.
  virtual ObjectId Put(std::string value) = 0;
  // Put of a value with refs inside (`nested`, whose handles the caller holds through the
  // call): they live as long as the value does. This default keeps nothing alive, for runtimes
  // whose objects all live in one process for its whole run.
  virtual ObjectId PutWithRefs(std::string value, const std::vector<NestedRef>& nested) {
    (void)nested;
    return Put(std::move(value));
  }
  // Stores a value of `size` serialized bytes that `write` produces in place (straight into
  // shared memory when large). `write` must write exactly `size` bytes.
  virtual ObjectId PutSerialized(size_t size, const std::function<void(uint8_t*)>& write) {
    std::string bytes(size, '\0');
    write(reinterpret_cast<uint8_t*>(bytes.data()));
    return Put(std::move(bytes));
  }
  // Submits a call of the registered function `function_name`; returns its result's id.
  virtual ObjectId SubmitTask(const std::string& function_name, std::vector<TaskArg> args,
                              const TaskOptions& options) = 0;
  // Creates an actor by calling the registered factory; returns once the creation is submitted
  // (a bad name fails with AlreadyExists, an infeasible request with its error). The API
  // throws InfeasibleError for ResourceExhausted, TimeoutError for DeadlineExceeded and
  // RaydError(message) for any other code.
  virtual Result<ActorId> CreateActor(const std::string& factory_name, std::vector<TaskArg> args,
                                      const ActorOptions& options) = 0;
  // Submits a call of the registered method `method_name` on the actor; calls from one caller
  // run in submission order.
  virtual ObjectId SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                   std::vector<TaskArg> args) = 0;
  // Waits for the objects (timeout < 0: forever). A value not ready in time is kTimeout.
  virtual std::vector<ObjectValue> Get(const std::vector<ObjectId>& ids,
                                       std::chrono::milliseconds timeout) = 0;
  virtual WaitOutcome Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                           std::chrono::milliseconds timeout) = 0;
  // Calls `ready` once the object (one this process owns: a task's result, a Put) has a value
  // or an error, on a thread of the runtime's that must not block: post the work elsewhere.
  // Nothing is fetched; `ready` is called at once when the value is there already. This
  // default blocks the caller in Wait, for runtimes that produce every value at once.
  virtual void WhenReady(const ObjectId& id, std::function<void()> ready) {
    Wait({id}, 1, std::chrono::milliseconds(-1));
    ready();
  }
  // The live actor registered under `name` (in the job's namespace when `ray_namespace` is
  // empty), if any.
  virtual std::optional<ActorId> GetNamedActor(const std::string& name,
                                               const std::string& ray_namespace) = 0;
  // A non-ok status becomes RaydError; killing an actor that is already dead should be Ok.
  virtual Status KillActor(const ActorId& actor, bool no_restart) = 0;

  // Reference counting of ObjectRef handles in this process. The owner frees an object when
  // no handle remains. Every live non-nil ObjectRef holds exactly one count (copies add one,
  // moves transfer theirs); a handle never releases into a runtime other than the one it
  // counted in (refs that outlive Shutdown release nothing).
  virtual void AddLocalRef(const ObjectId& id) = 0;
  virtual void RemoveLocalRef(const ObjectId& id) = 0;
  // Ray's reference table: {handles, held for unfinished tasks} of each object referenced
  // here (rayd::GetAllReferenceCounts).
  virtual std::unordered_map<ObjectId, std::pair<size_t, size_t>> ReferenceCounts() = 0;
  // The RPC address of the owner of `id` (to serialize a ref), "" if unknown. The API asks only
  // for refs this process created (received refs carry their owner's address).
  virtual std::string OwnerAddress(const ObjectId& id) = 0;
  // Registers a ref received from elsewhere (an ObjectRef<T> argument, or one inside a value)
  // so that Get can fetch it from its owner. Adds no count: the ObjectRef built from it calls
  // AddLocalRef right after. May come more than once for one id, and for refs this process
  // owns (a ref that went out and came back).
  virtual void RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) = 0;

  // Placement groups. Create validates the options (InvalidArgument: no bundles, an empty
  // bundle, a negative amount; AlreadyExists: a taken name) and returns the group's id once the
  // GCS has recorded it; the group is reserved in the background.
  virtual Result<std::string> CreatePlacementGroup(const PlacementGroupOptions& options) {
    (void)options;
    return Status::Unimplemented("placement groups are not supported by this runtime");
  }
  // Removes the group: its bundles are freed and the tasks and actors running in it are killed.
  // Removing a removed group is Ok; an unknown id is NotFound.
  virtual Status RemovePlacementGroup(const std::string& id) {
    (void)id;
    return Status::Unimplemented("placement groups are not supported by this runtime");
  }
  // Waits until the group is CREATED: true; false when `timeout` runs out first (timeout < 0:
  // forever). A group that failed as infeasible is ResourceExhausted (the scheduler's reason);
  // a removed one Cancelled (with why); an unknown one NotFound.
  virtual Result<bool> WaitPlacementGroupReady(const std::string& id,
                                               std::chrono::milliseconds timeout) {
    (void)id, (void)timeout;
    return Status::Unimplemented("placement groups are not supported by this runtime");
  }
  // WaitPlacementGroupReady without blocking: `ready` gets its answer on a thread of the
  // runtime's that must not block. This default blocks the caller.
  virtual void WhenPlacementGroupReady(const std::string& id, std::chrono::milliseconds timeout,
                                       std::function<void(Result<bool>)> ready) {
    ready(WaitPlacementGroupReady(id, timeout));
  }
  // The group with this id, or (id empty) the one named `name` in `ray_namespace` (empty: the
  // job's) that is not removed; nullopt when there is none.
  virtual Result<std::optional<PlacementGroupInfo>> GetPlacementGroup(
      const std::string& id, const std::string& name, const std::string& ray_namespace) {
    (void)id, (void)name, (void)ray_namespace;
    return Status::Unimplemented("placement groups are not supported by this runtime");
  }
  virtual Result<std::vector<PlacementGroupInfo>> GetAllPlacementGroups() {
    return Status::Unimplemented("placement groups are not supported by this runtime");
  }

  // The GCS's key-value store (durable with Redis). KvPut returns whether the key was new;
  // without `overwrite` an existing value is kept.
  virtual Result<bool> KvPut(const std::string& ns, const std::string& key,
                             const std::string& value, bool overwrite) {
    (void)ns, (void)key, (void)value, (void)overwrite;
    return Status::Unimplemented("the key-value store is not supported by this runtime");
  }
  virtual Result<std::optional<std::string>> KvGet(const std::string& ns, const std::string& key) {
    (void)ns, (void)key;
    return Status::Unimplemented("the key-value store is not supported by this runtime");
  }
  // Deletes `key` (or, with by_prefix, every key starting with it); returns how many went.
  virtual Result<int> KvDel(const std::string& ns, const std::string& key, bool by_prefix) {
    (void)ns, (void)key, (void)by_prefix;
    return Status::Unimplemented("the key-value store is not supported by this runtime");
  }

  // GPU ids assigned to this worker (empty on the driver unless it reserved some).
  virtual std::vector<int> GetGpuIds() = 0;
  virtual std::string GetNodeId() = 0;

  // The job's namespace (named actors and placement groups live in it).
  virtual std::string GetNamespace() = 0;
  // Inside an actor's method or factory: whether this instance is a restart (its process died
  // and the factory ran again). False elsewhere.
  virtual bool WasCurrentActorRestarted() { return false; }
  // True when tasks and actors run inside this process (RaydConfig::local_mode).
  virtual bool IsLocalMode() const { return false; }
};

// Thrown by rayd::ExitActor inside an actor's method: the worker answers the call with
// ActorDiedError, then the actor ends for good (no restart). Never reaches user code elsewhere.
struct ActorExitRequest {};

// Where this driver's cluster is (its GCS address and token), for tools that start more
// daemons into it (benchmarks, tests). Empty when not a driver.
struct ClusterEndpoint {
  std::string gcs_address;
  std::string token;
};
ClusterEndpoint DriverClusterEndpoint();

// The process's runtime: set by rayd::Init (driver) or worker start-up; null before Init and
// after Shutdown.
Runtime* CurrentRuntime();
void SetCurrentRuntime(Runtime* runtime);

// Whether the calling thread is running an actor's factory or method (the runtime sets it
// around each; rayd::ExitActor checks it).
bool InActorCall();
void SetInActorCall(bool in_actor_call);

}  // namespace internal
}  // namespace rayd
