#pragma once
// TaskSubmitter: runs normal tasks on leased workers.
//
// How it works: tasks are grouped by shape (resources, scheduling options and worker
// environment). For each shape the submitter asks the local node daemon for worker leases
// (following spillbacks to other nodes; the node honours label selectors and node affinity),
// pushes tasks straight to the leased workers, reuses a lease for the next task of the same
// shape, and returns it after a short idle time. The head is not on this path. A worker that
// dies fails its in-flight tasks, which are retried up to max_retries.
//
// Spreading before queueing: a task goes to an idle lease, and while tasks wait the submitter
// keeps lease requests pending at the node (which queues them until a CPU frees), so
// independent tasks run in parallel on whatever CPUs are free, whenever they free. A task
// pushed to a busy worker cannot move when a CPU frees elsewhere, so tasks are queued behind
// busy workers (up to kMaxInFlightPerLease each, which keeps tiny tasks flowing without a
// round trip between them) only when all of these hold:
// - the node said no other lease of the shape fits (the last grant's moreRoom), and nothing
//   this submitter did since freed room: returning a lease forgets every "full" it was told;
// - the shape's tasks are short (their recent service time below kPipelineTaskTime), so the
//   wait behind a busy worker is bounded by a few milliseconds even if a CPU frees meanwhile;
// - no lease request of the shape failed recently (then the submitter asks again after a
//   back-off instead of giving up on more leases while others run).
//
// Placement groups: a shape that targets a group asks the GCS once where the group's bundles
// are (GET_PLACEMENT_GROUP, waiting until it is created; the answer is cached per group) and
// requests leases straight from the bundle's node, never spilled: bundle index -1 rotates over
// the group's bundles that could hold the shape. A node that answers NotFound or Cancelled no
// longer holds the bundle (it moved, or the group is going away): the cache is dropped and the
// GCS asked again. A removed group fails the shape's tasks ("placement group X was removed"), a
// failed one fails them as infeasible with the group's cause.
//
// Loop thread only.

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/client_pool.h"
#include "core/memory_store.h"
#include "core/reference_counter.h"
#include "common/task_spec.h"

namespace rayd::core {

class InfeasibleWarner;
class ObjectManager;

struct SubmitterContext {
  EventLoop& loop;
  MemoryStore& store;
  ClientPool& clients;
  ObjectManager& objects;
  rpc::RpcClient& gcs;       // placement groups are looked up here; valid until `stopping`
  std::string node_address;  // the local node daemon
  JobId job_id;
  // How node daemons start this job's workers (filled into lease requests).
  std::vector<std::string> launch_argv;
  std::map<std::string, std::string> launch_env;
  // Warns in the log about requests no node can hold (set once the submitters exist).
  InfeasibleWarner* warner = nullptr;
  // Keeps the lineage of reconstructable tasks whose results land in the object store (set
  // once the core worker has one).
  ReferenceCounter* lineage = nullptr;
  // Set (on the loop) when the core worker shuts down: replies and failures that arrive after
  // it are dropped, so nothing retries or touches a submitter being torn down.
  bool stopping = false;
};

// Fills a WorkerLaunch message from the context, with `env` on top of its launch environment.
void FillLaunch(const SubmitterContext& ctx, const std::map<std::string, std::string>& env,
                proto::WorkerLaunch::Builder out);

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
    Clock::time_point last_reply;  // when the worker last finished a task
    bool dead = false;
  };
  struct Shape {
    scheduler::ResourceSet resources;
    SchedulingOptions scheduling;
    std::deque<TaskSpec> queue;
    std::map<std::string, std::string> env;
    std::vector<std::shared_ptr<Lease>> leases;
    int pending_requests = 0;
    // The last grant said no lease of this shape would fit now (cleared when this submitter
    // returns a lease, which frees room).
    bool saturated = false;
    // A lease request failed while other leases run: no new request before `retry_at`.
    Clock::time_point retry_at;
    Millis retry_backoff{0};
    // Smoothed time a task of the shape keeps its worker busy (0: none finished yet).
    std::chrono::microseconds service_time{0};
  };
  // A placement group as the GCS last described it, for the shapes that target it.
  struct Group {
    enum class State { kAsking, kReady, kGone };
    struct Bundle {
      scheduler::ResourceSet resources;
      std::string node_address;
    };
    State state = State::kAsking;
    std::vector<Bundle> bundles;  // kReady
    size_t next = 0;              // kReady: where the rotation for bundle index -1 goes on
    internal::ErrorKind error = internal::ErrorKind::kSystem;  // kGone: how its tasks fail
    std::string why;                                           // kGone
  };

  void Pump(const std::string& key);
  // Whether tasks of the shape may wait behind busy workers now (see the top of the file).
  bool MayQueueBehindBusy(const Shape& shape) const;
  // Smooths the time the task pushed at `pushed` kept its lease's worker busy into the shape's.
  void RecordServiceTime(Shape& shape, Lease& lease, Clock::time_point pushed);
  // Asks for one more lease for the shape: from the local node, or from its bundle's node.
  void AskForLease(const std::string& key);
  void RequestLease(const std::string& key, const std::string& node_address, bool no_spill);
  void OnLeaseFailed(const std::string& key, const Status& status);
  // Fails every queued task of the shape with `kind` and `why`.
  void FailQueue(const std::string& key, internal::ErrorKind kind, const std::string& why);
  // GET_PLACEMENT_GROUP (waiting until it is created), then pumps the group's shapes.
  void LookUpGroup(const std::string& group_id);
  void OnGroupAnswer(const std::string& group_id, const Status& status,
                     proto::GetPlacementGroupReply::Reader reply);
  // The node holding the bundle the shape should use next, or why there is none.
  Result<std::string> BundleNode(Group& group, const Shape& shape);
  void Push(const std::string& key, const std::shared_ptr<Lease>& lease, TaskSpec spec);
  void OnWorkerLost(const std::string& key, const std::shared_ptr<Lease>& lease);
  void ReturnLease(const std::shared_ptr<Lease>& lease, bool kill);
  void ReturnIdleLeases();

  SubmitterContext& ctx_;
  std::map<std::string, Shape> shapes_;  // by shape key
  std::map<std::string, Group> groups_;  // by placement group id
  Timer idle_timer_;
};

}  // namespace rayd::core
