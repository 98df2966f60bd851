// The rank side of the Trainer: the TrainWorker actor, the per-process session a running loop
// sees through GetContext/Report/GetCheckpoint (PrepareModel and PrepareOptimizer are the torch
// half's: torch/prepare.cc), and the loop registry.

#include "train_worker.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "background_writer.h"
#include "datasets.h"
#include "launch/command_rank.h"
#include "launch/horovod_rendezvous.h"
#include "rank_session.h"
#include "rayd/base/files.h"
#include "rayd/runtime/cluster.h"

namespace rayd::train {
namespace {

namespace fs = std::filesystem;

std::map<std::string, TrainLoop>& Loops() {
  static std::map<std::string, TrainLoop> loops;
  return loops;
}

// The session of the loop running on this thread (one rank actor per worker process). Owned
// by TrainWorker::Run's stack frame while the loop runs.
thread_local internal::RankSession* current = nullptr;

// Removes a directory tree when it goes out of scope.
class ScopedDir {
 public:
  explicit ScopedDir(std::string path) : path_(std::move(path)) {}
  ~ScopedDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Where a rank unpacks the checkpoint it resumes from, for the attempt's lifetime.
std::string UnpackDir(int rank) {
  return (internal::ScratchDir() /
          ("rayd-train-" + std::to_string(::getpid()) + "-rank" + std::to_string(rank)))
      .string();
}

void Unpack(const internal::CheckpointFiles& files, const std::string& dir) {
  Status written = internal::WriteCheckpointDir(dir, files);
  if (!written.ok()) throw RaydError("unpacking the checkpoint: " + written.message());
}

std::string NodeAddress() {
  const char* ip = std::getenv("RAYD_NODE_IP");
  return ip != nullptr && *ip != '\0' ? ip : "127.0.0.1";
}

}  // namespace

bool RegisterTrainLoop(const std::string& name, TrainLoop loop) {
  Loops()[name] = loop;
  return true;
}

std::vector<std::string> RegisteredTrainLoops() {
  std::vector<std::string> names;
  for (const auto& [name, loop] : Loops()) names.push_back(name);
  return names;
}

std::string UnknownTrainLoop(const std::string& name) {
  if (Loops().count(name)) return "";
  std::string known;
  for (const auto& [registered, loop] : Loops()) known += (known.empty() ? "" : ", ") + registered;
  return "unknown train loop '" + name + "' (registered: " + (known.empty() ? "none" : known) +
         ")";
}

double NodeDrain::SecondsLeft() const {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return std::max(0.0, deadline - now);
}

const TrainContext& GetContext() {
  internal::RankSession& session = internal::RequireSession("GetContext");
  session.context.drain = internal::ReadNodeDrain(session.drain_file);
  return session.context;
}

std::string NewCheckpointDir() {
  internal::RankSession& session = internal::RequireSession("NewCheckpointDir");
  const fs::path dir = internal::ScratchDir() / ("rayd-checkpoint-" + std::to_string(::getpid()) +
                                                 "-" + std::to_string(session.dirs_made++));
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw RaydError("NewCheckpointDir: cannot create " + dir.string() + ": " + ec.message());
  session.new_dirs.insert(dir.string());
  return dir.string();
}

void Report(const std::map<std::string, double>& metrics,
            const std::optional<std::string>& checkpoint_dir) {
  internal::RankSession& session = internal::RequireSession("Report");
  // The driver stopped this run and wants the rank back: leave the loop here.
  if (session.worker->stop_requested()) throw internal::StopRequested{};
  // A checkpoint written or shipped in the background failed: the attempt ends here.
  if (Status failed = session.writer.TakeError(); !failed.ok()) {
    throw RaydError("Report: " + failed.message());
  }
  const bool taken_over = checkpoint_dir && session.new_dirs.erase(*checkpoint_dir) > 0;
  const int rank = session.context.world_rank;
  // Another rank's own directory is not part of any checkpoint (only rank 0's are kept), as its
  // metrics are not: nothing to read, and no part the driver would never collect.
  std::optional<std::string> dir = rank == 0 || taken_over ? checkpoint_dir : std::nullopt;
  // Read the checkpoint's files, hand them over (rank 0's report to the driver's Poll, another
  // rank's to the driver's collection of parts), and delete a directory taken over.
  // The time the loop waited for its datasets' batches since the last report (rayd/train/data.h).
  std::map<std::string, double> reported = metrics;
  if (!session.shards.empty()) {
    double waited = 0;
    int64_t skipped = 0;  // rows `on_error: skip` left out, over the run's attempt
    for (const auto& [name, shard] : session.shards) {
      const data::ShardStats stats = shard->stats();
      waited += stats.wait_seconds;
      skipped += stats.skipped_rows;
    }
    reported.try_emplace("data_wait_s", waited - session.data_wait_reported);
    if (skipped > 0) reported.try_emplace("data_skipped_rows", static_cast<double>(skipped));
    session.data_wait_reported = waited;
    // Every rank's datasets on the dashboard; rank 0's row gets each rank's wait (data_feed.h).
    internal::DataFeed::Shards shards;
    for (const auto& [name, shard] : session.shards) shards.emplace(name, shard.get());
    session.data_feed->Publish(shards);
    for (auto& [name, value] : internal::DataFeed::CacheColumns(shards)) {
      reported.try_emplace(name, value);
    }
    if (rank == 0 && session.context.world_size > 1) {
      for (auto& [name, value] : session.data_feed->RankWaitColumns(waited)) {
        reported.try_emplace(name, value);
      }
    }
  }
  // Where the datasets stand goes into the checkpoint (rank 0's: every rank is at the same
  // steps), for the attempt that resumes from it.
  if (rank == 0 && dir && !session.shards.empty()) {
    std::map<std::string, data::ShardPosition> positions;
    for (const auto& [name, shard] : session.shards) positions[name] = shard->position();
    if (Status s = internal::WriteDataPositions(positions, *dir); !s.ok()) {
      throw RaydError("Report: " + s.message());
    }
  }
  auto ship = [worker = session.worker, rank, index = session.reports++, metrics = std::move(reported),
               checkpoint_dir = dir, taken_over]() -> Status {
    std::optional<internal::CheckpointFiles> files;
    if (checkpoint_dir) {
      Result<internal::CheckpointFiles> read = internal::ReadCheckpointDir(*checkpoint_dir);
      if (taken_over) {
        std::error_code ec;
        fs::remove_all(*checkpoint_dir, ec);
      }
      if (!read.ok()) return read.status();
      files = std::move(read).value();
    }
    if (rank != 0) {
      worker->Deposit(index, std::move(files));
      return Status::Ok();
    }
    internal::ReportMessage report;
    report.metrics = metrics;
    report.index = index;
    report.has_checkpoint = files.has_value();
    report.gather = taken_over;
    if (files) report.checkpoint = std::move(*files);
    worker->Enqueue(std::move(report));
    return Status::Ok();
  };
  if (!dir || taken_over) {
    session.writer.Post(std::move(ship));  // in order behind the writes before it
    return;
  }
  // The loop's own directory, which it may delete once Report returns: shipped now, after
  // everything posted before it (a SaveState into it, say).
  Status status = session.writer.Drain();
  if (status.ok()) status = ship();
  if (!status.ok()) throw RaydError("Report: " + status.message());
}

std::optional<std::string> GetCheckpoint() {
  return internal::RequireSession("GetCheckpoint").checkpoint;
}

namespace internal {

fs::path ScratchDir() {
  const char* own = std::getenv("RAYD_WORKER_TEMP_DIR");
  if (own == nullptr || *own == '\0') return fs::temp_directory_path();
  // Made once, locked for this process's life (MakeOwnedDirectory): a node that starts removes
  // it only once this worker is dead.
  static std::mutex mu;
  static bool made = false;
  std::lock_guard lock(mu);
  if (!made) {
    const Status status = MakeOwnedDirectory(own);
    if (!status.ok()) {
      throw RaydError("cannot create the worker's scratch directory: " + status.message());
    }
    made = true;
  }
  return own;
}

std::string NodeDrainFile() {
  const char* session_dir = std::getenv("RAYD_SESSION_DIR");
  const char* node_id = std::getenv("RAYD_NODE_ID");
  if (session_dir == nullptr || node_id == nullptr) return "";
  return DrainNoticePath(session_dir, node_id);
}

std::optional<NodeDrain> ReadNodeDrain(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return std::nullopt;  // the usual case
  std::optional<DrainNotice> notice = ReadDrainNotice(path);
  if (!notice) return std::nullopt;
  return NodeDrain{static_cast<double>(notice->deadline_ms) / 1000, notice->reason};
}

RankSession::~RankSession() {
  for (const std::string& dir : new_dirs) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

RankSession& RequireSession(const char* what) {
  if (current == nullptr) {
    throw RaydError(std::string(what) + " called outside a train loop run by a Trainer");
  }
  return *current;
}

Result<CheckpointFiles> ReadCheckpointDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::InvalidArgument("no checkpoint directory " + dir);
  CheckpointFiles files;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (!in) return Status::Internal("cannot read " + it->path().string());
    files[fs::relative(it->path(), dir).string()] = std::move(bytes).str();
  }
  if (ec) return Status::Internal("cannot list " + dir + ": " + ec.message());
  return files;
}

Status WriteCheckpointDir(const std::string& dir, const CheckpointFiles& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  for (const auto& [name, bytes] : files) {
    fs::path path = fs::path(dir) / name;
    fs::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return Status::Internal("cannot write " + path.string());
  }
  return Status::Ok();
}

TrainWorker::TrainWorker(int rank) : rank_(rank) {
  if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw RaydError("rank " + std::to_string(rank) + ": cannot create its stop pipe");
  }
}

TrainWorker::~TrainWorker() = default;

std::string TrainWorker::NodeId() { return rayd::GetNodeId(); }

bool TrainWorker::WarmTorch() {
  try {
    RequireTorch("warming the rank for its process group");
    return true;
  } catch (const RaydError&) {
    return false;
  }
}

std::string TrainWorker::ReservePort() {
  Result<std::string> endpoint = internal::ReservePort(NodeAddress());
  if (!endpoint.ok()) throw RaydError(endpoint.status().message());
  return *endpoint;
}

std::string TrainWorker::HostHorovod(std::vector<int> rank_nodes,
                                     std::vector<std::string> endpoints) {
  horovod_.reset();  // an earlier attempt's: its port closes before this one's opens
  Result<std::unique_ptr<HorovodRendezvous>> started =
      HorovodRendezvous::ForGang(rank_nodes, endpoints);
  if (!started.ok()) {
    throw RaydError("rank 0: serving Horovod's rendezvous: " + started.status().message());
  }
  horovod_ = std::move(started).value();
  return horovod_->address();
}

void TrainWorker::RunCommand(const RunSpec& spec, const std::string& checkpoint_dir) {
  CommandRank rank;
  rank.command = {.argv = spec.command.argv,
                  .launcher = spec.command.launcher,
                  .working_dir = spec.command.working_dir,
                  .env = spec.command.env,
                  .report_timeout_s = spec.command.report_timeout_s,
                  .stop_grace_s = spec.command.stop_grace_s,
                  .path = spec.command.path};
  const char* gpus = std::getenv("CUDA_VISIBLE_DEVICES");
  rank.launch = {.launcher = spec.command.launcher,
                 .world_rank = spec.world_rank,
                 .world_size = spec.world_size,
                 .local_rank = spec.local_rank,
                 .local_world_size = spec.local_world_size,
                 .node_rank = spec.node_rank,
                 .num_nodes = spec.num_nodes,
                 .endpoints = spec.endpoints,
                 .rank_nodes = spec.rank_nodes,
                 .trial_id = spec.trial_id,
                 .trial_dir = spec.trial_dir,
                 .restart_count = spec.restart_count,
                 .max_restarts = spec.max_restarts,
                 .checkpoint_dir = checkpoint_dir,
                 .gpus = spec.gpus && gpus != nullptr ? gpus : "",
                 .cpus = spec.cpus};
  rank.config_json = spec.config_json;
  rank.datasets_json = spec.datasets_json;
  rank.run_name = spec.run_name;
  // Beside the trial's other files when the driver's directory is visible here (this node is
  // the driver's, or they share a filesystem); else in this node's temporary directory.
  const std::string log_name = "rank_" + std::to_string(spec.world_rank) + ".log";
  std::error_code ec;
  rank.log_path = fs::is_directory(spec.trial_dir, ec)
                      ? (fs::path(spec.trial_dir) / log_name).string()
                      : (fs::temp_directory_path() / "rayd-command-logs" / spec.trial_id / log_name)
                            .string();
  ReportFn report = [this](const std::map<std::string, double>& metrics,
                           const std::optional<std::string>& checkpoint) -> Status {
    ReportMessage message;
    message.metrics = metrics;
    if (checkpoint) {
      RAYD_ASSIGN_OR_RETURN(message.checkpoint, ReadCheckpointDir(*checkpoint));
      message.has_checkpoint = true;
    }
    Enqueue(std::move(message));
    return Status::Ok();
  };
  Result<bool> ran =
      RunCommandRank(rank, report, stop_pipe_[0], [this] { return stop_requested(); });
  // The attempt's Horovod rendezvous (rank 0's) ends with it; a rank that never came to it is
  // the likeliest reason the command failed, so the failure says who.
  std::unique_ptr<HorovodRendezvous> horovod = std::move(horovod_);
  if (!ran.ok()) {
    std::string why = ran.status().message();
    if (const std::string waiting = horovod ? horovod->Waiting() : ""; !waiting.empty()) {
      why += "\n" + waiting;
    }
    throw RaydError(why);
  }
}

std::string TrainWorker::Host(int collective_timeout_s, std::string rendezvous_key) {
  const TorchHooks& torch = RequireTorch("rank 0 of several hosts their process group's store");
  hosted_ = torch.host(NodeAddress(), std::chrono::seconds(collective_timeout_s));
  std::string address = hosted_->address();
  rayd::KvPut(kRendezvousNamespace, rendezvous_key, address);
  return address;
}

int TrainWorker::Run(RunSpec spec) {
  {
    // A reused rank starts clean: nothing left from an earlier run's reports or stop.
    std::lock_guard lock(mu_);
    finished_ = false;
    loop_failed_ = false;
    attempt_token_ = spec.attempt_token;
    reports_.clear();
    parts_.clear();
    deposited_ = 0;
    enqueued_ = 0;
  }
  stop_requested_ = false;
  for (char drained[64]; ::read(stop_pipe_[0], drained, sizeof drained) > 0;) {
  }
  // However Run ends, a Poll waiting for reports returns at once: the driver need not wait out
  // its poll to learn that the loop is over.
  // Whether it ended by failing (an exception leaving Run) goes with it: a checkpoint part the
  // rank never reported is then lost, not absent by the loop's choice.
  struct MarkFinished {
    TrainWorker* worker;
    int exceptions = std::uncaught_exceptions();
    ~MarkFinished() {
      {
        std::lock_guard lock(worker->mu_);
        worker->finished_ = true;
        worker->loop_failed_ = std::uncaught_exceptions() > exceptions;
      }
      worker->reported_.notify_all();
    }
  } mark_finished{this};
  // LibTorch in this process (a loop that trains links it): one intra-op thread per rank, as
  // ranks share the node's cores. A loop without LibTorch never loads it.
  const TorchHooks* torch = LoadedTorch();
  if (torch == nullptr && LibTorchInProcess()) torch = &RequireTorch("LibTorch is in this process");
  if (torch != nullptr) torch->begin_run();
  if (spec.has_command) {
    ScopedDir unpacked(UnpackDir(spec.world_rank));
    if (spec.has_checkpoint) Unpack(spec.checkpoint, unpacked.path());
    RunCommand(spec, spec.has_checkpoint ? unpacked.path() : "");
    return Enqueued();
  }
  auto loop = Loops().find(spec.loop);
  if (loop == Loops().end()) {
    throw RaydError("rank " + std::to_string(rank_) + ": no train loop registered as '" +
                    spec.loop + "' (RAYD_TRAIN_LOOP)");
  }
  // A group of several ranks is formed before the loop starts, so that every rank's peers are
  // known to be there; that takes the torch half. A single rank forms its group of one when the
  // loop first needs it (PrepareModel): a loop that never communicates (most one-worker trials
  // of a sweep) then pays neither LibTorch's loading nor the group's set-up and teardown.
  if (spec.world_size > 1 || spec.use_gpu) {
    torch = &RequireTorch(spec.world_size > 1 ? "a run of several ranks forms a process group"
                                              : "use_gpu trains with LibTorch");
  }
  GroupSpec group;
  group.rank = spec.world_rank;
  group.world_size = spec.world_size;
  group.local_address = NodeAddress();
  group.timeout = std::chrono::seconds(spec.collective_timeout_s);
  group.mesh = {.data = spec.mesh_data, .pipeline = spec.mesh_pipeline, .tensor = spec.mesh_tensor};
  if (group.mesh.data * group.mesh.pipeline * group.mesh.tensor != spec.world_size) {
    group.mesh = {.data = spec.world_size};  // a driver from before meshes: data parallel
  }
  if (spec.world_size > 1 && spec.world_rank == 0) {
    if (!hosted_) throw RaydError("rank 0 was not asked to host the rendezvous");
    group.hosted = std::move(hosted_);
  } else if (spec.world_size > 1) {
    // Rank 0 published its store before the driver started any Run.
    std::optional<std::string> address = rayd::KvGet(kRendezvousNamespace, spec.rendezvous_key);
    if (!address || address->rfind(':') == std::string::npos) {
      throw RaydError("no rendezvous address under " + spec.rendezvous_key +
                      " in the cluster's key-value store");
    }
    group.join_address = *address;
  }
  // use_gpu: NCCL on this rank's first visible GPU, or Gloo on the CPU in a build without CUDA
  // LibTorch (the GPUs stay reserved; the log says why they go unused).
  const bool on_gpu = spec.use_gpu && torch->cuda_built();
  if (spec.use_gpu && !on_gpu && spec.world_rank == 0) {
    spdlog::warn("use_gpu: rayd was built against a LibTorch without CUDA, so rank 0 of {} "
                 "trains on the CPU over Gloo (build with -DRAYD_WITH_CUDA=ON: docs/gpu.md)",
                 spec.run_name);
  }
  group.nccl = on_gpu;
  // Runs last, after the session (its group, models and buckets) is gone: a reused rank gives
  // the last run's cached device memory back before the next one starts.
  struct ReleaseDeviceMemory {
    const TorchHooks* torch;
    ~ReleaseDeviceMemory() {
      if (torch != nullptr) torch->release_device_memory();
    }
  } release_device_memory{on_gpu ? torch : nullptr};
  RankSession session;
  session.group = std::move(group);
  if (spec.world_size > 1) torch->form_group(session);
  session.context = {.world_rank = spec.world_rank,
                     .world_size = spec.world_size,
                     .local_rank = spec.local_rank,
                     .local_world_size = spec.local_world_size,
                     .node_rank = spec.node_rank,
                     .run_name = spec.run_name,
                     .device = on_gpu ? "cuda:0" : "cpu",
                     .mesh = MeshCoordinatesOf(session.group.mesh, spec.world_rank)};
  session.worker = this;
  session.drain_file = NodeDrainFile();
  session.datasets_json = spec.datasets_json;
  // The checkpoint to resume from, unpacked on this node for the attempt's lifetime.
  ScopedDir unpacked(UnpackDir(spec.world_rank));
  if (spec.has_checkpoint) {
    Unpack(spec.checkpoint, unpacked.path());
    session.checkpoint = unpacked.path();
  }
  nlohmann::json config = nlohmann::json::parse(spec.config_json);
  current = &session;
  try {
    loop->second(config);
    // The loop's last reports are shipped before Run returns; a failed one fails the attempt.
    if (Status shipped = session.writer.Drain(); !shipped.ok()) {
      throw RaydError("shipping a report: " + shipped.message());
    }
  } catch (const StopRequested&) {
    current = nullptr;
    return Enqueued();
  } catch (...) {
    current = nullptr;
    throw;
  }
  current = nullptr;
  return Enqueued();
}

int TrainWorker::Enqueued() {
  std::lock_guard lock(mu_);
  return enqueued_;
}

void TrainWorker::RequestStop() {
  stop_requested_ = true;
  (void)!::write(stop_pipe_[1], "x", 1);
}

PollReply TrainWorker::Poll(int wait_ms, uint64_t attempt_token) {
  std::unique_lock lock(mu_);
  const bool ours = reported_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
    return attempt_token_ == attempt_token && (!reports_.empty() || finished_);
  });
  PollReply out;
  if (!ours && attempt_token_ != attempt_token) return out;  // its Run has not started yet
  out.reports.assign(std::make_move_iterator(reports_.begin()),
                     std::make_move_iterator(reports_.end()));
  // Every report is enqueued before finished_ is set (both under mu_): none can follow these.
  out.finished = finished_;
  reports_.clear();
  lock.unlock();
  static const std::string drain_file = NodeDrainFile();
  out.node_draining = ReadNodeDrain(drain_file).has_value();
  return out;
}

CheckpointPart TrainWorker::Part(int index, int wait_ms) {
  std::unique_lock lock(mu_);
  CheckpointPart part;
  part.ready = reported_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                                  [&] { return deposited_ > index || finished_; });
  part.reported = deposited_ > index;
  part.failed = finished_ && loop_failed_;
  if (auto it = parts_.find(index); part.ready && it != parts_.end()) {
    part.files = std::move(it->second);
  }
  if (part.ready) parts_.erase(parts_.begin(), parts_.upper_bound(index));
  return part;
}

void TrainWorker::Deposit(int index, std::optional<CheckpointFiles> files) {
  {
    std::lock_guard lock(mu_);
    if (files) parts_[index] = std::move(*files);
    deposited_ = index + 1;
  }
  reported_.notify_all();
}

void TrainWorker::Enqueue(ReportMessage report) {
  {
    std::lock_guard lock(mu_);
    reports_.push_back(std::move(report));
    ++enqueued_;
  }
  reported_.notify_all();
}

RAYD_REMOTE(TrainWorker::FactoryCreate, &TrainWorker::NodeId, &TrainWorker::WarmTorch,
            &TrainWorker::Host, &TrainWorker::ReservePort, &TrainWorker::HostHorovod,
            &TrainWorker::Run, &TrainWorker::Poll, &TrainWorker::Part, &TrainWorker::RequestStop);

}  // namespace internal
}  // namespace rayd::train
