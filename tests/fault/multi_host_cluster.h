#pragma once
// A rayd cluster on the network-namespace test bed (testbed.h), and the `rayd tune` sweeps the
// fault tests run on it: shared by scenarios_test.cc (one fault per scenario) and chaos_test.cc
// (the soak). Uses Catch2 assertions: a daemon that does not start fails the running test.
//
// The cluster: a head on host 0 (`rayd start --head`), nodes on the hosts the test chooses
// (`rayd start --address`), each host with its own address, temp root and session directories,
// the cluster token passed as a flag as on real machines. Heartbeats are 250 ms with 12 missed =
// dead (3 s), so that a dead node is noticed quickly without a busy 2-core machine's hiccups
// declaring a live one dead.
//
// Ownership: a MultiHostCluster owns its Testbed, so every process started in its hosts is
// SIGKILLed when it is destroyed. Single-threaded: the test's thread only.

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "testbed.h"

namespace rayd::testing {

inline constexpr char kFaultToken[] = "fault-test-cluster-token";
// Each host is its own network namespace: the port is free there.
inline constexpr int kHeadPort = 6380;
inline constexpr std::chrono::seconds kSweepTimeout{240};
inline constexpr std::chrono::seconds kSettle{60};

// Skips the test (CTest: skipped, exit 77) where network namespaces cannot be made.
#define REQUIRE_TESTBED() ::rayd::testing::Testbed::SkipUnlessSupported()

// This binary's path (it is also the workers' and child drivers' executable).
std::string SelfExe();
// Seconds since the epoch, the clock result.json's "timestamp" uses.
double WallSeconds();

// A cluster on a test bed: the head on host 0, nodes on the hosts the test chooses.
class MultiHostCluster {
 public:
  explicit MultiHostCluster(int hosts) : bed_(hosts) {}
  // With RAYD_FAULT_KEEP_LOGS=DIR, every host's session directories are copied to DIR/host<i>
  // (logs for a failed or slow scenario).
  ~MultiHostCluster();
  MultiHostCluster(const MultiHostCluster&) = delete;
  MultiHostCluster& operator=(const MultiHostCluster&) = delete;

  Testbed& bed() { return bed_; }
  std::string head_address() const;
  // The environment of every command run on `host`: the token, the temp root and, after
  // UseHostScratchDirs, TMPDIR.
  std::map<std::string, std::string> Env(int host) const;
  // From now on, commands (and so daemons and their workers) started on a host get
  // TMPDIR=<its root>/tmp: what ranks leave in their scratch directories stays in the host's
  // root, where ScratchLeftovers finds it, and goes with the test bed.
  void UseHostScratchDirs();
  // What is left in `host`'s TMPDIR (UseHostScratchDirs), by name.
  std::vector<std::string> ScratchLeftovers(int host) const;

  // `rayd <args> --temp-dir ROOT` on `host`; returns its exit code.
  int Rayd(int host, std::vector<std::string> args, std::string* out);

  // `rayd start --head` on host 0 with `extra` flags (kept for RestartHead); returns its node id.
  std::string StartHead(const std::vector<std::string>& extra);
  // The head again, with the flags StartHead was given.
  std::string RestartHead();
  std::string StartNode(int host, const std::vector<std::string>& extra);

  // `rayd status --format json`, asked from the head's host.
  std::optional<nlohmann::json> TryStatus() { return TryJson({"status"}); }
  nlohmann::json Status();
  // `rayd <args> --format json --address HEAD` on host 0; nullopt when it fails.
  std::optional<nlohmann::json> TryJson(std::vector<std::string> args);

  // "ALIVE" or "DEAD"; "UNKNOWN" when the head does not answer, "MISSING" when it lacks the node.
  std::string NodeState(const std::string& node_id);
  // The node's available amount of `resource`; -1 when the head does not answer or lacks it.
  double Available(const std::string& node_id, const std::string& resource);
  // The host whose node runs an alive rank of a trial (a TrainWorker actor); -1 if none.
  int HostRunningATrial(const std::map<std::string, int>& host_of_node);

  const std::string& last_output() const { return last_output_; }

 private:
  std::string Start(int host, const std::vector<std::string>& args);

  Testbed bed_;
  std::vector<std::string> head_flags_;
  bool scratch_dirs_ = false;
  std::string last_output_;  // of the last TryJson, for failure messages
};

// ---- Sweeps ------------------------------------------------------------------------------------

// A sweep of three 2-worker Gloo trials of the example MLP, `epochs` each, all at once, each
// rank one CPU; every epoch reports and checkpoints; a failed trial's gang restarts up to
// `max_failures` times within one Fit. Written to DIR/NAME.yaml; results go to
// DIR/results/NAME. Returns the file's path.
std::string WriteSweep(const std::string& dir, const std::string& name, int epochs,
                       int max_failures = 2);

struct TrialRecord {
  std::string id;
  std::string status;
  int num_failures = 0;
  std::vector<int> epochs;         // "epoch" of each result.json line, in order
  std::vector<int> iterations;     // "training_iteration" of each line, likewise
  std::vector<double> timestamps;  // likewise
};

// What the experiment directory holds now: experiment_state.json's trials and their results.
std::vector<TrialRecord> ReadTrials(const std::string& experiment);

// Every trial finished, and reported every epoch exactly once, in order: none started over
// (a restart resumed from its checkpoint) and none reported an epoch twice (nothing ran twice).
void CheckSweepComplete(const std::string& experiment, int trials, int epochs);

// Seconds from the fault at `fault_at` to the first result of a trial that failed reported
// after `dead_at` (when the head declared the node dead: whatever the failed gang still had in
// flight is older), once there is one.
std::optional<double> RecoveredAfter(const std::string& experiment, double fault_at,
                                     double dead_at);

bool AnyTrialHas(const std::string& experiment, size_t results);

// `rayd tune YAML` (with `--resume` when `resume`) as a driver on `host`.
std::unique_ptr<ChildProcess> StartSweep(MultiHostCluster& cluster, int host,
                                         const std::string& yaml, bool resume = false);

void RequireSweepSucceeded(ChildProcess& driver);

int TotalFailures(const std::string& experiment);

// Head (no CPUs) on host 0; 2-CPU nodes on hosts 1..nodes. Returns node id -> host.
std::map<std::string, int> StartTrainingCluster(MultiHostCluster& cluster, int nodes,
                                                const std::vector<std::string>& head_extra = {});

}  // namespace rayd::testing
