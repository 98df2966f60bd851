#pragma once
// WorkerPool: the worker processes of one node daemon.
//
// How it works
// - StartWorker spawns `launch.argv` with uv_spawn on the node's loop, with the node's
//   environment plus the launch's plus the RAYD_* variables a core worker needs to find its
//   node (and CUDA_VISIBLE_DEVICES when it gets GPUs). Its stdout and stderr go to
//   <session_dir>/logs/worker-<first 8 hex of id>.log.
// - The worker connects to the node's Unix socket and calls REGISTER_WORKER; the StartCallback
//   then runs with the worker (now IDLE). It runs with an error instead if the spawn fails,
//   the process exits first, or it does not register within `start_timeout` (it is killed).
// - The lease manager moves registered workers between IDLE and LEASED (MarkLeased,
//   ReturnToIdle). Idle workers beyond `max_idle_per_job` per job, or idle longer than
//   `idle_timeout`, are killed.
// - When a process exits (libuv's exit callback) its worker becomes DEAD with a reason ("exited
//   with code 3", "killed by signal 9") and the ExitFn runs; DEAD workers stay listed for
//   `dead_retention`, for GET_WORKERS.
//
// Invariants: a worker is STARTING until it registers and has `on_started` set only then;
// LEASED workers have a non-empty `lease_id`; only non-DEAD workers have a process handle.
//
// Ownership: the pool owns every Worker and its uv_process_t. Worker pointers handed out stay
// valid until the worker is pruned (dead_retention after it died) or the pool is destroyed.
// Threading: the node daemon's loop thread only; callbacks run on it.
// Destruction SIGKILLs every live worker and reaps it; no callback runs after that.

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rayd/base/ids.h"
#include "rayd/base/rpc.h"

namespace rayd::node {

// The command and environment a job's workers run with (proto::WorkerLaunch as a value).
struct WorkerLaunch {
  std::vector<std::string> argv;  // argv[0] is the executable
  std::vector<std::pair<std::string, std::string>> env;
  friend bool operator==(const WorkerLaunch&, const WorkerLaunch&) = default;
};

enum class WorkerState { kStarting, kIdle, kLeased, kDead };
const char* WorkerStateName(WorkerState state);  // "STARTING", "IDLE", "LEASED", "DEAD"

struct Worker;
using StartCallback = std::function<void(Result<Worker*>)>;

struct Worker {
  WorkerId id;
  JobId job_id;
  WorkerLaunch launch;
  std::vector<int> gpu_ids;  // the devices its CUDA_VISIBLE_DEVICES names; fixed for its life
  bool for_actor = false;    // started for, or leased by, an actor: never shared afterwards
  WorkerState state = WorkerState::kStarting;
  int pid = 0;
  std::string address;  // its core worker service, once registered
  std::string log_path;
  // Its own directory for rayd's scratch files (RAYD_WORKER_TEMP_DIR): the worker makes it when
  // it needs one; the pool removes it once the worker is dead.
  std::string temp_dir;
  std::string lease_id;     // while LEASED
  std::string kill_reason;  // set when the node killed it
  bool registered = false;  // it did register at some point
  std::string exit_reason;  // once DEAD
  Clock::time_point idle_since;
  Clock::time_point dead_since;

  // Pool-internal.
  uv_process_t* process = nullptr;  // owned; null once DEAD (closed and freed by the loop)
  StartCallback on_started;         // while STARTING
  std::unique_ptr<Timer> start_timer;
};

struct WorkerPoolConfig {
  std::string session_dir;
  std::string node_ip;
  std::string gcs_address;  // the address the node daemon uses for the GCS
  std::string token;
  size_t max_idle_per_job = 1;  // usually the node's CPU count
  // Workers spawned and not yet registered at once (0: no limit); the others wait their turn,
  // so that a burst (a thousand actors) does not start a thousand processes on a few cores and
  // starve the node's own heartbeats.
  size_t max_starting = 0;
  Millis start_timeout{30000};
  Millis idle_timeout{60000};
  Millis dead_retention{300000};
};

class WorkerPool {
 public:
  // Runs after a worker exited: its state is already DEAD, `previous` is the state it died
  // in, and lease_id is still set if it was leased.
  using ExitFn = std::function<void(Worker&, WorkerState previous)>;

  // `loop` and `node_id` (the node daemon's current id, which may change on rejoin) must
  // outlive the pool.
  WorkerPool(EventLoop& loop, WorkerPoolConfig config, const NodeId& node_id);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void SetOnExit(ExitFn fn) { on_exit_ = std::move(fn); }
  // REGISTER_WORKER, KILL_WORKER, GET_WORKERS.
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // Spawns a worker; `done` runs exactly once, possibly before this returns (spawn failure),
  // with the registered worker or Unavailable "worker for job J failed to start: ... (log: P)".
  void StartWorker(const JobId& job_id, const WorkerLaunch& launch, const std::vector<int>& gpu_ids,
                   bool for_actor, StartCallback done);
  // An IDLE worker of `job_id` started with the same launch and GPU ids, or null.
  Worker* FindIdle(const JobId& job_id, const WorkerLaunch& launch,
                   const std::vector<int>& gpu_ids);
  void MarkLeased(Worker& worker, const std::string& lease_id, bool for_actor);
  // A LEASED worker becomes IDLE (or is killed when its job has too many idle workers).
  void ReturnToIdle(Worker& worker);

  // SIGKILLs the worker; its exit callback follows. No-op on a DEAD worker.
  void Kill(Worker& worker, const std::string& reason);
  // Kills the workers of `job_id` that are not (started for or leased by) an actor.
  void KillJobWorkers(const JobId& job_id, const std::string& reason);
  void KillAll(const std::string& reason);

  Worker* Find(const WorkerId& id);
  const std::map<WorkerId, std::unique_ptr<Worker>>& workers() const { return workers_; }

 private:
  static void OnProcessExit(uv_process_t* process, int64_t exit_status, int term_signal);
  void HandleExit(Worker& worker, int64_t exit_status, int term_signal);
  void HandleRegister(const rpc::Incoming<proto::Method::REGISTER_WORKER>& call);
  void HandleKill(const rpc::Incoming<proto::Method::KILL_WORKER>& call);
  void HandleGetWorkers(const rpc::Incoming<proto::Method::GET_WORKERS>& call);
  // Spawns queued workers while fewer than max_starting are starting.
  void SpawnQueued();
  void Spawn(Worker& worker);
  size_t Spawning() const;  // spawned, not yet registered
  // Fails a STARTING worker's callback: "worker for job J failed to start: <why> (log: P)".
  void FailStart(Worker& worker, const std::string& why);
  std::vector<std::string> BuildEnv(const Worker& worker) const;
  void TrimIdle(const JobId& job_id);
  void Maintain();  // idle timeout, pruning of DEAD workers

  EventLoop& loop_;
  WorkerPoolConfig config_;
  const NodeId& node_id_;
  std::deque<WorkerId> to_spawn_;  // STARTING workers waiting for their turn (max_starting)
  std::map<WorkerId, std::unique_ptr<Worker>> workers_;
  ExitFn on_exit_;
  Timer maintenance_timer_;
};

}  // namespace rayd::node
