#pragma once
// CommandRunner: runs the providers' external commands (sbatch, squeue, a site's create
// script) on the head's EventLoop, without a shell, each with its own environment and a time
// limit, and hands back what it printed.
//
// How it works: each command's stdout and stderr go to two temporary files that are unlinked
// as soon as they are open (nothing is left behind, even by a crash), read back once the
// command exits. Files, not pipes: a command that leaves a daemon running in the background (a
// create script starting nodes) would hold a pipe open for ever. Each command leads a process
// group of its own; on its time limit the whole group is killed (SIGKILL), and whatever it
// started there with it. A command that exits normally keeps what it started.
//
// Threading: the loop's thread only. Callbacks run there, later (never inside Run). Destroying
// the runner kills the commands still running (their groups, SIGKILL) and drops their
// callbacks.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/base/status.h"

namespace rayd::autoscaler {

struct CommandSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on the environment's PATH
  std::vector<std::string> env;   // NAME=VALUE: the command's whole environment
  Millis timeout = Millis(120000);
  std::string scratch_dir;  // where the output files go while it runs; "": the system's
};

struct CommandResult {
  int exit_code = 0;  // its exit status; 128 + N when signal N ended it
  std::string out;    // stdout (at most kMaxOutput bytes: the first)
  std::string err;    // stderr (at most kMaxOutput bytes: the last)
};

class CommandRunner {
 public:
  static constexpr size_t kMaxOutput = 8u << 20;

  explicit CommandRunner(EventLoop& loop);  // `loop` outlives the runner
  ~CommandRunner();
  CommandRunner(const CommandRunner&) = delete;
  CommandRunner& operator=(const CommandRunner&) = delete;

  // Runs `spec`. A command that ran to its end gives its result whatever its exit status
  // (CommandFailure makes an error of it); one that could not start gives Unavailable, one
  // killed on its time limit DeadlineExceeded, each naming the command and with its output's
  // last lines.
  using Done = std::function<void(Result<CommandResult>)>;
  void Run(CommandSpec spec, Done done);
  // Runs `fn` on the loop later, unless the runner is destroyed first: for callers that answer
  // without running anything but must not answer inside the call.
  void Later(std::function<void()> fn);
  size_t running() const { return running_.size(); }

 private:
  struct Running;
  static void OnExit(uv_process_t* process, int64_t exit_status, int term_signal);
  void Finish(Running* running, int64_t exit_status, int term_signal);

  EventLoop& loop_;
  std::unordered_map<Running*, std::unique_ptr<Running>> running_;
  LifetimeGuard guard_;  // last: invalidated first, before the members above go
};

// The command line as a shell would read it: `sbatch --parsable '--job-name=a b'`.
std::string DescribeCommand(const std::vector<std::string>& argv);
// `word` quoted for a POSIX shell when it needs it ('...' with ' as '\'').
std::string ShellQuote(const std::string& word);
// The last `lines` lines of `text` (without a trailing newline).
std::string LastLines(const std::string& text, size_t lines = 20);
// The error for a command that ran and exited non-zero: the command, its exit status, and the
// last lines of its stderr, then of its stdout.
Status CommandFailure(const std::vector<std::string>& argv, const CommandResult& result);

// The head's environment for a provider's commands and nodes: this process's own, less the
// RAYD_ variables that would point the child elsewhere (all but RAYD_TEMP_DIR and
// RAYD_LOG_LEVEL), with `set` added over it. Ordered by name.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& set);

}  // namespace rayd::autoscaler
