// `rayd stop`: stops the daemons this machine started (their pid files in the session
// directories under the temp root). Nodes first, so they leave the cluster before its head.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "rayd/runtime/session.h"

namespace rayd::cli {
namespace {

struct Daemon {
  pid_t pid;
  std::string pid_file;
  bool head;
};

// True if `pid` is alive and is a rayd process (not a recycled pid).
bool IsRaydProcess(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string argv0;
  std::getline(in, argv0, '\0');
  return argv0.find("rayd") != std::string::npos;
}

bool IsZombieOrGone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

std::vector<Daemon> FindDaemons(const std::string& root) {
  std::vector<Daemon> out;
  for (const auto& dir : session::ListSessions(root)) {
    for (bool head : {false, true}) {
      std::string pid_file = dir + (head ? "/head.pid" : "/node.pid");
      auto text = session::ReadTrimmed(pid_file);
      if (!text.ok()) continue;
      pid_t pid = static_cast<pid_t>(std::atol(text->c_str()));
      if (pid > 0 && IsRaydProcess(pid)) {
        out.push_back({pid, pid_file, head});
      } else {
        ::unlink(pid_file.c_str());  // stale: the daemon died without cleaning up
      }
    }
  }
  return out;
}

// Polls until every pid is gone or the deadline passes; returns those still running.
std::vector<Daemon> WaitGone(std::vector<Daemon> daemons, std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    std::erase_if(daemons, [](const Daemon& d) { return IsZombieOrGone(d.pid); });
    if (daemons.empty() || std::chrono::steady_clock::now() >= deadline) return daemons;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // poll interval
  }
}

}  // namespace

int RunStop(const StopArgs& args) {
  const std::string root = session::ResolveTempRoot(args.temp_dir);
  auto daemons = FindDaemons(root);
  if (daemons.empty()) {
    std::cout << "No rayd processes are running on this machine (under " << root << ").\n";
    return 0;
  }
  const int signal = args.force ? SIGKILL : SIGTERM;
  // Stop nodes, wait for them, then heads: nodes unregister from a head that still serves.
  std::vector<Daemon> nodes, heads;
  for (auto& d : daemons) (d.head ? heads : nodes).push_back(d);
  size_t stopped = 0;
  for (auto* group : {&nodes, &heads}) {
    for (const auto& d : *group) ::kill(d.pid, signal);
    auto stubborn = WaitGone(*group, std::chrono::milliseconds(args.grace_ms));
    for (const auto& d : stubborn) {
      std::cerr << "rayd stop: pid " << d.pid << " did not exit in " << args.grace_ms
                << " ms; killing it\n";
      ::kill(d.pid, SIGKILL);
    }
    WaitGone(stubborn, std::chrono::milliseconds(5000));
    for (const auto& d : *group) ::unlink(d.pid_file.c_str());
    stopped += group->size();
  }
  // A head stopping cleanly stops its submitted jobs' drivers; one killed leaves them running
  // (a head restarted on Redis adopts them). --force means everything: their groups go too.
  const std::vector<int> drivers = args.force ? session::RunningJobDrivers(root) : std::vector<int>{};
  for (int pid : drivers) ::kill(-pid, SIGKILL);
  std::cout << "Stopped " << stopped << " rayd process" << (stopped == 1 ? "" : "es") << " ("
            << heads.size() << " head, " << nodes.size() << " node"
            << (nodes.size() == 1 ? "" : "s")
            << (drivers.empty() ? "" : ", " + std::to_string(drivers.size()) + " job driver" +
                                           (drivers.size() == 1 ? "" : "s"))
            << ").\n";
  return 0;
}

}  // namespace rayd::cli
