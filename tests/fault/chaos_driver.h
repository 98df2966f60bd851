#pragma once
// The chaos soak's moving parts (chaos_test.cc says how the soak works and what it checks): the
// sweeps it keeps running (SweepSeries), the faults it injects and waits out (ChaosDriver), and
// the head's memory (HeadMemory).
//
// Threading and ownership: the test's thread only. Each class keeps references to what its
// constructor is given (the cluster, the series, the memory sampler), which must outlive it.
// Failures to do what a fault needs (a node that does not start again, a head that does not
// die) end the running test through Catch2's REQUIRE; a fault the cluster does not recover
// from is a value (Fault::recovery_s empty), for the report.

#include <sys/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "multi_host_cluster.h"
#include "test_util.h"

namespace rayd::testing::chaos {

// The bed: the head (no CPUs) and its Redis on kHeadHost; a node without CPUs on kDriverHost,
// where `rayd tune` runs (so no node or link fault takes the driver with it); 2-CPU nodes for
// the ranks on kFirstTrainingHost..kHosts-1 (three trials of two ranks fill three; one spare).
inline constexpr int kHeadHost = 0;
inline constexpr int kDriverHost = 1;
inline constexpr int kFirstTrainingHost = 2;
inline constexpr int kHosts = 6;
// Each sweep: WriteSweep's three trials, kEpochs epochs each (~15 s on 2 cores), a failed gang
// restarted from the latest checkpoint up to kMaxFailures times per Fit.
inline constexpr int kTrials = 3;
inline constexpr int kEpochs = 24;
inline constexpr int kMaxFailures = 20;
// How long a fault may take to recover from.
inline constexpr std::chrono::seconds kRecoveryDeadline{150};

enum class Kind { kWorker, kNode, kLink, kHead, kDriver };
inline constexpr std::array<Kind, 5> kKinds = {Kind::kWorker, Kind::kNode, Kind::kLink, Kind::kHead,
                                               Kind::kDriver};
const char* KindName(Kind kind);

// The pids that `root`'s pid files name and that still run rayd, once each (a head's session
// names its process in head.pid and node.pid; stale files of SIGKILLed daemons are left out).
std::vector<pid_t> LiveDaemons(const std::string& root);

// Samples the VmRSS of whichever head process runs in `root` (host 0's), at most once a second.
class HeadMemory {
 public:
  explicit HeadMemory(std::string root) : root_(std::move(root)) {}

  void Sample();
  // Samples now, whatever the time since the last one; returns the latest sample (MiB).
  double SampleNow();
  // Samples now and keeps it as the warmed-up baseline.
  void MarkWarm();

  double warm() const { return warm_; }
  double peak() const { return peak_; }
  double latest() const { return latest_; }
  size_t incarnations() const { return pids_.size(); }

 private:
  std::string root_;
  std::chrono::steady_clock::time_point last_{};
  bool warm_wanted_ = false;
  double warm_ = 0, peak_ = 0, latest_ = 0;
  std::set<pid_t> pids_;
};

struct Sweep {
  std::string name;
  std::string yaml;
  std::string experiment;
  int resumes = 0;
  int exit_code = -1;                 // of its last driver, once it has ended
  std::string output;                 // the tail of its last driver's output
  std::vector<std::string> problems;  // filled by SweepSeries::Check
};

// trial id -> (the last epoch it had reported, -1 for none; its status).
using TrialProgress = std::map<std::string, std::pair<int, std::string>>;

// Sweeps run one after another on kDriverHost, each a `rayd tune` driver: Pump starts the next
// when one ends (while asked to); KillDriverAndResume SIGKILLs the running one and resumes its
// sweep.
class SweepSeries {
 public:
  SweepSeries(MultiHostCluster& cluster, std::string dir)
      : cluster_(cluster), dir_(std::move(dir)) {}

  void StartNext();
  // Notices a driver that ended: records how, and starts the next sweep when `keep_going`.
  void Pump(bool keep_going);
  bool driver_running() { return driver_ && driver_->running(); }
  // The current sweep's driver runs, one of its trials has reported and one has not finished.
  bool Progressing();
  // SIGKILLs the running driver and starts `rayd tune FILE --resume`.
  void KillDriverAndResume();

  // The current sweep's trials now.
  TrialProgress Snapshot() const;
  enum class Progress { kNotYet, kYes, kNever };
  // kYes once every trial of `before` (a Snapshot of sweep `index`) that had not finished has
  // ended TERMINATED or reported an epoch two past its last one then; kNever once one of them
  // has ended otherwise (ERROR: it will not report again).
  Progress Progressed(size_t index, const TrialProgress& before) const;

  // Checks every sweep (once every driver has ended): fills each one's problems.
  void Check();

  size_t size() const { return sweeps_.size(); }
  size_t current_index() const { return sweeps_.size() - 1; }
  const Sweep& current() const { return sweeps_.back(); }
  const std::vector<Sweep>& sweeps() const { return sweeps_; }

 private:
  MultiHostCluster& cluster_;
  const std::string dir_;
  std::vector<Sweep> sweeps_;
  std::unique_ptr<ChildProcess> driver_;  // the current sweep's
};

struct Fault {
  Kind kind;
  double at = 0;     // wall seconds
  size_t sweep = 0;  // the sweep it hit (SweepSeries index)
  std::string detail;
  std::optional<double> recovery_s;  // empty: it did not recover
};

// Injects faults at random times, each followed by what an operator would do, and waits for
// the cluster to recover from each (chaos_test.cc defines recovery per kind).
class ChaosDriver {
 public:
  ChaosDriver(MultiHostCluster& cluster, SweepSeries& sweeps, HeadMemory& memory, unsigned seed)
      : cluster_(cluster), sweeps_(sweeps), memory_(memory), rng_(seed) {}

  // Runs faults until `seconds` have passed and every kind was injected, or until one does not
  // recover: the five kinds first, in a shuffled order, then kinds drawn uniformly; a random
  // 2-8 s before each, then until a sweep is making progress.
  void Run(double seconds);
  const std::vector<Fault>& faults() const { return faults_; }

  // Between polls: starts sweeps as they end (unless held) and samples the head's memory.
  void Tick();
  // Polls `pred`, after a Tick, every 250 ms until it holds or `timeout` passes; returns pred().
  bool Until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);
  // Ticks for `seconds`.
  void Wait(double seconds);
  // No new sweep starts from now on.
  void StopLaunching() { launching_ = false; }

 private:
  // Injects a fault of `kind`, does what follows it, and waits for recovery.
  Fault& Inject(Kind kind);
  // The fault happens now: what the sweep has reported so far is what it must go beyond.
  void Mark(Fault& f);
  // `rayd status` answers and every host has an ALIVE node.
  bool Whole();
  // pid -> host of every LEASED worker on a training host.
  std::map<pid_t, int> Ranks();
  // A live rank that is training (its CPU time grows), else any live rank; nullopt when there
  // is none (within kSettle).
  std::optional<std::pair<pid_t, int>> PickRank();
  // The host of a training rank, else any training host.
  int PickTrainingHost();

  void KillWorker(Fault& f);
  void KillNode(Fault& f);
  void CutLink(Fault& f);
  void KillHead(Fault& f);
  void KillDriver(Fault& f);

  MultiHostCluster& cluster_;
  SweepSeries& sweeps_;
  HeadMemory& memory_;
  std::mt19937 rng_;
  bool launching_ = true;
  std::vector<Fault> faults_;
  TrialProgress before_;  // the current fault's Snapshot
};

}  // namespace rayd::testing::chaos
