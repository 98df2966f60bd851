// The chaos soak (issue 25, "Chaos soak"): while `rayd tune` sweeps of 2-rank checkpointing
// trials run on the network-namespace test bed, a seeded chaos driver injects faults at random
// times, one at a time, waits for the cluster to recover from each, and at the end checks that
// nothing was lost or leaked. It prints a report table, lines beginning "CHAOS".
//
// How it works
// - The bed: host 0 runs the head (no CPUs) backed by a password-protected Redis on the same
//   host; host 1 a node without CPUs where the sweeps' driver runs (so no node or link fault
//   takes the driver with it); hosts 2..5 a 2-CPU node each, for the ranks: three trials of two
//   ranks fill three of them, and one is spare (chaos_driver.h).
// - The work: sweeps of three 2-rank Gloo trials of the example MLP (kEpochs epochs each, every
//   epoch reported with a checkpoint), one after another for as long as the chaos window lasts
//   ("keep launching": a sweep of ~15 s is hit by a fault or two, and the window's length, not
//   the sweep's, sets how long the soak runs). A failed gang restarts from its trial's latest
//   checkpoint up to kMaxFailures times per Fit.
// - The chaos driver: std::mt19937 seeded from RAYD_CHAOS_SEED (default kDefaultSeed; printed).
//   The first five faults are the five kinds in a shuffled order, so even the shortest run
//   injects every kind once; after them each kind is drawn uniformly. Before each fault it
//   waits a random 2-8 s, then until a sweep is making progress (its driver runs and a trial
//   has reported), injects the fault, does what the operator would do afterwards (restart the
//   node, restore the link, restart the head, resume the sweep) and polls, with a deadline of
//   kRecoveryDeadline, until the cluster has recovered. It stops once RAYD_CHAOS_SECONDS
//   (default kDefaultSeconds) have passed and every kind was injected; then the last sweep runs
//   to its end and the invariants are checked.
//
// Fault kinds, and what "recovered" means for each. Recovery is measured from the injection;
// "the sweep progressed" means every trial of the sweep that was running at the fault has since
// ended TERMINATED or reported an epoch at least two past the last one it had reported (a gang
// hit by the fault can still have one report in flight, persisted after the fault; any later
// one comes from a restarted gang: if the driver had fallen further behind rank 0, the time is
// a little short); "the cluster is whole" means `rayd status` answers and every host has an
// ALIVE node.
//   worker-sigkill  SIGKILL of a rank's process (a LEASED worker on a training host, preferring
//                   one whose CPU time grows, i.e. training). Recovered: the sweep progressed
//                   and the cluster is whole. (A kill that lands as its trial ends recovers at
//                   once: nothing needed doing.)
//   node-sigkill    SIGKILL of every process of a training host running a rank (its node daemon
//                   and workers); once the head has declared the node DEAD, `rayd start
//                   --address` starts a new node there. Recovered: progressed, whole (so the new
//                   node is ALIVE).
//   link-cut        the link of a training host running a rank goes down for a random 1-6 s
//                   (shorter or longer than the 3 s that declares a node dead) and comes back.
//                   Recovered: progressed, whole (the host's node ALIVE again, rejoined under a
//                   new id if it had been declared dead). The time includes the cut itself.
//   head-sigkill    SIGKILL of the Redis-backed head, restarted at once with the same flags.
//                   Recovered: progressed, whole (every node back).
//   driver-sigkill  SIGKILL of the `rayd tune` process; `rayd tune FILE --resume` is started at
//                   once. Recovered: progressed (the resumed trials report again), whole.
//
// Invariants, checked at the end (each a CHECK with its own message):
//   - every sweep's last driver exited 0; every trial is TERMINATED and its result.json holds
//     epochs 0..N-1 and training_iteration 1..N, each exactly once and in order;
//   - every job is FINISHED, no placement group is left but REMOVED ones, no actor ALIVE, no
//     worker LEASED, and every ALIVE node has all of its resources available (no lease held);
//   - no process is left on any host but the daemons (and the head host's Redis); after `rayd
//     stop` on every host, none but Redis;
//   - session files: after `rayd stop`, no head.pid or node.pid is left in any session
//     directory (stop removes the live daemons' and the stale ones of SIGKILLed daemons), and no
//     spilled object file is left in any session's spill/ directory;
//   - shared memory: no /dev/shm entry the run created is left after `rayd stop` (the object
//     store maps memfds, so there should be none at all);
//   - the head's memory is bounded: the VmRSS of the head's process (whichever incarnation
//     runs; sampled about once a second) at the end is below 2x the RSS sampled at the first
//     fault (warmed up: a sweep running) plus 64 MiB.
// Rank scratch directories (TMPDIR: each host's root/tmp) left by SIGKILLed ranks are counted
// and printed, not asserted: a process killed with SIGKILL cannot remove them.
//
// The report: "CHAOS <kind> injected survived p50 p99 lost" rows, where survived counts faults
// that recovered within the deadline, whose sweep lost nothing and after which the final
// invariants held; lost counts the problems (trials not TERMINATED, epochs missing, repeated
// or out of order, a failed driver) of the sweeps the kind hit. p50/p99 are nearest-rank.
// scripts/chaos-soak.sh runs it (--long: 30 minutes of chaos).

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "chaos_driver.h"
#include "multi_host_cluster.h"
#include "test_util.h"
#include "testbed.h"

namespace rayd::testing::chaos {
namespace {

namespace fs = std::filesystem;

// Every kind is injected at least once whatever the window; with setup and the checks, about
// 1.5 minutes on 2 cores (scripts/chaos-soak.sh --long for the long soak).
constexpr int kDefaultSeconds = 40;
// Fixed: CTest's runs inject the first five kinds in the same order (worker, node, head,
// driver, link), the rest as timing allows.
constexpr unsigned kDefaultSeed = 25;
// How long the cluster may take to let go of what the ended sweeps held, and their processes
// to exit.
constexpr auto kCleanupDeadline = std::chrono::seconds(30);
constexpr int kRedisPort = 6390;
constexpr char kRedisPassword[] = "chaos-redis-secret";
constexpr double kRssSlackMib = 64;

long EnvLong(const char* name, long fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtol(value, nullptr, 10) : fallback;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

// Redis on the head's host, answering PING.
std::unique_ptr<ChildProcess> StartRedis(MultiHostCluster& cluster) {
  const std::string port = std::to_string(kRedisPort);
  auto redis = std::make_unique<ChildProcess>(cluster.bed().In(
      kHeadHost, {REDIS_SERVER_BINARY, "--port", port, "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--requirepass", kRedisPassword}));
  REQUIRE(WaitFor(
      [&] {
        std::string out;
        return cluster.bed().Run(kHeadHost,
                                 {"/usr/bin/redis-cli", "-p", port, "-a", kRedisPassword, "ping"},
                                 &out) == 0 &&
               out.find("PONG") != std::string::npos;
      },
      kSettle));
  return redis;
}

// The head (Redis-backed, no CPUs), the driver host's node (no CPUs), the training nodes.
void StartCluster(MultiHostCluster& cluster) {
  cluster.StartHead({"--num-cpus", "0", "--redis-address",
                     "redis://127.0.0.1:" + std::to_string(kRedisPort), "--redis-password",
                     kRedisPassword});
  cluster.StartNode(kDriverHost, {"--num-cpus", "0"});
  for (int host = kFirstTrainingHost; host < kHosts; ++host) {
    cluster.StartNode(host, {"--num-cpus", "2"});
  }
}

// ---- The final invariants ----------------------------------------------------------------------

// What the cluster still holds for work that has ended, "" when nothing: jobs not FINISHED,
// placement groups not REMOVED, actors ALIVE, workers LEASED, ALIVE nodes with less available
// than their total.
std::string HeldResources(MultiHostCluster& cluster) {
  auto groups = cluster.TryJson({"list", "placement-groups"});
  auto actors = groups ? cluster.TryJson({"list", "actors"}) : std::nullopt;
  auto workers = actors ? cluster.TryJson({"list", "workers"}) : std::nullopt;
  auto jobs = workers ? cluster.TryJson({"list", "jobs"}) : std::nullopt;
  auto status = jobs ? cluster.TryStatus() : std::nullopt;
  if (!status) return "(no answer: " + cluster.last_output() + ")";
  std::string held;
  for (const auto& j : *jobs) {
    if (j.at("status") == "FINISHED") continue;
    const int pid = j.value("driver_pid", 0);
    held += "\n  job " + j.at("job_id").get<std::string>() + " " +
            j.at("status").get<std::string>() + ", its driver (pid " + std::to_string(pid) + ") " +
            (ProcessGone(pid) ? "gone" : "running");
  }
  for (const auto& g : *groups) {
    if (g.at("state") == "REMOVED") continue;
    held += "\n  placement group " + g.at("placement_group_id").get<std::string>() + " " +
            g.at("state").get<std::string>();
  }
  for (const auto& a : *actors) {
    if (a.at("state") == "ALIVE") held += "\n  actor " + a.at("actor_id").get<std::string>();
  }
  for (const auto& w : *workers) {
    if (w.at("state") != "LEASED") continue;
    held += "\n  worker " + w.at("worker_id").get<std::string>() + " (pid " +
            std::to_string(w.value("pid", 0)) + ") LEASED";
  }
  for (const auto& n : status->at("nodes")) {
    if (n.at("state") != "ALIVE" || n.at("available") == n.at("total")) continue;
    held += "\n  node " + n.at("node_id").get<std::string>() + " has " + n.at("available").dump() +
            " of " + n.at("total").dump();
  }
  return held;
}

// The processes of every host but `allowed` and, when `daemons_allowed`, the live daemons; ""
// when none.
std::string Processes(MultiHostCluster& cluster, pid_t allowed, bool daemons_allowed) {
  std::ostringstream out;
  for (int host = 0; host < cluster.bed().size(); ++host) {
    std::vector<pid_t> daemons;
    if (daemons_allowed) daemons = LiveDaemons(cluster.bed().root(host));
    for (pid_t pid : cluster.bed().Pids(host)) {
      if (ProcessGone(pid) || pid == allowed) continue;
      if (std::find(daemons.begin(), daemons.end(), pid) != daemons.end()) continue;
      std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      out << "\n  host " << host << " pid " << pid << ": " << cmdline.substr(0, 160);
    }
  }
  return out.str();
}

// Session files left in `root`'s session directories: pid files, spilled objects.
std::string SessionLeftovers(const std::string& root) {
  std::string left;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator(root, ec)) {
    if (!dir.is_directory() || !dir.path().filename().string().starts_with("session_")) continue;
    for (const char* file : {"head.pid", "node.pid"}) {
      if (fs::exists(dir.path() / file)) left += "\n  " + (dir.path() / file).string();
    }
    std::error_code no_spill;
    for (const auto& spilled : fs::directory_iterator(dir.path() / "spill", no_spill)) {
      left += "\n  " + spilled.path().string();
    }
  }
  return left;
}

std::set<std::string> ShmEntries() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// What the run left, each "" when nothing (else what, for the failure message).
struct Leftovers {
  std::string held;        // HeldResources once the last sweep has ended
  std::string processes;   // besides the daemons and Redis, before `rayd stop`
  std::string after_stop;  // besides Redis, after `rayd stop` on every host
  std::string session_files;
  std::string shm;                   // /dev/shm entries that were not there before the run
  std::vector<std::string> scratch;  // "host:name" in the hosts' TMPDIRs
  double head_rss_mib = 0;           // the head's, before `rayd stop`

  bool clean() const {
    return held.empty() && processes.empty() && after_stop.empty() && session_files.empty() &&
           shm.empty();
  }
};

// Polls (with deadlines) until the cluster has let go of the ended sweeps, stops every host's
// daemons and looks at what is left.
Leftovers CollectLeftovers(MultiHostCluster& cluster, ChaosDriver& chaos, HeadMemory& memory,
                           pid_t redis, const std::set<std::string>& shm_before) {
  Leftovers left;
  chaos.Until([&] { return (left.held = HeldResources(cluster)).empty(); }, kCleanupDeadline);
  chaos.Until([&] { return (left.processes = Processes(cluster, redis, true)).empty(); },
              kCleanupDeadline);
  left.head_rss_mib = memory.SampleNow();
  for (int host = kHosts - 1; host >= 0; --host) {  // nodes before the head
    std::string out;
    const int rc = cluster.Rayd(host, {"stop"}, &out);
    INFO("rayd stop on host " << host << ": " << out);
    CHECK(rc == 0);
  }
  WaitFor([&] { return (left.after_stop = Processes(cluster, redis, false)).empty(); },
          kCleanupDeadline);
  for (int host = 0; host < kHosts; ++host) {
    left.session_files += SessionLeftovers(cluster.bed().root(host));
    for (const auto& name : cluster.ScratchLeftovers(host)) {
      left.scratch.push_back(std::to_string(host) + ":" + name);
    }
  }
  for (const auto& name : ShmEntries()) {
    if (!shm_before.count(name)) left.shm += " " + name;
  }
  return left;
}

// ---- The report --------------------------------------------------------------------------------

// " (host:name ...)" of the scratch directories left, "" for none.
std::string ScratchNames(const std::vector<std::string>& scratch) {
  std::string out;
  for (const std::string& name : scratch) out += (out.empty() ? " (" : " ") + name;
  return out.empty() ? out : out + ")";
}

void PrintReport(const ChaosDriver& chaos, const SweepSeries& sweeps, const HeadMemory& memory,
                 const Leftovers& left, double rss_bound) {
  std::map<Kind, std::vector<double>> recoveries;
  std::map<Kind, int> injected, survived;
  std::map<Kind, std::set<size_t>> hit;
  for (const Fault& f : chaos.faults()) {
    ++injected[f.kind];
    hit[f.kind].insert(f.sweep);
    if (f.recovery_s) recoveries[f.kind].push_back(*f.recovery_s);
    const bool kept = sweeps.sweeps()[f.sweep].problems.empty();
    if (f.recovery_s && kept && left.clean() && left.head_rss_mib < rss_bound) ++survived[f.kind];
  }
  std::printf("CHAOS %-16s %8s %8s %14s %14s %5s\n", "kind", "injected", "survived",
              "recovery_p50_s", "recovery_p99_s", "lost");
  for (Kind kind : kKinds) {
    size_t lost = 0;
    for (size_t sweep : hit[kind]) lost += sweeps.sweeps()[sweep].problems.size();
    std::printf("CHAOS %-16s %8d %8d %14.2f %14.2f %5zu\n", KindName(kind), injected[kind],
                survived[kind], Percentile(recoveries[kind], 0.5),
                Percentile(recoveries[kind], 0.99), lost);
  }
  std::printf(
      "CHAOS head RSS: %.1f MiB warm, %.1f MiB peak, %.1f MiB at the end (bound %.1f "
      "MiB), %zu head processes\n",
      memory.warm(), memory.peak(), left.head_rss_mib, rss_bound, memory.incarnations());
  auto state = [](const std::string& what) { return what.empty() ? "none" : "LEFT"; };
  std::printf(
      "CHAOS leftovers: jobs/groups/actors/leases %s, processes %s, after stop %s, "
      "session files %s, /dev/shm %s; rank scratch dirs of SIGKILLed ranks: %zu%s\n",
      state(left.held), state(left.processes), state(left.after_stop), state(left.session_files),
      state(left.shm), left.scratch.size(), ScratchNames(left.scratch).c_str());
  std::fflush(stdout);
}

}  // namespace

TEST_CASE(
    "chaos soak: seeded worker node link head and driver faults during checkpointing "
    "sweeps lose nothing",
    "[fault]") {
  REQUIRE_TESTBED();
  const double started = WallSeconds();
  const auto seed = static_cast<unsigned>(EnvLong("RAYD_CHAOS_SEED", kDefaultSeed));
  const long seconds = EnvLong("RAYD_CHAOS_SECONDS", kDefaultSeconds);
  std::printf("CHAOS seed=%u window=%ld s (RAYD_CHAOS_SEED, RAYD_CHAOS_SECONDS)\n", seed, seconds);
  std::fflush(stdout);
  const std::set<std::string> shm_before = ShmEntries();

  MultiHostCluster cluster(kHosts);
  cluster.UseHostScratchDirs();
  std::unique_ptr<ChildProcess> redis = StartRedis(cluster);
  StartCluster(cluster);
  TempDir work;
  SweepSeries sweeps(cluster, work.path());
  HeadMemory memory(cluster.bed().root(kHeadHost));
  ChaosDriver chaos(cluster, sweeps, memory, seed);
  sweeps.StartNext();
  const double chaos_started = WallSeconds();
  chaos.Run(static_cast<double>(seconds));
  const double chaos_s = WallSeconds() - chaos_started;

  // The last sweep runs to its end; then nothing may be left running or held.
  chaos.StopLaunching();
  const bool drained = chaos.Until([&] { return !sweeps.driver_running(); }, kSweepTimeout);
  chaos.Tick();
  sweeps.Check();
  const Leftovers left = CollectLeftovers(cluster, chaos, memory, redis->pid(), shm_before);
  const double rss_bound = 2 * memory.warm() + kRssSlackMib;

  size_t trials = 0;
  for (const Sweep& s : sweeps.sweeps()) trials += ReadTrials(s.experiment).size();
  std::printf(
      "CHAOS seed=%u window=%ld s: %zu faults in %.0f s; %zu sweeps, %zu trials x %d "
      "epochs; whole run %.0f s\n",
      seed, seconds, chaos.faults().size(), chaos_s, sweeps.size(), trials, kEpochs,
      WallSeconds() - started);
  PrintReport(chaos, sweeps, memory, left, rss_bound);

  {
    INFO("the last sweep's driver did not end:\n" << sweeps.current().output);
    CHECK(drained);
  }
  for (const Fault& f : chaos.faults()) {
    INFO(KindName(f.kind) << " (" << f.detail << ") did not recover (deadline "
                          << kRecoveryDeadline.count() << " s)");
    CHECK(f.recovery_s.has_value());
  }
  for (Kind kind : kKinds) {
    INFO(KindName(kind) << " was never injected");
    CHECK(std::any_of(chaos.faults().begin(), chaos.faults().end(),
                      [&](const Fault& f) { return f.kind == kind; }));
  }
  for (const Sweep& s : sweeps.sweeps()) {
    std::string list;
    for (const auto& p : s.problems) list += "\n  " + p;
    INFO("sweep " << s.name << " (resumed " << s.resumes << " times) lost something:" << list
                  << "\nits driver's output:\n"
                  << s.output);
    CHECK(s.problems.empty());
  }
  {
    INFO("held once the last sweep had ended:" << left.held);
    CHECK(left.held.empty());
  }
  {
    INFO("processes left besides the daemons and Redis:" << left.processes);
    CHECK(left.processes.empty());
  }
  {
    INFO("processes left after `rayd stop`:" << left.after_stop);
    CHECK(left.after_stop.empty());
  }
  {
    INFO("session files left after `rayd stop`:" << left.session_files);
    CHECK(left.session_files.empty());
  }
  {
    INFO("/dev/shm entries left:" << left.shm);
    CHECK(left.shm.empty());
  }
  {
    INFO("head RSS " << left.head_rss_mib << " MiB at the end, " << memory.warm()
                     << " MiB warm; bound " << rss_bound << " MiB");
    CHECK(memory.warm() > 0);
    CHECK(left.head_rss_mib > 0);
    CHECK(left.head_rss_mib < rss_bound);
  }
}

}  // namespace rayd::testing::chaos
