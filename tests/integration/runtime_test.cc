// The core runtime on real multi-process clusters: tasks, objects, actors, retries and
// restarts after SIGKILL, a CLI-started cluster with a custom resource, and the clean-up of a
// driver that exits without Shutdown.
//
// This binary is its own driver and, re-run by node daemons (RAYD_WORKER_MODE), its own
// worker: the remote functions and actors below run in worker processes spawned from it.
// Embedded-cluster tests Init with a fresh temp root; CLI tests start `rayd start --head` (and
// a node) on a free port in a fresh temp root, and a CliCluster guard stops everything
// (`rayd stop --force`, then SIGKILL of every daemon and worker it saw). Tests synchronise by
// the API's own blocking Get/Wait or by polling with deadlines; remote functions may block,
// that is their behaviour under test.

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <rayd/api.h>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime_harness.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::FreeTcpPort;
using rayd::testing::ReadFile;
using rayd::testing::RunCommand;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;

constexpr int kRetriedMarker = 4242;  // what a blocking call returns when it ran again
using rayd_runtime_test::CliCluster;
using rayd_runtime_test::EmbeddedRayd;
using rayd_runtime_test::kCommandTimeout;
using rayd_runtime_test::kSettleTimeout;
using rayd_runtime_test::Runs;
using rayd_runtime_test::SelfExe;
using rayd_runtime_test::ThrownMessage;

// ---- Remote functions -------------------------------------------------------------------------

struct Point {
  double x = 0;
  double y = 0;
  std::string label;
  MSGPACK_DEFINE(x, y, label);
  friend bool operator==(const Point&, const Point&) = default;
};

int Plus(int a, int b) { return a + b; }

Point Mirror(Point p) { return Point{-p.x, -p.y, p.label + "'"}; }

// Takes the ref itself and fetches the value from its owner (the driver that Put it).
int SumOfRef(rayd::ObjectRef<std::vector<int>> ref) {
  std::shared_ptr<std::vector<int>> values = rayd::Get(ref);
  return std::accumulate(values->begin(), values->end(), 0);
}

int Fail(int x) {
  if (x > 0) throw std::out_of_range("x must not be positive, got " + std::to_string(x));
  return x;
}

// Blocks until `release_path` exists (at most 30 s), then returns its argument.
int BlockUntilFile(std::string release_path, int value) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!std::filesystem::exists(release_path) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  return value;
}

std::string WorkerNodeId() { return rayd::GetNodeId(); }

// Reads a key of the cluster's key-value store from a worker.
std::string KvRead(std::string ns, std::string key) {
  return rayd::KvGet(ns, key).value_or("<missing>");
}

// Runs in a worker: returns kRetriedMarker at once if `path` exists (an earlier attempt wrote
// it); otherwise writes this process's pid to `path` (atomically) and blocks, for the test to
// SIGKILL it.
int PidThenBlock(std::string path) {
  if (std::filesystem::exists(path)) return kRetriedMarker;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << getpid() << "\n";
  }
  std::filesystem::rename(tmp, path);
  std::this_thread::sleep_for(60s);
  return -1;
}

// Never registered: calling it must fail at Remote().
int NotRegistered(int x) { return x; }

RAYD_REMOTE(Plus, Mirror, SumOfRef, Fail, BlockUntilFile, WorkerNodeId, KvRead, PidThenBlock);

// ---- Actors -----------------------------------------------------------------------------------

class Counter {
 public:
  explicit Counter(int start) : n_(start) {}
  static Counter* FactoryCreate(int start) { return new Counter(start); }
  int Add(int x) { return n_ += x; }
  int Get() { return n_; }

 private:
  int n_;
};

// Appends what it is given: shows the order calls ran in.
class Log {
 public:
  static Log* Create() { return new Log(); }
  void Append(int i) { values_.push_back(i); }
  std::vector<int> Values() { return values_; }

 private:
  std::vector<int> values_;
};

// Meet(n) waits (10 s at most) until n calls have entered it; true if they did.
class Gate {
 public:
  static Gate* Create() { return new Gate(); }
  bool Meet(int n) {
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, 10s, [&] { return arrived_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
};

class Faulty {
 public:
  static Faulty* Create(std::string why) { throw std::runtime_error(why); }
  int Ping() { return 1; }
};

// State that a restart resets: Incr counts calls since the constructor ran.
class Phoenix {
 public:
  static Phoenix* Create() { return new Phoenix(); }
  int Incr() { return ++calls_; }
  int Pid() { return static_cast<int>(getpid()); }
  int Block(std::string path) { return PidThenBlock(std::move(path)); }

 private:
  int calls_ = 0;
};

// Uses the rayd API in its constructor, the first thing a fresh worker runs.
class NodeAware {
 public:
  explicit NodeAware(std::string node) : node_(std::move(node)) {}
  static NodeAware* Create() { return new NodeAware(rayd::GetNodeId()); }
  std::string Node() { return node_; }

 private:
  std::string node_;
};

// Where an actor landed and which devices its worker sees.
struct GpuView {
  std::string node;
  std::string visible;  // CUDA_VISIBLE_DEVICES
  std::vector<int> ids;  // rayd::GetGpuIds()
  MSGPACK_DEFINE(node, visible, ids);
};
class GpuUser {
 public:
  static GpuUser* Create() { return new GpuUser(); }
  GpuView View() {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return GpuView{rayd::GetNodeId(), visible ? visible : "", rayd::GetGpuIds()};
  }
};
RAYD_REMOTE(GpuUser::Create, &GpuUser::View);

RAYD_REMOTE(Counter::FactoryCreate, &Counter::Add, &Counter::Get);
RAYD_REMOTE(NodeAware::Create, &NodeAware::Node);
RAYD_REMOTE(Log::Create, &Log::Append, &Log::Values);
RAYD_REMOTE(Gate::Create, &Gate::Meet);
RAYD_REMOTE(Faulty::Create, &Faulty::Ping);
RAYD_REMOTE(Phoenix::Create, &Phoenix::Incr, &Phoenix::Pid, &Phoenix::Block);

// ---- Helpers ----------------------------------------------------------------------------------

using rayd::testing::ProcessGone;

// SIGKILLs the worker (a process of this very binary) whose pid is in `pid_file`, once the
// file appears; returns the pid.
pid_t KillWorkerFromPidFile(const std::string& pid_file) {
  REQUIRE(WaitFor([&] { return !ReadFile(pid_file).empty(); }, kSettleTimeout));
  const pid_t pid = static_cast<pid_t>(std::atol(ReadFile(pid_file).c_str()));
  INFO("worker pid " << pid);
  REQUIRE(Runs(pid, SelfExe()));
  REQUIRE(::kill(pid, SIGKILL) == 0);
  return pid;
}

// Gets the result of a task that uses the rayd API inside the worker (a fresh worker must have
// its runtime installed before its first task runs).
template <typename T, typename Submit>
T GetPastStartupRace(Submit submit, int timeout_ms) {
  return *rayd::Get(submit(), timeout_ms);
}

// The job id of this process's driver, from `rayd list jobs` (driver_pid and RUNNING).
std::string OwnJobId(CliCluster& cluster) {
  json jobs = cluster.Json({"list", "jobs"});
  INFO(jobs.dump(2));
  for (const auto& j : jobs) {
    if (j.value("driver_pid", 0) == getpid() && j.value("status", "") == "RUNNING") {
      return j.at("job_id").get<std::string>();
    }
  }
  FAIL("this driver's job is not listed as RUNNING");
  return "";
}

}  // namespace

// ---- Child drivers (RUNTIME_TEST_DRIVER_MODE) -------------------------------------------------

namespace {

// "keeper": a driver of the cluster at RAYD_ADDRESS (temp root RAYD_TEMP_DIR) in namespace
// RUNTIME_TEST_NAMESPACE: creates the detached actor "keeper" (holding 42) and the non-detached
// "transient", prints "ready", then ends without Shutdown: std::_Exit(0) when
// RUNTIME_TEST_DRIVER_EXIT=exit, else it blocks until the test SIGKILLs it.
int RunKeeperDriver(int argc, char** argv) {
  rayd::RaydConfig config;
  const char* ns = std::getenv("RUNTIME_TEST_NAMESPACE");
  config.ray_namespace = ns ? ns : "";
  rayd::Init(config, argc, argv);
  auto keeper = rayd::Actor(Counter::FactoryCreate).SetName("keeper").SetDetached().Remote(40);
  auto transient = rayd::Actor(Counter::FactoryCreate).SetName("transient").Remote(1);
  const int kept = *rayd::Get(keeper.Task(&Counter::Add).Remote(2));
  const int passing = *rayd::Get(transient.Task(&Counter::Get).Remote());
  std::cout << "keeper " << kept << " transient " << passing << "\nready" << std::endl;
  const char* how = std::getenv("RUNTIME_TEST_DRIVER_EXIT");
  if (how != nullptr && std::string(how) == "exit") std::_Exit(0);
  while (true) ::pause();  // until SIGKILL
}

// How Get(ref) ends within `timeout_ms`: "value N", or the exception's class.
std::string Outcome(const rayd::ObjectRef<int>& ref, int timeout_ms) {
  try {
    return "value " + std::to_string(*rayd::Get(ref, timeout_ms));
  } catch (const rayd::ActorDiedError&) {
    return "ActorDiedError";
  } catch (const rayd::TimeoutError&) {
    return "TimeoutError";
  } catch (const std::exception& e) {
    return std::string("other error: ") + e.what();
  }
}

// Scenarios that hang or crash on known bugs run in a child, so that the test process survives
// them. Each runs on an embedded cluster (temp root RAYD_TEMP_DIR), prints "what: outcome"
// lines, then Shuts down and prints "shut down cleanly".
//   "kill-then-call": a call to a killed actor once its worker is gone; a call to another one
//                     right after Kill.
//   "idle-restart":   a call to a restartable actor whose worker was SIGKILLed while idle.
int RunScenario(const std::string& scenario, int argc, char** argv) {
  if (scenario != "kill-then-call" && scenario != "idle-restart") {
    std::cerr << "unknown RUNTIME_TEST_DRIVER_MODE '" << scenario << "'" << std::endl;
    return 2;
  }
  ::unsetenv("RAYD_ADDRESS");  // embedded, whatever the environment says
  rayd::RaydConfig config;
  config.num_cpus = 2;
  rayd::Init(config, argc, argv);
  auto actor = rayd::Actor(Phoenix::Create).SetMaxRestarts(scenario == "idle-restart" ? 1 : 0)
                   .Remote();
  std::cout << "first: " << Outcome(actor.Task(&Phoenix::Incr).Remote(), 30000) << std::endl;
  const pid_t pid = *rayd::Get(actor.Task(&Phoenix::Pid).Remote());
  if (scenario == "kill-then-call") {
    actor.Kill();
  } else if (Runs(pid, SelfExe())) {
    ::kill(pid, SIGKILL);
  }
  const bool gone = WaitFor([&] { return ProcessGone(pid); }, kSettleTimeout);
  std::cout << "worker gone: " << (gone ? "yes" : "no") << std::endl;
  std::string after = Outcome(actor.Task(&Phoenix::Incr).Remote(),
                              scenario == "idle-restart" ? 30000 : 3000);
  if (scenario == "idle-restart" && after == "ActorDiedError") {
    // The call raced the death notice (the driver had not read the connection's EOF yet): it
    // was sent to the dead worker, and a call in flight when a worker dies fails without
    // max_task_retries. The next call must reach the restarted actor.
    after = Outcome(actor.Task(&Phoenix::Incr).Remote(), 30000);
  }
  std::cout << "after the worker is gone: " << after << std::endl;
  if (scenario == "kill-then-call") {
    auto other = rayd::Actor(Phoenix::Create).Remote();
    std::cout << "other first: " << Outcome(other.Task(&Phoenix::Incr).Remote(), 30000)
              << std::endl;
    other.Kill();
    auto right_after = other.Task(&Phoenix::Incr).Remote();
    std::cout << "right after Kill: " << Outcome(right_after, 3000) << std::endl;
  }
  // A known bug can make Shutdown hang (see the tests): give it 15 s, then leave.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, 15s, [&] { return done; })) {
      std::cout << "shutdown hung" << std::endl;
      std::_Exit(5);
    }
  });
  rayd::Shutdown();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  std::cout << "shut down cleanly" << std::endl;
  return 0;
}

}  // namespace

int RunChildDriver(int argc, char** argv) {
  const std::string mode = std::getenv("RUNTIME_TEST_DRIVER_MODE");
  if (mode == "keeper") return RunKeeperDriver(argc, argv);
  return RunScenario(mode, argc, argv);
}

namespace {

// Runs scenario `name` in a child process; returns its output; *exit_code gets its exit code
// (128 + signal when a signal ended it; -1 if it did not end within 60 s).
std::string RunScenarioChild(const std::string& name, int* exit_code) {
  TempDir dir;
  ChildProcess child({SelfExe()},
                     {{"RUNTIME_TEST_DRIVER_MODE", name}, {"RAYD_TEMP_DIR", dir.path()}});
  *exit_code = child.WaitExit(60s) ? child.exit_code() : -1;
  return child.output();
}

}  // namespace

// ---- 1. Tasks and objects on an embedded cluster ----------------------------------------------

TEST_CASE("embedded: tasks with values and refs and Put/Get of vectors and structs",
          "[integration]") {
  EmbeddedRayd rt;
  REQUIRE(rayd::IsInitialized());

  rayd::ObjectRef<int> three = rayd::Task(Plus).Remote(1, 2);
  CHECK(*rayd::Get(three) == 3);

  // A ref as the argument of an int parameter: resolved to its value before the call.
  rayd::ObjectRef<int> pending = rayd::Task(BlockUntilFile).Remote(rt.Path("go"), 40);
  rayd::ObjectRef<int> chained = rayd::Task(Plus).Remote(pending, 2);
  std::ofstream(rt.Path("go")).put('1');
  CHECK(*rayd::Get(chained) == 42);

  // A ref as an ObjectRef parameter: the worker fetches the value from its owner (us).
  rayd::ObjectRef<std::vector<int>> numbers = rayd::Put(std::vector<int>{1, 2, 3, 4, 100});
  CHECK(GetPastStartupRace<int>([&] { return rayd::Task(SumOfRef).Remote(numbers); }, 60000) ==
        110);

  // Put/Get of a vector and of a MSGPACK_DEFINE struct, locally and through a task.
  std::vector<double> big(10000);
  std::iota(big.begin(), big.end(), 0.5);
  CHECK(*rayd::Get(rayd::Put(big)) == big);
  const Point p{1.5, -2.0, "p"};
  auto put_point = rayd::Put(p);
  CHECK(*rayd::Get(put_point) == p);
  CHECK(*rayd::Get(rayd::Task(Mirror).Remote(p)) == Point{-1.5, 2.0, "p'"});
  CHECK(*rayd::Get(rayd::Task(Mirror).Remote(put_point)) == Point{-1.5, 2.0, "p'"});

  // Many refs at once, in order.
  std::vector<rayd::ObjectRef<int>> refs;
  for (int i = 0; i < 20; ++i) refs.push_back(rayd::Task(Plus).Remote(i, i));
  std::vector<std::shared_ptr<int>> values = rayd::Get(refs);
  REQUIRE(values.size() == 20);
  for (int i = 0; i < 20; ++i) CHECK(*values[i] == 2 * i);
}

TEST_CASE("embedded: Wait honours num_objects and timeouts and Get times out",
          "[integration]") {
  EmbeddedRayd rt;
  rayd::ObjectRef<int> fast = rayd::Task(Plus).Remote(2, 2);
  rayd::ObjectRef<int> slow = rayd::Task(BlockUntilFile).Remote(rt.Path("release"), 7);

  // One of two: the fast one, while the slow one still blocks.
  rayd::WaitResult<int> one = rayd::Wait(std::vector{slow, fast}, 1, 20000);
  REQUIRE(one.ready.size() == 1);
  REQUIRE(one.unready.size() == 1);
  CHECK(one.ready[0] == fast);
  CHECK(one.unready[0] == slow);

  // The slow one is not ready within a short timeout, and Wait does wait for it.
  const auto start = std::chrono::steady_clock::now();
  rayd::WaitResult<int> none = rayd::Wait(std::vector{slow}, 1, 300);
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  CHECK(none.ready.empty());
  REQUIRE(none.unready.size() == 1);
  CHECK(none.unready[0] == slow);
  // Zero objects wanted: returns at once, nothing counted as ready that is not.
  rayd::WaitResult<int> zero = rayd::Wait(std::vector{slow}, 0, 10000);
  CHECK(zero.ready.empty());
  CHECK_THROWS_AS(rayd::Wait(std::vector{slow}, 2, 100), rayd::RaydError);

  CHECK_THROWS_AS(rayd::Get(slow, 200), rayd::TimeoutError);

  std::ofstream(rt.Path("release")).put('1');
  rayd::WaitResult<int> both = rayd::Wait(std::vector{slow, fast}, 2, 20000);
  CHECK(both.ready.size() == 2);
  CHECK(both.unready.empty());
  CHECK(*rayd::Get(slow, 1000) == 7);
  CHECK(*rayd::Get(fast) == 4);
}

TEST_CASE("embedded: remote exceptions and unregistered functions raise", "[integration]") {
  EmbeddedRayd rt;
  auto failed = rayd::Task(Fail).Remote(7);
  try {
    rayd::Get(failed);
    FAIL("Get of a failed task returned");
  } catch (const rayd::RemoteError& e) {
    CHECK(e.remote_type() == "std::out_of_range");
    CHECK_THAT(std::string(e.what()), Contains("x must not be positive, got 7"));
  }
  // The function runs fine with another argument: the failure was the call's, not the worker's.
  CHECK(*rayd::Get(rayd::Task(Fail).Remote(-3)) == -3);

  CHECK_THROWS_AS(rayd::Task(NotRegistered).Remote(1), rayd::RaydError);
  CHECK(*rayd::Get(rayd::Task(Plus).Remote(1, 1)) == 2);
}

TEST_CASE("embedded: a second Init does nothing, Shutdown then Init works again",
          "[integration]") {
  {
    EmbeddedRayd rt;
    CHECK(*rayd::Get(rayd::Task(Plus).Remote(20, 1)) == 21);
    TempDir other;
    rayd::RaydConfig again;
    again.temp_dir = other.path();
    again.num_cpus = 1;
    rayd::Init(again);  // Ray's behaviour: ignored while initialised
    CHECK(rayd::IsInitialized());
    CHECK(rayd::ClusterResources()["CPU"] == 2);  // still the first cluster
    CHECK(*rayd::Get(rayd::Task(Plus).Remote(20, 2)) == 22);  // still usable
  }
  CHECK_FALSE(rayd::IsInitialized());
  CHECK_THROWS_AS(rayd::Task(Plus).Remote(1, 1), rayd::RaydError);
  rayd::Shutdown();  // not initialised: does nothing
  {
    EmbeddedRayd rt;
    CHECK(rayd::IsInitialized());
    CHECK(*rayd::Get(rayd::Task(Plus).Remote(20, 3)) == 23);
    auto counter = rayd::Actor(Counter::FactoryCreate).Remote(5);
    CHECK(*rayd::Get(counter.Task(&Counter::Add).Remote(1)) == 6);
  }
  CHECK_FALSE(rayd::IsInitialized());
}

// A driver learns the id of the node it leases from (here the embedded node).
TEST_CASE("embedded: the driver's GetNodeId is the id of its node", "[integration]") {
  EmbeddedRayd rt;
  const std::string worker_node =
      GetPastStartupRace<std::string>([] { return rayd::Task(WorkerNodeId).Remote(); }, 60000);
  CHECK(worker_node.size() == 32);
  CHECK(rayd::GetNodeId() == worker_node);
}

// The key-value store is the cluster's: what the driver puts, a worker reads.
TEST_CASE("embedded: KvPut KvGet and KvDel reach the head's key-value store", "[integration]") {
  EmbeddedRayd rt;
  CHECK(rayd::KvPut("ns", "a/1", "one"));
  CHECK_FALSE(rayd::KvPut("ns", "a/1", "uno", /*overwrite=*/false));
  CHECK(*rayd::KvGet("ns", "a/1") == "one");
  CHECK_FALSE(rayd::KvPut("ns", "a/1", std::string("u\0no", 4)));  // binary values too
  CHECK(*rayd::KvGet("ns", "a/1") == std::string("u\0no", 4));
  CHECK(rayd::KvPut("ns", "a/2", "two"));
  CHECK_FALSE(rayd::KvGet("other", "a/1").has_value());  // namespaces are apart
  CHECK(GetPastStartupRace<std::string>([] { return rayd::Task(KvRead).Remote("ns", "a/2"); },
                                        60000) == "two");
  CHECK(rayd::KvDel("ns", "a/", /*by_prefix=*/true) == 2);
  CHECK_FALSE(rayd::KvGet("ns", "a/2").has_value());
}

// ---- 2. Actors --------------------------------------------------------------------------------

TEST_CASE("actors: calls from one caller run in submission order", "[integration]") {
  EmbeddedRayd rt;
  auto log = rayd::Actor(Log::Create).Remote();
  std::vector<rayd::ObjectRef<void>> appends;
  for (int i = 0; i < 500; ++i) appends.push_back(log.Task(&Log::Append).Remote(i));
  std::vector<int> values = *rayd::Get(log.Task(&Log::Values).Remote());
  std::vector<int> expected(500);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(values == expected);
  rayd::Get(appends);  // none of them failed
}

TEST_CASE("actors: max concurrency 4 runs four calls at once", "[integration]") {
  EmbeddedRayd rt;
  auto gate = rayd::Actor(Gate::Create).SetMaxConcurrency(4).Remote();
  std::vector<rayd::ObjectRef<bool>> meets;
  for (int i = 0; i < 4; ++i) meets.push_back(gate.Task(&Gate::Meet).Remote(4));
  for (const auto& met : meets) CHECK(*rayd::Get(met, 30000));
}

TEST_CASE("actors: named actors and Kill", "[integration]") {
  EmbeddedRayd rt;
  auto counter = rayd::Actor(Counter::FactoryCreate).SetName("counter").Remote(10);
  CHECK(*rayd::Get(counter.Task(&Counter::Add).Remote(5)) == 15);

  std::optional<rayd::ActorHandle<Counter>> found = rayd::GetActor<Counter>("counter");
  REQUIRE(found.has_value());
  CHECK(found->ID() == counter.ID());
  CHECK(*rayd::Get(found->Task(&Counter::Add).Remote(1)) == 16);
  CHECK(*rayd::Get(counter.Task(&Counter::Get).Remote()) == 16);  // the same state
  CHECK_FALSE(rayd::GetActor<Counter>("no-such-actor").has_value());
  CHECK_THROWS_AS(rayd::Actor(Counter::FactoryCreate).SetName("counter").Remote(0),
                  rayd::RaydError);  // the name is taken

  // Calls after Kill: see "actors: calls to a killed actor fail" below.
  counter.Kill();
  CHECK_FALSE(rayd::GetActor<Counter>("counter").has_value());
  // The name is free again.
  auto second = rayd::Actor(Counter::FactoryCreate).SetName("counter").Remote(1);
  CHECK(*rayd::Get(second.Task(&Counter::Get).Remote()) == 1);
}

TEST_CASE("actors: a constructor that throws leaves the actor dead with its error",
          "[integration]") {
  EmbeddedRayd rt;
  auto faulty = rayd::Actor(Faulty::Create).Remote(std::string("the constructor exploded"));
  std::string message = ThrownMessage<rayd::ActorDiedError>(
      [&] { rayd::Get(faulty.Task(&Faulty::Ping).Remote(), 30000); });
  CHECK_THAT(message, Contains("the constructor exploded"));
  CHECK_THAT(message, Contains("std::runtime_error"));
}

// A dead actor worker is noticed even with no call in flight (the connection's state), and
// Kill() marks the actor dead for its caller at once; Shutdown afterwards is clean. Runs in a
// child process so that a hang or crash is a failed assertion, not a stuck suite.
TEST_CASE("actors: calls to a killed actor fail with ActorDiedError",
          "[integration]") {
  int exit_code = 0;
  const std::string out = RunScenarioChild("kill-then-call", &exit_code);
  INFO("scenario output:\n" << out);
  REQUIRE_THAT(out, Contains("first: value 1\n"));
  CHECK_THAT(out, Contains("worker gone: yes\n"));
  CHECK_THAT(out, Contains("after the worker is gone: ActorDiedError\n"));
  CHECK_THAT(out, Contains("other first: value 1\n"));
  CHECK_THAT(out, Contains("right after Kill: ActorDiedError\n"));
  CHECK_THAT(out, Contains("shut down cleanly\n"));
  CHECK(exit_code == 0);
}

// An actor SIGKILLed between calls: the next call waits for the restart instead of failing.
TEST_CASE("failures: an actor SIGKILLed while idle restarts for the next call",
          "[integration]") {
  int exit_code = 0;
  const std::string out = RunScenarioChild("idle-restart", &exit_code);
  INFO("scenario output:\n" << out);
  REQUIRE_THAT(out, Contains("first: value 1\n"));
  CHECK_THAT(out, Contains("worker gone: yes\n"));
  CHECK_THAT(out, Contains("after the worker is gone: value 1\n"));  // fresh state
  CHECK_THAT(out, Contains("shut down cleanly\n"));
  CHECK(exit_code == 0);
}

// ---- 3. Worker deaths (SIGKILL) ---------------------------------------------------------------

TEST_CASE("failures: a task whose worker is SIGKILLed is retried", "[integration]") {
  EmbeddedRayd rt;
  auto ref = rayd::Task(PidThenBlock).SetMaxRetries(1).Remote(rt.Path("pid"));
  KillWorkerFromPidFile(rt.Path("pid"));
  CHECK(*rayd::Get(ref, 60000) == kRetriedMarker);  // the retry ran, and saw the first's file
}

TEST_CASE("failures: a task without retries fails when its worker is SIGKILLed",
          "[integration]") {
  EmbeddedRayd rt;
  auto ref = rayd::Task(PidThenBlock).SetMaxRetries(0).Remote(rt.Path("pid"));
  KillWorkerFromPidFile(rt.Path("pid"));
  std::string message =
      ThrownMessage<rayd::RaydError>([&] { rayd::Get(ref, 60000); });
  CHECK_THAT(message, Contains("died"));
  CHECK(*rayd::Get(rayd::Task(Plus).Remote(1, 2)) == 3);  // new tasks get new workers
}

TEST_CASE("failures: an actor restarts after SIGKILL until its restarts are spent",
          "[integration]") {
  EmbeddedRayd rt;
  auto actor = rayd::Actor(Phoenix::Create).SetMaxRestarts(1).Remote();
  CHECK(*rayd::Get(actor.Task(&Phoenix::Incr).Remote()) == 1);
  CHECK(*rayd::Get(actor.Task(&Phoenix::Incr).Remote()) == 2);

  // The call in flight when the worker dies fails (no task retries); the actor comes back
  // with fresh state in a new process.
  auto blocked = actor.Task(&Phoenix::Block).Remote(rt.Path("pid1"));
  const pid_t first = KillWorkerFromPidFile(rt.Path("pid1"));
  CHECK_THROWS_AS(rayd::Get(blocked, 60000), rayd::ActorDiedError);
  CHECK(*rayd::Get(actor.Task(&Phoenix::Incr).Remote(), 60000) == 1);
  CHECK(*rayd::Get(actor.Task(&Phoenix::Pid).Remote()) != first);

  // The one restart is spent: another death is final.
  auto blocked_again = actor.Task(&Phoenix::Block).Remote(rt.Path("pid2"));
  KillWorkerFromPidFile(rt.Path("pid2"));
  CHECK_THROWS_AS(rayd::Get(blocked_again, 60000), rayd::ActorDiedError);
  CHECK_THROWS_AS(rayd::Get(actor.Task(&Phoenix::Incr).Remote(), 60000), rayd::ActorDiedError);
}

TEST_CASE("failures: an actor call interrupted by a restart is retried", "[integration]") {
  EmbeddedRayd rt;
  auto actor = rayd::Actor(Phoenix::Create).SetMaxRestarts(1).SetMaxTaskRetries(1).Remote();
  CHECK(*rayd::Get(actor.Task(&Phoenix::Incr).Remote()) == 1);
  auto blocked = actor.Task(&Phoenix::Block).Remote(rt.Path("pid"));
  const pid_t killed = KillWorkerFromPidFile(rt.Path("pid"));
  CHECK(*rayd::Get(blocked, 60000) == kRetriedMarker);
  CHECK(*rayd::Get(actor.Task(&Phoenix::Incr).Remote()) == 1);  // the constructor ran again
  CHECK(*rayd::Get(actor.Task(&Phoenix::Pid).Remote()) != killed);
}

// Every actor starts a fresh worker whose first task is the constructor, which uses the API.
TEST_CASE("failures: a fresh worker has the rayd API from its first task",
          "[integration]") {
  EmbeddedRayd rt;
  std::vector<rayd::ActorHandle<NodeAware>> actors;
  for (int i = 0; i < 12; ++i) actors.push_back(rayd::Actor(NodeAware::Create).Remote());
  for (const auto& actor : actors) {
    CHECK(rayd::Get(actor.Task(&NodeAware::Node).Remote(), 60000)->size() == 32);
  }
}

// ---- 4. A cluster started with the CLI --------------------------------------------------------

TEST_CASE("cli cluster: custom resources place tasks and Shutdown cleans up the job",
          "[integration]") {
  CliCluster cluster;
  const std::string head = cluster.StartHead(2);
  const std::string special = cluster.Start(
      {"--address", cluster.address(), "--num-cpus", "1", "--resources", R"({"special":1})"});

  // `rayd status` names the node that has "special": the one just started.
  json status = cluster.Json({"status"});
  INFO(status.dump(2));
  std::string with_special;
  for (const auto& n : status.at("nodes")) {
    if (n.at("total").contains("special")) with_special = n.at("node_id").get<std::string>();
  }
  REQUIRE(with_special == special);
  REQUIRE(special != head);

  cluster.InitDriver();
  CHECK(GetPastStartupRace<std::string>(
            [] { return rayd::Task(WorkerNodeId).SetResource("special", 1).Remote(); }, 60000) ==
        special);
  CHECK(*rayd::Get(rayd::Task(Plus).Remote(40, 2), 60000) == 42);
  auto numbers = rayd::Put(std::vector<int>{5, 6});
  // Fetched from the driver by a worker on the other node.
  CHECK(GetPastStartupRace<int>(
            [&] { return rayd::Task(SumOfRef).SetResource("special", 1).Remote(numbers); },
            60000) == 11);
  auto counter = rayd::Actor(Counter::FactoryCreate).Remote(1);
  CHECK(*rayd::Get(counter.Task(&Counter::Add).Remote(2), 60000) == 3);
  auto pinned = rayd::Actor(Counter::FactoryCreate).SetResource("special", 0.5).Remote(7);
  CHECK(*rayd::Get(pinned.Task(&Counter::Get).Remote(), 60000) == 7);

  const std::string job = OwnJobId(cluster);
  json actors = cluster.Json({"list", "actors"});
  int ours = 0;
  for (const auto& a : actors) {
    if (a.at("job_id") != job) continue;
    ++ours;
    CHECK(a.at("state") == "ALIVE");
    if (a.at("actor_id") == pinned.ID()) CHECK(a.at("node_id") == special);
  }
  CHECK(ours == 2);
  std::set<pid_t> worker_pids;
  for (const auto& w : cluster.Json({"list", "workers"})) {
    if (w.at("job_id") == job && w.at("state") != "DEAD") worker_pids.insert(w.at("pid").get<pid_t>());
  }
  CHECK(worker_pids.size() >= 2);  // at least the actors' workers

  rayd::Shutdown();
  // The job's actors are DEAD and all its workers gone.
  json last_actors, last_workers;
  const bool cleaned = WaitFor(
      [&] {
        auto a = cluster.TryJson({"list", "actors"});
        auto w = cluster.TryJson({"list", "workers"});
        if (!a || !w) return false;
        last_actors = *a;
        last_workers = *w;
        for (const auto& actor : *a) {
          if (actor.at("job_id") == job && actor.at("state") != "DEAD") return false;
        }
        for (const auto& worker : *w) {
          if (worker.at("job_id") == job && worker.at("state") != "DEAD") return false;
        }
        return std::all_of(worker_pids.begin(), worker_pids.end(), ProcessGone);
      },
      kSettleTimeout);
  INFO("actors: " << last_actors.dump(2) << "\nworkers: " << last_workers.dump(2));
  CHECK(cleaned);
}

// ---- 5. A driver that exits without Shutdown --------------------------------------------------

namespace {

// Runs a child driver that ends by `how` ("exit": std::_Exit(0); "kill": SIGKILL from us),
// then checks from a new driver in the same namespace that its non-detached actor dies and its
// detached one lives on.
void CheckDriverExitCleanup(const std::string& how) {
  CliCluster cluster;
  cluster.StartHead(2);
  const std::string ns = "runtime-test-" + how + "-" + std::to_string(cluster.port());
  ChildProcess child({SelfExe()}, {{"RUNTIME_TEST_DRIVER_MODE", "keeper"},
                                   {"RUNTIME_TEST_DRIVER_EXIT", how},
                                   {"RUNTIME_TEST_NAMESPACE", ns},
                                   {"RAYD_ADDRESS", cluster.address()},
                                   {"RAYD_TEMP_DIR", cluster.root()}});
  const bool ready = WaitFor(
      [&] { return child.output().find("ready") != std::string::npos || !child.running(); }, 60s);
  INFO("child driver output:\n" << child.output());
  REQUIRE(ready);
  REQUIRE(child.output().find("keeper 42 transient 1\nready") != std::string::npos);
  if (how == "kill") child.Signal(SIGKILL);
  REQUIRE(child.WaitExit(kSettleTimeout));
  if (how == "exit") CHECK(child.exit_code() == 0);

  cluster.InitDriver(ns);
  CHECK(WaitFor([] { return !rayd::GetActor<Counter>("transient").has_value(); },
                kSettleTimeout));
  std::optional<rayd::ActorHandle<Counter>> keeper = rayd::GetActor<Counter>("keeper");
  REQUIRE(keeper.has_value());
  CHECK(*rayd::Get(keeper->Task(&Counter::Add).Remote(1), 30000) == 43);
  json actors = cluster.Json({"list", "actors"});
  INFO(actors.dump(2));
  for (const auto& a : actors) {
    if (a.at("name") == "transient") CHECK(a.at("state") == "DEAD");
    if (a.at("name") == "keeper") CHECK(a.at("state") == "ALIVE");
  }
  keeper->Kill();
}

}  // namespace

TEST_CASE("driver exit: std::_Exit without Shutdown ends the non-detached actors",
          "[integration]") {
  CheckDriverExitCleanup("exit");
}

TEST_CASE("driver exit: a SIGKILLed driver's non-detached actors end", "[integration]") {
  CheckDriverExitCleanup("kill");
}

// ---- 6. Demands no node can satisfy -----------------------------------------------------------

TEST_CASE("infeasible: a task no node can run is reported and runs once a node that fits joins",
          "[integration]") {
  CliCluster cluster;
  cluster.StartHead(1);
  cluster.InitDriver();
  auto ref = rayd::Task(WorkerNodeId).SetResource("accelerator", 1).Remote();
  // `rayd status` lists it as an infeasible demand while it waits.
  json last;
  const bool reported = WaitFor(
      [&] {
        auto status = cluster.TryJson({"status"});
        if (!status) return false;
        last = *status;
        for (const auto& n : status->at("nodes")) {
          for (const auto& d : n.at("infeasible")) {
            if (d.at("resources").contains("accelerator")) return true;
          }
        }
        return false;
      },
      kSettleTimeout);
  INFO(last.dump(2));
  REQUIRE(reported);
  std::string table;
  cluster.Rayd({"status"}, &table);
  CHECK_THAT(table, Contains("accelerator") && Contains("infeasible"));

  const std::string fits = cluster.Start(
      {"--address", cluster.address(), "--num-cpus", "1", "--resources", R"({"accelerator":1})"});
  CHECK(*rayd::Get(ref, 60000) == fits);
}

TEST_CASE("infeasible: a task no node can run fails with InfeasibleError after the timeout",
          "[integration]") {
  CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "1",
                 "--infeasible-timeout-ms", "1500"});
  cluster.InitDriver();
  auto ref = rayd::Task(Plus).SetResource("CPU", 64).Remote(1, 2);
  const std::string message = ThrownMessage<rayd::InfeasibleError>([&] { rayd::Get(ref, 30000); });
  CHECK_THAT(message, Contains("CPU: 64") && Contains("largest node"));
}

TEST_CASE("infeasible: an actor no node can hold waits for one to join", "[integration]") {
  CliCluster cluster;
  cluster.StartHead(1);
  cluster.InitDriver();
  auto counter = rayd::Actor(Counter::FactoryCreate).SetResource("accelerator", 1).Remote(5);
  auto added = counter.Task(&Counter::Add).Remote(1);
  const std::string fits = cluster.Start(
      {"--address", cluster.address(), "--num-cpus", "1", "--resources", R"({"accelerator":1})"});
  CHECK(*rayd::Get(added, 60000) == 6);
  bool placed = false;
  for (const auto& a : cluster.Json({"list", "actors"})) {
    if (a.at("actor_id") == counter.ID()) placed = a.at("node_id") == fits;
  }
  CHECK(placed);
}

// ---- 7. GPUs ----------------------------------------------------------------------------------

TEST_CASE("gpus: actors reserving GPUs are spread over three nodes and see only their devices",
          "[integration]") {
  CliCluster cluster;
  std::set<std::string> nodes;
  nodes.insert(cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus",
                              "2", "--num-gpus", "2"}));
  for (int i = 0; i < 2; ++i) {
    nodes.insert(cluster.Start(
        {"--address", cluster.address(), "--num-cpus", "2", "--num-gpus", "2"}));
  }
  cluster.InitDriver();
  // Six whole GPUs on three 2-GPU nodes: every device is taken exactly once.
  std::vector<rayd::ActorHandle<GpuUser>> actors;
  for (int i = 0; i < 6; ++i) {
    actors.push_back(rayd::Actor(GpuUser::Create).SetResources({{"GPU", 1}, {"CPU", 0}}).Remote());
  }
  std::map<std::string, std::multiset<std::string>> devices_by_node;
  for (auto& a : actors) {
    GpuView v = *rayd::Get(a.Task(&GpuUser::View).Remote(), 60000);
    INFO("node " << v.node << " CUDA_VISIBLE_DEVICES=" << v.visible);
    REQUIRE(v.ids.size() == 1);
    CHECK(v.visible == std::to_string(v.ids[0]));
    CHECK(nodes.count(v.node) == 1);
    devices_by_node[v.node].insert(v.visible);
  }
  CHECK(devices_by_node.size() == 3);
  for (const auto& [node, devices] : devices_by_node) {
    CHECK(devices == std::multiset<std::string>{"0", "1"});
  }
  // A seventh has to wait: no GPU is free anywhere.
  auto waiting = rayd::Actor(GpuUser::Create).SetResources({{"GPU", 1}, {"CPU", 0}}).Remote();
  auto view = waiting.Task(&GpuUser::View).Remote();
  CHECK(rayd::Wait(std::vector{view}, 1, 1000).ready.empty());
  // Once one goes, it gets that device.
  actors.front().Kill();
  GpuView v = *rayd::Get(view, 60000);
  CHECK(v.ids.size() == 1);
}

TEST_CASE("gpus: fractional GPU actors share a device without over-committing it",
          "[integration]") {
  CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "4",
                 "--num-gpus", "1"});
  cluster.InitDriver();
  std::vector<rayd::ActorHandle<GpuUser>> quarter;
  for (int i = 0; i < 4; ++i) {
    quarter.push_back(
        rayd::Actor(GpuUser::Create).SetResources({{"GPU", 0.25}, {"CPU", 0}}).Remote());
  }
  for (auto& a : quarter) {
    GpuView v = *rayd::Get(a.Task(&GpuUser::View).Remote(), 60000);
    CHECK(v.visible == "0");
    CHECK(v.ids == std::vector<int>{0});
  }
  // The device is fully committed: one more quarter waits.
  auto extra = rayd::Actor(GpuUser::Create).SetResources({{"GPU", 0.25}, {"CPU", 0}}).Remote();
  CHECK(rayd::Wait(std::vector{extra.Task(&GpuUser::View).Remote()}, 1, 1000).ready.empty());
}
