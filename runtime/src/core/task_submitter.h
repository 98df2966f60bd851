#pragma once
// TaskSubmitter: runs normal tasks on leased workers.
//
// How it works: tasks are grouped by resource shape. For each shape the submitter asks the
// local node daemon for worker leases (following spillbacks to other nodes), pushes tasks
// straight to the leased workers (a few in flight per worker), reuses a lease for the next
// task of the same shape, and returns it after a short idle time. The head is not on this
// path. A worker that dies fails its in-flight tasks, which are retried up to max_retries.
//
// Loop thread only.

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/client_pool.h"
#include "core/memory_store.h"
#include "core/task_spec.h"

namespace rayd::core {

class ObjectManager;

struct SubmitterContext {
  EventLoop& loop;
  MemoryStore& store;
  ClientPool& clients;
  ObjectManager& objects;
  std::string node_address;  // the local node daemon
  JobId job_id;
  // How node daemons start this job's workers (filled into lease requests).
  std::vector<std::string> launch_argv;
  std::map<std::string, std::string> launch_env;
  // Set (on the loop) when the core worker shuts down: replies and failures that arrive after
  // it are dropped, so nothing retries or touches a submitter being torn down.
  bool stopping = false;
};

// Fills a WorkerLaunch message from the context.
void FillLaunch(const SubmitterContext& ctx, proto::WorkerLaunch::Builder out);

class TaskSubmitter {
 public:
  // `ctx` must outlive the submitter.
  explicit TaskSubmitter(SubmitterContext& ctx);
  ~TaskSubmitter();

  // Queues a task whose arguments are resolved (no kRef left).
  void Submit(TaskSpec spec);
  // Returns every lease (on shutdown).
  void ReturnAllLeases();

 private:
  struct Lease {
    std::string lease_id;
    std::string worker_address;
    std::string node_address;  // the node that granted it
    int in_flight = 0;
    Clock::time_point idle_since;
    bool dead = false;
  };
  struct Shape {
    scheduler::ResourceSet resources;
    std::deque<TaskSpec> queue;
    std::vector<std::shared_ptr<Lease>> leases;
    int pending_requests = 0;
  };

  void Pump(const std::string& key);
  void RequestLease(const std::string& key, const std::string& node_address, bool no_spill);
  void OnLeaseFailed(const std::string& key, const Status& status);
  void Push(const std::string& key, const std::shared_ptr<Lease>& lease, TaskSpec spec);
  void OnWorkerLost(const std::string& key, const std::shared_ptr<Lease>& lease);
  void ReturnLease(const std::shared_ptr<Lease>& lease, bool kill);
  void ReturnIdleLeases();

  SubmitterContext& ctx_;
  std::map<std::string, Shape> shapes_;  // by resource-shape key
  Timer idle_timer_;
};

}  // namespace rayd::core
