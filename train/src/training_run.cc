// The driver side of a training run: attempts, each one a gang (placement group and rank
// actors), restarted from the latest checkpoint within max_failures. A state machine on the
// owner's event loop; see training_run.h for the protocol and trainer.h for what Fit promises.

#include <rayd/api/task_options.h>
#include <rayd/base/logging.h>
#include <rayd/train/data.h>
#include <rayd/train/mlflow.h>
#include <rayd/train/run_directory.h>
#include <rayd/train/training_run.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "checkpoint_store.h"
#include "cluster_nodes.h"
#include "data_feed.h"
#include "run_feed.h"
#include "train_worker.h"

namespace rayd::train {
namespace {

using internal::CheckpointPart;
using internal::CheckpointStore;
using internal::ReportMessage;
using internal::TrainWorker;

constexpr int kStartTimeoutMs = 60'000;  // a rank actor starts (a worker process spawns)
// How long one Poll may wait on rank 0 for a report. Poll answers at once when rank 0 reports
// or its loop ends, so this bounds only how long a quiet rank 0 holds an actor call open.
constexpr int kPollWaitMs = 10'000;
constexpr int kPollTimeoutMs = 30'000;  // a Poll call is answered (rank 0 is not wedged)
constexpr int kDrainTimeoutMs = 5'000;  // rank 0 hands over its last reports after a failure
constexpr int kStopTimeoutMs = 5'000;   // a stopped single-rank loop reaches its next Report
// A stopped command rank ends its process group: its grace period, and this beside it.
constexpr int kCommandStopSlackMs = 5'000;
// An elastic attempt waits this long for a group of more than min_workers before asking for
// fewer (what the cluster's free resources hold, or one fewer).
constexpr int kElasticWaitMs = 5'000;

// How an attempt ended.
struct Attempt {
  enum class End { kFinished, kFailed, kNoGroup, kStopped } end = End::kFinished;
  std::string error;
  bool idle = false;  // every rank's Run returned: the gang may serve another run
};

using Reports = ObjectRef<internal::PollReply>;

uint64_t AttemptToken() {
  static std::atomic<uint64_t> next{std::random_device{}() |
                                    (uint64_t{std::random_device{}()} << 32)};
  return ++next;
}

}  // namespace

namespace internal {

// The attempt's placement group and rank actors; tears both down when destroyed (killing the
// actors first, so none is left running in a removed bundle).
class Gang {
 public:
  explicit Gang(rayd::PlacementGroup group) : group_(std::move(group)) {}
  ~Gang() {
    for (const auto& actor : actors_) {
      try {
        actor.Kill();
      } catch (const RaydError&) {
        // Already gone.
      }
    }
    try {
      rayd::RemovePlacementGroup(group_.GetID());
    } catch (const RaydError&) {
      // Already removed.
    }
    try {
      rayd::KvDel(internal::kRendezvousNamespace, rendezvous_key());
    } catch (const RaydError&) {
      // The head is gone: nothing to clean.
    }
  }
  Gang(const Gang&) = delete;
  Gang& operator=(const Gang&) = delete;

  const rayd::PlacementGroup& group() const { return group_; }
  std::string rendezvous_key() const { return group_.GetID() + "/rendezvous"; }
  std::vector<ActorHandle<TrainWorker>>& actors() { return actors_; }
  std::vector<std::string>& nodes() { return nodes_; }  // each rank's node

 private:
  rayd::PlacementGroup group_;
  std::vector<ActorHandle<TrainWorker>> actors_;
  std::vector<std::string> nodes_;
};

}  // namespace internal

namespace {

using internal::Gang;

// What a gang was made for: only a run asking for the same may reuse it.
std::string ShapeOf(const ScalingConfig& scaling) {
  nlohmann::json shape = {{"workers", scaling.num_workers},
                          {"bundle", WorkerBundle(scaling)},
                          {"tensor", std::max(scaling.mesh.tensor, 1)},
                          {"strategy", static_cast<int>(scaling.placement_strategy)},
                          {"local", scaling.local_mode}};
  return shape.dump();
}

// params.json of a Trainer's own run: the config and the workers (an elastic run's range too),
// as MLflow-style params. The effective batch is each rank's batch times the data-parallel
// ranks (a mesh's pipeline stages and tensor shards share one batch), at the start.
nlohmann::json TrainerParams(const nlohmann::json& config, const ScalingConfig& scaling,
                             int data_size) {
  nlohmann::json params = {{"config", config}, {"num_workers", scaling.num_workers}};
  if (scaling.min_workers > 0 && scaling.min_workers < scaling.num_workers) {
    params["min_workers"] = scaling.min_workers;
    params["max_workers"] = scaling.num_workers;
  }
  if (config.is_object() && config.contains("batch_size") && config["batch_size"].is_number()) {
    params["effective_batch_size"] = config["batch_size"].get<double>() * data_size;
  }
  return params;
}

std::string Describe(const std::map<std::string, double>& resources) {
  std::ostringstream out;
  out << "{";
  for (const auto& [name, amount] : resources) {
    if (name != resources.begin()->first) out << ", ";
    out << name << ": " << amount;
  }
  out << "}";
  return out.str();
}

// Each rank's node, numbered 0.. in order of first appearance (the ranks' node_rank).
std::vector<int> RankNodes(const std::vector<std::string>& nodes) {
  std::map<std::string, int> number;
  std::vector<int> out;
  for (const auto& node : nodes) {
    out.push_back(number.emplace(node, static_cast<int>(number.size())).first->second);
  }
  return out;
}

// Each rank's RunSpec. Nodes are numbered in order of their lowest rank; local ranks count up
// within a node.
std::vector<internal::RunSpec> RunSpecs(const internal::RunSpec& common,
                                        const std::vector<std::string>& nodes) {
  std::map<std::string, int> node_rank;
  std::map<std::string, int> on_node;
  for (const auto& node : nodes) {
    node_rank.emplace(node, static_cast<int>(node_rank.size()));
    ++on_node[node];
  }
  std::map<std::string, int> seen;
  const std::vector<int> rank_nodes = RankNodes(nodes);
  std::vector<internal::RunSpec> specs;
  for (size_t rank = 0; rank < nodes.size(); ++rank) {
    internal::RunSpec spec = common;
    spec.world_rank = static_cast<int>(rank);
    spec.world_size = static_cast<int>(nodes.size());
    spec.local_rank = seen[nodes[rank]]++;
    spec.local_world_size = on_node[nodes[rank]];
    spec.node_rank = node_rank[nodes[rank]];
    spec.num_nodes = static_cast<int>(node_rank.size());
    spec.rank_nodes = rank_nodes;
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace

int ResolveNumWorkers(const ScalingConfig& scaling) {
  if (scaling.num_workers >= 1) return scaling.num_workers;
  if (scaling.num_workers != -1) {
    throw RaydError("ScalingConfig.num_workers must be at least 1, or -1 for one per GPU");
  }
  if (!scaling.use_gpu) throw RaydError("ScalingConfig.num_workers = -1 needs use_gpu");
  const double gpus = rayd::ClusterResources()["GPU"];
  const int workers = static_cast<int>(gpus / WorkerBundle(scaling).at("GPU") + 1e-9);
  if (workers < 1) throw RaydError("ScalingConfig.num_workers = -1: the cluster has no GPU");
  return workers;
}

// Where the runtime's wake-ups go: the owner's loop while the run lives. The runtime calls
// back on its own thread, possibly after the run (and its loop) are gone. (Not in the anonymous
// namespace: TrainingRun::Impl holds one.)
struct Inbox {
  std::mutex mu;
  EventLoop* loop = nullptr;  // guarded by mu; null once the run is gone

  void Post(std::function<void()> fn) {
    std::lock_guard lock(mu);
    if (loop) loop->Post(std::move(fn));
  }
};

class TrainingRun::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(EventLoop& loop, Target target, nlohmann::json config, ScalingConfig scaling,
       RunConfig run, FitOptions options, Callbacks callbacks)
      : loop_(loop),
        inbox_(std::make_shared<Inbox>()),
        deadline_(loop),
        loop_name_(std::holds_alternative<std::string>(target) ? std::get<std::string>(target)
                                                               : ""),
        command_(std::holds_alternative<Command>(target)
                     ? std::optional<Command>(std::get<Command>(std::move(target)))
                     : std::nullopt),
        config_(std::move(config)),
        scaling_(std::move(scaling)),
        run_(std::move(run)),
        options_(std::move(options)),
        callbacks_(std::move(callbacks)) {
    inbox_->loop = &loop;
  }

  ~Impl() {
    std::lock_guard lock(inbox_->mu);
    inbox_->loop = nullptr;
  }

  // The checks and files of Fit's start; throws RaydError.
  void Open();
  void BeginAttempt();
  void Answer(bool go_on);
  void GrowTo(int workers) { grow_to_ = std::min(workers, scaling_.num_workers); }
  bool WaitingForWorkers() const { return reserving_; }
  // The owner lets go of a run that is not over: tear its gang down, call nothing back.
  void Abandon() {
    ++attempt_;
    over_ = true;
    deadline_.Stop();
    gang_.reset();
  }

 private:
  // Runs `then` on the loop once `id` is ready, unless the attempt has ended since.
  void OnReady(const ObjectId& id, std::function<void(Impl&)> then);
  // Runs `then` in a later turn of the loop, unless the attempt has ended since.
  std::function<void()> Later(std::function<void(Impl&)> then);
  // The current step's deadline: the attempt fails with `error` unless the step is done first
  // (deadline_.Stop()), or another deadline replaces this one.
  void FailAfter(int ms, std::string error);

  bool elastic() const { return scaling_.min_workers > 0; }
  void Reserve();
  void ReserveGroup();
  // An elastic run after a checkpointed report: restart at a larger size when the cluster has
  // room and the last resize is resize_interval_s old.
  void MaybeGrow();
  // After a checkpointed report: when a node of the gang is draining (`rayd drain`), restart
  // from this checkpoint without it, as a preemption rather than a failure.
  void MaybeLeaveDrained();
  // A line about the run's size for its owner (FitOptions::on_notice) and the log.
  void Notice(const std::string& line) const;
  // The run's size and attempt for `rayd status` and the dashboard (run_feed.h).
  void PublishFeed(bool running);
  // rayd::AvailableResources() (draining nodes left out), or nothing when the head does not
  // answer.
  std::map<std::string, double> FreeResources() const;
  void WaitForGroup();
  void OnReserved(const Result<bool>& ready);
  void StartRanks();
  void Host();
  void ReservePorts();
  void HostHorovod();
  void Launch();
  void PollRank0(int wait_ms, int deadline_ms);
  void OnPolled();
  void OnRunReturned(size_t rank);
  void Advance();
  void Deliver();
  // Rank 0's next report has a checkpoint of every rank's (from NewCheckpointDir): the other
  // ranks' files of the same report join it before it is persisted. One Part call per rank,
  // asked again until that rank has made that report.
  bool NeedsParts(const ReportMessage& report) const;
  void CollectParts();
  void AskPart(size_t rank);
  void OnPart(size_t rank);
  void StopRanks();
  void EndAttempt(Attempt attempt);
  void Finish();

  EventLoop& loop_;
  std::shared_ptr<Inbox> inbox_;
  Timer deadline_;  // the current step's: one step at a time has one
  const std::string loop_name_;
  std::optional<Command> command_;  // a command trainable, in place of the loop
  const nlohmann::json config_;
  ScalingConfig scaling_;
  MeshShape mesh_;  // scaling_.mesh resolved, at Start
  const RunConfig run_;
  const FitOptions options_;
  const Callbacks callbacks_;
  std::string shape_;
  std::string what_;  // the group, for errors: "placement group of 2 bundles {CPU: 1}"
  std::chrono::steady_clock::time_point reserve_deadline_;  // of the current reservation
  std::optional<CheckpointStore> store_;
  std::optional<MlflowRun> tracking_;
  TrainResult result_;
  bool over_ = false;
  bool feed_off_ = false;  // the head refused the run's feed (run_feed.h): not tried again

  // Run-wide: the answer the owner owes, and the results it has not been handed yet.
  bool awaiting_answer_ = false;
  bool delivering_ = false;
  bool stop_asked_ = false;
  std::deque<ReportMessage> reports_;

  // The attempt; every wake-up carries its number and is dropped once it has ended.
  uint64_t attempt_ = 0;
  std::unique_ptr<Gang> gang_;
  std::vector<ObjectRef<std::string>> starting_;  // each rank's NodeId while it starts
  std::vector<ObjectRef<bool>> warming_;          // each rank's WarmTorch, never awaited
  size_t started_ = 0;
  std::optional<ObjectRef<std::string>> hosting_;
  std::vector<ObjectRef<std::string>> ports_;  // a command's: each rank's reserved endpoint
  size_t reserved_ = 0;  // of ports_, those answered
  std::vector<std::string> endpoints_;
  std::optional<ObjectRef<std::string>> horovod_;  // rank 0's HostHorovod, while it starts
  int world_ = 0;          // this attempt's workers: num_workers, or an elastic run's size
  int resize_to_ = 0;      // the size an elastic run's next attempt asks for first; 0: the most
  bool resizing_ = false;  // stopping the attempt to restart it at resize_to_
  bool leaving_drained_ = false;  // ... because a drain takes some of its nodes
  bool rank0_draining_ = false;   // rank 0's last Poll: its node is draining
  bool reserving_ = false;        // waiting for the attempt's group to be placed
  int grow_to_ = 0;        // GrowTo's: the size to restart at, at the next checkpoint
  std::chrono::steady_clock::time_point sized_at_;  // when the current size's attempt began
  std::vector<ObjectRef<int>> runs_;
  std::set<size_t> running_;           // ranks whose Run has not returned
  std::optional<Reports> poll_;        // the Poll of rank 0 in flight
  // Collecting the other ranks' files for reports_.front()'s checkpoint: by rank, the Part
  // call in flight; how many ranks are still owed; whether the front report has them all.
  std::vector<std::optional<ObjectRef<CheckpointPart>>> part_calls_;
  size_t parts_owed_ = 0;
  bool parts_collected_ = false;
  bool part_lost_ = false;  // a rank failed before its part came
  std::optional<std::string> failed_;  // a rank's Run failed: the attempt ends once drained
  bool final_poll_ = false;            // every Run returned; the last Poll was sent
  bool rank0_finished_ = false;        // a Poll answered after rank 0's loop was over
  int polled_ = 0;                     // reports rank 0's Polls handed over this attempt
  std::optional<int> rank0_reports_;   // what rank 0's returned Run says it enqueued
  uint64_t attempt_token_ = 0;         // names this attempt's Runs to their Polls
  bool stopping_ = false;              // the ranks were asked to leave their loops
  bool stop_failed_ = false;           // a stopped rank's Run failed: the gang is not reused
  std::vector<ObjectRef<void>> stop_calls_;
};

void TrainingRun::Impl::Open() {
  if (run_.name.empty() || run_.storage_path.empty()) {
    throw RaydError("RunConfig needs a name and a storage_path");
  }
  if (command_) {
    if (command_->working_dir.empty()) command_->working_dir = std::filesystem::current_path();
    if (command_->path.empty()) {
      const char* path = std::getenv("PATH");
      command_->path = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    }
    if (std::string why = CheckCommand(*command_); !why.empty()) {
      throw RaydError("command trainable: " + why);
    }
  } else if (std::string unknown = UnknownTrainLoop(loop_name_); !unknown.empty()) {
    throw RaydError(unknown);
  }
  try {
    rayd::internal::CheckTaskOptions(WorkerBundle(scaling_));
  } catch (const RaydError& e) {
    throw RaydError(std::string("ScalingConfig.resources_per_worker: ") + e.what());
  }
  if (std::string why = CheckGpuSharing(scaling_); !why.empty()) {
    throw RaydError("ScalingConfig.resources_per_worker.GPU: " + why);
  }
  scaling_.num_workers = ResolveNumWorkers(scaling_);
  if (std::string why = CheckElastic(scaling_); !why.empty()) {
    throw RaydError("ScalingConfig.min_workers: " + why);
  }
  mesh_ = ResolveMesh(scaling_);
  shape_ = ShapeOf(scaling_);
  what_ =
      "placement group of " +
      (elastic() ? std::to_string(scaling_.min_workers) + " to " : std::string()) +
      std::to_string(scaling_.num_workers / mesh_.tensor) + " bundles " +
      Describe(WorkerBundle(scaling_)) +
      (mesh_.tensor > 1 ? " x " + std::to_string(mesh_.tensor) + " (a tensor group each)" : "") +
      (scaling_.local_mode ? " on the driver's node" : "");
  std::string run_dir = (std::filesystem::path(run_.storage_path) / run_.name).string();
  Result<CheckpointStore> store = CheckpointStore::Open(run_dir, run_.checkpoint);
  if (!store.ok()) throw RaydError(store.status().message());
  store_.emplace(std::move(store).value());
  Status written = RunDirectory(run_dir).WriteParams(
      options_.params ? *options_.params : TrainerParams(config_, scaling_, mesh_.data));
  if (!written.ok()) throw RaydError(written.message());

  // MLflow tracking from this driver: rank 0's reports, as they are persisted.
  if (!run_.mlflow_tracking_uri.empty()) {
    std::map<std::string, std::string> params = MlflowParams(config_);
    params["num_workers"] = std::to_string(scaling_.num_workers);
    Result<MlflowRun> started = StartMlflowRun(
        run_.mlflow_tracking_uri,
        run_.mlflow_experiment_name.empty() ? run_.name : run_.mlflow_experiment_name, run_.name,
        std::filesystem::absolute(run_dir).lexically_normal().string(), params,
        {{command_ ? "command" : "train_loop", command_ ? CommandLine(*command_) : loop_name_}});
    if (!started.ok()) throw RaydError("MLflow tracking: " + started.status().message());
    tracking_ = std::move(started).value();
  }
}

void TrainingRun::Impl::OnReady(const ObjectId& id, std::function<void(Impl&)> then) {
  rayd::internal::RequireRuntime().WhenReady(
      id,
      [inbox = inbox_, wake = Later(std::move(then))]() mutable { inbox->Post(std::move(wake)); });
}

std::function<void()> TrainingRun::Impl::Later(std::function<void(Impl&)> then) {
  return [weak = weak_from_this(), attempt = attempt_, then = std::move(then)] {
    std::shared_ptr<Impl> self = weak.lock();
    if (self && !self->over_ && self->attempt_ == attempt) then(*self);
  };
}

void TrainingRun::Impl::FailAfter(int ms, std::string error) {
  deadline_.Start(Millis(ms), Millis(0), Later([error = std::move(error)](Impl& self) {
                    self.EndAttempt({Attempt::End::kFailed, error});
                  }));
}

// One attempt: take the owner's idle gang of the same shape, or reserve a new one.
void TrainingRun::Impl::BeginAttempt() {
  ++attempt_;
  gang_ = options_.reuse && !elastic() ? options_.reuse->Take(shape_) : nullptr;
  if (gang_ && !scaling_.local_mode &&
      !internal::DrainedOf(internal::DriverNodes(std::chrono::milliseconds(1000)), gang_->nodes())
           .empty()) {
    gang_.reset();  // an idle gang on a node that is leaving: reserve anew elsewhere
  }
  world_ = scaling_.num_workers;
  resizing_ = false;
  leaving_drained_ = false;
  rank0_draining_ = false;
  starting_.clear();
  warming_.clear();
  started_ = 0;
  hosting_.reset();
  ports_.clear();
  reserved_ = 0;
  endpoints_.clear();
  horovod_.reset();
  runs_.clear();
  running_.clear();
  poll_.reset();
  failed_.reset();
  final_poll_ = false;
  rank0_finished_ = false;
  polled_ = 0;
  rank0_reports_.reset();
  stopping_ = false;
  stop_calls_.clear();
  if (gang_) {
    Host();
  } else {
    Reserve();
  }
}

void TrainingRun::Impl::Reserve() {
  if (elastic()) {
    // A run of its own asks for the most and takes what fits; a Tuner's trial (no growing by
    // itself) starts at its least and is grown by the Tuner, which decides who gets workers.
    world_ = resize_to_ > 0  ? resize_to_
             : options_.grow ? scaling_.num_workers
                             : scaling_.min_workers;
    resize_to_ = 0;
  }
  ReserveGroup();
}

// A group of world_ workers' bundles.
void TrainingRun::Impl::ReserveGroup() {
  // One bundle per tensor-parallel group (mesh_.tensor workers' resources): a bundle sits on
  // one node, so each group's per-layer all-reduces stay on it.
  std::map<std::string, double> bundle = WorkerBundle(scaling_);
  for (auto& [name, amount] : bundle) amount *= mesh_.tensor;
  rayd::PlacementGroupCreationOptions group{
      .bundles = std::vector(static_cast<size_t>(world_ / mesh_.tensor),
                             std::unordered_map<std::string, double>(bundle.begin(), bundle.end())),
      .strategy = scaling_.placement_strategy};
  if (scaling_.local_mode) {
    group.bundle_label_selector.assign(group.bundles.size(),
                                       {{rayd::kNodeIdLabel, rayd::GetNodeId()}});
  }
  const auto timeout = std::chrono::milliseconds(scaling_.placement_timeout_s * 1000);
  const bool may_shrink = elastic() && world_ > scaling_.min_workers;
  const auto wait =
      may_shrink ? std::min(timeout, std::chrono::milliseconds(kElasticWaitMs)) : timeout;
  if (may_shrink) {
    // Said before the wait, which may take all of its time; counted before the group takes
    // what it can.
    if (const int fit = WorkersThatFit(scaling_, FreeResources()); fit < world_) {
      Notice(std::to_string(fit) + " of " + std::to_string(world_) +
             " workers fit now; waiting up to " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(wait).count()) +
             " s for the rest, then starting with as many as fit");
    }
  }
  try {
    gang_ = std::make_unique<Gang>(rayd::CreatePlacementGroup(group));
  } catch (const RaydError& e) {
    return EndAttempt({Attempt::End::kNoGroup, what_ + ": " + e.what()});
  }
  PublishFeed(/*running=*/false);
  reserving_ = true;
  reserve_deadline_ = std::chrono::steady_clock::now() + wait;
  WaitForGroup();
}

void TrainingRun::Impl::WaitForGroup() {
  const auto left = std::max(std::chrono::milliseconds(0),
                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                 reserve_deadline_ - std::chrono::steady_clock::now()));
  // Written on the runtime's thread, read on the loop's after the post.
  auto answer = std::make_shared<std::optional<Result<bool>>>();
  rayd::internal::RequireRuntime().WhenPlacementGroupReady(
      gang_->group().GetID(), left,
      [inbox = inbox_, answer,
       wake = Later([answer](Impl& self) { self.OnReserved(**answer); })](Result<bool> ready) {
        *answer = std::move(ready);
        inbox->Post(wake);
      });
}

void TrainingRun::Impl::OnReserved(const Result<bool>& ready) {
  reserving_ = false;
  // The connection to the head closed while waiting (a head restarting on Redis): the group
  // is still there, so wait again for what is left of the time (calls made while the runtime
  // reconnects wait for it).
  if (!ready.ok() && ready.status().code() == StatusCode::kUnavailable &&
      std::chrono::steady_clock::now() < reserve_deadline_) {
    spdlog::info("{}: {}; waiting for it again", what_, ready.status().message());
    reserving_ = true;
    return WaitForGroup();
  }
  if ((!ready.ok() || !*ready) && elastic() && world_ > scaling_.min_workers) {
    // Fewer workers then: as many as the cluster's free resources hold, or one fewer.
    gang_.reset();
    const int before = world_;
    world_ = std::min(ElasticWorkers(scaling_, FreeResources()), world_ - 1);
    Notice(std::to_string(before) + " workers did not fit; asking for " + std::to_string(world_));
    return ReserveGroup();
  }
  if (!ready.ok()) {
    return EndAttempt(
        {Attempt::End::kNoGroup, what_ + " is infeasible: " + ready.status().message()});
  }
  if (!*ready) {
    return EndAttempt({Attempt::End::kNoGroup, what_ + " could not be reserved within " +
                                                   std::to_string(scaling_.placement_timeout_s) +
                                                   " s (the cluster lacks the resources)"});
  }
  sized_at_ = std::chrono::steady_clock::now();
  if (elastic()) {
    Notice("starting with " + std::to_string(world_) + (world_ == 1 ? " worker" : " workers") +
           " (elastic, " + std::to_string(scaling_.min_workers) + " to " +
           std::to_string(scaling_.num_workers) + ")");
  }
  StartRanks();
}

// Creates a rank actor per bundle of the reserved group and waits until each runs.
void TrainingRun::Impl::StartRanks() {
  auto& actors = gang_->actors();
  const std::map<std::string, double> bundle = WorkerBundle(scaling_);
  try {
    for (int rank = 0; rank < world_; ++rank) {
      actors.push_back(rayd::Actor(TrainWorker::FactoryCreate)
                           .SetResources(bundle)
                           .SetPlacementGroup(gang_->group(), rank / mesh_.tensor)
                           .SetMaxConcurrency(2)
                           .Remote(rank));
    }
    // A loop of several ranks (or on a GPU) forms its group with LibTorch: every rank loads it
    // now, side by side and while the start's calls go on, instead of rank 0 at Host and the
    // others only after it, at Run. The answers are not awaited: Host and Run wait for the load.
    const bool forms_group = !command_ && (world_ > 1 || scaling_.use_gpu);
    for (auto& actor : actors) {
      if (forms_group) warming_.push_back(actor.Task(&TrainWorker::WarmTorch).Remote());
      starting_.push_back(actor.Task(&TrainWorker::NodeId).Remote());
    }
  } catch (const RaydError& e) {
    return EndAttempt(
        {Attempt::End::kFailed, std::string("starting the rank actors: ") + e.what()});
  }
  FailAfter(kStartTimeoutMs, "starting the rank actors: not every rank started within " +
                                 std::to_string(kStartTimeoutMs / 1000) + " s");
  for (const auto& node : starting_) {
    OnReady(node.id(), [](Impl& self) {
      if (++self.started_ < self.starting_.size()) return;
      self.deadline_.Stop();
      try {
        for (const auto& ready : self.starting_)
          self.gang_->nodes().push_back(*rayd::Get(ready, 0));
      } catch (const RaydError& e) {
        return self.EndAttempt(
            {Attempt::End::kFailed, std::string("starting the rank actors: ") + e.what()});
      }
      self.starting_.clear();
      self.Host();
    });
  }
}

// A new rendezvous per attempt, hosted by rank 0 and published under the gang's key; a lone
// rank meets nobody (its store is its own: Rendezvous::Alone).
void TrainingRun::Impl::Host() {
  if (command_) return ReservePorts();
  if (gang_->actors().size() == 1) return Launch();
  hosting_ = gang_->actors()[0]
                 .Task(&TrainWorker::Host)
                 .Remote(scaling_.collective_timeout_s, gang_->rendezvous_key());
  FailAfter(kStartTimeoutMs, "hosting the rendezvous: rank 0 did not answer within " +
                                 std::to_string(kStartTimeoutMs / 1000) + " s");
  OnReady(hosting_->id(), [](Impl& self) {
    self.deadline_.Stop();
    try {
      rayd::Get(*self.hosting_, 0);
    } catch (const RaydError& e) {
      return self.EndAttempt(
          {Attempt::End::kFailed, std::string("hosting the rendezvous: ") + e.what()});
    }
    self.Launch();
  });
}

// A command's rendezvous is its own (its init_process_group hosts the store on MASTER_PORT):
// every rank reserves a port on its node for it, and each rank is told them all.
void TrainingRun::Impl::ReservePorts() {
  try {
    for (auto& actor : gang_->actors()) {
      ports_.push_back(actor.Task(&TrainWorker::ReservePort).Remote());
    }
  } catch (const RaydError& e) {
    return EndAttempt({Attempt::End::kFailed, std::string("reserving ports: ") + e.what()});
  }
  FailAfter(kStartTimeoutMs, "reserving ports: not every rank answered within " +
                                 std::to_string(kStartTimeoutMs / 1000) + " s");
  for (const auto& port : ports_) {
    OnReady(port.id(), [](Impl& self) {
      if (++self.reserved_ < self.ports_.size()) return;  // the last one goes on
      self.deadline_.Stop();
      try {
        for (const auto& reserved : self.ports_) {
          self.endpoints_.push_back(*rayd::Get(reserved, 0));
        }
      } catch (const RaydError& e) {
        return self.EndAttempt(
            {Attempt::End::kFailed, std::string("reserving ports: ") + e.what()});
      }
      if (self.command_->launcher == "horovod") return self.HostHorovod();
      self.Launch();
    });
  }
}

// A Horovod command meets through an HTTP rendezvous that must listen before any rank starts:
// rank 0's actor serves it on rank 0's reserved port, for this attempt only.
void TrainingRun::Impl::HostHorovod() {
  try {
    horovod_ = gang_->actors()[0]
                   .Task(&TrainWorker::HostHorovod)
                   .Remote(RankNodes(gang_->nodes()), endpoints_);
  } catch (const RaydError& e) {
    return EndAttempt({Attempt::End::kFailed, std::string("horovod rendezvous: ") + e.what()});
  }
  FailAfter(kStartTimeoutMs, "horovod rendezvous: rank 0 did not start it within " +
                                 std::to_string(kStartTimeoutMs / 1000) + " s");
  OnReady(horovod_->id(), [](Impl& self) {
    self.deadline_.Stop();
    try {
      spdlog::debug("{}: horovod rendezvous at {}", self.run_.name, *rayd::Get(*self.horovod_, 0));
    } catch (const RaydError& e) {
      return self.EndAttempt({Attempt::End::kFailed, e.what()});
    }
    self.Launch();
  });
}

// Starts the loop on every rank, from the latest checkpoint, and the first Poll of rank 0.
void TrainingRun::Impl::Launch() {
  PublishFeed(/*running=*/true);
  internal::RunSpec common;
  common.loop = loop_name_;
  common.config_json = config_.dump();
  common.rendezvous_key = gang_->rendezvous_key();
  common.run_name = run_.name;
  common.collective_timeout_s = scaling_.collective_timeout_s;
  common.mesh_data = elastic() ? world_ : mesh_.data;
  common.mesh_pipeline = mesh_.pipeline;
  common.mesh_tensor = mesh_.tensor;
  common.use_gpu = scaling_.use_gpu;
  if (!run_.datasets.empty()) {
    common.datasets_json = DatasetsToJson(run_.datasets).dump();
    // The last attempt's ranks' feeds go: this attempt's rank 0 counts its ranks' waits anew.
    internal::DeleteShardFeeds(run_.name);
  }
  // Unique among the attempts a reused gang serves (its Polls must not see another's end).
  attempt_token_ = AttemptToken();
  common.attempt_token = attempt_token_;
  if (command_) {
    common.has_command = true;
    common.command = {.argv = command_->argv,
                      .launcher = command_->launcher,
                      .working_dir = command_->working_dir,
                      .env = command_->env,
                      .report_timeout_s = command_->report_timeout_s,
                      .stop_grace_s = command_->stop_grace_s,
                      .path = command_->path};
    common.endpoints = endpoints_;
    common.trial_id = options_.result_fields.value("trial_id", run_.name);
    common.trial_dir = std::filesystem::absolute(std::filesystem::path(run_.storage_path) /
                                                 run_.name)
                           .lexically_normal()
                           .string();
    // torchrun counts every restart, whatever its cause.
    common.restart_count = result_.restarts + result_.resizes + result_.preemptions;
    common.max_restarts = run_.failure.max_failures;
    const std::map<std::string, double> bundle = WorkerBundle(scaling_);
    common.cpus = bundle.count("CPU") ? bundle.at("CPU") : 0;
    common.gpus = bundle.count("GPU") && bundle.at("GPU") > 0;
  }
  if (std::optional<std::string> resume_from = store_->Latest()) {
    Result<internal::CheckpointFiles> files = internal::ReadCheckpointDir(*resume_from);
    if (!files.ok()) return EndAttempt({Attempt::End::kFailed, files.status().message()});
    common.has_checkpoint = true;
    common.checkpoint = std::move(files).value();
  }
  store_->StartAttempt();
  for (internal::RunSpec& spec : RunSpecs(common, gang_->nodes())) {
    const size_t rank = static_cast<size_t>(spec.world_rank);
    runs_.push_back(gang_->actors()[rank].Task(&TrainWorker::Run).Remote(std::move(spec)));
    running_.insert(rank);
  }
  for (size_t rank = 0; rank < runs_.size(); ++rank) {
    OnReady(runs_[rank].id(), [rank](Impl& self) { self.OnRunReturned(rank); });
  }
  PollRank0(kPollWaitMs, kPollWaitMs + kPollTimeoutMs);
}

// Asks rank 0 for its reports: answered at once when it has some (or its loop ends), else
// after `wait_ms`. The attempt fails when no answer comes within `deadline_ms`.
void TrainingRun::Impl::PollRank0(int wait_ms, int deadline_ms) {
  poll_ = gang_->actors()[0].Task(&TrainWorker::Poll).Remote(wait_ms, attempt_token_);
  FailAfter(deadline_ms, failed_.value_or("rank 0 does not answer its Poll"));
  OnReady(poll_->id(), [](Impl& self) { self.OnPolled(); });
}

void TrainingRun::Impl::OnPolled() {
  if (!poll_ || stopping_) return;  // stopped since: later reports are not wanted
  deadline_.Stop();
  try {
    auto reply = rayd::Get(*poll_, 0);
    for (ReportMessage& report : reply->reports) reports_.push_back(std::move(report));
    polled_ += static_cast<int>(reply->reports.size());
    rank0_finished_ = rank0_finished_ || reply->finished;
    rank0_draining_ = reply->node_draining;
  } catch (const RaydError& e) {
    // Rank 0 is gone; after another rank's failure, that failure is the attempt's.
    return EndAttempt(
        {Attempt::End::kFailed, failed_.value_or(std::string("polling rank 0: ") + e.what())});
  }
  poll_.reset();
  Advance();
}

void TrainingRun::Impl::OnRunReturned(size_t rank) {
  if (stopping_) {
    // Every stopped rank's Run returns; the gang is idle (reusable) if none failed.
    try {
      rayd::Get(runs_[rank], 0);
    } catch (const RaydError&) {
      stop_failed_ = true;
    }
    running_.erase(rank);
    if (running_.empty()) EndAttempt({Attempt::End::kStopped, "", !stop_failed_});
    return;
  }
  try {
    const int enqueued = *rayd::Get(runs_[rank], 0);
    if (rank == 0) rank0_reports_ = enqueued;
  } catch (const RaydError& e) {
    if (failed_) return;  // the first failure is the attempt's
    // A RaydError the rank threw itself (a command's exit, a failed rendezvous) needs no type
    // name; what a train loop threw keeps its own ("std::runtime_error: ...").
    const auto* remote = dynamic_cast<const RemoteError*>(&e);
    // On a mesh, where the rank sat: its pipeline stage, tensor and data coordinates.
    std::string where;
    if (mesh_.pipeline * mesh_.tensor > 1) {
      const MeshCoordinates at = MeshCoordinatesOf(mesh_, static_cast<int>(rank));
      where = " (pipeline stage " + std::to_string(at.pipeline_rank) + ", tensor " +
              std::to_string(at.tensor_rank) + ", data " + std::to_string(at.data_rank) + ")";
    }
    failed_ =
        "rank " + std::to_string(rank) + where + ": " +
        (remote != nullptr && remote->remote_type() == "rayd::RaydError" ? remote->remote_message()
                                                                         : std::string(e.what()));
    // Keep what rank 0 reported before the failure (it may still answer), for a while.
    if (!poll_) PollRank0(0, kDrainTimeoutMs);
    FailAfter(kDrainTimeoutMs, *failed_);
    return Advance();
  }
  running_.erase(rank);
  Advance();
}

// Decides the attempt's next step once nothing is owed to the owner: hand over the reports
// that came, poll again while rank 0's loop runs, end when every Run has returned.
void TrainingRun::Impl::Advance() {
  if (awaiting_answer_ || delivering_) return;
  // No rank of this attempt runs yet (it is being reserved or started; the owner's answer to a
  // result of the attempt before can come now): nothing to poll or stop. A stop ends it here;
  // otherwise the ranks' launch polls them.
  if (runs_.empty()) {
    if (stop_asked_ || resizing_) EndAttempt({Attempt::End::kStopped});
    return;
  }
  if (stop_asked_ || resizing_) return StopRanks();
  if (!reports_.empty()) return Deliver();
  if (poll_) return;  // its answer comes back here
  if (failed_) return EndAttempt({Attempt::End::kFailed, *failed_});
  if (running_.empty()) {
    // Rank 0's last Poll already saw its loop over, or its Polls handed over every report its
    // Run says it made: nothing is left to ask for.
    if (final_poll_ || rank0_finished_ || rank0_reports_ == polled_) {
      return EndAttempt({Attempt::End::kFinished});
    }
    // Every Run returned: what rank 0 reported last.
    final_poll_ = true;
    return PollRank0(0, kPollTimeoutMs);
  }
  // Rank 0's loop is over once its Run has returned: poll no more then, only wait for the
  // other ranks' Runs.
  const bool rank0_running =
      running_.count(0) && !rayd::Wait(std::vector<ObjectRef<int>>{runs_[0]}, 1, 0).unready.empty();
  if (rank0_running && !rank0_finished_) PollRank0(kPollWaitMs, kPollWaitMs + kPollTimeoutMs);
}

// Persists the reports that came, handing each to the owner; the next waits for its answer.
void TrainingRun::Impl::Deliver() {
  delivering_ = true;
  while (!reports_.empty() && !awaiting_answer_ && !stop_asked_ && !resizing_) {
    if (NeedsParts(reports_.front())) {
      delivering_ = false;
      return CollectParts();  // Advance comes back here once they are in
    }
    if (elastic()) reports_.front().metrics["world_size"] = world_;
    Result<ReportedResult> persisted = store_->Persist(reports_.front(), options_.result_fields);
    reports_.pop_front();
    parts_collected_ = false;
    // The last of the reports that came together: their result.json lines go out in one write.
    if (persisted.ok() && reports_.empty()) {
      if (Status flushed = store_->Flush(); !flushed.ok()) persisted = flushed;
    }
    if (!persisted.ok()) {
      delivering_ = false;
      return EndAttempt(
          {Attempt::End::kFailed, "persisting a report: " + persisted.status().message()});
    }
    if (tracking_) {
      Status logged = LogMlflowResult(*tracking_, persisted->metrics);
      if (!logged.ok()) spdlog::warn("MLflow tracking: {}", logged.message());
    }
    if (persisted->checkpoint) {
      MaybeLeaveDrained();
      MaybeGrow();
    }
    awaiting_answer_ = true;
    if (callbacks_.on_result) {
      callbacks_.on_result(*persisted);  // may Answer at once
    } else {
      awaiting_answer_ = false;
    }
  }
  delivering_ = false;
  Advance();
}

void TrainingRun::Impl::Notice(const std::string& line) const {
  spdlog::info("{}: {}", run_.name, line);
  if (options_.on_notice) options_.on_notice(line);
}

void TrainingRun::Impl::PublishFeed(bool running) {
  internal::RunFeedState s;
  s.name = run_.name;
  s.run_dir = std::filesystem::absolute(std::filesystem::path(run_.storage_path) / run_.name)
                  .lexically_normal()
                  .string();
  s.trial_id = options_.result_fields.value("trial_id", "");
  s.running = running;
  s.world_size = world_;
  s.min_workers = elastic() ? scaling_.min_workers : scaling_.num_workers;
  s.max_workers = scaling_.num_workers;
  s.mesh[0] = elastic() ? world_ : mesh_.data;
  s.mesh[1] = mesh_.pipeline;
  s.mesh[2] = mesh_.tensor;
  s.placement_group = gang_ ? gang_->group().GetID() : "";
  s.attempt = static_cast<int>(attempt_);
  s.restarts = result_.restarts;
  s.resizes = result_.resizes;
  s.preemptions = result_.preemptions;
  internal::PublishRunFeed(s, &feed_off_);
}

std::map<std::string, double> TrainingRun::Impl::FreeResources() const {
  try {
    return rayd::AvailableResources();
  } catch (const RaydError& e) {
    spdlog::warn("{}: the cluster's free resources: {}", run_.name, e.what());
    return {};  // nothing free: the size stays (or goes to min_workers)
  }
}

void TrainingRun::Impl::MaybeLeaveDrained() {
  if (resizing_ || !gang_ || scaling_.local_mode) return;
  // A second-old read of the node table serves every run of the driver process; read now when
  // rank 0's node is draining: its loop may have checkpointed for it, and the head had the
  // drain before the node did.
  const std::vector<NodeInfo> nodes =
      internal::DriverNodes(std::chrono::milliseconds(rank0_draining_ ? 0 : 1000));
  const std::set<std::string> drained = internal::DrainedOf(nodes, gang_->nodes());
  if (drained.empty()) return;
  const auto kept = static_cast<int>(
      std::count_if(gang_->nodes().begin(), gang_->nodes().end(),
                    [&](const std::string& node) { return !drained.contains(node); }));
  std::string which;
  for (const std::string& node : drained) which += (which.empty() ? "" : ", ") + node.substr(0, 8);
  Notice("node " + which + " is draining: restarting from this checkpoint without it");
  if (elastic()) {
    // The workers left plus what is free elsewhere; a Tuner's trial does not grow by itself.
    const int fit = ElasticWorkers(scaling_, FreeResources(), kept);
    resize_to_ = options_.grow ? fit : std::min(fit, world_);
  }
  leaving_drained_ = true;
  resizing_ = true;
}

void TrainingRun::Impl::MaybeGrow() {
  if (!elastic() || world_ >= scaling_.num_workers || resizing_) return;
  if (grow_to_ > world_) {  // the owner decided
    Notice("growing from " + std::to_string(world_) + " to " + std::to_string(grow_to_) +
           " workers from this checkpoint");
    resize_to_ = std::exchange(grow_to_, 0);
    resizing_ = true;
    return;
  }
  if (!options_.grow) return;
  const auto since = std::chrono::steady_clock::now() - sized_at_;
  if (since < std::chrono::duration<double>(scaling_.resize_interval_s)) return;
  const int want = ElasticWorkers(scaling_, FreeResources(), world_);
  if (want <= world_) return;
  Notice("the cluster has room for " + std::to_string(want) + " workers (now " +
         std::to_string(world_) + "): growing to " + std::to_string(want) +
         " from this checkpoint");
  resize_to_ = want;
  resizing_ = true;
}

bool TrainingRun::Impl::NeedsParts(const ReportMessage& report) const {
  return report.has_checkpoint && report.gather && runs_.size() > 1 && !parts_collected_;
}

void TrainingRun::Impl::CollectParts() {
  if (parts_owed_ > 0) return;  // under way
  part_calls_.assign(runs_.size(), std::nullopt);
  parts_owed_ = runs_.size() - 1;
  part_lost_ = false;
  for (size_t rank = 1; rank < runs_.size(); ++rank) AskPart(rank);
}

void TrainingRun::Impl::AskPart(size_t rank) {
  part_calls_[rank] =
      gang_->actors()[rank].Task(&TrainWorker::Part).Remote(reports_.front().index, kPollWaitMs);
  OnReady(part_calls_[rank]->id(), [rank](Impl& self) { self.OnPart(rank); });
}

void TrainingRun::Impl::OnPart(size_t rank) {
  CheckpointPart part;
  try {
    part = std::move(*rayd::Get(*part_calls_[rank], 0));
  } catch (const RaydError& e) {
    // The rank is gone (its Run's failure ends the attempt): its files never come.
    spdlog::warn("{}: rank {}'s checkpoint files did not come: {}", run_.name, rank, e.what());
    part.ready = true;
    part_lost_ = true;
  }
  if (!part.ready) return AskPart(rank);
  part_calls_[rank].reset();
  ReportMessage& report = reports_.front();
  for (auto& [name, bytes] : part.files) {
    if (!report.checkpoint.try_emplace(name, std::move(bytes)).second) {
      spdlog::warn("{}: rank {}'s checkpoint file {} has the name of another rank's; rank 0's "
                   "is kept",
                   run_.name, rank, name);
    }
  }
  // A loop that ended without this report has no part in it, unless it ended by failing (seen
  // here or by the rank itself, before the driver has heard of the failure).
  if (!part.reported && (failed_ || part.failed)) part_lost_ = true;
  if (--parts_owed_ > 0) return;
  if (part_lost_) {
    // A rank failed before its part of this checkpoint came: the report is not persisted, so
    // the restart resumes from the last whole checkpoint and makes this report again (kept
    // without its checkpoint, it would be made twice).
    spdlog::warn("{}: a rank failed before its part of the checkpoint of report {} came; the "
                 "report is dropped, and a restart resumes before it",
                 run_.name, report.index);
    reports_.pop_front();
  } else {
    parts_collected_ = true;
  }
  Advance();
}

void TrainingRun::Impl::Answer(bool go_on) {
  if (!awaiting_answer_ || over_) return;
  awaiting_answer_ = false;
  if (!go_on) stop_asked_ = true;
  if (!delivering_) Advance();
}

// The owner stopped the run. A single rank leaves its loop at its next Report and its gang can
// be reused; loops of several ranks are not asked (the others would wait in a collective for
// rank 0 until their timeout): their gang is torn down. Every rank of a command ends its
// process group (SIGTERM, then SIGKILL after the grace period), so its gang can be reused.
void TrainingRun::Impl::StopRanks() {
  if (stopping_) return;
  if ((runs_.size() != 1 && !command_) || failed_) return EndAttempt({Attempt::End::kStopped});
  stopping_ = true;
  stop_failed_ = false;
  poll_.reset();
  if (running_.empty()) return EndAttempt({Attempt::End::kStopped, "", true});
  for (size_t rank : running_) {
    stop_calls_.push_back(gang_->actors()[rank].Task(&TrainWorker::RequestStop).Remote());
  }
  const int wait_ms =
      command_ ? command_->stop_grace_s * 1000 + kCommandStopSlackMs : kStopTimeoutMs;
  deadline_.Start(Millis(wait_ms), Millis(0),
                  Later([](Impl& self) { self.EndAttempt({Attempt::End::kStopped}); }));
  // Their Runs returning (already watched) end the attempt: OnRunReturned.
}

void TrainingRun::Impl::EndAttempt(Attempt attempt) {
  ++attempt_;  // what the attempt still waits for is dropped when it wakes
  deadline_.Stop();
  reserving_ = false;
  // Lines of reports persisted while others of their batch were still owed (a stop asked for
  // in the middle of one) are on disk before the attempt's end is told to anyone.
  if (Status flushed = store_->Flush(); !flushed.ok()) {
    spdlog::warn("{}: result.json: {}", run_.name, flushed.message());
  }
  poll_.reset();
  stop_calls_.clear();
  // Only a gang whose loops all returned is idle; a stopped one may still be running its loop.
  if ((attempt.end == Attempt::End::kFinished || attempt.idle) && options_.reuse && gang_ &&
      !elastic()) {
    options_.reuse->Put(shape_, std::move(gang_));
  }
  // A failure on a node a drain was taking (its deadline came, or it went sooner) is a
  // preemption, not a failure.
  const bool drained =
      leaving_drained_ ||
      (attempt.end == Attempt::End::kFailed && gang_ && !scaling_.local_mode &&
       !internal::DrainedOf(internal::DriverNodes(std::chrono::milliseconds(0)), gang_->nodes())
            .empty());
  gang_.reset();
  runs_.clear();
  reports_.clear();
  part_calls_.clear();
  parts_owed_ = 0;
  parts_collected_ = false;
  const bool resized = std::exchange(resizing_, false) && attempt.end == Attempt::End::kStopped;
  const int max_preemptions = run_.failure.max_preemptions;
  if (drained && !stop_asked_ && (resized || attempt.end == Attempt::End::kFailed)) {
    if (max_preemptions >= 0 && result_.preemptions >= max_preemptions) {
      attempt = {Attempt::End::kFailed,
                 "a drained node took ranks away more than max_preemptions (" +
                     std::to_string(max_preemptions) + ") times" +
                     (attempt.error.empty() ? "" : "; the last attempt: " + attempt.error)};
    } else {
      ++result_.preemptions;
      spdlog::info("{}: restarting after a drain (preemption {})", run_.name, result_.preemptions);
      return BeginAttempt();
    }
  } else if (resized && !stop_asked_) {
    ++result_.resizes;  // stopped to grow: not a failure, not the owner's stop
    return BeginAttempt();
  }
  resize_to_ = 0;
  result_.error = attempt.error;
  result_.stopped = attempt.end == Attempt::End::kStopped || stop_asked_;
  const int max_failures = run_.failure.max_failures;
  if (attempt.end == Attempt::End::kFailed && !stop_asked_ && !drained &&
      (max_failures < 0 || result_.restarts < max_failures)) {
    ++result_.restarts;
    result_.restart_errors.push_back(attempt.error);
    return BeginAttempt();
  }
  Finish();
}

void TrainingRun::Impl::Finish() {
  over_ = true;
  if (!run_.datasets.empty()) internal::DeleteShardFeeds(run_.name);
  if (!feed_off_) internal::DeleteRunFeed(run_.name);
  result_.metrics = store_->last_metrics();
  result_.checkpoint = store_->Latest();
  if (tracking_) {
    // A run its owner stopped ended as asked: FINISHED, as Ray's MLflow callback marks it.
    Status ended = tracking_->End(result_.ok() || result_.stopped ? MlflowRunStatus::kFinished
                                                                  : MlflowRunStatus::kFailed);
    if (!ended.ok()) spdlog::warn("MLflow tracking: {}", ended.message());
  }
  loop_.Post([weak = weak_from_this()] {
    if (std::shared_ptr<Impl> self = weak.lock(); self && self->callbacks_.on_done) {
      self->callbacks_.on_done(std::move(self->result_));
    }
  });
}

TrainingRun::TrainingRun(EventLoop& loop, Target target, nlohmann::json config,
                         ScalingConfig scaling, RunConfig run, const FitOptions& options,
                         Callbacks callbacks)
    : impl_(std::make_shared<Impl>(loop, std::move(target), std::move(config),
                                   std::move(scaling), std::move(run), options,
                                   std::move(callbacks))) {
  impl_->Open();
  impl_->BeginAttempt();
}

TrainingRun::~TrainingRun() {
  if (impl_) impl_->Abandon();
}

void TrainingRun::Answer(bool go_on) { impl_->Answer(go_on); }

void TrainingRun::GrowTo(int workers) { impl_->GrowTo(workers); }

bool TrainingRun::WaitingForWorkers() const { return impl_->WaitingForWorkers(); }

class GangPool::Idle {
 public:
  std::string shape;
  std::unique_ptr<internal::Gang> gang;
};

GangPool::GangPool() = default;
GangPool::~GangPool() = default;

std::unique_ptr<internal::Gang> GangPool::Take(const std::string& shape) {
  std::lock_guard lock(mu_);
  if (!idle_ || idle_->shape != shape) return nullptr;
  std::unique_ptr<internal::Gang> gang = std::move(idle_->gang);
  idle_.reset();
  return gang;
}

void GangPool::Put(const std::string& shape, std::unique_ptr<internal::Gang> gang) {
  std::unique_ptr<Idle> replaced;  // torn down outside the lock
  std::lock_guard lock(mu_);
  replaced = std::move(idle_);
  idle_ = std::make_unique<Idle>(Idle{shape, std::move(gang)});
}

}  // namespace rayd::train
