// A command rank: spawn (through a supervisor), the report wire, logs, stop and failure.

#include "command_rank.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "data_server.h"
#include "rank_session.h"

namespace rayd::train::internal {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kStderrTailBytes = 4096;  // kept for the failure's message
constexpr int kStderrTailLines = 10;
constexpr size_t kMaxRequestBytes = 1 << 20;  // one report line

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// A reported metric's value: a JSON number, or (JSON has none) NaN and the infinities spelled
// as strings, as JavaScript and Python print them: a diverged loss is a result, ranked worst.
std::optional<double> MetricNumber(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (!value.is_string()) return std::nullopt;
  const std::string& text = value.get_ref<const std::string&>();
  if (text == "nan" || text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf" || text == "Infinity") return std::numeric_limits<double>::infinity();
  if (text == "-inf" || text == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.Release();
    }
    return *this;
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Result<std::pair<Fd, Fd>> Pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Internal(Errno("pipe"));
  return std::pair<Fd, Fd>(Fd(fds[0]), Fd(fds[1]));
}

std::string RandomHex(size_t bytes) {
  std::random_device random;
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned value = random() & 0xff;
    out += kHex[value >> 4];
    out += kHex[value & 0xf];
  }
  return out;
}

// argv[0] as execve wants it: a path with a '/' as it is (relative to working_dir), else the
// first executable file of that name on `path`.
Result<std::string> ResolveProgram(const std::string& program, const std::string& path,
                                   const std::string& working_dir) {
  if (program.find('/') != std::string::npos) {
    fs::path resolved = fs::path(program).is_absolute() || working_dir.empty()
                            ? fs::path(program)
                            : fs::path(working_dir) / program;
    if (::access(resolved.c_str(), X_OK) != 0) {
      return Status::NotFound(Errno("command " + resolved.string()));
    }
    return resolved.string();
  }
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) dir = ".";
    fs::path candidate = fs::path(dir) / program;
    if (fs::path(dir).is_relative() && !working_dir.empty()) {
      candidate = fs::path(working_dir) / candidate;
    }
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
  }
  return Status::NotFound("command not found: " + program + " (not on PATH=" + path + ")");
}

double MonotonicSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// --- The supervisor: runs between fork and _exit, so async-signal-safe calls only. ---

// Whether any process of group `pgid` is left (zombies of ours are reaped first).
bool GroupAlive(pid_t pgid) {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return ::kill(-pgid, 0) == 0 || errno != ESRCH;
}

// Waits up to `seconds` for a child to change state (a SIGCHLD); false when the time ran out.
void WaitChildSignal(double seconds) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  timespec timeout{};
  timeout.tv_sec = static_cast<time_t>(seconds);
  timeout.tv_nsec = static_cast<long>((seconds - static_cast<double>(timeout.tv_sec)) * 1e9);
  ::sigtimedwait(&chld, nullptr, &timeout);
}

// SIGTERM to the group, SIGKILL to what is left after `grace_s`, and everything reaped.
// Records the leader's wait status when it is reaped here.
void EndGroup(pid_t leader, double grace_s, int* leader_status, bool* leader_done) {
  auto reap = [&] {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == leader) {
        *leader_status = status;
        *leader_done = true;
      }
    }
  };
  ::kill(-leader, SIGTERM);
  const double deadline = MonotonicSeconds() + grace_s;
  while (true) {
    reap();
    if (!GroupAlive(leader)) break;
    const double left = deadline - MonotonicSeconds();
    if (left <= 0) break;
    WaitChildSignal(left);
  }
  ::kill(-leader, SIGKILL);
  // SIGKILL cannot be refused: what is left ends promptly.
  while (true) {
    reap();
    if (!GroupAlive(leader) && *leader_done) break;
    WaitChildSignal(0.05);
  }
}

[[noreturn]] void Supervise(pid_t actor, const char* program, char* const* argv, char* const* envp,
                            const char* working_dir, int out_fd, int err_fd, int exec_error_fd,
                            int status_fd, double grace_s) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  // Keep only our four pipes, as fds 3 to 6 (close-on-exec): nothing else of the actor's
  // (its sockets to the node and the head) stays open here or reaches the command.
  int keep[4] = {out_fd, err_fd, exec_error_fd, status_fd};
  for (int& fd : keep) fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 1000);
  for (int i = 0; i < 4; ++i) keep[i] = ::dup3(keep[i], 3 + i, O_CLOEXEC);
  ::close_range(7, ~0U, 0);
  out_fd = keep[0];
  err_fd = keep[1];
  exec_error_fd = keep[2];
  status_fd = keep[3];
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (::getppid() != actor) ::_exit(0);  // the actor is gone already: start nothing

  // _Fork, not fork: no atfork handler runs. libuv's (in the actor's process) closes the
  // pipe it made in the supervisor's own fork, whose numbers our dup3s above may have taken
  // (the command's stderr went into libuv's pipe so), and opens a new one.
  const pid_t child = ::_Fork();
  if (child == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) {
      ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Tell the actor why: a chdir errno as negative, an exec errno as positive.
    int code = 0;
    if (working_dir[0] != '\0' && ::chdir(working_dir) != 0) {
      code = -errno;
    } else {
      ::execve(program, argv, envp);
      code = errno;
    }
    (void)!::write(exec_error_fd, &code, sizeof code);
    ::_exit(127);
  }
  ::close(exec_error_fd);
  ::close(out_fd);
  ::close(err_fd);
  int leader_status = 0;
  bool leader_done = false;
  if (child < 0) {
    leader_status = 127 << 8;
    leader_done = true;
  } else {
    ::setpgid(child, child);
    sigset_t wake;
    sigemptyset(&wake);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&wake, sig);
    while (!leader_done) {
      siginfo_t info{};
      const int sig = ::sigwaitinfo(&wake, &info);
      if (sig == SIGCHLD) {
        int status = 0;
        pid_t pid;
        while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
          if (pid == child) {
            leader_status = status;
            leader_done = true;
          }
        }
      } else if (sig > 0) {
        break;  // asked to stop (or the actor died)
      }
    }
    // The leader exited on its own, or we were asked to end it: either way nothing of its
    // group outlives the rank.
    EndGroup(child, grace_s, &leader_status, &leader_done);
  }
  (void)!::write(status_fd, &leader_status, sizeof leader_status);
  ::_exit(0);
}

// --- The actor's side ---

struct Client {
  Fd fd;
  std::string buffer;
};

// The command's process tree, through its supervisor.
class Spawned {
 public:
  pid_t supervisor = -1;
  Fd out;     // the command's stdout
  Fd err;     // its stderr
  Fd status;  // the leader's wait status, written once the whole group is gone
  double grace_s = 5;

  ~Spawned() { End(); }

  // Ends the group (if it is still there) and reaps the supervisor; returns the leader's wait
  // status, or nullopt if the supervisor never told it.
  std::optional<int> End() {
    if (supervisor < 0) return leader_status_;
    ::kill(supervisor, SIGTERM);
    WaitStatus(grace_s + 10);
    while (::waitpid(supervisor, nullptr, 0) < 0 && errno == EINTR) {
    }
    supervisor = -1;
    return leader_status_;
  }

  // Reads the leader's status once the supervisor writes it (within `seconds`).
  std::optional<int> WaitStatus(double seconds) {
    if (leader_status_ || !status) return leader_status_;
    pollfd p{status.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(seconds * 1000)) > 0) {
      int value = 0;
      if (::read(status.get(), &value, sizeof value) == sizeof value) leader_status_ = value;
      status.Reset();
    }
    return leader_status_;
  }

 private:
  std::optional<int> leader_status_;
};

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) +
           (name != nullptr ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

// The last lines of `tail`, indented under the failure's first line.
std::string LastLines(const std::string& tail) {
  std::deque<std::string> lines;
  std::stringstream in(tail);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    lines.push_back(line);
    if (lines.size() > static_cast<size_t>(kStderrTailLines)) lines.pop_front();
  }
  std::string out;
  for (const std::string& line : lines) out += "\n  " + line;
  return out;
}

class RankProcess {
 public:
  RankProcess(const CommandRank& rank, const ReportFn& report, int stop_fd,
              const std::function<bool()>& stopped)
      : rank_(rank), report_(report), stop_fd_(stop_fd), stopped_(stopped) {}

  Result<bool> Run();

 private:
  Status Listen();
  Status Start(const LaunchEnv& env);
  // One request line from the command; returns the reply and, when the report was malformed,
  // the reason the attempt fails.
  std::string Handle(const std::string& line, std::optional<std::string>* failure);
  void Output(int fd, bool is_stderr);
  // The command, naming what failed (the driver adds the rank).
  std::string Who() const { return CommandLine(rank_.command); }
  // The command ended with `status`: the run's result.
  Result<bool> Ended(int status);
  // Stops the command's group and fails with `why` (a bad report, a timeout).
  Result<bool> Abort(const std::string& why);

  const CommandRank& rank_;
  const ReportFn& report_;
  const int stop_fd_;
  const std::function<bool()>& stopped_;
  std::string token_;
  Fd listener_;
  uint16_t port_ = 0;
  Fd log_;
  std::string stderr_tail_;
  std::vector<Client> clients_;
  Spawned spawned_;
  DataServer* data_server_ = nullptr;  // Run's, while the command runs
};

Status RankProcess::Listen() {
  listener_ = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener_) return Status::Internal(Errno("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_.get(), 16) != 0 ||
      ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::Internal(Errno("listening for the command's reports"));
  }
  port_ = ntohs(addr.sin_port);
  return Status::Ok();
}

Status RankProcess::Start(const LaunchEnv& launch) {
  const Command& command = rank_.command;
  std::string path = command.path;
  if (path.empty()) {
    auto it = launch.env.find("PATH");
    path = it != launch.env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  }
  Result<std::string> program = ResolveProgram(command.argv[0], path, command.working_dir);
  if (!program.ok()) return program.status();

  // Everything the supervisor and the command use is made before fork.
  std::vector<std::string> args = command.argv;
  args.insert(args.end(), launch.extra_args.begin(), launch.extra_args.end());
  std::vector<std::string> vars;
  for (const auto& [key, value] : launch.env) vars.push_back(key + "=" + value);
  if (!command.path.empty()) vars.push_back("PATH=" + command.path);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& var : vars) envp.push_back(var.data());
  envp.push_back(nullptr);

  RAYD_ASSIGN_OR_RETURN(auto out, Pipe());
  RAYD_ASSIGN_OR_RETURN(auto err, Pipe());
  RAYD_ASSIGN_OR_RETURN(auto exec_error, Pipe());
  RAYD_ASSIGN_OR_RETURN(auto status, Pipe());
  const pid_t actor = ::getpid();
  const double grace_s = command.stop_grace_s;
  // Without atfork handlers (the supervisor calls only async-signal-safe functions): libuv's
  // would open a pipe here at the lowest free descriptors.
  const pid_t supervisor = ::_Fork();
  if (supervisor < 0) return Status::Internal(Errno("fork"));
  if (supervisor == 0) {
    Supervise(actor, program->c_str(), argv.data(), envp.data(), command.working_dir.c_str(),
              out.second.get(), err.second.get(), exec_error.second.get(), status.second.get(),
              grace_s);
  }
  spawned_.supervisor = supervisor;
  spawned_.grace_s = grace_s;
  spawned_.out = std::move(out.first);
  spawned_.err = std::move(err.first);
  spawned_.status = std::move(status.first);
  out.second.Reset();
  err.second.Reset();
  status.second.Reset();
  exec_error.second.Reset();
  // EOF once the command's exec succeeded (the pipe is close-on-exec); its errno otherwise.
  int code = 0;
  ssize_t got;
  while ((got = ::read(exec_error.first.get(), &code, sizeof code)) < 0 && errno == EINTR) {
  }
  if (got == sizeof code) {
    spawned_.End();
    if (code < 0) {
      return Status::InvalidArgument("cannot enter working_dir " + command.working_dir + ": " +
                                     std::strerror(-code));
    }
    return Status::InvalidArgument("cannot run " + *program + ": " + std::strerror(code));
  }
  return Status::Ok();
}

std::string RankProcess::Handle(const std::string& line, std::optional<std::string>* failure) {
  auto reject = [&](const std::string& why) {
    *failure = Who() + " sent a malformed report: " + why;
    return nlohmann::json{{"ok", false}, {"error", why}}.dump();
  };
  nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    return reject("not a JSON object: " + line.substr(0, 200));
  }
  if (!request.contains("token") || request["token"] != token_) {
    return nlohmann::json{{"ok", false}, {"error", "wrong or missing token"}}.dump();
  }
  const nlohmann::json& metrics = request.value("metrics", nlohmann::json());
  if (!metrics.is_object()) return reject("\"metrics\" is not an object");
  std::map<std::string, double> values;
  for (const auto& [name, value] : metrics.items()) {
    std::optional<double> number = MetricNumber(value);
    if (!number) return reject("metric '" + name + "' is not a number: " + value.dump());
    values[name] = *number;
  }
  std::optional<std::string> checkpoint;
  if (request.contains("checkpoint") && !request["checkpoint"].is_null()) {
    if (!request["checkpoint"].is_string()) return reject("\"checkpoint\" is not a string");
    fs::path dir = request["checkpoint"].get<std::string>();
    if (dir.is_relative() && !rank_.command.working_dir.empty()) {
      dir = fs::path(rank_.command.working_dir) / dir;
    }
    checkpoint = dir.string();
  }
  // Every rank's datasets on the dashboard; rank 0's row gets each rank's wait (data_feed.h).
  if (data_server_ != nullptr) {
    for (auto& [name, value] : data_server_->PublishFeed(rank_.launch.world_rank == 0)) {
      values.try_emplace(name, value);
    }
  }
  if (rank_.launch.world_rank == 0) {
    // Where the datasets stand goes into the checkpoint, for the attempt that resumes from it.
    if (checkpoint && data_server_ != nullptr) {
      if (Status s = data_server_->WritePositions(*checkpoint); !s.ok()) {
        *failure = Who() + ": " + s.message();
        return nlohmann::json{{"ok", false}, {"error", s.message()}}.dump();
      }
    }
    Status kept = report_(values, checkpoint);
    if (!kept.ok()) return reject(kept.message());
  }
  return R"({"ok": true})";
}

void RankProcess::Output(int fd, bool is_stderr) {
  std::array<char, 16384> chunk;
  const ssize_t n = ::read(fd, chunk.data(), chunk.size());
  if (n <= 0) {
    // EOF: every process holding the pipe is gone.
    (is_stderr ? spawned_.err : spawned_.out).Reset();
    return;
  }
  if (log_) (void)!::write(log_.get(), chunk.data(), static_cast<size_t>(n));
  if (is_stderr) {
    stderr_tail_.append(chunk.data(), static_cast<size_t>(n));
    if (stderr_tail_.size() > kStderrTailBytes) {
      stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
    }
  }
}

Result<bool> RankProcess::Ended(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  std::string why = Who() + " " + DescribeExit(status);
  if (!stderr_tail_.empty()) why += "; the last lines of its stderr:" + LastLines(stderr_tail_);
  return Status::Internal(why);
}

Result<bool> RankProcess::Abort(const std::string& why) {
  spawned_.End();
  std::string message = why;
  if (!stderr_tail_.empty()) message += "; the last lines of its stderr:" + LastLines(stderr_tail_);
  return Status::Internal(message);
}

Result<bool> RankProcess::Run() {
  const Command& command = rank_.command;
  if (std::string why = CheckCommand(command); !why.empty()) return Status::InvalidArgument(why);
  RAYD_RETURN_IF_ERROR(Listen());
  token_ = RandomHex(16);

  // The rank's files: its config, beside a log it appends to across attempts.
  std::string scratch_template;
  try {
    scratch_template = (ScratchDir() / "rayd-command-XXXXXX").string();
  } catch (const std::exception& e) {
    return Status::Internal(e.what());
  }
  if (::mkdtemp(scratch_template.data()) == nullptr) return Status::Internal(Errno("mkdtemp"));
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } scratch{scratch_template};
  RankLaunch launch = rank_.launch;
  launch.config_file = scratch.path + "/config.json";
  std::ofstream(launch.config_file) << rank_.config_json;
  launch.report_address = "127.0.0.1:" + std::to_string(port_);
  launch.report_token = token_;
  launch.python_dir = PythonClientDir();
  launch.drain_file = NodeDrainFile();
  // The run's datasets, served to the command until this attempt ends.
  std::unique_ptr<DataServer> data_server;
  if (!rank_.datasets_json.empty()) {
    launch.data_socket = scratch.path + "/data.sock";
    Result<std::unique_ptr<DataServer>> started =
        DataServer::Start(launch.data_socket, rank_.datasets_json, launch.world_size,
                          launch.world_rank, launch.local_world_size, launch.checkpoint_dir,
                          rank_.run_name);
    if (!started.ok()) return started.status();
    data_server = std::move(*started);
    data_server_ = data_server.get();
  }
  if (launch.gloo_iface.empty() && launch.world_rank < static_cast<int>(launch.endpoints.size())) {
    launch.gloo_iface = InterfaceOf(HostOf(launch.endpoints[launch.world_rank]));
  }
  if (!rank_.log_path.empty()) {
    std::error_code ec;
    fs::create_directories(fs::path(rank_.log_path).parent_path(), ec);
    log_ = Fd(::open(rank_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (log_) {
      const std::string header = "--- rayd: attempt " + std::to_string(launch.restart_count + 1) +
                                 ", rank " + std::to_string(launch.world_rank) + " of " +
                                 std::to_string(launch.world_size) + ": " + CommandLine(command) +
                                 "\n";
      (void)!::write(log_.get(), header.data(), header.size());
      if (launch.launcher == "horovod" && launch.num_nodes > 1) {
        const std::string warning = LoopbackHostnameWarning();
        (void)!::write(log_.get(), warning.data(), warning.size());
      }
    }
  }
  RAYD_ASSIGN_OR_RETURN(LaunchEnv env,
                        ComposeLaunchEnv(launch, InheritedEnvironment(), command.env));
  RAYD_RETURN_IF_ERROR(Start(env));

  auto last_heard = Clock::now();
  std::optional<int> exit_status;
  while (true) {
    if (stopped_()) {
      spawned_.End();
      return false;
    }
    // The command ended: its status is in, and its output has been read to the end.
    if (exit_status && !spawned_.out && !spawned_.err) return Ended(*exit_status);

    std::vector<pollfd> fds;
    fds.push_back({stop_fd_, POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    fds.push_back({spawned_.out.get(), POLLIN, 0});
    fds.push_back({spawned_.err.get(), POLLIN, 0});
    fds.push_back({spawned_.status.get(), POLLIN, 0});
    for (const Client& c : clients_) fds.push_back({c.fd.get(), POLLIN, 0});
    int timeout_ms = -1;
    if (command.report_timeout_s > 0 && !exit_status) {
      const auto left =
          std::chrono::seconds(command.report_timeout_s) - (Clock::now() - last_heard);
      timeout_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    }
    if (exit_status) timeout_ms = 2000;  // output still open: a stray process of the group
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) return Abort(Errno("poll"));
    if (ready == 0) {
      if (exit_status) {
        // The group is gone (the supervisor says so) but something else holds its output:
        // stop reading it.
        spawned_.out.Reset();
        spawned_.err.Reset();
        continue;
      }
      return Abort(Who() + " neither reported nor exited for " +
                   std::to_string(command.report_timeout_s) + " s (report_timeout_s)");
    }
    if (fds[2].revents != 0) Output(fds[2].fd, false);
    if (fds[3].revents != 0) Output(fds[3].fd, true);
    if (fds[4].revents != 0) {
      exit_status = spawned_.WaitStatus(0);
      if (!exit_status) exit_status = 255 << 8;  // the supervisor vanished without a word
      spawned_.End();
    }
    if (fds[1].revents != 0) {
      Fd accepted(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (accepted) clients_.push_back({std::move(accepted), ""});
    }
    for (size_t i = 5; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Client& client = clients_[i - 5];
      std::array<char, 65536> chunk;
      const ssize_t n = ::read(client.fd.get(), chunk.data(), chunk.size());
      if (n <= 0) {
        client.fd.Reset();
        continue;
      }
      client.buffer.append(chunk.data(), static_cast<size_t>(n));
      size_t newline;
      while ((newline = client.buffer.find('\n')) != std::string::npos) {
        std::string line = client.buffer.substr(0, newline);
        client.buffer.erase(0, newline + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        std::optional<std::string> failure;
        std::string reply = Handle(line, &failure) + "\n";
        (void)!::send(client.fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
        last_heard = Clock::now();
        if (failure) return Abort(*failure);
      }
      if (client.buffer.size() > kMaxRequestBytes) {
        return Abort(Who() + " sent a malformed report: a line longer than 1 MiB");
      }
    }
    std::erase_if(clients_, [](const Client& c) { return !c.fd; });
  }
}

}  // namespace

Result<bool> RunCommandRank(const CommandRank& rank, const ReportFn& report, int stop_fd,
                            const std::function<bool()>& stopped) {
  RankProcess process(rank, report, stop_fd, stopped);
  return process.Run();
}

std::string InterfaceOf(const std::string& ipv4) {
  in_addr wanted{};
  if (::inet_pton(AF_INET, ipv4.c_str(), &wanted) != 1) return "";
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string name;
  for (ifaddrs* at = all; at != nullptr && name.empty(); at = at->ifa_next) {
    if (at->ifa_addr == nullptr || at->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<const sockaddr_in*>(at->ifa_addr)->sin_addr.s_addr == wanted.s_addr) {
      name = at->ifa_name;
    }
  }
  ::freeifaddrs(all);
  return name;
}

std::string LoopbackHostnameWarning() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &found) != 0 || found == nullptr) return "";
  bool loopback = true;
  for (const addrinfo* at = found; at != nullptr; at = at->ai_next) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(at->ai_addr)->sin_addr.s_addr);
    loopback = loopback && (ip >> 24) == 127;
  }
  ::freeaddrinfo(found);
  if (!loopback) return "";
  return std::string("--- rayd: warning: this machine's hostname '") + name +
         "' resolves to a loopback address. Horovod 0.28's process-set Gloo contexts ignore "
         "HOROVOD_GLOO_IFACE and bind that address, so ranks on other nodes cannot connect "
         "(\"connect [127.x.x.x]: Connection refused\"); map the hostname to this node's "
         "address in /etc/hosts.\n";
}

Result<std::string> ReservePort(const std::string& host) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Status::Internal(Errno("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("not an IPv4 address: " + host);
  }
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::Internal(Errno("reserving a port on " + host));
  }
  return host + ":" + std::to_string(ntohs(addr.sin_port));
}

std::string PythonClientDir() {
  std::error_code ec;
  if (const char* dir = std::getenv("RAYD_PYTHON_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  // Installed: <prefix>/share/rayd/python beside this library's <prefix>/lib, whatever the
  // prefix (a package under /usr, a tree copied elsewhere). Then the source tree, for a build
  // tree; then the prefix the build was configured with.
  std::vector<fs::path> candidates;
  Dl_info self{};
  if (::dladdr(reinterpret_cast<void*>(&PythonClientDir), &self) != 0 && self.dli_fname) {
    fs::path lib = fs::weakly_canonical(self.dli_fname, ec).parent_path();
    candidates.push_back(lib.parent_path() / "share" / "rayd" / "python");
  }
  candidates.emplace_back(RAYD_PYTHON_SOURCE_DIR);
  candidates.emplace_back(RAYD_PYTHON_INSTALL_DIR);
  for (const fs::path& dir : candidates) {
    if (fs::is_regular_file(dir / "rayd" / "train.py", ec)) return dir.string();
  }
  return "";
}

}  // namespace rayd::train::internal
