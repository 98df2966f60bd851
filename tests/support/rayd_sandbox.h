#pragma once
// RaydSandbox: one test's own rayd installation root. It owns a fresh temp root, runs `rayd`
// commands in it (`--temp-dir ROOT`, RAYD_TEMP_DIR=ROOT), remembers every daemon pid it has
// seen, and on destruction runs `rayd stop --force` and SIGKILLs whatever rayd daemon is left.
// Tests derive from it to add their own queries. Header-only: it uses Catch2 assertions.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace rayd::testing {

// The 32-hex node id on the line "Head node: <id> ..." or "Node:  <id> ..." of `rayd start`.
inline std::string StartedNodeId(const std::string& start_output) {
  static const std::regex kNodeLine(R"((?:Head node|Node):\s+([0-9a-f]{32})\b)");
  std::smatch m;
  return std::regex_search(start_output, m, kNodeLine) ? m[1].str() : "";
}

class RaydSandbox {
 public:
  explicit RaydSandbox(std::string rayd_binary,
                       std::chrono::milliseconds command_timeout = std::chrono::seconds(30))
      : binary_(std::move(rayd_binary)), command_timeout_(command_timeout) {
    // Commands and drivers must find this test's cluster only, never the environment's.
    ::unsetenv("RAYD_ADDRESS");
    ::unsetenv("RAYD_TOKEN");
  }
  virtual ~RaydSandbox() {
    RunCommand({binary_, "stop", "--force", "--temp-dir", root()}, nullptr, Env(),
               command_timeout_);
    RememberDaemonPids();
    for (pid_t pid : daemon_pids_) {
      if (IsRaydProcess(pid)) ::kill(pid, SIGKILL);
    }
  }
  RaydSandbox(const RaydSandbox&) = delete;
  RaydSandbox& operator=(const RaydSandbox&) = delete;

  const std::string& root() const { return dir_.path(); }
  std::map<std::string, std::string> Env() const { return {{"RAYD_TEMP_DIR", root()}}; }

  // Runs `rayd <args> --temp-dir ROOT`; returns the exit code, stdout+stderr in *output.
  int Rayd(std::vector<std::string> args, std::string* output) {
    args.insert(args.begin(), binary_);
    args.insert(args.end(), {"--temp-dir", root()});
    int rc = RunCommand(args, output, Env(), command_timeout_);
    RememberDaemonPids();
    return rc;
  }

  // `rayd start <args>` that must succeed; returns the started node's id.
  std::string Start(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"start"};
    full.insert(full.end(), args.begin(), args.end());
    std::string out;
    int rc = Rayd(full, &out);
    INFO("rayd start output:\n" << out);
    REQUIRE(rc == 0);
    std::string id = StartedNodeId(out);
    REQUIRE(id.size() == 32);
    last_start_output_ = out;
    return id;
  }
  const std::string& last_start_output() const { return last_start_output_; }

  // Session directories under the root whose name ends in `suffix` ("_head", "_node", "").
  std::vector<std::string> Sessions(const std::string& suffix) const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root(), ec)) {
      const std::string name = e.path().filename();
      if (name.starts_with("session_") && name.ends_with(suffix) && !e.is_symlink()) {
        out.push_back(e.path());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Records the pid in every session's head.pid / node.pid, for the destructor.
  void RememberDaemonPids() {
    for (pid_t pid : DaemonPids(root())) daemon_pids_.insert(pid);
  }

 private:
  TempDir dir_;  // declared first: removed after the daemons are stopped
  const std::string binary_;
  const std::chrono::milliseconds command_timeout_;
  std::set<pid_t> daemon_pids_;
  std::string last_start_output_;
};

}  // namespace rayd::testing
