#pragma once
// CoreWorker: the runtime inside every driver and worker process. It implements the API's
// internal::Runtime on top of an I/O thread that runs one event loop: an RPC server (tasks
// pushed to us, objects we own), a client to the GCS, a client to the local node daemon, and
// clients to peers. User threads call in; blocking calls wait on the store or on a promise
// fulfilled by the loop.
//
// Member declaration order follows the dependency order (the loop first, the thread last).

#include <atomic>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "core/actor_submitter.h"
#include "core/borrowing.h"
#include "common/client_pool.h"
#include "common/gcs_client.h"
#include "core/executor.h"
#include "core/infeasible_warner.h"
#include "core/memory_store.h"
#include "core/metrics_reporter.h"
#include "core/object_manager.h"
#include "core/reference_counter.h"
#include "core/object_store_client.h"
#include "core/task_submitter.h"
#include "rayd/runtime/cluster.h"

namespace rayd::core {

struct CoreWorkerOptions {
  bool is_driver = true;
  std::string gcs_address;
  std::string node_address;  // empty for drivers: chosen from the GCS's node table
  std::string token;
  std::string node_ip = "127.0.0.1";  // where our own server listens
  JobId job_id;
  WorkerId worker_id;
  std::string ray_namespace;
  bool default_detached = false;         // actors created without SetDetached
  std::vector<std::string> launch_argv;  // how workers of this job are started
  std::map<std::string, std::string> launch_env;
  std::string entrypoint;  // drivers: shown in `rayd list jobs`
};

class CoreWorker : public internal::Runtime {
 public:
  // Connects and registers: drivers add their job to the GCS; workers register with their
  // node daemon. Fails with a clear message when the cluster can't be reached.
  static Result<std::unique_ptr<CoreWorker>> Start(CoreWorkerOptions options);
  ~CoreWorker() override;

  // Drivers: tells the GCS the job is done (its actors and workers are cleaned up), returns
  // leases, and stops the I/O thread. Idempotent.
  void Shutdown();
  // Workers: blocks until the node daemon goes away (or Shutdown).
  void WaitForDisconnect();

  const std::string& address() const { return address_; }
  const JobId& job_id() const { return options_.job_id; }

  // internal::Runtime
  ObjectId Put(std::string value) override;
  ObjectId PutWithRefs(std::string value,
                       const std::vector<internal::NestedRef>& nested) override;
  ObjectId PutSerialized(size_t size, const std::function<void(uint8_t*)>& write) override;
  ObjectId SubmitTask(const std::string& function_name, std::vector<internal::TaskArg> args,
                      const internal::TaskOptions& options) override;
  Result<ActorId> CreateActor(const std::string& factory_name,
                              std::vector<internal::TaskArg> args,
                              const internal::ActorOptions& options) override;
  ObjectId SubmitActorTask(const ActorId& actor, const std::string& method_name,
                           std::vector<internal::TaskArg> args) override;
  std::vector<internal::ObjectValue> Get(const std::vector<ObjectId>& ids,
                                         std::chrono::milliseconds timeout) override;
  internal::WaitOutcome Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                             std::chrono::milliseconds timeout) override;
  void WhenReady(const ObjectId& id, std::function<void()> ready) override;
  std::optional<ActorId> GetNamedActor(const std::string& name,
                                       const std::string& ray_namespace) override;
  Status KillActor(const ActorId& actor, bool no_restart) override;
  void AddLocalRef(const ObjectId& id) override;
  void RemoveLocalRef(const ObjectId& id) override;
  std::unordered_map<ObjectId, std::pair<size_t, size_t>> ReferenceCounts() override {
    return refs_.AllReferenceCounts();
  }
  std::string OwnerAddress(const ObjectId& id) override;
  void RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) override;
  Result<std::string> CreatePlacementGroup(const internal::PlacementGroupOptions& options) override;
  Status RemovePlacementGroup(const std::string& id) override;
  Result<bool> WaitPlacementGroupReady(const std::string& id,
                                       std::chrono::milliseconds timeout) override;
  void WhenPlacementGroupReady(const std::string& id, std::chrono::milliseconds timeout,
                               std::function<void(Result<bool>)> ready) override;
  Result<std::optional<internal::PlacementGroupInfo>> GetPlacementGroup(
      const std::string& id, const std::string& name, const std::string& ray_namespace) override;
  Result<std::vector<internal::PlacementGroupInfo>> GetAllPlacementGroups() override;
  std::vector<int> GetGpuIds() override;
  std::string GetNodeId() override;
  std::string GetNamespace() override;
  bool WasCurrentActorRestarted() override;
  Result<bool> KvPut(const std::string& ns, const std::string& key, const std::string& value,
                     bool overwrite) override;
  Result<std::optional<std::string>> KvGet(const std::string& ns, const std::string& key) override;
  Result<int> KvDel(const std::string& ns, const std::string& key, bool by_prefix) override;

 private:
  explicit CoreWorker(CoreWorkerOptions options);
  Status Connect();
  Status ChooseNode();
  Status LearnNodeId();
  Status RegisterDriver();
  // ADD_JOB of this driver's job (loop thread).
  void AddDriverJob(std::function<void(const Status&)> done);
  Status RegisterWorker();
  // Runs `fn` on the loop and waits for the Status it reports (timeout < 0: for as long as it
  // takes).
  Status RunOnLoop(const std::function<void(std::function<void(Status)>)>& fn,
                   Millis timeout = Millis(60000));
  // Runs `op` (a GcsClient operation, given its completion) on the loop and waits for its
  // result; `wait` guards against a stalled loop (the call's own deadline answers first).
  template <typename T>
  Result<T> AskGcs(std::function<void(runtime::GcsClient&, runtime::Done<T>)> op,
                   Millis wait = Millis(20000));
  // Fetches borrowed objects that are not here yet (their values land in the store).
  void FetchMissing(const std::vector<ObjectId>& ids);
  TaskSpec NewSpec(const std::string& function_name, std::vector<internal::TaskArg> args);
  // Maps the node's shared-memory store; without one (no node daemon on this host) large
  // values stay inline.
  void ConnectStore(const NodeInfo& node);
  void InstallStoreHooks();
  // A result we own whose value holds `nested` refs arrived (`kept`: wanted here): the ones
  // owned elsewhere are borrows its worker registered for us; they live while it does.
  void TakeNested(const ObjectId& result, const std::vector<internal::NestedRef>& nested,
                  bool kept);
  // Turns in_store markers into bytes read in place (or the error that stopped that).
  void ResolveStored(const std::vector<ObjectId>& ids, std::vector<internal::ObjectValue>& values);
  internal::ObjectValue ResolveStored(const ObjectId& id, const internal::ObjectValue& marker);
  // Large by-value arguments go to the object store and travel as refs; every ref argument is
  // kept alive until the task's result arrives.
  void PromoteLargeArgs(std::vector<internal::TaskArg>& args);
  // Runs the task that made `id` again (its lineage), if it can; see ReferenceCounter.
  bool Reconstruct(const ObjectId& id);
  // Executor hooks (task threads).
  internal::ObjectValue FetchArg(const ObjectId& id, const std::string& owner);
  internal::ObjectValue StoreResult(const ObjectId& id, internal::ObjectValue value,
                                    const std::string& owner);
  // Tells the node the running task waits (or runs again); see BlockedScope.
  class BlockedScope;
  void SetBlocked(bool blocked);

  CoreWorkerOptions options_;
  EventLoop loop_;
  MemoryStore store_;
  ClientPool clients_;
  std::shared_ptr<ObjectStoreClient> object_store_;  // co-owned by the SharedBytes it hands out
  ReferenceCounter refs_{store_};  // argument pins, borrowers, borrows, lineage
  rpc::Dispatcher dispatcher_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::string address_;
  std::unique_ptr<ObjectManager> objects_;
  std::unique_ptr<Borrowing> borrowing_;
  std::unique_ptr<runtime::GcsClient> gcs_;
  std::unique_ptr<SubmitterContext> submit_ctx_;
  std::unique_ptr<InfeasibleWarner> warner_;
  std::unique_ptr<TaskSubmitter> tasks_;
  std::unique_ptr<ActorSubmitter> actors_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<MetricsReporter> metrics_;  // loop thread
  std::string node_id_;
  std::promise<void> disconnected_;
  bool disconnect_signalled_ = false;  // loop thread
  std::atomic<bool> shut_down_{false};
  std::thread io_thread_;
};

}  // namespace rayd::core
