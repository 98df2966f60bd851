#pragma once
// The Trainer: runs a registered train loop on N rank actors of a rayd cluster, as one
// data-parallel job over a c10d Gloo group, and keeps its reports and checkpoints.
//
//   void TrainMlp(const nlohmann::json& config) {        // runs on every rank
//     auto model = MakeModel();
//     if (auto dir = rayd::train::GetCheckpoint()) LoadFrom(*dir);
//     rayd::train::PreparedModel& ddp = rayd::train::PrepareModel(*model);
//     for (...) { loss.backward(); ddp.FinishBackward(); optimizer.step(); }
//     rayd::train::Report({{"loss", l}}, checkpoint_dir);
//   }
//   RAYD_TRAIN_LOOP(TrainMlp);
//
//   rayd::train::TrainResult r = rayd::train::Trainer("TrainMlp", config,
//       {.num_workers = 2}, {.name = "mlp", .storage_path = "/data/runs"}).Fit();
//
// How Fit works:
// - One placement group holds a bundle per worker; it is reserved whole or not at all. If it
//   is not reserved within ScalingConfig::placement_timeout_s (or is infeasible), Fit fails
//   naming the group, and no rank actor was created.
// - One TrainWorker actor per bundle (max concurrency 2: the blocking Run beside Poll). Rank 0
//   hosts the c10d store on its node's address (RAYD_NODE_IP, which node daemons give their
//   workers; loopback when unset) and publishes its host:port in the cluster's key-value store
//   (namespace "rayd.train", key "<placement group id>/rendezvous", deleted with the group),
//   where the other ranks look it up.
// - The driver polls rank 0 for its reports. A report's checkpoint directory is read on rank 0
//   and its files travel as bytes through the actor call (no shared filesystem); when rank 0's
//   report has a checkpoint, the driver also collects the other ranks' files of the same report
//   (TrainWorker::Part). It writes them to storage_path/name/checkpoint_NNNNNN/ (under a
//   temporary name, renamed once whole), appends the metrics to
//   storage_path/name/result.json (JSON lines) and keeps CheckpointConfig::num_to_keep.
// - A rank that dies or a loop that throws ends the attempt: every rank actor is killed and the
//   group removed; while the failures so far are <= FailureConfig::max_failures, a new attempt
//   starts from the latest checkpoint (its files sent to every rank and unpacked on its node,
//   where GetCheckpoint() finds them). A Fit on a run name that already has checkpoints
//   resumes from its latest one.
//
// Only the driver thread that built a Trainer may call Fit; rayd must be initialised. The
// in-loop functions (GetContext, PrepareModel, Report, GetCheckpoint) may be called only from
// the thread running the loop, inside a rank actor; elsewhere they throw rayd::RaydError.

#include <rayd/api/placement_group.h>
#include <rayd/data/reader.h>
#include <rayd/api/remote.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rayd::train {

// A trial's gang as a device mesh (3D parallelism): data x pipeline x tensor ranks. Ranks are
// numbered tensor fastest, then data, then pipeline (Megatron-LM's order): the ranks of a
// tensor-parallel group are consecutive, so a gang packed in rank order keeps each one on a
// node whenever one node can hold it; pipeline stages are the outermost, and may span nodes.
struct MeshShape {
  int data = 0;  // 0: num_workers / (pipeline x tensor)
  int pipeline = 1;
  int tensor = 1;
  bool IsSet() const { return data > 0 || pipeline > 1 || tensor > 1; }
  bool operator==(const MeshShape&) const = default;
};

// Where one rank sits in a mesh, and the mesh's sizes (all 1 without a mesh but data, which
// is then the world).
struct MeshCoordinates {
  int data = 1, pipeline = 1, tensor = 1;
  int data_rank = 0, pipeline_rank = 0, tensor_rank = 0;
};

struct ScalingConfig {
  // Ranks of the job. -1 (TorchDistributor's num_processes=-1): one per GPU in the cluster,
  // counted when Fit starts (needs use_gpu; ResolveNumWorkers). With min_workers, the most
  // ranks.
  int num_workers = 1;
  // Above 0, an elastic run (torchrun's --nnodes=MIN:MAX, Ray Train's (min, max),
  // `num_workers: [min, max]` in YAML) of min_workers to num_workers ranks: each attempt starts
  // with as many as fit (ElasticWorkers), so a run restarting after a node died goes on with
  // the workers left instead of waiting for the lost node; and a run (not a Tuner's trial)
  // grows toward num_workers at a checkpoint once the cluster has room, at most once per
  // resize_interval_s. Every resize restarts the ranks from the newest checkpoint, as a
  // failure does, without counting as one; each result row records world_size.
  int min_workers = 0;
  double resize_interval_s = 30;
  // Asks each bundle for a GPU too (resources_per_worker's "GPU", 1 when unset), and trains on
  // it over NCCL: each rank's model and gradients live on its device (TrainContext::device).
  // Ranks of one group never share a GPU (NCCL refuses it), so with more than one worker the
  // GPUs per worker must be whole; a single-rank run may take a fraction (trials sharing a
  // GPU). A build against a CPU-only LibTorch reserves the GPUs and trains on the CPU over
  // Gloo, saying so in each rank's log.
  bool use_gpu = false;
  // Resources of one worker's bundle; empty means {"CPU": 1}.
  std::map<std::string, double> resources_per_worker;
  rayd::PlacementStrategy placement_strategy = rayd::PlacementStrategy::PACK;
  // Every rank on the driver's node (HorovodRunner/TorchDistributor local_mode): each bundle
  // is pinned there by its node-id label, whatever placement_strategy says.
  bool local_mode = false;
  // How long Fit waits for the group to be reserved before failing.
  int placement_timeout_s = 60;
  // Bounds forming the process group and each collective, so a hung peer fails fast.
  int collective_timeout_s = 60;
  // A device mesh: data x pipeline x tensor must equal num_workers (data may be left 0, then
  // it is num_workers / (pipeline x tensor)). Unset: every rank is a data-parallel replica.
  // GetContext().mesh tells a rank its coordinates; GetGroup (rayd/train/session.h) its data,
  // pipeline and tensor groups.
  MeshShape mesh;
};

struct FailureConfig {
  // Restarts allowed after a failed attempt; -1: unlimited.
  int max_failures = 0;
  // Restarts allowed after a drained node (`rayd drain`) took ranks away, counted apart from
  // failures (Ray Train counts preemptions so); -1: unlimited.
  int max_preemptions = -1;
};

struct CheckpointConfig {
  int num_to_keep = 0;  // 0: keep every checkpoint
  // The metric that ranks checkpoints for num_to_keep; empty: keep the newest. The latest
  // checkpoint is always kept, since restarts resume from it.
  std::string score_attribute;
  std::string score_order = "max";  // "max" or "min": which scores are best
};

struct RunConfig {
  std::string name;          // the run's directory under storage_path; resumed when it exists
  std::string storage_path;  // a directory on the driver's machine
  FailureConfig failure;
  CheckpointConfig checkpoint;
  // Experiment tracking in MLflow's file-store layout (docs/tracking.md), written by the driver
  // from rank 0's reports: a directory or a file:// URI (`mlflow ui --backend-store-uri` opens
  // it); empty: off. A Trainer writes one MLflow run per Fit; a Tuner one per trial.
  std::string mlflow_tracking_uri;
  // The MLflow experiment the runs go to, found by name or created; empty: `name`.
  std::string mlflow_experiment_name;
  // The datasets the run's ranks read (Ray Train's `datasets=`): each rank takes its shard of
  // one by name with GetDatasetShard (rayd/train/data.h). Carried here so that a Trainer, a
  // TrainingRun and every trial of a Tuner get them through the one config they share. Paths
  // must be valid on the nodes the ranks run on (absolute, or relative to their working
  // directory); train.yaml and tune.yaml make them absolute against the file's directory.
  std::vector<rayd::data::DatasetSpec> datasets;
};

// A report of rank 0 as Fit persisted it.
struct ReportedResult {
  // The loop's metrics plus what Fit adds (Ray's auto-filled fields): training_iteration
  // (reports so far in this run, across restarts and resumes), time_this_iter_s, time_total_s
  // (seconds the run has been training, over all its attempts) and timestamp (unix seconds).
  std::map<std::string, double> metrics;
  std::optional<std::string> checkpoint;  // the persisted checkpoint directory, if it had one
};

namespace internal {
class Gang;
}  // namespace internal

// Keeps the gang (placement group and rank actors) of a run that finished, for the next Fit of
// the same shape (workers, bundle, strategy, local_mode) to reuse: no new group, no new worker
// processes, only a new rendezvous for several ranks (Ray Tune's reuse_actors). Holds one idle
// gang; destroying the pool tears it down. Gangs of runs that failed or were stopped are never
// kept. A train loop that runs on a reused rank must not rely on process state from an earlier
// run.
class GangPool {
 public:
  GangPool();
  ~GangPool();
  GangPool(const GangPool&) = delete;
  GangPool& operator=(const GangPool&) = delete;

  // Used by Fit.
  std::unique_ptr<internal::Gang> Take(const std::string& shape);
  void Put(const std::string& shape, std::unique_ptr<internal::Gang> gang);

 private:
  class Idle;
  std::mutex mu_;
  std::unique_ptr<Idle> idle_;  // guarded by mu_
};

// Hooks for a caller that drives many runs (the Tuner).
struct FitOptions {
  // Called on Fit's thread after each report is persisted; returning false stops the run at
  // once (its ranks are killed and its group removed; not a failure: TrainResult::stopped).
  std::function<bool(const ReportedResult&)> on_report;
  // Fields added to every result.json line (e.g. trial_id, config).
  nlohmann::json result_fields = nlohmann::json::object();
  // What Fit writes to the run directory's params.json (rayd/train/run_directory.h). Unset:
  // the config, num_workers and, when the config has batch_size (per worker),
  // effective_batch_size = batch_size * num_workers. The Tuner sets the trial's config, as Ray
  // Tune's params.json holds.
  std::optional<nlohmann::json> params;
  // Reuse a finished run's gang from here, and leave this run's there when it finishes.
  std::shared_ptr<GangPool> reuse;
  // Called on Fit's thread with one line whenever the run's size is in question: an elastic run
  // waiting for its workers, starting with fewer, growing; a restart that leaves a draining
  // node. `rayd train` prints them; unset, they go to the driver's log only.
  std::function<void(const std::string&)> on_notice;
  // An elastic run (ScalingConfig::min_workers) starts with as many workers as fit and grows
  // toward num_workers by itself when the cluster has room. A Tuner turns this off: its trials
  // start at min_workers, and it decides which of them grow (TrainingRun::GrowTo).
  bool grow = true;
};

// What Fit ended with.
struct TrainResult {
  std::map<std::string, double> metrics;  // rank 0's last report (kept across restarts)
  std::optional<std::string> checkpoint;  // the latest persisted checkpoint directory
  std::string error;                      // empty when the run finished
  int restarts = 0;                       // attempts started after a failure
  std::vector<std::string> restart_errors;  // why each of those failed, in order
  int resizes = 0;                        // an elastic run's attempts started to grow
  int preemptions = 0;  // attempts started after a drained node (`rayd drain`) took ranks away
  bool stopped = false;                   // FitOptions::on_report asked to stop
  bool ok() const { return error.empty(); }
};

// Runs `train_loop_name` (registered with RAYD_TRAIN_LOOP in the driver's binary, which
// workers re-run) with `config` on every rank.
struct Command;

class Trainer {
 public:
  Trainer(std::string train_loop_name, nlohmann::json config, ScalingConfig scaling, RunConfig run);
  // Runs `command` as a process on every rank instead of a train loop (rayd/train/command.h);
  // `config` reaches it as RAYD_CONFIG_FILE (the Python client's get_config()).
  Trainer(Command command, nlohmann::json config, ScalingConfig scaling, RunConfig run);

  // Blocks until the run finishes or fails for good; failures come back in TrainResult::error
  // rather than as exceptions. Throws RaydError for an invalid configuration or when rayd is
  // not initialised.
  TrainResult Fit();
  TrainResult Fit(const FitOptions& options);

 private:
  std::string train_loop_name_;
  std::shared_ptr<const Command> command_;  // set: a command trainable
  nlohmann::json config_;
  ScalingConfig scaling_;
  RunConfig run_;
};

// This rank's node is leaving the cluster (`rayd drain`: a preemption notice). Its ranks are
// stopped at `deadline`: report a checkpoint now, and the run goes on from it on other nodes
// without counting a failure.
struct NodeDrain {
  double deadline = 0;  // unix seconds
  std::string reason;   // as given to `rayd drain --reason`; may be empty
  double SecondsLeft() const;
};

// Where this rank sits in the job.
struct TrainContext {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;        // among the ranks on this node
  int local_world_size = 1;  // ranks on this node
  int node_rank = 0;         // nodes numbered in order of their lowest rank
  std::string run_name;
  // Where this rank trains: "cuda:0" with use_gpu (the first of the GPUs its bundle holds,
  // the only ones it sees), else "cpu". PrepareModel moves the model there; make the data
  // there too (torch::Device(GetContext().device)).
  std::string device = "cpu";
  // Coordinates in the run's mesh (ScalingConfig::mesh); without one, data = world_size and
  // data_rank = world_rank.
  MeshCoordinates mesh;
  // Set while this rank's node is draining; each GetContext() call looks again (a stat of the
  // node's notice file, ~1 us), so a loop may ask once per step.
  std::optional<NodeDrain> drain;
};

// Inside a train loop (on the thread running it, in a rank actor; elsewhere these throw
// rayd::RaydError):
const TrainContext& GetContext();
// Records metrics, and a checkpoint directory. Only rank 0's metrics are kept; the others' are
// dropped. Two kinds of checkpoint:
// - Every rank's, in directories from NewCheckpointDir (sharded state): every rank calls Report
//   at the same points of the loop (as Ray Train's report), and the files each rank passes to
//   its Report of the same count join rank 0's checkpoint (name each rank's files apart). The
//   driver persists the checkpoint only once every rank's files are in: it appears whole or not
//   at all. Report returns at once; the directory is shipped (after the writes into it posted
//   before, PreparedOptimizer::SaveState) and deleted in the background while the loop trains.
// - Rank 0's, in a directory of the loop's own: copied before Report returns, so the loop may
//   delete it afterwards; the other ranks need not report.
// When the driver stops a single-rank run (a scheduler's decision) to reuse the rank, Report
// leaves the loop by throwing an internal type: let it pass (no catch (...) around Report).
void Report(const std::map<std::string, double>& metrics,
            const std::optional<std::string>& checkpoint_dir = std::nullopt);
// A new, empty directory on this rank's node for the checkpoint the next Report takes over.
std::string NewCheckpointDir();
// The directory of the checkpoint this attempt resumes from (on this node), if any.
std::optional<std::string> GetCheckpoint();

using TrainLoop = void (*)(const nlohmann::json& config);
// Registers `loop` under `name`; the Trainer looks it up there on every rank. Returns true.
bool RegisterTrainLoop(const std::string& name, TrainLoop loop);
// The names registered in this process so far (sorted).
std::vector<std::string> RegisteredTrainLoops();
// Empty when `name` is registered here; else the reason, naming the registered loops:
// "unknown train loop 'x' (registered: a, b)".
std::string UnknownTrainLoop(const std::string& name);

// Copies the checkpoint directory `source` into the run directory `run_dir`
// (storage_path/name) as its newest checkpoint, so the run's next Fit resumes from it (PBT's
// exploit). Returns the new directory. Not while a Fit of that run persists reports.
Result<std::string> AddCheckpoint(const std::string& run_dir, const std::string& source);

// One worker's bundle: resources_per_worker ({"CPU": 1} when empty), plus a GPU with use_gpu.
std::map<std::string, double> WorkerBundle(const ScalingConfig& scaling);

// Empty when `scaling` keeps every rank of a group on GPUs of its own; else why its
// resources_per_worker.GPU does not. NCCL refuses two ranks of one communicator on one GPU, so
// with use_gpu and more than one worker each worker's GPUs must be whole.
std::string CheckGpuSharing(const ScalingConfig& scaling);

// Empty when `scaling`'s elastic bounds hold (min_workers 0, or 1 <= min_workers <=
// num_workers, no mesh, a positive resize_interval_s); else why not.
std::string CheckElastic(const ScalingConfig& scaling);
// How many of `scaling`'s worker bundles `resources` (summed over the cluster) holds. Summed
// resources stand for what could be placed: a bundle must fit on one node, so this may count a
// bundle split across two (a reservation then stays pending).
int WorkersThatFit(const ScalingConfig& scaling, const std::map<std::string, double>& resources);
// num_workers, or for -1 one worker per GPU of the cluster now. Throws RaydError naming
// ScalingConfig.num_workers without use_gpu, when the cluster has no GPU, or for another value
// below 1. Needs rayd initialised.
int ResolveNumWorkers(const ScalingConfig& scaling);
// How many workers an elastic attempt asks for: WorkersThatFit(`available`, the cluster's
// free resources) plus `own` (workers whose bundles this run holds and gives back), clamped to
// [min_workers, num_workers].
int ElasticWorkers(const ScalingConfig& scaling, const std::map<std::string, double>& available,
                   int own = 0);

// The mesh `scaling` asks for, its data size filled in; RaydError naming ScalingConfig.mesh
// when its sizes are below 1 or their product is not num_workers (num_workers resolved).
MeshShape ResolveMesh(const ScalingConfig& scaling);
// Empty when ResolveMesh would accept `scaling`, else why not.
std::string CheckMesh(const ScalingConfig& scaling);
// Rank `rank`'s place in `mesh` (data resolved), and the world ranks of its group along each
// axis, in the order of that axis' coordinate.
MeshCoordinates MeshCoordinatesOf(const MeshShape& mesh, int rank);
enum class MeshAxis { kData, kPipeline, kTensor };
std::vector<int> MeshGroupRanks(const MeshShape& mesh, int rank, MeshAxis axis);

}  // namespace rayd::train

// Registers a `void fn(const nlohmann::json&)` under its own name, at static initialisation.
#define RAYD_TRAIN_LOOP(fn)                                                                  \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_train_loop_registered_, __COUNTER__) = \
      ::rayd::train::RegisterTrainLoop(#fn, fn)
