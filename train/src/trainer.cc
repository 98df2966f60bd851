// The driver side of the Trainer: attempts, each one a placement group and its rank actors,
// restarted from the latest checkpoint within max_failures. See trainer.h for the protocol.

#include <rayd/base/logging.h>
#include <rayd/train/mlflow.h>
#include <rayd/train/run_directory.h>
#include <rayd/train/trainer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "checkpoint_store.h"
#include "train_worker.h"

namespace rayd::train {
namespace {

using internal::CheckpointStore;
using internal::ReportMessage;
using internal::TrainWorker;

constexpr int kStartTimeoutMs = 60'000;  // a rank actor starts (a worker process spawns)
// How long one Poll may wait on rank 0 for a report. Poll answers at once when rank 0 reports
// or its loop ends, so this bounds only how long a quiet rank 0 holds an actor call open.
constexpr int kPollWaitMs = 10'000;
constexpr int kPollTimeoutMs = 30'000;   // a Poll call is answered (rank 0 is not wedged)
constexpr int kDrainTimeoutMs = 5'000;   // rank 0 hands over its last reports after a failure
constexpr int kStopTimeoutMs = 5'000;    // a stopped single-rank loop reaches its next Report

// How an attempt ended.
struct Attempt {
  enum class End { kFinished, kFailed, kNoGroup, kStopped } end = End::kFinished;
  std::string error;
  bool idle = false;  // every rank's Run returned: the gang may serve another run
};

// What Collect found.
enum class Polled { kOk, kGone, kStopped };

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
                          {"strategy", static_cast<int>(scaling.placement_strategy)},
                          {"local", scaling.local_mode}};
  return shape.dump();
}

// num_workers = -1: as many ranks as the cluster's GPUs hold bundles.
int ResolveNumWorkers(const ScalingConfig& scaling) {
  if (scaling.num_workers >= 1) return scaling.num_workers;
  if (scaling.num_workers != -1) {
    throw RaydError("ScalingConfig.num_workers must be at least 1, or -1 for one per GPU");
  }
  if (!scaling.use_gpu) throw RaydError("ScalingConfig.num_workers = -1 needs use_gpu");
  double gpus = rayd::ClusterResources()["GPU"];
  int workers = static_cast<int>(gpus / WorkerBundle(scaling).at("GPU") + 1e-9);
  if (workers < 1) throw RaydError("ScalingConfig.num_workers = -1: the cluster has no GPU");
  return workers;
}

// params.json of a Trainer's own run: the config and the workers, as MLflow-style params.
nlohmann::json TrainerParams(const nlohmann::json& config, int num_workers) {
  nlohmann::json params = {{"config", config}, {"num_workers", num_workers}};
  if (config.is_object() && config.contains("batch_size") && config["batch_size"].is_number()) {
    params["effective_batch_size"] = config["batch_size"].get<double>() * num_workers;
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

using Reports = ObjectRef<std::vector<ReportMessage>>;

// Persists the reports a Poll of rank 0 answered, handing each to the caller's on_report.
// kGone with `error` set when rank 0 is gone or a report cannot be persisted.
Polled Deliver(const Reports& poll, int timeout_ms, CheckpointStore& store,
               const FitOptions& options, std::string* error) {
  try {
    auto reports = rayd::Get(poll, timeout_ms);
    for (const ReportMessage& report : *reports) {
      Result<ReportedResult> persisted = store.Persist(report, options.result_fields);
      if (!persisted.ok()) {
        *error = "persisting a report: " + persisted.status().message();
        return Polled::kGone;
      }
      if (options.on_report && !options.on_report(*persisted)) return Polled::kStopped;
    }
    return Polled::kOk;
  } catch (const RaydError& e) {
    *error = std::string("polling rank 0: ") + e.what();
    return Polled::kGone;
  }
}

Reports Poll(ActorHandle<TrainWorker>& rank0, int wait_ms) {
  return rank0.Task(&TrainWorker::Poll).Remote(wait_ms);
}

// Creates a rank actor per bundle of the reserved group and waits until each runs; fills the
// gang's nodes.
std::optional<Attempt> StartRanks(Gang& gang, const ScalingConfig& scaling,
                                  const std::map<std::string, double>& bundle) {
  auto& actors = gang.actors();
  try {
    for (int rank = 0; rank < scaling.num_workers; ++rank) {
      actors.push_back(rayd::Actor(TrainWorker::FactoryCreate)
                           .SetResources(bundle)
                           .SetPlacementGroup(gang.group(), rank)
                           .SetMaxConcurrency(2)
                           .Remote(rank));
    }
    for (auto& actor : actors) {
      gang.nodes().push_back(
          *rayd::Get(actor.Task(&TrainWorker::NodeId).Remote(), kStartTimeoutMs));
    }
  } catch (const RaydError& e) {
    return Attempt{Attempt::End::kFailed, std::string("starting the rank actors: ") + e.what()};
  }
  return std::nullopt;
}

// Reserves a new gang (its group, then its rank actors); fails naming the group when the cluster
// cannot hold it.
Result<std::unique_ptr<Gang>> NewGang(const ScalingConfig& scaling, Attempt* failed) {
  std::map<std::string, double> bundle = WorkerBundle(scaling);
  std::string what =
      "placement group of " + std::to_string(scaling.num_workers) + " bundles " + Describe(bundle);
  rayd::PlacementGroupCreationOptions group{
      .bundles = std::vector(static_cast<size_t>(scaling.num_workers),
                             std::unordered_map<std::string, double>(bundle.begin(), bundle.end())),
      .strategy = scaling.placement_strategy};
  if (scaling.local_mode) {
    group.bundle_label_selector.assign(group.bundles.size(),
                                       {{rayd::kNodeIdLabel, rayd::GetNodeId()}});
    what += " on the driver's node";
  }
  auto gang = std::make_unique<Gang>(rayd::CreatePlacementGroup(group));
  try {
    if (!gang->group().Wait(scaling.placement_timeout_s)) {
      *failed = {Attempt::End::kNoGroup, what + " could not be reserved within " +
                                             std::to_string(scaling.placement_timeout_s) +
                                             " s (the cluster lacks the resources)"};
      return Status::ResourceExhausted(failed->error);
    }
  } catch (const RaydError& e) {
    *failed = {Attempt::End::kNoGroup, what + " is infeasible: " + e.what()};
    return Status::ResourceExhausted(failed->error);
  }
  if (auto started = StartRanks(*gang, scaling, bundle)) {
    *failed = *started;
    return Status::Unavailable(failed->error);
  }
  return gang;
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
  std::vector<internal::RunSpec> specs;
  for (size_t rank = 0; rank < nodes.size(); ++rank) {
    internal::RunSpec spec = common;
    spec.world_rank = static_cast<int>(rank);
    spec.world_size = static_cast<int>(nodes.size());
    spec.local_rank = seen[nodes[rank]]++;
    spec.local_world_size = on_node[nodes[rank]];
    spec.node_rank = node_rank[nodes[rank]];
    specs.push_back(std::move(spec));
  }
  return specs;
}

// A stopped run of one rank leaves its loop at its next Report, so its gang can be reused;
// returns whether it did in time. Runs of several ranks are not asked (the others would wait in
// a collective for rank 0 until their timeout): their gang is torn down.
bool StopOneRank(ActorHandle<TrainWorker>& rank0, const std::vector<ObjectRef<bool>>& runs) {
  if (runs.size() != 1) return false;
  try {
    rayd::Get(rank0.Task(&TrainWorker::RequestStop).Remote(), kStopTimeoutMs);
    if (!rayd::Wait(runs, 1, kStopTimeoutMs).unready.empty()) return false;
    rayd::Get(runs[0]);
    return true;
  } catch (const RaydError&) {
    return false;
  }
}

// Persists rank 0's reports until every Run has returned, or one failed, or the caller stopped
// the run. Event-driven: one Poll of rank 0 is always in flight (it answers as soon as rank 0
// reports), and the driver sleeps until that Poll answers or any rank's Run ends, whichever
// comes first; a rank that dies is seen at once, and a quiet run costs one call per
// kPollWaitMs. After rank 0's loop is over only the other ranks' Runs are awaited.
Attempt Supervise(ActorHandle<TrainWorker>& rank0, const std::vector<ObjectRef<bool>>& runs,
                  CheckpointStore& store, const FitOptions& options) {
  std::string error;
  auto deliver = [&](const Reports& poll, int timeout_ms) -> std::optional<Attempt> {
    switch (Deliver(poll, timeout_ms, store, options, &error)) {
      case Polled::kOk: return std::nullopt;
      case Polled::kStopped: return Attempt{Attempt::End::kStopped, "", StopOneRank(rank0, runs)};
      case Polled::kGone: break;
    }
    return Attempt{Attempt::End::kFailed, error};
  };
  std::optional<Reports> poll = Poll(rank0, kPollWaitMs);
  std::vector<size_t> running(runs.size());  // ranks whose Run has not returned
  for (size_t rank = 0; rank < runs.size(); ++rank) running[rank] = rank;
  while (!running.empty()) {
    std::vector<ObjectId> watched;
    if (poll) watched.push_back(poll->id());
    for (size_t rank : running) watched.push_back(runs[rank].id());
    const int timeout_ms = poll ? kPollWaitMs + kPollTimeoutMs : -1;
    rayd::internal::WaitOutcome woke =
        rayd::internal::RequireRuntime().Wait(watched, 1, std::chrono::milliseconds(timeout_ms));
    if (woke.ready.empty()) return {Attempt::End::kFailed, "rank 0 does not answer its Poll"};
    if (poll && woke.ready.front() == 0) {
      if (auto ended = deliver(*poll, 0)) return *ended;
      poll.reset();
      // Rank 0's loop is over once its Run has returned: poll no more then.
      const bool rank0_running =
          running.front() == 0 &&
          !rayd::Wait(std::vector<ObjectRef<bool>>{runs[0]}, 1, 0).unready.empty();
      if (rank0_running) poll = Poll(rank0, kPollWaitMs);
      continue;
    }
    const size_t rank = running[woke.ready.front() - (poll ? 1 : 0)];
    try {
      rayd::Get(runs[rank]);
    } catch (const RaydError& e) {
      // Keep what rank 0 reported before the failure (it may still answer).
      if (!poll) poll = Poll(rank0, 0);
      if (auto ended = deliver(*poll, kDrainTimeoutMs);
          ended && ended->end == Attempt::End::kStopped) {
        return *ended;
      }
      return {Attempt::End::kFailed, "rank " + std::to_string(rank) + ": " + e.what()};
    }
    running.erase(std::find(running.begin(), running.end(), rank));
  }
  // Every Run returned: what rank 0 reported last.
  if (poll) {
    if (auto ended = deliver(*poll, kPollTimeoutMs)) return *ended;
  }
  if (auto ended = deliver(Poll(rank0, 0), kPollTimeoutMs)) return *ended;
  return {};
}

// One attempt: reserve the gang (or take the caller's idle one of the same shape), start its
// ranks from the latest checkpoint, supervise them. The gang is torn down on every way out,
// except that a gang whose ranks all finished goes back to the caller's pool.
Attempt RunAttempt(const std::string& loop, const nlohmann::json& config,
                   const ScalingConfig& scaling, const std::string& run_name,
                   CheckpointStore& store, const FitOptions& options) {
  const std::string shape = ShapeOf(scaling);
  std::unique_ptr<Gang> gang = options.reuse ? options.reuse->Take(shape) : nullptr;
  if (!gang) {
    Attempt failed;
    Result<std::unique_ptr<Gang>> made = NewGang(scaling, &failed);
    if (!made.ok()) return failed;
    gang = std::move(made).value();
  }
  try {
    // A new rendezvous per attempt, published under the gang's key.
    rayd::Get(gang->actors()[0]
                  .Task(&TrainWorker::Host)
                  .Remote(scaling.collective_timeout_s, gang->rendezvous_key()),
              kStartTimeoutMs);
  } catch (const RaydError& e) {
    return {Attempt::End::kFailed, std::string("hosting the rendezvous: ") + e.what()};
  }

  internal::RunSpec common;
  common.loop = loop;
  common.config_json = config.dump();
  common.rendezvous_key = gang->rendezvous_key();
  common.run_name = run_name;
  common.collective_timeout_s = scaling.collective_timeout_s;
  common.use_gpu = scaling.use_gpu;
  if (std::optional<std::string> resume_from = store.Latest()) {
    Result<internal::CheckpointFiles> files = internal::ReadCheckpointDir(*resume_from);
    if (!files.ok()) return {Attempt::End::kFailed, files.status().message()};
    common.has_checkpoint = true;
    common.checkpoint = std::move(files).value();
  }
  std::vector<ObjectRef<bool>> runs;
  store.StartAttempt();
  for (internal::RunSpec& spec : RunSpecs(common, gang->nodes())) {
    runs.push_back(
        gang->actors()[spec.world_rank].Task(&TrainWorker::Run).Remote(std::move(spec)));
  }
  Attempt attempt = Supervise(gang->actors()[0], runs, store, options);
  // Only a gang whose loops all returned is idle; a stopped one may still be running its loop.
  if ((attempt.end == Attempt::End::kFinished || attempt.idle) && options.reuse) {
    options.reuse->Put(shape, std::move(gang));
  }
  return attempt;
}

}  // namespace

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

Trainer::Trainer(std::string train_loop_name, nlohmann::json config, ScalingConfig scaling,
                 RunConfig run)
    : train_loop_name_(std::move(train_loop_name)),
      config_(std::move(config)),
      scaling_(std::move(scaling)),
      run_(std::move(run)) {}

TrainResult Trainer::Fit() { return Fit(FitOptions{}); }

TrainResult Trainer::Fit(const FitOptions& options) {
  if (run_.name.empty() || run_.storage_path.empty()) {
    throw RaydError("RunConfig needs a name and a storage_path");
  }
  if (std::string unknown = UnknownTrainLoop(train_loop_name_); !unknown.empty()) {
    throw RaydError(unknown);
  }
  ScalingConfig scaling = scaling_;
  if (std::string why = CheckGpuSharing(scaling_); !why.empty()) {
    throw RaydError("ScalingConfig.resources_per_worker.GPU: " + why);
  }
  scaling.num_workers = ResolveNumWorkers(scaling_);
  std::string run_dir = (std::filesystem::path(run_.storage_path) / run_.name).string();
  Result<CheckpointStore> store = CheckpointStore::Open(run_dir, run_.checkpoint);
  if (!store.ok()) throw RaydError(store.status().message());
  Status written = RunDirectory(run_dir).WriteParams(
      options.params ? *options.params : TrainerParams(config_, scaling.num_workers));
  if (!written.ok()) throw RaydError(written.message());

  // MLflow tracking from this driver: rank 0's reports, as Fit persists them.
  std::optional<MlflowRun> tracking;
  FitOptions tracked = options;
  if (!run_.mlflow_tracking_uri.empty()) {
    std::map<std::string, std::string> params = MlflowParams(config_);
    params["num_workers"] = std::to_string(scaling.num_workers);
    Result<MlflowRun> started = StartMlflowRun(
        run_.mlflow_tracking_uri,
        run_.mlflow_experiment_name.empty() ? run_.name : run_.mlflow_experiment_name, run_.name,
        std::filesystem::absolute(run_dir).lexically_normal().string(), params,
        {{"train_loop", train_loop_name_}});
    if (!started.ok()) throw RaydError("MLflow tracking: " + started.status().message());
    tracking = std::move(started).value();
    tracked.on_report = [&tracking, &options](const ReportedResult& report) {
      Status logged = LogMlflowResult(*tracking, report.metrics);
      if (!logged.ok()) spdlog::warn("MLflow tracking: {}", logged.message());
      return options.on_report ? options.on_report(report) : true;
    };
  }

  TrainResult result;
  while (true) {
    Attempt attempt = RunAttempt(train_loop_name_, config_, scaling, run_.name, *store, tracked);
    result.error = attempt.error;
    result.stopped = attempt.end == Attempt::End::kStopped;
    if (attempt.end != Attempt::End::kFailed) break;
    int max_failures = run_.failure.max_failures;
    if (max_failures >= 0 && result.restarts >= max_failures) break;
    ++result.restarts;
  }
  result.metrics = store->last_metrics();
  result.checkpoint = store->Latest();
  if (tracking) {
    // A run its caller stopped ended as asked: FINISHED, as Ray's MLflow callback marks it.
    Status ended = tracking->End(result.ok() || result.stopped ? MlflowRunStatus::kFinished
                                                               : MlflowRunStatus::kFailed);
    if (!ended.ok()) spdlog::warn("MLflow tracking: {}", ended.message());
  }
  return result;
}

}  // namespace rayd::train
