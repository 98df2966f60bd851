#include "head/job_manager.h"

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
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "common/job_submission.h"
#include "rayd/base/capnp_bytes.h"
#include "rayd/base/ids.h"
#include "rayd/base/process.h"
#include "rayd/runtime/cluster_json.h"
#include "rayd/runtime/session.h"

extern char** environ;

namespace rayd::head {
namespace fs = std::filesystem;

namespace {

constexpr char kTable[] = "job_submissions";
constexpr uint32_t kMaxLogRead = 4u << 20;
// Runs the command ("$@"), then writes its exit status to the file named by $0: a head that
// restarted and adopted the driver learns from it how the job ended. The wrapper outlives
// SIGTERM and SIGINT (a trap, not an ignored signal, which the command would inherit) so that
// a driver stopping gracefully is not cut short by its group being killed when the wrapper
// ends.
constexpr char kExitRecorder[] =
    "trap : TERM INT; \"$@\"; status=$?; echo $status > \"$0\"; exit $status";

std::string ExitFile(const JobSubmissionInfo& job) {
  return (fs::path(job.log_path).parent_path() / "exit_code").string();
}

std::string DriverPidFile(const JobSubmissionInfo& job) {
  return (fs::path(job.log_path).parent_path() / "driver.pid").string();
}

bool SameProcessAlive(const JobSubmissionInfo& job) {
  return job.pid > 0 && job.driver_start_ticks != 0 &&
         session::ProcessStartTicks(job.pid) == job.driver_start_ticks;
}

std::string SignalName(int signum) {
  const char* name = sigabbrev_np(signum);
  return name ? std::string("SIG") + name : std::to_string(signum);
}

// A one-string entrypoint with spaces or shell syntax is a shell command line, as Ray's are.
bool NeedsShell(const std::vector<std::string>& argv) {
  return argv.size() == 1 && argv[0].find_first_of(" \t\n;&|<>()$`\"'*?~") != std::string::npos;
}

// Whether `command` names something `cwd`'s process could execute with `path` as its PATH.
bool Executable(const std::string& command, const std::string& cwd, const std::string& path) {
  auto runnable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (command.find('/') != std::string::npos) {
    return runnable(command.front() == '/' ? fs::path(command) : fs::path(cwd) / command);
  }
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path base = dir.empty() ? fs::path(cwd) : fs::path(dir).is_absolute()
                                                            ? fs::path(dir)
                                                            : fs::path(cwd) / dir;
    if (runnable(base / command)) return true;
  }
  return false;
}

std::string NewSubmissionId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  uint8_t bytes[16];
  internal::FillRandom(bytes, sizeof bytes);
  std::string id = "raydsubmit_";
  for (uint8_t b : bytes) id += kAlphabet[b % (sizeof kAlphabet - 1)];
  return id;
}

}  // namespace

struct JobManager::Job {
  JobSubmissionInfo info;
  uv_process_t* process = nullptr;  // a driver this head started
  bool adopted = false;             // a driver an earlier head started, still running
  bool stop_requested = false;
  std::string stop_reason;
  std::unique_ptr<Timer> kill_timer;
};

JobManager::JobManager(EventLoop& loop, gcs::TableStore& store, JobManagerConfig config)
    : loop_(loop), store_(store), config_(std::move(config)), adopted_timer_(loop) {}

JobManager::~JobManager() {
  for (auto& [id, job] : jobs_) {
    if (job->process) {
      ::kill(-job->info.pid, SIGKILL);
      CloseProcessHandle(job->process);
      job->process = nullptr;
      // The handle is closed, so libuv will not reap it: do it here.
      while (waitpid(job->info.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    } else if (job->adopted && SameProcessAlive(job->info)) {
      ::kill(-job->info.pid, SIGKILL);
    }
  }
}

void JobManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::SUBMIT_JOB>([this](const auto& c) { HandleSubmit(c); });
  dispatcher.Handle<proto::Method::GET_JOB_SUBMISSION>([this](const auto& c) { HandleGet(c); });
  dispatcher.Handle<proto::Method::LIST_JOB_SUBMISSIONS>(
      [this](const auto& c) { HandleList(c); });
  dispatcher.Handle<proto::Method::STOP_JOB_SUBMISSION>([this](const auto& c) { HandleStop(c); });
  dispatcher.Handle<proto::Method::READ_JOB_LOGS>([this](const auto& c) { HandleReadLogs(c); });
}

void JobManager::Recover(std::function<void(Status)> done) {
  store_.GetAll(kTable, [this, done](Result<std::map<std::string, std::string>> rows) {
    if (!rows.ok()) return done(rows.status().WithContext("reading submitted jobs"));
    for (const auto& [id, text] : *rows) {
      nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_discarded()) {
        spdlog::warn("submitted job {}: unreadable record, skipped", id);
        continue;
      }
      auto job = std::make_unique<Job>();
      job->info = JobSubmissionFromJson(j);
      Job& ref = *job;
      jobs_[id] = std::move(job);
      if (ref.info.terminal()) continue;
      if (SameProcessAlive(ref.info)) {
        Adopt(ref);
      } else {
        FinishAdopted(ref);
      }
    }
    done(Status::Ok());
  });
}

JobManager::Job* JobManager::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void JobManager::HandleSubmit(const rpc::Incoming<proto::Method::SUBMIT_JOB>& call) {
  auto request = call.params();
  std::string id = request.getSubmissionId();
  if (id.empty()) {
    id = NewSubmissionId();
  } else if (!std::regex_match(id, std::regex("[A-Za-z0-9_.-]{1,128}"))) {
    return call.Fail(Status::InvalidArgument(
        "submission id '" + id + "' may hold only letters, digits, '_', '.' and '-'"));
  }
  if (const Job* existing = Find(id)) {
    return call.Fail(Status::AlreadyExists("a job with submission id " + id + " exists (" +
                                           existing->info.status + ")"));
  }
  std::vector<std::string> entrypoint;
  for (auto arg : request.getEntrypoint()) entrypoint.emplace_back(arg);
  if (entrypoint.empty() || entrypoint.front().empty()) {
    return call.Fail(Status::InvalidArgument("no command to run"));
  }
  auto runtime_env = runtime::ParseJobRuntimeEnv(request.getRuntimeEnvJson());
  if (!runtime_env.ok()) return call.Fail(runtime_env.status());

  auto job = std::make_unique<Job>();
  JobSubmissionInfo& info = job->info;
  info.submission_id = id;
  info.entrypoint = entrypoint;
  info.runtime_env_json = request.getRuntimeEnvJson();
  const fs::path dir = fs::path(config_.session_dir) / "jobs" / id;
  info.working_dir = (dir / "working_dir").string();
  info.log_path = (dir / "driver.log").string();
  std::error_code ec;
  fs::create_directories(info.working_dir, ec);
  if (ec) return call.Fail(Status::Internal("cannot create " + info.working_dir + ": " + ec.message()));
  Status unpacked = runtime::UnpackWorkingDir(request.getFiles(), info.working_dir);
  Status spawned = unpacked.ok() ? Spawn(*job, runtime_env->env_vars) : unpacked;
  if (!spawned.ok()) {
    fs::remove_all(dir, ec);  // nothing ran: nothing to keep
    return call.Fail(spawned);
  }
  std::string command;
  for (const auto& arg : entrypoint) command += (command.empty() ? "" : " ") + arg;
  spdlog::info("job {} started (pid {}): {}", id, info.pid, command);
  Job& ref = *job;
  jobs_[id] = std::move(job);
  Persist(ref, [this, call, id](const Status& s) {
    if (!s.ok()) spdlog::warn("job {}: could not record it: {}", id, s.ToString());
    const Job* j = Find(id);
    if (!j) return call.Fail(Status::Internal("job " + id + " vanished"));
    call.Reply([&](proto::JobSubmissionReply::Builder r) { runtime::ToWire(j->info, r.initJob()); });
  });
}

Status JobManager::Spawn(Job& job, const std::map<std::string, std::string>& env_vars) {
  JobSubmissionInfo& info = job.info;
  // The driver's environment: the head's, less its own RAYD_ settings, plus the cluster's
  // address and token and the submission's variables.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (name.rfind("RAYD_", 0) == 0 && name != "RAYD_TEMP_DIR") continue;
    env[name] = entry.substr(eq + 1);
  }
  env["RAYD_ADDRESS"] = config_.gcs_address;
  env["RAYD_TOKEN"] = config_.token;
  env["RAYD_JOB_SUBMISSION_ID"] = info.submission_id;
  env.emplace("PYTHONUNBUFFERED", "1");  // logs as they are written, as Ray's job drivers
  for (const auto& [name, value] : env_vars) env[name] = value;

  std::vector<std::string> command = info.entrypoint;
  if (NeedsShell(command)) {
    command = {"/bin/sh", "-c", info.entrypoint[0]};
  } else {
    auto path = env.find("PATH");
    if (!Executable(command[0], info.working_dir,
                    path == env.end() ? "/usr/local/bin:/usr/bin:/bin" : path->second)) {
      return Status::NotFound("command not found: " + command[0] +
                              (command[0].find('/') == std::string::npos
                                   ? " (not on the head's PATH)"
                                   : " (no such executable in the working directory)"));
    }
  }
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", kExitRecorder, ExitFile(info)};
  options.argv.insert(options.argv.end(), command.begin(), command.end());
  for (const auto& [name, value] : env) options.env.push_back(name + "=" + value);
  options.cwd = info.working_dir;
  options.own_process_group = true;  // to stop as a whole
  options.on_exit = &JobManager::OnProcessExit;
  options.data = this;
  options.log_fd = ::open(info.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (options.log_fd < 0) {
    return Status::Internal("cannot open " + info.log_path + ": " + strerror(errno));
  }
  auto spawned = SpawnProcess(loop_, options);
  ::close(options.log_fd);
  RAYD_RETURN_IF_ERROR(spawned.status());
  uv_process_t* process = *spawned;
  job.process = process;
  info.pid = process->pid;
  info.driver_start_ticks = session::ProcessStartTicks(info.pid);
  // For `rayd stop --force`, which kills the daemons without asking them: it ends these too.
  Status recorded = session::WriteFileWithMode(
      DriverPidFile(info), std::to_string(info.pid) + " " + std::to_string(info.driver_start_ticks) + "\n",
      0600);
  if (!recorded.ok()) spdlog::warn("job {}: {}", info.submission_id, recorded.ToString());
  info.status = "RUNNING";
  info.message = "its driver runs on the head";
  info.start_time_ms = NowUnixMs();
  return Status::Ok();
}

void JobManager::OnProcessExit(uv_process_t* process, int64_t exit_status, int term_signal) {
  auto* self = static_cast<JobManager*>(process->data);
  if (!self) return;
  for (auto& [id, job] : self->jobs_) {
    if (job->process == process) return self->Finish(*job, exit_status, term_signal);
  }
  CloseProcessHandle(process);
}

void JobManager::Finish(Job& job, int64_t exit_status, int term_signal) {
  JobSubmissionInfo& info = job.info;
  if (job.process) {
    CloseProcessHandle(job.process);
    job.process = nullptr;
  }
  job.adopted = false;
  job.kill_timer.reset();
  ::kill(-info.pid, SIGKILL);  // whatever the driver left behind in its group
  ::unlink(DriverPidFile(info).c_str());
  info.end_time_ms = NowUnixMs();
  info.exit_code = term_signal != 0 ? -1 : static_cast<int>(exit_status);
  if (job.stop_requested) {
    info.status = "STOPPED";
    info.message = job.stop_reason + (term_signal != 0
                                          ? " (its driver was killed by " + SignalName(term_signal) + ")"
                                          : " (its driver exited with code " +
                                                std::to_string(exit_status) + ")");
  } else if (term_signal != 0) {
    info.status = "FAILED";
    info.message = "its driver was killed by " + SignalName(term_signal);
  } else if (exit_status == 0) {
    info.status = "SUCCEEDED";
    info.message = "its driver exited with code 0";
  } else {
    info.status = "FAILED";
    info.message = "its driver exited with code " + std::to_string(exit_status) +
                   (exit_status == 127 ? " (command not found: see its logs)" : "");
  }
  spdlog::info("job {} {}: {}", info.submission_id, info.status, info.message);
  Persist(job);
}

void JobManager::Adopt(Job& job) {
  job.adopted = true;
  spdlog::info("job {}: its driver (pid {}) still runs; watching it", job.info.submission_id,
               job.info.pid);
  if (adopted_timer_.active()) return;
  adopted_timer_.Start(config_.adopted_poll, config_.adopted_poll, [this] {
    bool any = false;
    for (auto& [id, job] : jobs_) {
      if (!job->adopted) continue;
      if (SameProcessAlive(job->info)) {
        any = true;
      } else {
        FinishAdopted(*job);
      }
    }
    if (!any) adopted_timer_.Stop();
  });
}

void JobManager::FinishAdopted(Job& job) {
  std::ifstream in(ExitFile(job.info));
  int code = 0;
  if (in >> code) return Finish(job, code, 0);
  job.adopted = false;
  job.kill_timer.reset();
  ::unlink(DriverPidFile(job.info).c_str());
  job.info.end_time_ms = NowUnixMs();
  job.info.status = job.stop_requested ? "STOPPED" : "FAILED";
  job.info.message = job.stop_requested
                         ? job.stop_reason
                         : "its driver ended while the head was down, leaving no exit status";
  Persist(job);
}

void JobManager::RequestStop(Job& job, const std::string& reason) {
  if (job.stop_requested) return;
  job.stop_requested = true;
  job.stop_reason = reason;
  job.info.message = "stopping: " + reason;
  ::kill(-job.info.pid, SIGTERM);
  job.kill_timer = std::make_unique<Timer>(loop_);
  job.kill_timer->Start(config_.stop_grace, Millis(0), [this, id = job.info.submission_id] {
    Job* j = Find(id);
    if (!j || j->info.terminal()) return;
    spdlog::info("job {}: its driver outlived SIGTERM by {} ms; killing it", id,
                 config_.stop_grace.count());
    ::kill(-j->info.pid, SIGKILL);
  });
}

void JobManager::HandleGet(const rpc::Incoming<proto::Method::GET_JOB_SUBMISSION>& call) {
  const std::string id = call.params().getSubmissionId();
  const Job* job = Find(id);
  if (!job) return call.Fail(Status::NotFound("no job with submission id " + id));
  call.Reply([&](proto::JobSubmissionReply::Builder r) { runtime::ToWire(job->info, r.initJob()); });
}

void JobManager::HandleList(const rpc::Incoming<proto::Method::LIST_JOB_SUBMISSIONS>& call) {
  std::vector<const JobSubmissionInfo*> jobs;
  for (const auto& [id, job] : jobs_) jobs.push_back(&job->info);
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto* a, const auto* b) {
    return a->start_time_ms < b->start_time_ms;
  });
  call.Reply([&](proto::ListJobSubmissionsReply::Builder r) {
    auto list = r.initJobs(static_cast<unsigned>(jobs.size()));
    for (size_t i = 0; i < jobs.size(); ++i) runtime::ToWire(*jobs[i], list[static_cast<unsigned>(i)]);
  });
}

void JobManager::HandleStop(const rpc::Incoming<proto::Method::STOP_JOB_SUBMISSION>& call) {
  const std::string id = call.params().getSubmissionId();
  Job* job = Find(id);
  if (!job) return call.Fail(Status::NotFound("no job with submission id " + id));
  if (job->info.terminal()) {
    return call.Fail(Status::InvalidArgument("job " + id + " has already ended: " +
                                                job->info.status + " (" + job->info.message +
                                                ")"));
  }
  RequestStop(*job, "stopped by `rayd job stop`");
  call.Reply([&](proto::JobSubmissionReply::Builder r) { runtime::ToWire(job->info, r.initJob()); });
}

void JobManager::HandleReadLogs(const rpc::Incoming<proto::Method::READ_JOB_LOGS>& call) {
  auto request = call.params();
  const std::string id = request.getSubmissionId();
  const Job* job = Find(id);
  if (!job) return call.Fail(Status::NotFound("no job with submission id " + id));
  uint64_t offset = request.getOffset();
  const uint32_t max_bytes = std::min(std::max(request.getMaxBytes(), 1u), kMaxLogRead);
  std::string data;
  std::ifstream in(job->info.log_path, std::ios::binary);
  if (in && request.getFromEnd()) {
    std::error_code ec;
    const uint64_t size = fs::file_size(job->info.log_path, ec);
    offset = ec || size < max_bytes ? 0 : size - max_bytes;
  }
  if (in) {
    in.seekg(static_cast<std::streamoff>(offset));
    data.resize(max_bytes);
    in.read(data.data(), max_bytes);
    data.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  }
  call.Reply([&](proto::ReadJobLogsReply::Builder r) {
    r.setData(AsData(data));
    r.setNextOffset(offset + data.size());
    runtime::ToWire(job->info, r.initJob());
  });
}

void JobManager::StopAll(const std::string& reason, std::function<void()> done) {
  bool any = false;
  for (auto& [id, job] : jobs_) {
    if (job->info.terminal()) continue;
    RequestStop(*job, reason);
    any = true;
  }
  if (!any && pending_writes_ == 0) return done();
  // Wait for the drivers to end (SIGKILL follows SIGTERM after the grace) and their records to
  // be written, a little longer than the grace at most.
  stop_all_timer_ = std::make_unique<Timer>(loop_);
  const auto deadline = std::chrono::steady_clock::now() + config_.stop_grace + Millis(2000);
  stop_all_timer_->Start(Millis(20), Millis(20), [this, deadline, done] {
    bool running = false;
    for (auto& [id, job] : jobs_) {
      if (job->adopted && !SameProcessAlive(job->info)) FinishAdopted(*job);
      running = running || !job->info.terminal();
    }
    if ((running || pending_writes_ > 0) && std::chrono::steady_clock::now() < deadline) return;
    stop_all_timer_->Stop();
    done();
  });
}

void JobManager::Persist(const Job& job, std::function<void(Status)> done) {
  ++pending_writes_;
  store_.Put(kTable, job.info.submission_id, JobSubmissionJson(job.info).dump(), true,
             [this, id = job.info.submission_id, done](Result<bool> r) {
               --pending_writes_;
               if (!r.ok()) spdlog::warn("job {}: could not record it: {}", id, r.status().ToString());
               if (done) done(r.status());
             });
}

}  // namespace rayd::head
