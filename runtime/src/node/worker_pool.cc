#include "node/worker_pool.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "rayd/base/files.h"
#include "rayd/base/logging.h"
#include "rayd/base/process.h"
#include "rayd/protocol/core.capnp.h"

extern char** environ;

namespace rayd::node {
namespace {

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string Seconds(Millis ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + " s";
  return std::to_string(ms.count()) + " ms";
}

constexpr char kWorkerDirPrefix[] = "rayd-worker-";

std::filesystem::path TempBase() {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  return ec ? std::filesystem::path("/tmp") : base;
}

// Under the node's temporary directory, named for the worker: a rank's unpacked checkpoint,
// its NewCheckpointDir and a command's scratch go there, so that a worker SIGKILLed in the
// middle of a checkpoint leaves nothing behind once the pool has seen it die. The worker makes
// it and holds a lock on it while it lives (MakeOwnedDirectory), so a node that starts can
// remove those of workers no node saw die (a SIGKILLed node's).
std::string TempDirFor(const WorkerId& id) {
  return (TempBase() / (kWorkerDirPrefix + id.Hex().substr(0, 12))).string();
}

void RemoveTempDir(Worker& worker) {
  if (worker.temp_dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(worker.temp_dir, ec);
  if (ec) {
    spdlog::warn("cannot remove worker {}'s {}: {}", worker.id.Hex(), worker.temp_dir,
                 ec.message());
  }
  worker.temp_dir.clear();
}

}  // namespace

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting:
      return "STARTING";
    case WorkerState::kIdle:
      return "IDLE";
    case WorkerState::kLeased:
      return "LEASED";
    case WorkerState::kDead:
      return "DEAD";
  }
  return "?";
}

WorkerPool::WorkerPool(EventLoop& loop, WorkerPoolConfig config, const NodeId& node_id)
    : loop_(loop), config_(std::move(config)), node_id_(node_id), maintenance_timer_(loop) {
  for (const std::string& dir : RemoveDeadOwnedDirectories(TempBase(), kWorkerDirPrefix)) {
    spdlog::info("removed {}: its worker died with no node left to remove it", dir);
  }
  const Millis period = std::min(Millis(1000), std::max(Millis(10), config_.idle_timeout / 2));
  maintenance_timer_.Start(period, period, [this] { Maintain(); });
}

WorkerPool::~WorkerPool() {
  for (auto& [id, worker] : workers_) {
    if (!worker->process) continue;
    uv_process_kill(worker->process, SIGKILL);
    CloseProcessHandle(worker->process);
    worker->process = nullptr;
    // The handle is closed, so libuv will not reap it: do it here (SIGKILL ends it promptly).
    while (waitpid(worker->pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    RemoveTempDir(*worker);
  }
}

void WorkerPool::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::REGISTER_WORKER>([this](const auto& c) { HandleRegister(c); });
  dispatcher.Handle<proto::Method::KILL_WORKER>([this](const auto& c) { HandleKill(c); });
  dispatcher.Handle<proto::Method::GET_WORKERS>([this](const auto& c) { HandleGetWorkers(c); });
}

std::vector<std::string> WorkerPool::BuildEnv(const Worker& worker) const {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // The node's own CUDA_VISIBLE_DEVICES (if any) maps our device ids to physical ones.
  std::vector<std::string> physical;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end() && !it->second.empty()) {
    physical = Split(it->second, ',');
  }
  std::string launch_keys;
  for (const auto& [k, v] : worker.launch.env) {
    env[k] = v;
    launch_keys += (launch_keys.empty() ? "" : ",") + k;
  }
  // The worker passes its launch environment on to the workers of what it submits.
  env["RAYD_LAUNCH_ENV_KEYS"] = launch_keys;
  env["RAYD_WORKER_MODE"] = "1";
  env["RAYD_WORKER_ID"] = worker.id.Hex();
  env["RAYD_JOB_ID"] = worker.job_id.Hex();
  env["RAYD_NODE_ID"] = node_id_.Hex();
  env["RAYD_NODE_IP"] = config_.node_ip;
  env["RAYD_NODE_ADDRESS"] = "unix:" + config_.session_dir + "/node.sock";
  env["RAYD_GCS_ADDRESS"] = config_.gcs_address;
  env["RAYD_TOKEN"] = config_.token;
  env["RAYD_SESSION_DIR"] = config_.session_dir;
  env["RAYD_WORKER_TEMP_DIR"] = worker.temp_dir;
  if (!worker.gpu_ids.empty()) {
    std::string devices;
    for (int id : worker.gpu_ids) {
      if (!devices.empty()) devices += ",";
      devices += static_cast<size_t>(id) < physical.size() ? physical[id] : std::to_string(id);
    }
    env["CUDA_VISIBLE_DEVICES"] = devices;
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

void WorkerPool::StartWorker(const JobId& job_id, const WorkerLaunch& launch,
                             const std::vector<int>& gpu_ids, bool for_actor, StartCallback done) {
  auto owned = std::make_unique<Worker>();
  Worker& w = *owned;
  w.id = WorkerId::FromRandom();
  w.job_id = job_id;
  w.launch = launch;
  w.gpu_ids = gpu_ids;
  w.for_actor = for_actor;
  w.log_path = config_.session_dir + "/logs/worker-" + w.id.Short() + ".log";
  w.temp_dir = TempDirFor(w.id);
  w.on_started = std::move(done);
  workers_.emplace(w.id, std::move(owned));

  if (launch.argv.empty() || launch.argv[0].empty()) return FailStart(w, "no command to run");
  to_spawn_.push_back(w.id);
  SpawnQueued();
}

size_t WorkerPool::Spawning() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) {
    if (w->state == WorkerState::kStarting && w->process) ++n;
  }
  return n;
}

void WorkerPool::SpawnQueued() {
  while (!to_spawn_.empty() && (config_.max_starting == 0 || Spawning() < config_.max_starting)) {
    Worker* w = Find(to_spawn_.front());
    to_spawn_.pop_front();
    // Gone, or killed while it waited.
    if (w != nullptr && w->state == WorkerState::kStarting && !w->process) Spawn(*w);
  }
}

void WorkerPool::Spawn(Worker& w) {
  ::mkdir((config_.session_dir + "/logs").c_str(), 0700);  // normally there already
  int log_fd = ::open(w.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) return FailStart(w, std::string("cannot open its log: ") + strerror(errno));

  SpawnOptions options;
  options.argv = w.launch.argv;
  options.env = BuildEnv(w);
  options.log_fd = log_fd;
  options.on_exit = &WorkerPool::OnProcessExit;
  options.data = this;
  auto spawned = SpawnProcess(loop_, options);
  ::close(log_fd);
  if (!spawned.ok()) return FailStart(w, spawned.status().message());
  uv_process_t* process = *spawned;
  w.process = process;
  w.pid = process->pid;
  spdlog::info("started worker {} (pid {}) for job {}: {}", w.id.Hex(), w.pid, w.job_id.Hex(),
               w.launch.argv[0]);
  w.start_timer = std::make_unique<Timer>(loop_);
  w.start_timer->Start(config_.start_timeout, Millis(0), [this, id = w.id] {
    Worker* worker = Find(id);
    if (!worker || worker->state != WorkerState::kStarting) return;
    Kill(*worker, "did not register in time");
    FailStart(*worker, "it did not register within " + Seconds(config_.start_timeout));
  });
}

void WorkerPool::FailStart(Worker& worker, const std::string& why) {
  if (worker.state == WorkerState::kStarting && !worker.process) {
    // Never ran (spawn failure): it is dead right away.
    worker.state = WorkerState::kDead;
    worker.exit_reason = why;
    worker.dead_since = Clock::now();
  }
  if (worker.start_timer) worker.start_timer->Stop();
  auto done = std::move(worker.on_started);
  worker.on_started = nullptr;
  spdlog::warn("worker {} for job {} failed to start: {}", worker.id.Hex(), worker.job_id.Hex(),
               why);
  if (done) {
    done(Status::Unavailable("worker for job " + worker.job_id.Hex() + " failed to start: " + why +
                             " (log: " + worker.log_path + ")"));
  }
}

void WorkerPool::OnProcessExit(uv_process_t* process, int64_t exit_status, int term_signal) {
  auto* pool = static_cast<WorkerPool*>(process->data);
  if (!pool) return;
  for (auto& [id, worker] : pool->workers_) {
    if (worker->process == process) return pool->HandleExit(*worker, exit_status, term_signal);
  }
  CloseProcessHandle(process);
}

void WorkerPool::HandleExit(Worker& worker, int64_t exit_status, int term_signal) {
  CloseProcessHandle(worker.process);
  worker.process = nullptr;
  RemoveTempDir(worker);
  if (worker.start_timer) worker.start_timer->Stop();
  const WorkerState previous = worker.state;
  worker.state = WorkerState::kDead;
  worker.dead_since = Clock::now();
  worker.exit_reason = term_signal != 0 ? "killed by signal " + std::to_string(term_signal)
                                        : "exited with code " + std::to_string(exit_status);
  if (!worker.kill_reason.empty()) worker.exit_reason += " (" + worker.kill_reason + ")";
  spdlog::info("worker {} (pid {}, job {}) {} while {}", worker.id.Hex(), worker.pid,
               worker.job_id.Hex(), worker.exit_reason, WorkerStateName(previous));
  if (worker.on_started) FailStart(worker, worker.exit_reason);
  if (on_exit_) on_exit_(worker, previous);
  worker.lease_id.clear();
  SpawnQueued();
}

Worker* WorkerPool::Find(const WorkerId& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

Worker* WorkerPool::FindIdle(const JobId& job_id, const WorkerLaunch& launch,
                             const std::vector<int>& gpu_ids) {
  Worker* best = nullptr;
  for (auto& [id, w] : workers_) {
    // Not one this pool has killed: it stays IDLE until its exit is seen, and would take the
    // lease down with it.
    if (w->state != WorkerState::kIdle || !w->kill_reason.empty() || w->job_id != job_id ||
        w->for_actor || w->gpu_ids != gpu_ids || !(w->launch == launch)) {
      continue;
    }
    // The most recently used one: the others may then time out and free their memory.
    if (!best || w->idle_since > best->idle_since) best = w.get();
  }
  return best;
}

void WorkerPool::MarkLeased(Worker& worker, const std::string& lease_id, bool for_actor) {
  RAYD_CHECK(worker.state == WorkerState::kIdle);
  worker.state = WorkerState::kLeased;
  worker.lease_id = lease_id;
  worker.for_actor = worker.for_actor || for_actor;
}

void WorkerPool::ReturnToIdle(Worker& worker) {
  if (worker.state != WorkerState::kLeased) return;
  worker.state = WorkerState::kIdle;
  worker.lease_id.clear();
  worker.idle_since = Clock::now();
  TrimIdle(worker.job_id);
}

void WorkerPool::TrimIdle(const JobId& job_id) {
  std::vector<Worker*> idle;
  for (auto& [id, w] : workers_) {
    if (w->state == WorkerState::kIdle && w->kill_reason.empty() && w->job_id == job_id &&
        w->process) {
      idle.push_back(w.get());  // not those already killed, whose exit is yet to be seen
    }
  }
  if (idle.size() <= config_.max_idle_per_job) return;
  std::sort(idle.begin(), idle.end(),
            [](Worker* a, Worker* b) { return a->idle_since < b->idle_since; });
  for (size_t i = 0; i < idle.size() - config_.max_idle_per_job; ++i) {
    Kill(*idle[i], "more idle workers than the node has CPUs");
  }
}

void WorkerPool::Kill(Worker& worker, const std::string& reason) {
  if (!worker.process) {
    // Still waiting for its turn to start: it never will.
    if (worker.state == WorkerState::kStarting) {
      std::erase(to_spawn_, worker.id);
      if (worker.kill_reason.empty()) worker.kill_reason = reason;
      FailStart(worker, reason);
    }
    return;
  }
  if (worker.kill_reason.empty()) worker.kill_reason = reason;
  int rc = uv_process_kill(worker.process, SIGKILL);
  if (rc != 0 && rc != UV_ESRCH) {
    spdlog::warn("cannot kill worker {} (pid {}): {}", worker.id.Hex(), worker.pid,
                 uv_strerror(rc));
  }
}

void WorkerPool::KillJobWorkers(const JobId& job_id, const std::string& reason) {
  for (auto& [id, w] : workers_) {
    if (w->job_id == job_id && !w->for_actor) Kill(*w, reason);
  }
}

void WorkerPool::KillAll(const std::string& reason) {
  for (auto& [id, w] : workers_) Kill(*w, reason);
}

void WorkerPool::Maintain() {
  const auto now = Clock::now();
  for (auto it = workers_.begin(); it != workers_.end();) {
    Worker& w = *it->second;
    if (w.state == WorkerState::kIdle && w.process && now - w.idle_since > config_.idle_timeout) {
      Kill(w, "idle for more than " + Seconds(config_.idle_timeout));
    }
    if (w.state == WorkerState::kDead && now - w.dead_since > config_.dead_retention) {
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkerPool::HandleRegister(const rpc::Incoming<proto::Method::REGISTER_WORKER>& call) {
  auto request = call.params();
  auto id = WorkerId::FromHex(request.getWorkerId().cStr());
  if (!id.ok()) return call.Fail(id.status());
  Worker* w = Find(*id);
  if (!w || w->state == WorkerState::kDead) {
    return call.Fail(Status::NotFound("no starting worker " + id->Hex() + " on this node"));
  }
  if (w->state != WorkerState::kStarting) {
    return call.Fail(Status::AlreadyExists("worker " + id->Hex() + " is already registered"));
  }
  if (request.getPid() != 0 && request.getPid() != w->pid) {
    spdlog::warn("worker {} registered with pid {}, but the node started pid {}", id->Hex(),
                 request.getPid(), w->pid);
  }
  w->address = request.getAddress();
  w->registered = true;
  w->state = WorkerState::kIdle;
  w->idle_since = Clock::now();
  if (w->start_timer) w->start_timer->Stop();
  spdlog::info("worker {} registered at {}", id->Hex(), w->address);
  call.Reply([this](proto::RegisterWorkerReply::Builder reply) {
    reply.setNodeId(node_id_.Hex());
    reply.setGcsAddress(config_.gcs_address);
  });
  auto done = std::move(w->on_started);
  w->on_started = nullptr;
  if (done) done(w);
  // Nobody took it (the requester went away meanwhile): it is an ordinary idle worker now.
  if (w->state == WorkerState::kIdle) TrimIdle(w->job_id);
  SpawnQueued();
}

void WorkerPool::HandleKill(const rpc::Incoming<proto::Method::KILL_WORKER>& call) {
  auto request = call.params();
  auto id = WorkerId::FromHex(request.getWorkerId().cStr());
  if (!id.ok()) return call.Fail(id.status());
  Worker* w = Find(*id);
  if (!w) return call.Fail(Status::NotFound("no worker " + id->Hex() + " on this node"));
  std::string reason = request.getReason();
  Kill(*w, reason.empty() ? "killed on request" : reason);
  call.Reply();
}

void WorkerPool::HandleGetWorkers(const rpc::Incoming<proto::Method::GET_WORKERS>& call) {
  call.Reply([this](proto::GetWorkersReply::Builder b) {
    auto list = b.initWorkers(static_cast<unsigned>(workers_.size()));
    unsigned i = 0;
    for (const auto& [id, w] : workers_) {
      auto out = list[i++];
      out.setWorkerId(id.Hex());
      out.setJobId(w->job_id.Hex());
      out.setNodeId(node_id_.Hex());
      out.setPid(w->pid);
      out.setAddress(w->address);
      out.setState(WorkerStateName(w->state));
      out.setExitReason(w->exit_reason);
    }
  });
}

}  // namespace rayd::node
