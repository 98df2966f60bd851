#pragma once
// The rank actor the Trainer creates in each bundle, and the values the driver and the ranks
// exchange through actor calls (msgpack).
//
// Threading: the actor runs with max concurrency 2. Run (which blocks for the whole loop) runs
// on one actor thread; Host, NodeId and Poll on the other. Run and Poll share only the report
// queue, under a mutex; everything else belongs to Run's thread.

#include <rayd/api.h>
#include <rayd/train/process_group.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rayd::train::internal {

// The key-value namespace of rendezvous addresses (keys "<placement group id>/rendezvous").
inline constexpr char kRendezvousNamespace[] = "rayd.train";

// A checkpoint directory in transit: relative path -> file contents.
using CheckpointFiles = std::map<std::string, std::string>;

// One report of rank 0, as the driver receives it.
struct ReportMessage {
  std::map<std::string, double> metrics;
  bool has_checkpoint = false;
  CheckpointFiles checkpoint;
  MSGPACK_DEFINE(metrics, has_checkpoint, checkpoint);
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
  MSGPACK_DEFINE(loop, config_json, rendezvous_key, world_rank, world_size, local_rank,
                 local_world_size, node_rank, run_name, collective_timeout_s, use_gpu,
                 has_checkpoint, checkpoint);
};

// Thrown by Report out of a loop whose run was stopped; Run catches it.
struct StopRequested {};

class TrainWorker {
 public:
  static TrainWorker* FactoryCreate(int rank) { return new TrainWorker(rank); }

  // This worker's node, for local and node ranks.
  std::string NodeId();
  // Rank 0 only: serves the c10d store on this node's address; returns "host:port".
  // Also publishes it under `rendezvous_key` in the cluster's key-value store, where the other
  // ranks look it up.
  std::string Host(int collective_timeout_s, std::string rendezvous_key);
  // Forms the group, runs the loop, returns true when it returned, false when it left at a
  // Report after RequestStop. Throws what the loop threw (the driver sees a RemoteError).
  bool Run(RunSpec spec);
  // Makes the loop's next Report leave the loop (a single-rank run the driver stopped, so the
  // rank can serve the next run). Called on the actor's second thread while Run runs.
  void RequestStop();
  bool stop_requested() const { return stop_requested_; }
  // Rank 0's reports since the last call, waiting up to `wait_ms` for the first one.
  std::vector<ReportMessage> Poll(int wait_ms);

  // Called by Report on the loop's thread.
  void Enqueue(ReportMessage report);

 private:
  explicit TrainWorker(int rank) : rank_(rank) {}

  int rank_;
  std::unique_ptr<Rendezvous> hosted_;  // rank 0, between Host and Run
  std::atomic<bool> stop_requested_{false};

  std::mutex mu_;
  std::condition_variable reported_;
  std::deque<ReportMessage> reports_;  // guarded by mu_
  bool finished_ = false;              // guarded by mu_: Run has returned or thrown
};

// Reads every regular file under `dir` (recursively) into memory.
Result<CheckpointFiles> ReadCheckpointDir(const std::string& dir);
// Writes `files` under `dir` (created, with parent directories).
Status WriteCheckpointDir(const std::string& dir, const CheckpointFiles& files);

}  // namespace rayd::train::internal
