#pragma once
// The rank actor the Trainer creates in each bundle, and the values the driver and the ranks
// exchange through actor calls (msgpack).
//
// Threading: the actor runs with max concurrency 2. Run (which blocks for the whole loop) runs
// on one actor thread; Host, NodeId, Poll and Part on the other. Run and Poll share only the
// report queue, Run and Part the checkpoint parts, under a mutex; the loop's reports are enqueued
// by its session's writer thread (background_writer.h). Everything else belongs to Run's thread.

#include <rayd/api.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace rayd::train::internal {

class HostedRendezvous;
class HorovodRendezvous;

// The key-value namespace of rendezvous addresses (keys "<placement group id>/rendezvous").
inline constexpr char kRendezvousNamespace[] = "rayd.train";

// A checkpoint directory in transit: relative path -> file contents.
using CheckpointFiles = std::map<std::string, std::string>;

// One report of rank 0, as the driver receives it.
struct ReportMessage {
  std::map<std::string, double> metrics;
  bool has_checkpoint = false;
  CheckpointFiles checkpoint;
  int index = -1;  // the loop's Report calls before this one, this attempt (every rank counts)
  // The checkpoint is every rank's (its directory came from NewCheckpointDir): the other ranks'
  // files of the same report join it before it is persisted.
  bool gather = false;
  MSGPACK_DEFINE(metrics, has_checkpoint, checkpoint, index, gather);
};

// What one Poll of rank 0 hands over: its reports since the last Poll, and whether its loop
// was over when they were taken (then no report can follow them this attempt).
struct PollReply {
  std::vector<ReportMessage> reports;
  bool finished = false;
  // Rank 0's node is draining (`rayd drain`): the driver looks at the node table now rather
  // than trusting a second-old read, since the loop may have checkpointed for it.
  bool node_draining = false;
  MSGPACK_DEFINE(reports, finished, node_draining);
};

// Another rank's files for the checkpoint of rank 0's report `index` (its own `index`-th Report),
// as the driver collects them before persisting that checkpoint.
struct CheckpointPart {
  bool ready = false;     // the rank has made that Report, or its loop is over
  bool reported = false;  // the rank has made that Report
  bool failed = false;    // its loop is over, and ended by failing
  CheckpointFiles files;  // empty when it passed no NewCheckpointDir directory
  MSGPACK_DEFINE(ready, reported, files, failed);
};

// A command trainable (rayd/train/command.h) as it travels to the ranks.
struct CommandSpec {
  std::vector<std::string> argv;
  std::string launcher;
  std::string working_dir;
  std::map<std::string, std::string> env;
  int report_timeout_s = 0;
  int stop_grace_s = 5;
  std::string path;
  MSGPACK_DEFINE(argv, launcher, working_dir, env, report_timeout_s, stop_grace_s, path);
};

// What a rank needs to run its part of one attempt.
struct RunSpec {
  std::string loop;
  std::string config_json;
  // Where rank 0 published its c10d store's "host:port" in the cluster's key-value store
  // (namespace kRendezvousNamespace).
  std::string rendezvous_key;
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string run_name;
  int collective_timeout_s = 60;
  bool use_gpu = false;  // train on this rank's GPU over NCCL (see ScalingConfig::use_gpu)
  bool has_checkpoint = false;
  CheckpointFiles checkpoint;
  // A command trainable: run `command` instead of the loop, with its launcher's environment.
  bool has_command = false;
  CommandSpec command;
  int num_nodes = 1;
  std::vector<std::string> endpoints;  // a reserved port on each rank's node, by rank
  std::string trial_id;                // the run's id (a Tuner's trial id, else its name)
  std::string trial_dir;               // the run's directory on the driver
  int restart_count = 0;               // attempts before this one that failed
  int max_restarts = 0;
  double cpus = 1;       // the bundle's CPUs
  bool gpus = false;     // the bundle holds GPUs (the worker's CUDA_VISIBLE_DEVICES)
  // Names the attempt: a Poll for it answers only about this Run, never about the rank's
  // previous one (a reused rank may get the Poll before the Run).
  uint64_t attempt_token = 0;
  // The run's mesh (ScalingConfig::mesh, resolved): 1 x 1 x world_size without one.
  int mesh_data = 1;
  int mesh_pipeline = 1;
  int mesh_tensor = 1;
  std::vector<int> rank_nodes;  // each rank's node (0.., by first appearance), by rank
  // RunConfig::datasets as JSON (DatasetsToJson), for GetDatasetShard.
  std::string datasets_json;
  MSGPACK_DEFINE(loop, config_json, rendezvous_key, world_rank, world_size, local_rank,
                 local_world_size, node_rank, run_name, collective_timeout_s, use_gpu,
                 has_checkpoint, checkpoint, has_command, command, num_nodes, endpoints, trial_id,
                 trial_dir, restart_count, max_restarts, cpus, gpus, attempt_token, mesh_data,
                 mesh_pipeline, mesh_tensor, rank_nodes, datasets_json);
};

// Thrown by Report out of a loop whose run was stopped; Run catches it.
struct StopRequested {};

class TrainWorker {
 public:
  static TrainWorker* FactoryCreate(int rank) { return new TrainWorker(rank); }
  ~TrainWorker();

  // This worker's node, for local and node ranks.
  std::string NodeId();
  // Loads rayd's torch half (LibTorch) now, beside the start's other calls, so that every rank
  // of a run that forms a group loads it at once rather than each when its turn comes (rank 0
  // for Host, the others when Run forms the group: one after the other). False if it cannot be
  // loaded: whoever needs it then says why.
  bool WarmTorch();
  // Rank 0 only: serves the c10d store on this node's address; returns "host:port".
  // Also publishes it under `rendezvous_key` in the cluster's key-value store, where the other
  // ranks look it up.
  std::string Host(int collective_timeout_s, std::string rendezvous_key);
  // A port free on this node, "host:port": a command's rendezvous (MASTER_PORT, TF_CONFIG).
  std::string ReservePort();
  // Rank 0 of a Horovod command: serves the attempt's HTTP rendezvous on `endpoints[0]` (this
  // rank's reserved port) for the gang placed as `rank_nodes` says, until this rank's next Run
  // returns; replaces an earlier attempt's. Returns its "host:port".
  std::string HostHorovod(std::vector<int> rank_nodes, std::vector<std::string> endpoints);
  // Forms the group, runs the loop (or the command) until it returns, or leaves it at a Report
  // after RequestStop. Returns how many reports rank 0 enqueued this attempt (0 on the other
  // ranks), all of them enqueued by then: a driver that has polled that many needs no last
  // Poll. Throws what the loop threw (the driver sees a RemoteError).
  int Run(RunSpec spec);
  // Makes the loop's next Report leave the loop (a single-rank run the driver stopped, so the
  // rank can serve the next run). Called on the actor's second thread while Run runs.
  void RequestStop();
  bool stop_requested() const { return stop_requested_; }
  // Rank 0's reports of the attempt `attempt_token` since the last call, waiting up to
  // `wait_ms` for the first one (or the end of its loop; or for its Run to start).
  PollReply Poll(int wait_ms, uint64_t attempt_token);
  // Ranks 1..N-1: this rank's files for its `index`-th Report, once it made it (or its loop is
  // over), waiting up to `wait_ms`; not ready after that. Parts up to `index` are let go.
  CheckpointPart Part(int index, int wait_ms);

  // Called by the session as the loop's reports are shipped: rank 0's report, another rank's
  // `index`-th Report (with its checkpoint files, if it had a checkpoint).
  void Enqueue(ReportMessage report);
  void Deposit(int index, std::optional<CheckpointFiles> files);

 private:
  explicit TrainWorker(int rank);
  // A command rank's part of Run: the command in place of the loop.
  void RunCommand(const RunSpec& spec, const std::string& checkpoint_dir);
  // Reports enqueued since this attempt's Run began.
  int Enqueued();

  int rank_;
  // Readable once RequestStop was called: wakes a command rank waiting on its command.
  int stop_pipe_[2] = {-1, -1};
  std::unique_ptr<HostedRendezvous> hosted_;  // rank 0, between Host and Run
  std::unique_ptr<HorovodRendezvous> horovod_;  // rank 0 of a Horovod command, for one attempt
  std::atomic<bool> stop_requested_{false};

  std::mutex mu_;
  std::condition_variable reported_;
  std::deque<ReportMessage> reports_;  // guarded by mu_
  std::map<int, CheckpointFiles> parts_;  // guarded by mu_: by report index, until collected
  int deposited_ = 0;                  // guarded by mu_: Reports this rank has shipped
  int enqueued_ = 0;                   // guarded by mu_: reports Enqueued this attempt
  bool finished_ = false;              // guarded by mu_: Run has returned or thrown
  bool loop_failed_ = false;           // guarded by mu_: ... by throwing
  uint64_t attempt_token_ = 0;         // guarded by mu_: the attempt of the latest Run
};

// Reads every regular file under `dir` (recursively) into memory.
Result<CheckpointFiles> ReadCheckpointDir(const std::string& dir);
// Writes `files` under `dir` (created, with parent directories).
Status WriteCheckpointDir(const std::string& dir, const CheckpointFiles& files);

}  // namespace rayd::train::internal
