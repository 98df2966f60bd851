#pragma once
// Helpers for tests that run real processes: temporary directories, free ports, child
// processes, and polling with deadlines (tests never synchronise by sleeping).

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rayd::testing {

// A fresh directory under /tmp, removed (recursively) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A TCP port on 127.0.0.1 that nothing listens on right now.
int FreeTcpPort();

// Polls `pred` every few milliseconds until it holds or `timeout` passes; returns pred().
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// Reads a whole file ("" when missing).
std::string ReadFile(const std::string& path);

// A child process in its own process group, with stdout and stderr captured to a file.
// The destructor kills the whole group (SIGKILL) and reaps it.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& extra_env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `signal` to the child's process group.
  void Signal(int signal);
  // Waits up to `timeout` for the child to exit; returns true if it did (exit_code() is set).
  bool WaitExit(std::chrono::milliseconds timeout);
  bool running();
  int exit_code() const { return exit_code_; }
  std::string output() const { return ReadFile(output_path_); }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  bool reaped_ = false;
  std::string output_path_;
};

// A blocking TCP socket connected to 127.0.0.1:`port`, or -1. For tests that speak raw bytes.
int ConnectLoopback(int port);

// One HTTP GET to 127.0.0.1:`port` on a fresh connection (the server closes it after the
// reply); status 0 when nothing sensible came back. `extra_headers` end in "\r\n" each.
struct HttpReply {
  int status = 0;
  std::string headers;
  std::string body;
};
HttpReply HttpGet(int port, const std::string& path, const std::string& extra_headers = "");

// True when `pid` no longer runs: no such process, or a zombie nobody reaped yet whose threads
// have all exited (so its sockets and files are closed).
bool ProcessGone(pid_t pid);
// True when `pid` runs and its argv[0] names rayd (so cleanup never kills a recycled pid).
bool IsRaydProcess(pid_t pid);
// The pids in the head.pid / node.pid files of every session directory under `root`.
std::vector<pid_t> DaemonPids(const std::string& root);

// Keeps the machine busy, as a shared cluster node always is: `count` child processes that
// spin on a CPU each until the destructor kills and reaps them. Claims about parallelism are
// checked with burners beside them.
class CpuBurners {
 public:
  explicit CpuBurners(int count);
  ~CpuBurners();
  CpuBurners(const CpuBurners&) = delete;
  CpuBurners& operator=(const CpuBurners&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// Runs a command to completion, capturing stdout+stderr; returns the exit code.
int RunCommand(const std::vector<std::string>& argv, std::string* output,
               const std::map<std::string, std::string>& extra_env = {},
               std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace rayd::testing
