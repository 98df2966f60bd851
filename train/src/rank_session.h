#pragma once
// The state of the train loop running in a rank process, and the seam between rayd_train's two
// libraries.
//
// rayd_train (this directory) holds everything a rank needs that does not touch LibTorch: the
// TrainWorker actor, the loop registry, GetContext, Report and checkpoints. rayd_train_torch
// (torch/) holds the process group, PrepareModel, PrepareOptimizer and what they build on. A
// process loads LibTorch only when something in it needs LibTorch: a loop that trains a model
// links rayd_train_torch; a loop that only reports (most sweeps' toy objectives, command
// trainables' ranks) does not, and its rank process starts without LibTorch's ~1 s of
// initialisers (Debian's libtorch links 286 libraries).
//
// The torch half registers TorchHooks when it is loaded (a static initialiser). When a rank
// needs it and nothing linked it (a run of several ranks forms its group before the loop
// starts; use_gpu asks whether this build has CUDA), RequireTorch dlopens it from beside
// librayd_train.so.
//
// Threading: a RankSession belongs to the thread running the loop (TrainWorker::Run's).

#include <rayd/base/status.h>
#include <rayd/data/shard.h>
#include <rayd/train/trainer.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "background_writer.h"
#include "data_feed.h"

namespace rayd::train::internal {

class TrainWorker;

// What the torch half keeps for one run: its process group, prepared models and optimizers.
class TorchRunState {
 public:
  virtual ~TorchRunState() = default;
};

// Rank 0's c10d store, served between TrainWorker::Host and Run.
class HostedRendezvous {
 public:
  virtual ~HostedRendezvous() = default;
  virtual std::string address() const = 0;  // "host:port"
};

// How this run's process group is formed, when the torch half forms it.
struct GroupSpec {
  bool nccl = false;  // NCCL on cuda:0, else Gloo
  int rank = 0;
  int world_size = 1;
  std::string local_address = "127.0.0.1";
  std::chrono::milliseconds timeout{60'000};
  std::unique_ptr<HostedRendezvous> hosted;  // rank 0 of several ranks
  std::string join_address;                  // ranks 1..n-1: rank 0's "host:port"
  // With pipeline or tensor above 1, the data, pipeline and tensor groups are formed too,
  // through the world's store.
  MeshShape mesh;
};

// Where this process keeps rayd's scratch files (an unpacked checkpoint, NewCheckpointDir's, a
// command's config and socket), made on first use: its node's directory for this worker
// (RAYD_WORKER_TEMP_DIR), which the node removes once the worker is dead, even SIGKILLed; the
// system's temporary directory outside a node's worker.
std::filesystem::path ScratchDir();

// Where this process's node posts a drain notice (rayd::DrainNoticePath, from the worker's
// RAYD_SESSION_DIR and RAYD_NODE_ID); empty outside a node's worker.
std::string NodeDrainFile();
// The notice at `path` as a rank sees it; nullopt when there is none.
std::optional<NodeDrain> ReadNodeDrain(const std::string& path);

struct RankSession {
  RankSession() = default;
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;
  // Removes the directories from NewCheckpointDir the loop never reported.
  ~RankSession();

  TrainContext context;
  // The run's datasets (RunSpec::datasets_json), and the shards the loop took of them.
  std::string datasets_json;
  std::map<std::string, std::unique_ptr<data::DatasetShard>> shards;
  double data_wait_reported = 0;  // the shards' wait_seconds at the last Report
  std::unique_ptr<DataFeed> data_feed;  // made with the first shard
  std::string drain_file;  // NodeDrainFile(), read by each GetContext
  TrainWorker* worker = nullptr;
  GroupSpec group;
  // The torch half's state, made when the loop first prepares a model or an optimizer (or the
  // group of several ranks is formed). Destroyed after `writer`, which may still use it.
  std::unique_ptr<TorchRunState> torch;
  std::optional<std::string> checkpoint;  // the unpacked checkpoint this attempt resumes from
  int reports = 0;                        // Report calls so far
  // Directories from NewCheckpointDir not reported yet (Report takes them over and deletes them).
  std::set<std::string> new_dirs;
  int dirs_made = 0;
  // Last, so that it is destroyed first: it ships what is still posted (the loop's last
  // reports) while everything its jobs use is alive.
  BackgroundWriter writer;
};

// The session of the loop running on this thread; throws RaydError naming `what` outside one.
RankSession& RequireSession(const char* what);

// What rayd_train needs from rayd_train_torch. Each throws RaydError when it fails.
struct TorchHooks {
  // Rank 0 of several: serves the c10d store on `address`, accepting joiners for `timeout`.
  std::unique_ptr<HostedRendezvous> (*host)(const std::string& address,
                                            std::chrono::milliseconds timeout) = nullptr;
  // Forms `session`'s process group now, if it has none.
  void (*form_group)(RankSession& session) = nullptr;
  // Whether this build trains on GPUs (LibTorch with CUDA and NCCL).
  bool (*cuda_built)() = nullptr;
  // Before each run: one intra-op thread (ranks share the node's cores).
  void (*begin_run)() = nullptr;
  // After each run on a GPU: the caching allocator's blocks go back to the driver.
  void (*release_device_memory)() = nullptr;
};

// Called once by the torch half as it is loaded; returns true.
bool RegisterTorchHooks(const TorchHooks& hooks);
// The torch half's hooks if it is loaded in this process, else null.
const TorchHooks* LoadedTorch();
// The torch half's hooks, loading librayd_train_torch.so from beside librayd_train.so when it
// is not loaded yet; throws RaydError naming `why` and the loader's error when it cannot be.
const TorchHooks& RequireTorch(const std::string& why);
// Whether LibTorch itself is in this process (a loop linked it, without rayd's torch half).
bool LibTorchInProcess();

}  // namespace rayd::train::internal
