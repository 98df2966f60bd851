// The failure model of ARCHITECTURE.md §12 on separate hosts: each scenario builds a test bed of
// network namespaces (testbed.h), starts a head and nodes in them with `rayd start` (each host
// its own address, temp root and session directory; the cluster token passed as a flag, as on
// real machines), runs real work — `rayd tune` sweeps of 2-worker Gloo trials of the example
// MLP, or a driver of this binary — and then breaks something: SIGKILLs a host, cuts its link,
// SIGKILLs the Redis-backed head, SIGKILLs a driver, fills the object store and its spill disk.
// Each checks that nothing the model promises to keep is lost, and prints how long recovery took
// ("FAULT ..." lines, for the issue's table). The cluster and the sweeps are
// multi_host_cluster.h's, shared with the chaos soak (chaos_test.cc).

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <rayd/api.h>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multi_host_cluster.h"
#include "record_ids.h"
#include "rayd_sandbox.h"
#include "test_util.h"
#include "testbed.h"

namespace {

using namespace std::chrono_literals;
using rayd::testing::AnyTrialHas;
using rayd::testing::CheckSweepComplete;
using rayd::testing::ChildProcess;
using rayd::testing::DaemonPids;
using rayd::testing::kSettle;
using rayd::testing::kSweepTimeout;
using rayd::testing::MultiHostCluster;
using rayd::testing::ProcessGone;
using rayd::testing::ReadTrials;
using rayd::testing::RecoveredAfter;
using rayd::testing::RequireSweepSucceeded;
using rayd::testing::SelfExe;
using rayd::testing::StartSweep;
using rayd::testing::StartTrainingCluster;
using rayd::testing::TempDir;
using rayd::testing::TotalFailures;
using rayd::testing::WaitFor;
using rayd::testing::WallSeconds;
using rayd::testing::WriteSweep;

}  // namespace

// ---- Child drivers -----------------------------------------------------------------------------

namespace {

class Probe {
 public:
  static Probe* Create() { return new Probe; }
  int Pid() { return static_cast<int>(getpid()); }
  // A value this actor's worker puts, and so owns; the caller borrows it.
  std::vector<rayd::ObjectRef<int>> Keep(int v) { return {rayd::Put(v)}; }
};

// Holds its worker's lease until the worker is killed.
int HoldLease() {
  for (;;) pause();
}

}  // namespace

RAYD_REMOTE(Probe::Create, &Probe::Pid, &Probe::Keep);
RAYD_REMOTE(HoldLease);

// FAULT_TEST_DRIVER_MODE=hold: three actors, one detached named actor and a task on the
// nodes with the "far" resource; prints the actors' pids, then waits to be SIGKILLed.
// FAULT_TEST_DRIVER_MODE=call: prints the pid of the detached actor, found by name.
int RunChildDriver(const char* mode_name) {
  const std::string mode = mode_name;
  rayd::RaydConfig config;
  config.address = std::getenv("FAULT_ADDRESS");
  config.ray_namespace = "fault";
  rayd::Init(config);
  const std::map<std::string, double> far = {{"CPU", 1}, {"far", 1}};
  if (mode == "hold") {
    std::vector<rayd::ActorHandle<Probe>> probes;
    for (int i = 0; i < 3; ++i) probes.push_back(rayd::Actor(Probe::Create).SetResources(far).Remote());
    auto keeper = rayd::Actor(Probe::Create)
                      .SetResources(far)
                      .SetName("keeper")
                      .SetDetached()
                      .Remote();
    auto held = rayd::Task(HoldLease).SetResources(far).Remote();
    std::printf("HOLD");
    for (auto& p : probes) std::printf(" %d", *rayd::Get(p.Task(&Probe::Pid).Remote(), 60000));
    std::printf(" DETACHED %d\n", *rayd::Get(keeper.Task(&Probe::Pid).Remote(), 60000));
    std::fflush(stdout);
    for (;;) pause();
  }
  if (mode == "borrow") {
    // Borrows a value owned by an actor on a "far" node, then, once $FAULT_GO exists (the
    // test has cut that node's host off), Gets it: says what happened and after how long.
    auto owner = rayd::Actor(Probe::Create).SetResources(far).Remote();
    auto refs = *rayd::Get(owner.Task(&Probe::Keep).Remote(7), 60000);
    std::printf("BORROWED %d\n", *rayd::Get(owner.Task(&Probe::Pid).Remote(), 60000));
    std::fflush(stdout);
    const std::string go = std::getenv("FAULT_GO");
    while (!std::filesystem::exists(go)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    try {
      std::printf("VALUE %d\n", *rayd::Get(refs.at(0), 120000));
    } catch (const rayd::OwnerDiedError& e) {
      std::printf("OWNERDIED %.2f %s\n", seconds(), e.what());
    } catch (const rayd::RaydError& e) {
      std::printf("OTHER %.2f %s\n", seconds(), e.what());
    }
    std::fflush(stdout);
    std::_Exit(0);  // the owner's host is cut off: no clean goodbye to wait for
  }
  if (mode == "call") {
    auto keeper = rayd::GetActor<Probe>("keeper", "fault");
    if (!keeper) {
      std::printf("NO KEEPER\n");
      return 1;
    }
    std::printf("KEEPER %d\n", *rayd::Get(keeper->Task(&Probe::Pid).Remote(), 60000));
    rayd::Shutdown();
    return 0;
  }
  std::fprintf(stderr, "unknown FAULT_TEST_DRIVER_MODE %s\n", mode_name);
  return 2;
}

// Scenarios 1 and 2: a sweep of three trials on four 2-CPU nodes (hosts 1..4, one spare; the
// head and the driver on host 0), and the host of one running trial's ranks, picked once some
// trial has three results.
class VictimSweep {
 public:
  struct Where {
    std::string experiment;
    int host = -1;
    std::string node_id;
  };
  static constexpr int kEpochs = 12;

  VictimSweep(MultiHostCluster& cluster, const std::string& name) {
    auto host_of_node = StartTrainingCluster(cluster, 4);
    where_.experiment = work_.path() + "/results/" + name;
    driver_ = StartSweep(cluster, 0, WriteSweep(work_.path(), name, kEpochs));
    REQUIRE(WaitFor([&] { return AnyTrialHas(where_.experiment, 3); }, kSettle));
    REQUIRE(WaitFor([&] { return (where_.host = cluster.HostRunningATrial(host_of_node)) > 0; },
                    kSettle));
    for (const auto& [id, host] : host_of_node) {
      if (host == where_.host) where_.node_id = id;
    }
  }
  const Where& where() const { return where_; }

  // Waits until the head declares the victim's node dead and then until a failed trial reports
  // again (its gang restarted elsewhere); returns the seconds from `fault_at` to each.
  std::pair<double, double> AwaitRecovery(MultiHostCluster& cluster, double fault_at) {
    REQUIRE(WaitFor([&] { return cluster.NodeState(where_.node_id) == "DEAD"; }, kSettle));
    const double dead_at = WallSeconds();
    std::optional<double> recovered;
    REQUIRE(WaitFor(
        [&] {
          return (recovered = RecoveredAfter(where_.experiment, fault_at, dead_at)).has_value();
        },
        kSweepTimeout));
    return {dead_at - fault_at, *recovered};
  }

  // The driver succeeded, every trial completed every epoch once, and some trial failed over.
  void RequireComplete() {
    RequireSweepSucceeded(*driver_);
    CheckSweepComplete(where_.experiment, 3, kEpochs);
    CHECK(TotalFailures(where_.experiment) >= 1);
  }

 private:
  TempDir work_;
  Where where_;
  std::unique_ptr<ChildProcess> driver_;
};

// ---- 1. A host dies ----------------------------------------------------------------------------

TEST_CASE("SIGKILL of a host during 2-worker trials: its trial restarts from its checkpoint "
          "elsewhere and the sweep completes",
          "[fault]") {
  REQUIRE_TESTBED();
  MultiHostCluster cluster(5);
  VictimSweep sweep(cluster, "host-kill");
  const int victim = sweep.where().host;
  const double killed_at = WallSeconds();
  cluster.bed().KillHost(victim);
  // The head notices, and the trial resumes on the spare node.
  const auto [declared_dead, recovered] = sweep.AwaitRecovery(cluster, killed_at);
  sweep.RequireComplete();
  std::printf("FAULT host-sigkill: node declared dead after %.2f s; trial's next result %.2f s "
              "after the kill\n",
              declared_dead, recovered);
}

// ---- 2. A link goes down and comes back --------------------------------------------------------

TEST_CASE("a cut link: the node is declared dead and its trial rescheduled and once "
          "restored it rejoins "
          "as a new node and its old workers are gone",
          "[fault]") {
  REQUIRE_TESTBED();
  MultiHostCluster cluster(5);
  VictimSweep sweep(cluster, "link-cut");
  const int victim = sweep.where().host;
  const std::string& victim_node = sweep.where().node_id;
  const std::vector<pid_t> daemon = DaemonPids(cluster.bed().root(victim));
  REQUIRE(daemon.size() == 1);
  std::vector<pid_t> old_workers;
  for (pid_t pid : cluster.bed().Pids(victim)) {
    if (pid != daemon[0]) old_workers.push_back(pid);
  }
  REQUIRE(old_workers.size() >= 2);  // the trial's two ranks

  const double cut_at = WallSeconds();
  cluster.bed().SetLink(victim, false);
  // Its trial is rescheduled while the node is still cut off.
  const auto [declared_dead, recovered] = sweep.AwaitRecovery(cluster, cut_at);

  const double restored_at = WallSeconds();
  cluster.bed().SetLink(victim, true);
  // The same daemon rejoins under a new id; what ran there before is ended, not resumed.
  std::string rejoined;
  REQUIRE(WaitFor(
      [&] {
        auto status = cluster.TryStatus();
        if (!status) return false;
        for (const auto& n : status->at("nodes")) {
          if (n.at("ip") == cluster.bed().ip(victim) && n.at("state") == "ALIVE" &&
              n.at("node_id") != victim_node) {
            rejoined = n.at("node_id");
          }
        }
        return !rejoined.empty();
      },
      kSettle));
  const double rejoin_s = WallSeconds() - restored_at;
  CHECK(cluster.NodeState(victim_node) == "DEAD");
  CHECK(!ProcessGone(daemon[0]));
  CHECK(WaitFor(
      [&] {
        return std::all_of(old_workers.begin(), old_workers.end(),
                           [](pid_t pid) { return ProcessGone(pid); });
      },
      kSettle));
  sweep.RequireComplete();
  std::printf("FAULT link-cut: node declared dead after %.2f s; trial's next result %.2f s after "
              "the cut; rejoined as a new node %.2f s after the link came back\n",
              declared_dead, recovered, rejoin_s);
}

// ---- 3. The head dies --------------------------------------------------------------------------

TEST_CASE("SIGKILL of the Redis-backed head mid-sweep: restarted with the same flags, nodes "
          "and the driver reconnect and the sweep completes",
          "[fault]") {
  REQUIRE_TESTBED();
  // Hosts: 0 head and its Redis (password-protected); 1..3 nodes; the driver on host 1.
  MultiHostCluster cluster(4);
  constexpr char kRedisPassword[] = "fault-redis-secret";
  ChildProcess redis(cluster.bed().In(0, {REDIS_SERVER_BINARY, "--port", "6390", "--bind", "127.0.0.1",
                                          "--save", "", "--appendonly", "no", "--requirepass",
                                          kRedisPassword}));
  REQUIRE(WaitFor(
      [&] {
        std::string out;
        return cluster.bed().Run(0, {"/usr/bin/redis-cli", "-p", "6390", "-a", kRedisPassword, "ping"},
                                 &out) == 0 &&
               out.find("PONG") != std::string::npos;
      },
      kSettle));
  auto host_of_node =
      StartTrainingCluster(cluster, 3,
                           {"--redis-address", "redis://127.0.0.1:6390", "--redis-password",
                            kRedisPassword});
  TempDir work;
  const int kEpochs = 12;
  const std::string experiment = work.path() + "/results/head-kill";
  auto driver = StartSweep(cluster, 1, WriteSweep(work.path(), "head-kill", kEpochs));
  REQUIRE(WaitFor([&] { return AnyTrialHas(experiment, 3); }, kSettle));

  const std::vector<pid_t> pids = DaemonPids(cluster.bed().root(0));  // head.pid, node.pid
  const std::set<pid_t> head(pids.begin(), pids.end());
  REQUIRE(head.size() == 1);
  ::kill(*head.begin(), SIGKILL);
  REQUIRE(WaitFor([&] { return ProcessGone(*head.begin()); }, kSettle));
  const double restarted_at = WallSeconds();
  cluster.RestartHead();
  // Every node is back under its own id.
  REQUIRE(WaitFor(
      [&] {
        return std::all_of(host_of_node.begin(), host_of_node.end(), [&](const auto& node) {
          return cluster.NodeState(node.first) == "ALIVE";
        });
      },
      kSettle));
  const double nodes_back = WallSeconds() - restarted_at;
  RequireSweepSucceeded(*driver);
  CheckSweepComplete(experiment, 3, kEpochs);
  // Results kept coming after the restart (the sweep went on, not merely ended).
  bool after = false;
  for (const auto& r : ReadTrials(experiment)) {
    after = after || (!r.timestamps.empty() && r.timestamps.back() > restarted_at);
  }
  CHECK(after);
  // Live actors stayed live: no trial's gang failed over while the head was away.
  CHECK(TotalFailures(experiment) == 0);
  std::printf("FAULT head-sigkill: all %zu nodes alive under their ids %.2f s after the restart\n",
              host_of_node.size(), nodes_back);
}

// ---- 4. A driver dies --------------------------------------------------------------------------

TEST_CASE("SIGKILL of a driver on another host: its actors and leases end there and its "
          "detached actor lives on",
          "[fault]") {
  REQUIRE_TESTBED();
  // Hosts: 0 head; 1 the driver's node; 2 a node with the "far" resource its work needs.
  MultiHostCluster cluster(3);
  cluster.StartHead({"--num-cpus", "0"});
  cluster.StartNode(1, {"--num-cpus", "1"});
  const std::string far_node = cluster.StartNode(2, {"--num-cpus", "8", "--resources", R"({"far":8})"});
  auto env = cluster.Env(1);
  env["FAULT_TEST_DRIVER_MODE"] = "hold";
  env["FAULT_ADDRESS"] = cluster.head_address();
  ChildProcess driver(cluster.bed().In(1, {SelfExe()}), env);

  std::vector<int> pids;
  int detached = 0;
  REQUIRE(WaitFor(
      [&] {
        std::istringstream out(driver.output());
        for (std::string word; out >> word;) {
          if (word != "HOLD") continue;
          pids.clear();
          for (int pid; out >> pid;) pids.push_back(pid);
          out.clear();
          out >> word >> detached;
          return pids.size() == 3 && word == "DETACHED";
        }
        return false;
      },
      kSettle));
  // Three actors, the detached one and the task's lease hold 5 of the far node's 8 CPUs.
  double cpus = -1;
  if (!WaitFor([&] { return (cpus = cluster.Available(far_node, "CPU")) == 3; }, kSettle)) {
    FAIL("the far node's available CPUs: " << cpus << "\n" << cluster.last_output());
  }

  const auto killed_at = std::chrono::steady_clock::now();
  driver.Signal(SIGKILL);
  REQUIRE(driver.WaitExit(kSettle));
  CHECK(WaitFor(
      [&] {
        return std::all_of(pids.begin(), pids.end(), [](int pid) { return ProcessGone(pid); });
      },
      kSettle));
  // Only the detached actor's CPU stays taken.
  if (!WaitFor([&] { return (cpus = cluster.Available(far_node, "CPU")) == 7; }, kSettle)) {
    FAIL("the far node's available CPUs: " << cpus << "\n" << cluster.last_output());
  }
  const double cleaned = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                       killed_at).count();
  CHECK(!ProcessGone(detached));

  // A new driver finds the detached actor by name, and it answers from the same process.
  env["FAULT_TEST_DRIVER_MODE"] = "call";
  ChildProcess caller(cluster.bed().In(1, {SelfExe()}), env);
  REQUIRE(caller.WaitExit(kSettle));
  INFO(caller.output());
  CHECK(caller.exit_code() == 0);
  CHECK(caller.output().find("KEEPER " + std::to_string(detached)) != std::string::npos);
  std::printf("FAULT driver-sigkill: actors and leases released %.2f s after the kill; the "
              "detached actor answers\n",
              cleaned);
}

TEST_CASE("a borrower whose object's owner is cut off gets OwnerDiedError instead of waiting "
          "for ever",
          "[fault]") {
  REQUIRE_TESTBED();
  // Hosts: 0 head; 1 the borrowing driver's node; 2 the owner's (an actor with "far").
  MultiHostCluster cluster(3);
  cluster.StartHead({"--num-cpus", "0"});
  cluster.StartNode(1, {"--num-cpus", "1"});
  cluster.StartNode(2, {"--num-cpus", "2", "--resources", R"({"far":2})"});
  TempDir signals;
  auto env = cluster.Env(1);
  env["FAULT_TEST_DRIVER_MODE"] = "borrow";
  env["FAULT_ADDRESS"] = cluster.head_address();
  env["FAULT_GO"] = signals.path() + "/go";
  ChildProcess driver(cluster.bed().In(1, {SelfExe()}), env);
  REQUIRE(WaitFor([&] { return driver.output().find("BORROWED") != std::string::npos; }, kSettle));

  cluster.bed().SetLink(2, false);  // the owner's host drops off the network, silently
  std::ofstream(signals.path() + "/go") << "go\n";
  const bool answered = driver.WaitExit(90s);
  cluster.bed().SetLink(2, true);
  INFO(driver.output());
  REQUIRE(answered);
  const size_t at = driver.output().find("OWNERDIED ");
  REQUIRE(at != std::string::npos);
  const double seconds = std::stod(driver.output().substr(at + std::strlen("OWNERDIED ")));
  // The kernel notices the silent peer (rayd::rpc::kDeadPeerTimeoutMs, 6 s), or the peer
  // client gives up waiting for a connection (kPeerGiveUpAfter, 30 s).
  CHECK(seconds < 35);
  std::printf("FAULT owner-cut: OwnerDiedError %.1f s after the owner's host was cut off\n",
              seconds);
}

// ---- 5. The object store and its spill disk fill up --------------------------------------------

namespace {
// A tmpfs of `megabytes` mounted on `dir` for the life of this object.
class SmallDisk {
 public:
  SmallDisk(const std::string& dir, int megabytes) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string options = "size=" + std::to_string(megabytes) + "m,mode=0700";
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};
}  // namespace

TEST_CASE("a full object store spills until its spill disk is full, then Put fails clearly and "
          "the daemon keeps serving",
          "[fault]") {
  REQUIRE_TESTBED();  // root, for the small disk
  rayd::testing::RaydSandbox sandbox(RAYD_BINARY);
  const int port = rayd::testing::FreeTcpPort();
  sandbox.Start({"--head", "--port", std::to_string(port), "--num-cpus", "1",
                 "--object-store-memory", std::to_string(32 << 20)});
  const auto sessions = sandbox.Sessions("_head");
  REQUIRE(sessions.size() == 1);
  SmallDisk disk(sessions[0] + "/spill", 16);
  REQUIRE(disk.mounted());

  rayd::RaydConfig config;
  config.address = "127.0.0.1:" + std::to_string(port);
  config.temp_dir = sandbox.root();
  rayd::Init(config);
  struct Guard {
    ~Guard() { rayd::Shutdown(); }
  } guard;

  // 4 MiB objects, each a different pattern: 8 fit in the store, about 4 more on the disk.
  auto object = [](int i) { return std::vector<uint8_t>(4 << 20, static_cast<uint8_t>(i * 7 + 1)); };
  std::vector<rayd::ObjectRef<std::vector<uint8_t>>> kept;
  std::string error;
  for (int i = 0; i < 40 && error.empty(); ++i) {
    try {
      kept.push_back(rayd::Put(object(i)));
    } catch (const rayd::ObjectStoreFullError& e) {
      error = e.what();
    }
  }
  INFO("error: " << error);
  REQUIRE(!error.empty());
  const size_t held = kept.size();
  CHECK(held > 8);  // spilling made room beyond the store's own 32 MiB
  CHECK(held < 14);
  CHECK_THAT(error, Catch::Contains("spill"));

  // The daemon still serves, and nothing is lost: objects in memory read back intact now; a
  // spilled one may not fit back while the store is full of objects that can no longer be
  // spilled, and then fails with the same clear error rather than anything worse.
  std::string out;
  CHECK(sandbox.Rayd({"status"}, &out) == 0);
  int unreadable = 0;
  for (size_t i = 0; i < held; ++i) {
    try {
      const bool intact = *rayd::Get(kept[i], 30000) == object(static_cast<int>(i));
      CHECK(intact);
    } catch (const rayd::ObjectStoreFullError& e) {
      ++unreadable;
      CHECK_THAT(e.what(), Catch::Contains("spill"));
    }
  }
  // Once objects are freed, there is room: every spilled object comes back intact, and Put works.
  // (Freeing is asynchronous: the owner tells the store; poll until the first reads back.)
  kept.resize(held - 6);
  CHECK(WaitFor(
      [&] {
        try {
          return *rayd::Get(kept[0], 30000) == object(0);
        } catch (const rayd::ObjectStoreFullError&) {
          return false;
        }
      },
      kSettle));
  for (size_t i = 0; i < kept.size(); ++i) {
    INFO("object " << i);
    CHECK(*rayd::Get(kept[i], 30000) == object(static_cast<int>(i)));
  }
  CHECK_NOTHROW(kept.push_back(rayd::Put(object(99))));
  CHECK(*rayd::Get(kept.back(), 30000) == object(99));
  std::printf("FAULT store-full: %zu x 4 MiB objects held (32 MiB store + 16 MiB spill disk) "
              "before Put failed with: %s; %d spilled objects unreadable until others were freed, "
              "then all intact\n",
              held, error.c_str(), unreadable);
}

// ---- Horovod across hosts ----------------------------------------------------------------------

TEST_CASE(
    "a Horovod job on 2 hosts: each rank's local and cross places are where the gang put "
    "it, and the ranks meet through rank 0's rendezvous",
    "[fault][horovod]") {
  REQUIRE_TESTBED();
  const std::string horovod = RAYD_HOROVOD_DIR;
  if (!std::filesystem::exists(horovod + "/horovod") ||
      std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    std::printf("skipped: no Horovod build at %s, or no python3-torch\n", horovod.c_str());
    std::exit(77);
  }
  MultiHostCluster cluster(3);
  StartTrainingCluster(cluster, 2);  // hosts 1 and 2, 2 CPUs each; the head holds none
  TempDir work;
  const std::string yaml = work.path() + "/hvd.yaml";
  std::ofstream(yaml) << "name: hvd-hosts\n"
                         "trainable:\n"
                         "  command: [/usr/bin/python3, " RAYD_SOURCE_DIR
                         "/tests/e2e/horovod/job.py]\n"
                         "  launcher: horovod\n"
                         "  env: {PYTHONPATH: " +
                             horovod +
                             "}\n"
                             "scaling: {num_workers: 4, resources_per_worker: {CPU: 1}}\n"
                             "run: {storage_path: " +
                             work.path() + "/results}\n";
  ChildProcess driver(
      cluster.bed().In(0, {RAYD_BINARY, "train", yaml, "--address", cluster.head_address()}),
      cluster.Env(0));
  REQUIRE(driver.WaitExit(kSweepTimeout));
  INFO(driver.output());
  std::string logs;
  for (int rank = 0; rank < 4; ++rank) {
    logs += "rank_" + std::to_string(rank) + ".log:\n" +
            rayd::testing::ReadFile(work.path() + "/results/hvd-hosts/rank_" +
                                    std::to_string(rank) + ".log");
  }
  INFO(logs);
  REQUIRE(driver.exit_code() == 0);
  CHECK(driver.output().find("size=4 sum=10") != std::string::npos);
  // Two ranks per host: local ranks 0 and 1 of 2 on each, cross rank = the host's index among
  // the two, the host named by its own address.
  std::map<std::string, std::set<std::string>> places_by_host;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string log = rayd::testing::ReadFile(work.path() + "/results/hvd-hosts/rank_" +
                                                    std::to_string(rank) + ".log");
    CHECK(log.find("resolves to a loopback address") == std::string::npos);  // hosts' /etc/hosts
    const size_t at = log.find("PLACE ");
    REQUIRE(at != std::string::npos);
    const std::string line = log.substr(at, log.find('\n', at) - at);
    const std::string host =
        line.substr(line.find("host=") + 5, line.find(" init=") - line.find("host=") - 5);
    places_by_host[host].insert(
        line.substr(line.find("local="), line.find(" host=") - line.find("local=")));
  }
  REQUIRE(places_by_host.size() == 2);
  CHECK(places_by_host.count(cluster.bed().ip(1)) == 1);
  CHECK(places_by_host.count(cluster.bed().ip(2)) == 1);
  std::set<std::string> all;
  for (const auto& [host, places] : places_by_host) all.insert(places.begin(), places.end());
  CHECK(all == std::set<std::string>{"local=0/2 cross=0/2", "local=1/2 cross=0/2",
                                     "local=0/2 cross=1/2", "local=1/2 cross=1/2"});
}

// ---- Elastic runs across hosts -----------------------------------------------------------------

namespace {

constexpr int kIds = 240;  // rows of the elastic runs' dataset

// A train.yaml of RecordIds (tests/support/loops/record_ids.h: it records every id it takes in
// its checkpoints) over a dataset of kIds ids, elastic over [2, 4] workers of a CPU each, 50 ms a
// step, writing under `work`/results/`name`; returns its path.
std::string ElasticIdsYaml(const std::string& work, const std::string& name, int epochs,
                           int max_failures) {
  rayd::testing::WriteIdsCsv(work, kIds);
  const std::string yaml = work + "/" + name + ".yaml";
  std::ofstream(yaml) << "name: " << name
                      << "\n"
                         "train_loop: RecordIds\n"
                         "libraries: [" RAYD_TEST_LOOPS_LIB "]\n"
                         "config: {epochs: "
                      << epochs
                      << ", batch_size: 4, pace_ms: 50}\n"
                         "scaling: {num_workers: [2, 4], resources_per_worker: {CPU: 1},\n"
                         "          resize_interval_s: 1, collective_timeout_s: 10}\n"
                         "datasets:\n"
                         "  ids: {format: csv, paths: ["
                      << work
                      << "/ids.csv]}\n"
                         "run: {storage_path: "
                      << work << "/results, failure: {max_failures: " << max_failures << "}}\n";
  return yaml;
}

// Every id of every epoch once in the latest checkpoint of run directory `run`, over every
// world size and attempt the run went through.
void CheckEveryIdOnce(const std::string& run, int epochs) {
  const std::string last = rayd::testing::LatestCheckpoint(run);
  REQUIRE(!last.empty());
  std::map<int, std::vector<int64_t>> by_epoch = rayd::testing::IdsByEpoch(last);
  std::vector<int64_t> every(kIds);
  for (int i = 0; i < kIds; ++i) every[i] = i;
  REQUIRE(by_epoch.size() == static_cast<size_t>(epochs));
  for (auto& [epoch, ids] : by_epoch) {
    std::sort(ids.begin(), ids.end());
    INFO("epoch " << epoch);
    CHECK(ids == every);  // 0 repeated, 0 missing
  }
}

// The rows of a run's result.json written so far (a half-written last line is skipped).
std::vector<json> Rows(const std::string& results) {
  std::vector<json> out;
  std::istringstream lines(rayd::testing::ReadFile(results));
  for (std::string line; std::getline(lines, line);) {
    json row = json::parse(line, nullptr, false);
    if (!row.is_discarded()) out.push_back(row);
  }
  return out;
}

// Whether a row after the first `after` was trained at `world_size`.
bool RowAt(const std::string& results, int world_size, size_t after) {
  std::vector<json> all = Rows(results);
  for (size_t i = after; i < all.size(); ++i) {
    if (all[i].value("world_size", 0) == world_size) return true;
  }
  return false;
}

}  // namespace

TEST_CASE(
    "an elastic rayd train run of [2, 4] workers goes on at 2 when a host dies and grows "
    "back to 4 when its node returns, every sample of every epoch once",
    "[fault][elastic]") {
  REQUIRE_TESTBED();
  MultiHostCluster cluster(3);
  StartTrainingCluster(cluster, 2);  // hosts 1 and 2, 2 CPUs each; the head holds none
  TempDir work;
  constexpr int kEpochs = 16;
  const std::string yaml = ElasticIdsYaml(work.path(), "elastic-hosts", kEpochs, 3);
  const std::string results = work.path() + "/results/elastic-hosts/result.json";
  auto rows = [&] { return Rows(results); };
  auto row_at = [&](int world_size, size_t after) { return RowAt(results, world_size, after); };
  ChildProcess driver(
      cluster.bed().In(0, {RAYD_BINARY, "train", yaml, "--address", cluster.head_address()}),
      cluster.Env(0));
  INFO(driver.output());
  REQUIRE(WaitFor([&] { return row_at(4, 0); }, kSettle));  // 4 CPUs: it starts at 4

  // Host 2 loses power: the run goes on with host 1's 2 workers, not waiting for host 2.
  size_t before = rows().size();
  const double killed_at = WallSeconds();
  cluster.bed().KillHost(2);
  REQUIRE(WaitFor([&] { return row_at(2, before); }, kSettle));
  const double shrunk_at = WallSeconds();

  // Its node comes back: at a checkpoint after it, the run grows to 4 again.
  before = rows().size();
  cluster.StartNode(2, {"--num-cpus", "2"});
  const double joined_at = WallSeconds();
  REQUIRE(WaitFor([&] { return row_at(4, before); }, kSettle));
  const double grown_at = WallSeconds();

  REQUIRE(driver.WaitExit(kSweepTimeout));
  REQUIRE(driver.exit_code() == 0);
  // Through 4, 2 (a failure: the restart resumes the last checkpoint's position) and 4 ranks
  // again, the dataset went on where each checkpoint left it.
  CheckEveryIdOnce(work.path() + "/results/elastic-hosts", kEpochs);
  CHECK(rows().back().at("epoch") == kEpochs - 1);
  std::printf(
      "FAULT elastic: training at 2 workers %.2f s after the host's death; at 4 again "
      "%.2f s after its node joined\n",
      shrunk_at - killed_at, grown_at - joined_at);
}

// `rayd drain` of a host: a preemption notice with a deadline, the node leaving in time.
TEST_CASE(
    "a drained host's ranks checkpoint before the deadline and the elastic run goes on at 2 "
    "without using a failure, every sample of every epoch once",
    "[fault][elastic][drain]") {
  REQUIRE_TESTBED();
  MultiHostCluster cluster(3);
  std::map<std::string, int> host_of_node = StartTrainingCluster(cluster, 2);
  std::string drained_node;
  for (const auto& [node, host] : host_of_node) {
    if (host == 2) drained_node = node;
  }
  REQUIRE(!drained_node.empty());
  TempDir work;
  constexpr int kEpochs = 12;
  constexpr double kDeadlineS = 30;
  const std::string yaml = ElasticIdsYaml(work.path(), "drained-hosts", kEpochs, 0);
  const std::string results = work.path() + "/results/drained-hosts/result.json";
  auto rows = [&] { return Rows(results); };
  auto row_at = [&](int world_size, size_t after) { return RowAt(results, world_size, after); };
  ChildProcess driver(
      cluster.bed().In(0, {RAYD_BINARY, "train", yaml, "--address", cluster.head_address()}),
      cluster.Env(0));
  INFO(driver.output());
  REQUIRE(WaitFor([&] { return row_at(4, 0); }, kSettle));  // both hosts: it starts at 4

  // Host 2 gets a preemption notice: its ranks' next checkpoint is the run's last at 4; it goes
  // on at 2 on host 1, and host 2's node, idle, leaves before its deadline.
  const size_t before = rows().size();
  const double drained_at = WallSeconds();
  std::string out;
  REQUIRE(cluster.Rayd(0,
                       {"drain", drained_node, "--deadline",
                        std::to_string(static_cast<int>(kDeadlineS)) + "s", "--reason",
                        "spot preemption", "--address", cluster.head_address()},
                       &out) == 0);
  REQUIRE(WaitFor([&] { return row_at(2, before); }, kSettle));
  const double shrunk_at = WallSeconds();
  REQUIRE(WaitFor([&] { return cluster.NodeState(drained_node) == "DEAD"; }, kSettle));
  const double left_at = WallSeconds();
  CHECK(left_at - drained_at < kDeadlineS);

  REQUIRE(driver.WaitExit(kSweepTimeout));
  REQUIRE(driver.exit_code() == 0);
  CHECK(driver.output().find("(0 restarts, 1 preemption)") != std::string::npos);
  CheckEveryIdOnce(work.path() + "/results/drained-hosts", kEpochs);
  const std::vector<json> all = rows();
  CHECK(all.back().at("epoch") == kEpochs - 1);
  CHECK(all.back().at("world_size") == 2);
  for (const json& n : cluster.Status().at("nodes")) {
    if (n.at("node_id") == drained_node) CHECK(n.at("death_reason") == "drained (spot preemption)");
  }
  std::printf(
      "FAULT drain: training at 2 workers %.2f s after `rayd drain` (deadline %.0f s); the "
      "drained node left after %.2f s\n",
      shrunk_at - drained_at, kDeadlineS, left_at - drained_at);
}
