#pragma once
// One rank of a command trainable: the rank actor starts the command as a process of its own
// process group, serves the report wire it speaks (docs/command-trainables.md), keeps its
// output in the rank's log, and ends the whole group when the run is stopped or fails.
//
// The command is not the actor's child but a supervisor's: the actor forks a small process
// that becomes a subreaper, starts the command in a new process group, and on SIGTERM (the
// actor asking, or the actor dying: the supervisor's parent-death signal) sends the group
// SIGTERM, then SIGKILL after the grace period, and reaps everything before it exits. So a
// rank actor killed outright (a gang torn down, a node's worker killed) leaves no process of
// its command behind either.
//
// No LibTorch here; TrainWorker::Run (train_worker.cc) calls RunCommandRank on its loop thread.

#include <rayd/base/status.h>
#include <rayd/train/command.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher_env.h"

namespace rayd::train::internal {

struct CommandRank {
  Command command;
  RankLaunch launch;  // report_*, config_file and python_dir are filled in by RunCommandRank
  std::string config_json;
  std::string datasets_json;  // the run's datasets, served to the command (data_server.h)
  std::string run_name;       // names the rank's dataset feed (data_feed.h)
  std::string log_path;  // the rank's stdout and stderr, appended
};

// Rank 0's report (the others' are answered and dropped): keeps the metrics and copies the
// checkpoint directory before returning. A failure is the report's error, sent back to the
// rank, and fails the attempt.
using ReportFn = std::function<Status(const std::map<std::string, double>& metrics,
                                      const std::optional<std::string>& checkpoint_dir)>;

// Runs the command until it exits or `stop_fd` becomes readable with `stopped()` true.
// Returns true when the command exited 0, false when it was stopped (its group ended).
// Fails with a one-line-first reason: the command cannot be started, it exited non-zero or
// was killed (with the last lines of its stderr), it sent a malformed report, or it neither
// reported nor exited within report_timeout_s.
Result<bool> RunCommandRank(const CommandRank& rank, const ReportFn& report, int stop_fd,
                            const std::function<bool()>& stopped);

// A port that was free on `host` a moment ago, "host:port" (the launcher's rendezvous; the
// command binds it, as torchrun's free-port choice does).
Result<std::string> ReservePort(const std::string& host);

// The name of the network interface holding IPv4 address `ipv4` ("lo" for 127.0.0.1), or ""
// (Horovod's Gloo binds the interface it is given, not an address).
std::string InterfaceOf(const std::string& ipv4);

// A line for a multi-node Horovod rank's log when this machine's hostname resolves only to
// loopback (Debian's 127.0.1.1, a container's 127.0.0.1), which breaks Horovod's Gloo across
// nodes; "" otherwise.
std::string LoopbackHostnameWarning();

// Where the rayd Python client lives: $RAYD_PYTHON_DIR, else the source tree's python/,
// else the installed copy; empty when none exists.
std::string PythonClientDir();

}  // namespace rayd::train::internal
