#pragma once
// The cluster as the CLI and embedding programs see it: starting the head and node daemons,
// and reading the cluster's state. No wire types here.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rayd/base/ids.h"
#include "rayd/base/status.h"
#include "rayd/internal/runtime.h"
#include "rayd/scheduler/resources.h"

namespace rayd {

using Millis = std::chrono::milliseconds;

// Requests of one shape waiting on a node.
struct ResourceDemand {
  scheduler::ResourceSet resources;
  int count = 0;
  int64_t waiting_since_ms = 0;  // the oldest one's arrival, unix ms
};

// What the cluster knows about one node. A plain value.
struct NodeInfo {
  NodeId node_id;
  std::string address;  // the node daemon's RPC address, host:port
  std::string hostname;
  std::string ip;
  bool is_head = false;
  bool alive = true;
  scheduler::ResourceSet total;
  scheduler::ResourceSet available;
  scheduler::Labels labels;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  int64_t last_heartbeat_ms = 0;
  std::string death_reason;
  int pid = 0;
  std::string session_dir;
  std::string store_socket;      // hands out the object store arena to local processes
  std::string transfer_address;  // host:port of the object transfer channel
  uint64_t object_store_bytes = 0;
  // Requests no node can satisfy yet, waiting here for one that can to join (from heartbeats;
  // not persisted).
  std::vector<ResourceDemand> infeasible;
  // Requests that fit it but wait for room here (from heartbeats; not persisted).
  std::vector<ResourceDemand> queued;
  uint32_t primary_objects = 0;  // primary copies in its object store (from heartbeats)
  // `rayd drain`: when the node leaves (unix ms), and why; 0 while it is not draining. A
  // draining node is alive but takes no new work.
  int64_t drain_deadline_ms = 0;
  std::string drain_reason;
  bool draining() const { return alive && drain_deadline_ms > 0; }
};

// Dashboard feeds: how a program shows what it runs on the head's dashboard and /metrics,
// through the GCS's KV store, with no schema the runtime knows. A feed has a kind (its
// publisher's word: a Tuner publishes kind "sweep") and a name. In KV namespace
// kFeedKvNamespace:
//   FeedKey(kind, name)              a JSON object, the feed's summary, served as published, with
//                                    two members the dashboard reads: "detail_only" (names of
//                                    members the list of feeds leaves out) and "metrics" (the
//                                    samples the head's /metrics exports: objects with "name",
//                                    "type" (gauge or counter), "help", "labels" (an object of
//                                    strings) and "value")
//   FeedItemPrefix(kind, name, part) + id   one JSON value per item and part: the dashboard
//                                    serves parts "series" (e.g. a learning curve,
//                                    [[x, y], ...]) and "logs" (e.g. {"rank_0.log": "..."})
// The dashboard serves them at /api/<kind>s (every summary) and /api/<kind>s/<name> (one, with
// "series" and "logs" by item id).
inline constexpr const char kFeedKvNamespace[] = "dashboard";
inline std::string FeedPrefix(const std::string& kind) { return "feed/" + kind + "/"; }
inline std::string FeedKey(const std::string& kind, const std::string& name) {
  return FeedPrefix(kind) + name;
}
inline std::string FeedItemPrefix(const std::string& kind, const std::string& name,
                                  const std::string& part) {
  return part + "/" + kind + "/" + name + "/";
}

struct ClusterView {
  std::string cluster_id;
  std::string gcs_address;
  std::string storage;  // "memory" or "redis://host:port"
  int64_t start_time_ms = 0;
  std::string dashboard_url;    // "" when the head serves no dashboard
  std::vector<NodeInfo> nodes;  // alive and dead
};

// Connects to the GCS at `address` with `token` and reads the node table (one-shot).
Result<ClusterView> FetchClusterView(const std::string& address, const std::string& token,
                                     Millis timeout = Millis(10000));

// One actor as the GCS records it. A plain value.
struct ActorSummary {
  std::string actor_id;
  std::string job_id;
  std::string name;           // empty: anonymous
  std::string ray_namespace;
  std::string class_name;     // the factory's name
  std::string state;          // PENDING_CREATION, ALIVE, RESTARTING or DEAD
  std::string address;        // its worker's address while ALIVE
  std::string node_id;
  std::string worker_id;
  int num_restarts = 0;
  int max_restarts = 0;       // -1: unlimited
  bool detached = false;
  std::string death_cause;
  int pid = 0;
};

// One job (driver) as the GCS records it.
struct JobSummary {
  std::string job_id;
  int driver_pid = 0;
  std::string driver_host;
  std::string entrypoint;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  bool is_dead = false;
};

// A job submitted with `rayd job submit` (Ray Jobs' model): a driver command the head runs
// for the user, in a working directory shipped with the submission, with RAYD_ADDRESS and
// RAYD_TOKEN set so that `rayd tune`, `rayd train` and C++ drivers attach to the cluster.
struct JobSubmissionInfo {
  std::string submission_id;
  std::vector<std::string> entrypoint;  // argv, or one shell command line
  std::string status;                   // PENDING RUNNING SUCCEEDED FAILED STOPPED
  std::string message;                  // why it is in its status
  int pid = 0;
  int exit_code = -1;  // -1: none (killed by a signal, or never ran)
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;  // 0 while it runs
  std::string working_dir;  // where it runs, on the head
  std::string log_path;     // its driver's stdout and stderr, on the head
  std::string runtime_env_json;
  uint64_t driver_start_ticks = 0;  // tells its process from a reused pid

  // SUCCEEDED, FAILED or STOPPED: it will not change again.
  bool terminal() const;
};

struct JobSubmitOptions {
  // Run as is when it has more than one element; a single element with spaces or shell
  // syntax runs under /bin/sh -c, as Ray's entrypoint strings do.
  std::vector<std::string> entrypoint;
  std::string working_dir;       // a local directory shipped to the head; "" for none
  std::string runtime_env_json;  // {"env_vars": {...}, "working_dir": "..."}
  std::string submission_id;     // "" : the head names it (raydsubmit_...)
};

// A stretch of a submitted job's log, and the job as it was when it was read.
struct JobLogChunk {
  std::string data;
  uint64_t next_offset = 0;
  JobSubmissionInfo job;
};

// One worker process as its node daemon reports it.
struct WorkerSummary {
  std::string worker_id;
  std::string job_id;
  std::string node_id;
  int pid = 0;
  std::string address;
  std::string state;          // STARTING, IDLE, LEASED, DEAD
  std::string actor_id;       // the actor it holds, if any
  std::string exit_reason;
};

struct WorkersView {
  std::vector<WorkerSummary> workers;
  // "node <id> at <address>: <why>" for each alive node that did not answer.
  std::vector<std::string> unreachable;
};

// One object in one node's shared-memory store (small objects live in their owners' memory
// and are not listed).
struct ObjectSummary {
  std::string object_id;
  std::string node_id;
  uint64_t size = 0;
  std::string state;          // CREATING, SEALED, SPILLED
  bool primary = false;       // the owner's copy (else a copy pulled by another node)
  int pins = 0;               // readers holding it in place
  std::string owner;          // the owner's address
  std::string spill_path;
};

struct NodeStoreSummary {
  std::string node_id;
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t peak_used = 0;  // the most bytes held at once since the store started
  uint64_t spilled_bytes = 0;
  uint64_t total_evicted = 0;
  uint64_t total_spilled = 0;
  uint64_t total_restored = 0;
};

struct ObjectsView {
  std::vector<ObjectSummary> objects;
  std::vector<NodeStoreSummary> stores;
  std::vector<std::string> unreachable;
};

// A connection to a cluster for reading its state: one authenticated connection to the GCS,
// kept for as long as the client lives (and one to each node asked for its workers or
// objects), on a private event loop that each call runs until its answer arrives. For the CLI
// and programs that inspect a cluster; not thread-safe.
class ClusterClient {
 public:
  // Connects once: nothing listening, or a wrong token, is an error at once, not a retry
  // until `timeout`, which also bounds every later call.
  static Result<std::unique_ptr<ClusterClient>> Connect(const std::string& address,
                                                        const std::string& token,
                                                        Millis timeout = Millis(10000));
  ~ClusterClient();

  // The cluster and its node table.
  Result<ClusterView> Nodes();
  // `rayd drain`: the node takes no new work from now and leaves at `deadline_ms` (unix ms),
  // its workers stopped; sooner when nothing runs on it. Ranks on it see the notice
  // (ReadDrainNotice). Not for the head's own node.
  Status DrainNode(const NodeId& node, int64_t deadline_ms, const std::string& reason);
  Result<std::vector<ActorSummary>> Actors();
  Result<std::vector<JobSummary>> Jobs();
  // Every placement group the GCS knows (recently removed and failed ones included), in
  // creation order.
  Result<std::vector<internal::PlacementGroupInfo>> PlacementGroups();
  // Asks every alive node for its workers / the objects in its store.
  Result<WorkersView> Workers();
  Result<ObjectsView> Objects();
  // Every key under `prefix` in KV namespace `ns` with its value.
  Result<std::map<std::string, std::string>> KvPrefix(const std::string& ns,
                                                      const std::string& prefix);
  // Sets `key` in namespace `ns` (replacing it), and removes it (Ok if it was not there).
  Status KvPut(const std::string& ns, const std::string& key, const std::string& value);
  Status KvDel(const std::string& ns, const std::string& key);

  // Jobs run by the head (`rayd job`). SubmitJob ships options.working_dir (at most
  // kMaxWorkingDirBytes, `.git` left out) and returns the job once its driver started, or the
  // one-line reason it could not (no such directory, command not found, a taken id).
  Result<JobSubmissionInfo> SubmitJob(const JobSubmitOptions& options);
  Result<JobSubmissionInfo> GetJobSubmission(const std::string& submission_id);
  Result<std::vector<JobSubmissionInfo>> JobSubmissions();
  // Asks a running job's driver to stop (SIGTERM to its process group, SIGKILL after a grace
  // period); FailedPrecondition naming its status when it has already ended.
  Result<JobSubmissionInfo> StopJobSubmission(const std::string& submission_id);
  // At most `max_bytes` of the job's log from `offset`.
  Result<JobLogChunk> ReadJobLogs(const std::string& submission_id, uint64_t offset,
                                  uint32_t max_bytes = 1u << 20);

 private:
  struct Impl;
  explicit ClusterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A drain's notice as a node hands it to the processes on it: a file in its session directory
// (DrainNoticePath), written when the node learns of the drain and removed when it leaves.
struct DrainNotice {
  int64_t deadline_ms = 0;  // unix ms
  std::string reason;
};
std::string DrainNoticePath(const std::string& session_dir, const std::string& node_id_hex);
// The notice at `path`, or nullopt when there is none (or it cannot be read).
std::optional<DrainNotice> ReadDrainNotice(const std::string& path);
std::string DrainNoticeJson(const DrainNotice& notice);

// The most a submitted job's working directory may hold (Ray's limit for a package too).
inline constexpr uint64_t kMaxWorkingDirBytes = 100ull << 20;

// One-shot reads, each on a connection of its own (ClusterClient keeps one for many).
Result<std::vector<ActorSummary>> FetchActors(const std::string& address,
                                              const std::string& token,
                                              Millis timeout = Millis(10000));
Result<std::vector<JobSummary>> FetchJobs(const std::string& address, const std::string& token,
                                          Millis timeout = Millis(10000));
Result<WorkersView> FetchWorkers(const std::string& address, const std::string& token,
                                 Millis timeout = Millis(10000));
Result<ObjectsView> FetchObjects(const std::string& address, const std::string& token,
                                 Millis timeout = Millis(10000));
Result<std::vector<internal::PlacementGroupInfo>> FetchPlacementGroups(
    const std::string& address, const std::string& token, Millis timeout = Millis(10000));
Result<std::map<std::string, std::string>> FetchKvPrefix(const std::string& address,
                                                         const std::string& token,
                                                         const std::string& ns,
                                                         const std::string& prefix,
                                                         Millis timeout = Millis(10000));

// Resources of the node a daemon runs; unset values are detected.
struct NodeResourceOptions {
  std::optional<double> num_cpus;
  std::optional<double> num_gpus;
  std::optional<int64_t> memory;
  std::optional<int64_t> object_store_memory;
  scheduler::ResourceSet custom;
  scheduler::Labels labels;
};

struct HeadOptions {
  std::string node_ip = "127.0.0.1";  // the head binds here; loopback unless told otherwise
  int port = 6380;
  std::string redis_address;  // empty: in-memory tables
  std::string redis_password;
  std::string token;          // empty: reuse the one in Redis, else generate
  Millis heartbeat_period{1000};
  int missed_heartbeats = 5;
  Millis infeasible_timeout{60000};  // a request no node can satisfy waits this long for one
  NodeResourceOptions resources;
  // The web dashboard and the cluster's /metrics (port -1: none). Unless `dashboard_required`,
  // a port that is taken only costs a warning: the cluster matters more than its page.
  std::string dashboard_host = "127.0.0.1";
  int dashboard_port = 8265;
  bool dashboard_required = false;
  int metrics_port = -1;  // this node's own /metrics (-1: none; 0: any free port)
  // An autoscaler config file (docs/autoscaler.md): nodes are started and stopped from demand.
  std::string autoscaler_config;
};

struct NodeOptions {
  std::string head_address;  // host:port of the head's GCS
  std::string token;
  std::string node_ip = "127.0.0.1";  // this node's address as other nodes reach it
  Millis join_timeout{15000};         // give up if the first registration takes longer
  Millis infeasible_timeout{60000};   // a request no node can satisfy waits this long for one
  NodeResourceOptions resources;
  int metrics_port = -1;  // this node's /metrics on node_ip (-1: none; 0: any free port)
};

// What a started daemon tells whoever waits for it.
struct DaemonInfo {
  std::string gcs_address;  // host:port nodes and drivers connect to
  std::string node_id;
  std::string node_address;
  std::string token;
  std::string session_dir;
  std::string log_file;
  scheduler::ResourceSet resources;
  std::string dashboard_url;    // http://host:port/?token=..., empty without a dashboard
  std::string metrics_address;  // host:port of this daemon's /metrics, empty without
};
using ReadyCallback = std::function<void(const Result<DaemonInfo>&)>;

// Run a daemon on the calling thread until SIGTERM or SIGINT; `on_ready` runs once, when it
// serves or with the reason it could not start. `session_dir` exists (0700) and is the
// daemon's. Return the process exit code.
int RunHeadDaemon(const HeadOptions& options, const std::string& session_dir,
                  const ReadyCallback& on_ready);
int RunNodeDaemon(const NodeOptions& options, const std::string& session_dir,
                  const ReadyCallback& on_ready);

}  // namespace rayd
