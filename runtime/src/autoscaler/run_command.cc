#include "autoscaler/run_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "rayd/base/process.h"

extern char** environ;

namespace rayd::autoscaler {
namespace {

// An unlinked temporary file under `dir`, open for reading and writing (close-on-exec: only
// the command it is given to inherits it).
Result<int> OpenScratchFile(const std::string& dir) {
  std::error_code ec;
  std::string base = dir.empty() ? std::filesystem::temp_directory_path(ec).string() : dir;
  if (base.empty()) base = "/tmp";
  std::string path = base + "/.rayd-command-XXXXXX";
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) {
    return Status::Internal("cannot create a file under " + base + ": " + std::strerror(errno));
  }
  ::unlink(path.c_str());
  return fd;
}

// Up to `max` bytes of the file behind `fd`: its first ones, or with `tail` its last ones.
std::string ReadBack(int fd, size_t max, bool tail) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) return "";
  const size_t size = static_cast<size_t>(st.st_size);
  const size_t want = std::min(size, max);
  const off_t start = tail ? static_cast<off_t>(size - want) : 0;
  std::string text(want, '\0');
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, text.data() + got, want - got, start + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

// "; stderr ends:\n...; stdout ends:\n..." for whichever of the two is not empty.
std::string OutputEnds(const CommandResult& result) {
  std::string text;
  if (!LastLines(result.err).empty()) text += "; its stderr ends:\n" + LastLines(result.err);
  if (!LastLines(result.out).empty()) text += "; its stdout ends:\n" + LastLines(result.out);
  return text;
}

}  // namespace

struct CommandRunner::Running {
  ~Running() {
    if (out_fd >= 0) ::close(out_fd);
    if (err_fd >= 0) ::close(err_fd);
  }

  CommandRunner* runner = nullptr;
  CommandSpec spec;
  Done done;
  uv_process_t* process = nullptr;  // open until it exits or the runner goes
  int pid = 0;                      // leads the command's process group
  int out_fd = -1;
  int err_fd = -1;
  std::unique_ptr<Timer> deadline;
  bool timed_out = false;
};

CommandRunner::CommandRunner(EventLoop& loop) : loop_(loop) {}

CommandRunner::~CommandRunner() {
  guard_.Invalidate();
  for (auto& [key, running] : running_) {
    ::kill(-running->pid, SIGKILL);
    CloseProcessHandle(running->process);
    // Its handle is closed, so libuv will not reap it: do it here (it was just killed).
    while (::waitpid(running->pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void CommandRunner::Run(CommandSpec spec, Done done) {
  auto running = std::make_unique<Running>();
  Running& r = *running;
  r.runner = this;
  auto out = OpenScratchFile(spec.scratch_dir);
  auto err = out.ok() ? OpenScratchFile(spec.scratch_dir) : out;
  if (out.ok()) r.out_fd = *out;
  if (!err.ok()) {
    Status failed = err.status().WithContext(DescribeCommand(spec.argv));
    return Later([failed, done = std::move(done)] { done(failed); });
  }
  r.err_fd = *err;

  SpawnOptions options;
  options.argv = spec.argv;
  options.env = spec.env;
  options.log_fd = r.out_fd;
  options.stderr_fd = r.err_fd;
  options.own_process_group = true;  // a time limit kills the group
  options.on_exit = &CommandRunner::OnExit;
  options.data = &r;
  auto spawned = SpawnProcess(loop_, options);
  if (!spawned.ok()) {
    Status failed =
        Status::Unavailable(DescribeCommand(spec.argv) + ": " + spawned.status().message());
    return Later([failed, done = std::move(done)] { done(failed); });
  }
  r.process = *spawned;
  r.pid = r.process->pid;
  r.spec = std::move(spec);
  r.done = std::move(done);
  r.deadline = std::make_unique<Timer>(loop_);
  // The timer belongs to `r`: it cannot fire once `r` is gone.
  r.deadline->Start(r.spec.timeout, Millis(0), [p = &r] {
    p->timed_out = true;
    ::kill(-p->pid, SIGKILL);
  });
  running_.emplace(&r, std::move(running));
}

void CommandRunner::OnExit(uv_process_t* process, int64_t exit_status, int term_signal) {
  auto* r = static_cast<Running*>(process->data);
  if (r == nullptr) return;
  r->runner->Finish(r, exit_status, term_signal);
}

void CommandRunner::Finish(Running* r, int64_t exit_status, int term_signal) {
  auto it = running_.find(r);
  if (it == running_.end()) return;
  std::unique_ptr<Running> running = std::move(it->second);
  running_.erase(it);
  CloseProcessHandle(running->process);
  running->process = nullptr;
  running->deadline.reset();

  CommandResult result;
  result.exit_code = term_signal != 0 ? 128 + term_signal : static_cast<int>(exit_status);
  result.out = ReadBack(running->out_fd, kMaxOutput, /*tail=*/false);
  result.err = ReadBack(running->err_fd, kMaxOutput, /*tail=*/true);
  Done done = std::move(running->done);
  if (running->timed_out) {
    const double seconds = static_cast<double>(running->spec.timeout.count()) / 1000;
    Status late = Status::DeadlineExceeded(
        fmt::format("{} did not finish within {:g} s and was killed{}",
                    DescribeCommand(running->spec.argv), seconds, OutputEnds(result)));
    running.reset();
    return done(late);
  }
  running.reset();
  done(std::move(result));  // last: it may destroy this runner
}

void CommandRunner::Later(std::function<void()> fn) { loop_.Post(guard_(std::move(fn))); }

std::string ShellQuote(const std::string& word) {
  static constexpr char kSafe[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-";
  if (!word.empty() && word.find_first_not_of(kSafe) == std::string::npos) return word;
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string DescribeCommand(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) line += (line.empty() ? "" : " ") + ShellQuote(word);
  return "`" + line + "`";
}

std::string LastLines(const std::string& text, size_t lines) {
  size_t end = text.find_last_not_of("\r\n \t");
  if (end == std::string::npos || lines == 0) return "";
  size_t start = end + 1;
  for (size_t seen = 0; seen < lines && start > 0; ++seen) {
    const size_t nl = text.rfind('\n', start - 1);
    start = nl == std::string::npos ? 0 : nl;
    if (nl == std::string::npos) break;
  }
  if (text[start] == '\n') ++start;
  return text.substr(start, end + 1 - start);
}

Status CommandFailure(const std::vector<std::string>& argv, const CommandResult& result) {
  return Status::Unavailable(DescribeCommand(argv) + " exited with status " +
                             std::to_string(result.exit_code) + OutputEnds(result));
}

std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& set) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    if (name.starts_with("RAYD_") && name != "RAYD_TEMP_DIR" && name != "RAYD_LOG_LEVEL") continue;
    env[name] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : set) env[name] = value;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

}  // namespace rayd::autoscaler
