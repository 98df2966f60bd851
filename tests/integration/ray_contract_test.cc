// Ray's C++ contract, as a Ray user relies on it after renaming ray:: to rayd::: tasks and
// actors that submit tasks and create actors (on every node), independent tasks that run in
// parallel, and the API items of Ray's C++ surface (ObjectRef::Get, RAYD_FUNC, namespaces,
// RuntimeEnv, actor restarts and ExitActor, local mode, application metrics, infeasible
// requests, head_args, default actor lifetime).
//
// The functions below run in worker processes re-run from this binary (runtime_test's main).
// Multi-node tests start a real head and a second node with `rayd start`.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <rayd/api.h>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "runtime_harness.h"
#include "test_util.h"

namespace contract {

using namespace std::chrono_literals;

// ---- Nesting ----------------------------------------------------------------------------------

// depth + 1, computed by a chain of `depth` nested tasks.
int Nest(int depth) {
  if (depth == 0) return 1;
  return *rayd::Task(Nest).Remote(depth - 1).Get() + 1;
}

// Hands the ref down `depth` levels of tasks; the deepest one reads it.
int PassDown(rayd::ObjectRef<int> ref, int depth) {
  if (depth == 0) return *ref.Get();
  return *rayd::Task(PassDown).Remote(ref, depth - 1).Get();
}

int Square(int x) { return x * x; }

// Fans out from a worker: the sum of the squares of 0..n-1, each a task of its own.
int SumOfSquares(int n) {
  std::vector<rayd::ObjectRef<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(rayd::Task(Square).Remote(i));
  int sum = 0;
  for (const auto& v : rayd::Get(refs)) sum += *v;
  return sum;
}

class Child {
 public:
  static Child* Create(int value) { return new Child(value); }
  explicit Child(int value) : value_(value) {}
  std::string Node() { return rayd::GetNodeId(); }
  int Value() { return value_; }

 private:
  int value_;
};

class Parent {
 public:
  static Parent* Create() { return new Parent(); }
  std::string Node() { return rayd::GetNodeId(); }
  // Creates a child actor on `node_id` and asks it where it runs and what it holds.
  std::string SpawnOn(std::string node_id) {
    auto child = rayd::Actor(Child::Create).SetNodeAffinity(node_id).Remote(7);
    return *child.Task(&Child::Node).Remote().Get() + ":" +
           std::to_string(*child.Task(&Child::Value).Remote().Get());
  }
  // A task submitted from an actor.
  int TaskFromActor(int n) { return *rayd::Task(SumOfSquares).Remote(n).Get(); }
};

// ---- Parallelism ------------------------------------------------------------------------------

struct Interval {
  int64_t start_us = 0;
  int64_t end_us = 0;
  int pid = 0;
  MSGPACK_DEFINE(start_us, end_us, pid);
};

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Interval SleepFor(int ms) {
  Interval interval;
  interval.start_us = NowUs();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  interval.end_us = NowUs();
  interval.pid = getpid();
  return interval;
}

// ---- API items --------------------------------------------------------------------------------

int Overloaded() { return 100; }
int Overloaded(int a) { return a; }
int Overloaded(int a, int b) { return a + b; }

bool SeesInitialized() { return rayd::IsInitialized(); }
std::string NamespaceInWorker() { return rayd::GetNamespace(); }

std::string Getenv(std::string name) {
  const char* value = std::getenv(name.c_str());
  return value ? value : "<unset>";
}

int OwnPid() { return getpid(); }

int NotRemote(int x) { return x; }  // never registered

void Throws() { throw std::logic_error("bad input"); }

// Records application metrics in a worker.
int RecordMetrics(int n) {
  rayd::Counter calls("contract_calls_total", "Calls of RecordMetrics.", "calls", {"kind"});
  rayd::Gauge level("contract_level", "Last n.", "items");
  rayd::Histogram sizes("contract_sizes", "Sizes seen.", "items", {1, 10, 100}, {"kind"});
  rayd::Sum total("contract_sum", "Sum of n.", "items");
  for (int i = 0; i < n; ++i) {
    calls.Inc(1, {{"kind", "worker"}});
    sizes.Observe(i * 7, {{"kind", "worker"}});
  }
  level.Set(n);
  total.Record(n);
  return n;
}

class Counter {
 public:
  static Counter* Create(int start) { return new Counter(start); }
  explicit Counter(int start) : n_(start) {}
  int Add(int x) { return n_ += x; }
  int Add(int x, int y) { return n_ += x + y; }
  int Get() const { return n_; }
  bool Restarted() { return rayd::WasCurrentActorRestarted(); }
  int Pid() { return getpid(); }
  int Quit() { rayd::ExitActor(); }
  std::string Env(std::string name) { return Getenv(name); }

 private:
  int n_;
};

// ---- Refs inside values and lists of refs (Ray's ObjectRefArgsTest, on a cluster) ------------

// Reads through a ref put inside a value: an ObjectRef<ObjectRef<int>>.
int ReadNested(rayd::ObjectRef<rayd::ObjectRef<int>> outer) {
  rayd::ObjectRef<int> inner = *outer.Get();
  return *inner.Get();
}

// `base` plus the values behind a list of refs.
int SumRefs(int base, std::vector<rayd::ObjectRef<int>> refs) {
  int sum = base;
  for (const auto& v : rayd::Get(refs)) sum += *v;
  return sum;
}

// A ref this worker creates and returns: its own handle goes when the task ends.
rayd::ObjectRef<int> MakeRef(int value) { return rayd::Put(value); }

class RefReader {
 public:
  static RefReader* Create() { return new RefReader(); }
  int ReadNested(rayd::ObjectRef<rayd::ObjectRef<int>> outer) { return contract::ReadNested(outer); }
  int SumRefs(int base, std::vector<rayd::ObjectRef<int>> refs) {
    return contract::SumRefs(base, refs);
  }
  int ReadRef(rayd::ObjectRef<int> ref) { return *ref.Get(); }
};

// An actor holding the refs it was created with.
class RefKeeper {
 public:
  static RefKeeper* Create(std::vector<rayd::ObjectRef<int>> refs) {
    return new RefKeeper(std::move(refs));
  }
  explicit RefKeeper(std::vector<rayd::ObjectRef<int>> refs) : refs_(std::move(refs)) {}
  int Sum() { return contract::SumRefs(0, refs_); }

 private:
  std::vector<rayd::ObjectRef<int>> refs_;
};

// A gate that tasks block on until someone opens it: Ray's BlockGet/GetValue pair, with an
// actor in place of their process-wide promise (a cluster runs tasks in separate processes).
class Gate {
 public:
  static Gate* Create() { return new Gate(); }
  bool Pass() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
    return true;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

bool BlockOnGate(rayd::ActorHandle<Gate> gate) { return *gate.Task(&Gate::Pass).Remote().Get(); }

// Finds `blocked` not ready, opens the gate, then blocks in Get of `blocked`'s result.
bool OpenThenGet(rayd::ActorHandle<Gate> gate, rayd::ObjectRef<bool> blocked) {
  if (!rayd::Wait(std::vector{blocked}, 1, 1000).ready.empty()) return false;
  gate.Task(&Gate::Open).Remote().Get();
  return *blocked.Get();
}

// Logs from a worker (RAYDLOG).
int LogFromWorker(std::string marker) {
  RAYDLOG(INFO) << "worker says " << marker;
  return 1;
}

}  // namespace contract

RAYD_REMOTE(contract::ReadNested, contract::SumRefs, contract::MakeRef, contract::BlockOnGate,
            contract::OpenThenGet, contract::LogFromWorker, contract::RefReader::Create,
            &contract::RefReader::ReadNested, &contract::RefReader::SumRefs,
            &contract::RefReader::ReadRef, contract::Gate::Create, &contract::Gate::Pass,
            &contract::Gate::Open, contract::RefKeeper::Create, &contract::RefKeeper::Sum);
RAYD_REMOTE(contract::Nest, contract::PassDown, contract::Square, contract::SumOfSquares,
            contract::Child::Create, &contract::Child::Node, &contract::Child::Value,
            contract::Parent::Create, &contract::Parent::Node, &contract::Parent::SpawnOn,
            &contract::Parent::TaskFromActor, contract::SleepFor, contract::SeesInitialized,
            contract::NamespaceInWorker, contract::Getenv, contract::OwnPid, contract::Throws,
            contract::RecordMetrics);
RAYD_REMOTE(RAYD_FUNC(contract::Overloaded), RAYD_FUNC(contract::Overloaded, int),
            RAYD_FUNC(contract::Overloaded, int, int));
RAYD_REMOTE(contract::Counter::Create, RAYD_FUNC(&contract::Counter::Add, int),
            RAYD_FUNC(&contract::Counter::Add, int, int), &contract::Counter::Get,
            &contract::Counter::Restarted, &contract::Counter::Pid, &contract::Counter::Quit,
            &contract::Counter::Env);

namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using rayd::testing::FreeTcpPort;
using rayd::testing::HttpGet;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;
using rayd_runtime_test::CliCluster;
using rayd_runtime_test::ThrownMessage;
using namespace contract;

constexpr int kGetTimeoutMs = 60000;

// A head (2 CPUs) and a second node (2 CPUs) started with `rayd start`, and this process as
// their driver.
struct TwoNodes {
  CliCluster cluster;
  std::string head;
  std::string second;
  explicit TwoNodes(const std::string& ray_namespace = "") {
    head = cluster.StartHead(2);
    second = cluster.Start({"--address", cluster.address(), "--num-cpus", "2"});
    cluster.InitDriver(ray_namespace);
  }
};

// An embedded cluster of 2 CPUs in its own temp root, after `tweak` has its say; shut down
// at the end of the scope.
class Embedded {
 public:
  explicit Embedded(const std::function<void(rayd::RaydConfig&)>& tweak = {}) {
    ::unsetenv("RAYD_ADDRESS");
    rayd::RaydConfig config;
    config.temp_dir = dir_.path();
    config.num_cpus = 2;
    if (tweak) tweak(config);
    rayd::Init(config);
  }
  ~Embedded() { rayd::Shutdown(); }
  Embedded(const Embedded&) = delete;
  Embedded& operator=(const Embedded&) = delete;

 private:
  TempDir dir_;
};

TEST_CASE("nested: tasks submit tasks three levels deep, refs are passed down", "[integration]") {
  TwoNodes nodes;
  CHECK(*rayd::Task(Nest).Remote(3).Get(kGetTimeoutMs) == 4);
  auto ref = rayd::Put(41);
  CHECK(*rayd::Task(PassDown).Remote(ref, 3).Get(kGetTimeoutMs) == 41);
  // Fan-out from a worker: more tasks than the two nodes have CPUs, every one of them nested.
  std::vector<rayd::ObjectRef<int>> sums;
  for (int i = 0; i < 6; ++i) sums.push_back(rayd::Task(SumOfSquares).Remote(5));
  for (const auto& s : rayd::Get(sums, kGetTimeoutMs)) CHECK(*s == 30);
}

TEST_CASE("nested: an actor creates an actor on the other node and submits tasks",
          "[integration]") {
  TwoNodes nodes;
  auto parent = rayd::Actor(Parent::Create).SetNodeAffinity(nodes.head).Remote();
  CHECK(*parent.Task(&Parent::Node).Remote().Get(kGetTimeoutMs) == nodes.head);
  CHECK(*parent.Task(&Parent::SpawnOn).Remote(nodes.second).Get(kGetTimeoutMs) ==
        nodes.second + ":7");
  CHECK(*parent.Task(&Parent::TaskFromActor).Remote(4).Get(kGetTimeoutMs) == 14);
}

// Four 1 s tasks on four CPUs after four 10 ms warm-up tasks, on a machine kept busy by two CPU
// burners, twice: leases granted while the node was briefly full must not leave a task queued
// behind a busy worker once CPUs are free again (before the fix, one round in three or four
// ran three at once and the fourth after the first).
TEST_CASE("parallel: four sleeping tasks on four CPUs overlap on a busy machine",
          "[integration]") {
  rayd::testing::CpuBurners burners(2);
  Embedded cluster([](rayd::RaydConfig& c) { c.num_cpus = 4; });
  for (int round = 0; round < 2; ++round) {
    std::vector<rayd::ObjectRef<Interval>> warm_up;
    for (int i = 0; i < 4; ++i) warm_up.push_back(rayd::Task(SleepFor).Remote(10));
    rayd::Get(warm_up, kGetTimeoutMs);
    std::vector<rayd::ObjectRef<Interval>> refs;
    for (int i = 0; i < 4; ++i) refs.push_back(rayd::Task(SleepFor).Remote(1000));
    std::vector<Interval> intervals;
    for (const auto& r : rayd::Get(refs, kGetTimeoutMs)) intervals.push_back(*r);
    const auto last_start =
        std::max_element(intervals.begin(), intervals.end(), [](auto& a, auto& b) {
          return a.start_us < b.start_us;
        })->start_us;
    const auto first_end =
        std::min_element(intervals.begin(), intervals.end(), [](auto& a, auto& b) {
          return a.end_us < b.end_us;
        })->end_us;
    INFO("round " << round << ": the last task started " << (last_start - first_end) / 1000
                  << " ms after the first one ended");
    CHECK(last_start < first_end);  // every interval overlaps every other
    std::set<int> pids;
    for (const auto& i : intervals) pids.insert(i.pid);
    CHECK(pids.size() == 4);
  }
}

TEST_CASE("api: ObjectRef::Get, a second Init, IsInitialized in workers, RAYD_FUNC",
          "[integration]") {
  rayd_runtime_test::EmbeddedRayd rt;
  rayd::RaydConfig again;
  again.num_cpus = 1;
  rayd::Init(again);  // does nothing: still the same cluster
  CHECK(rayd::IsInitialized());
  auto plus = rayd::Task(Square).Remote(9);
  CHECK(*plus.Get() == 81);
  CHECK(*plus.Get(kGetTimeoutMs) == 81);
  CHECK(*rayd::Task(SeesInitialized).Remote().Get(kGetTimeoutMs));

  CHECK(*rayd::Task(RAYD_FUNC(Overloaded)).Remote().Get(kGetTimeoutMs) == 100);
  CHECK(*rayd::Task(RAYD_FUNC(Overloaded, int)).Remote(5).Get(kGetTimeoutMs) == 5);
  CHECK(*rayd::Task(RAYD_FUNC(Overloaded, int, int)).Remote(5, 6).Get(kGetTimeoutMs) == 11);
  auto counter = rayd::Actor(Counter::Create).Remote(1);
  CHECK(*counter.Task(RAYD_FUNC(&Counter::Add, int)).Remote(2).Get(kGetTimeoutMs) == 3);
  CHECK(*counter.Task(RAYD_FUNC(&Counter::Add, int, int)).Remote(2, 3).Get(kGetTimeoutMs) == 8);
  CHECK(*counter.Task(&Counter::Get).SetName("get").Remote().Get(kGetTimeoutMs) == 8);

  // Errors: an unregistered function at Task(f); a remote exception names its type first.
  CHECK_THROWS_WITH(rayd::Task(NotRemote), Contains("not registered"));
  CHECK_THAT(ThrownMessage<rayd::RemoteError>([] { rayd::Task(Throws).Remote().Get(); }),
             StartsWith("std::logic_error: bad input"));
}

TEST_CASE("api: actor restarts are visible, ExitActor ends an actor for good", "[integration]") {
  rayd_runtime_test::EmbeddedRayd rt;
  auto counter = rayd::Actor(Counter::Create).SetName("restartable").SetMaxRestarts(2).Remote(0);
  CHECK_FALSE(*counter.Task(&Counter::Restarted).Remote().Get(kGetTimeoutMs));
  CHECK_FALSE(rayd::WasCurrentActorRestarted());  // the driver is no actor
  const int pid = *counter.Task(&Counter::Pid).Remote().Get(kGetTimeoutMs);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  REQUIRE(WaitFor(
      [&] {
        try {
          return *counter.Task(&Counter::Restarted).Remote().Get(kGetTimeoutMs);
        } catch (const rayd::RaydError&) {
          return false;  // calls that met the dead process
        }
      },
      30s));

  CHECK_THROWS_AS(counter.Task(&Counter::Quit).Remote().Get(kGetTimeoutMs), rayd::ActorDiedError);
  // Not restarted although max_restarts allows it: gone, and its name free.
  CHECK_THROWS_AS(counter.Task(&Counter::Get).Remote().Get(kGetTimeoutMs), rayd::ActorDiedError);
  REQUIRE(WaitFor([] { return !rayd::GetActor<Counter>("restartable").has_value(); }, 20s));
  CHECK_THROWS_WITH(rayd::ExitActor(), Contains("outside an actor"));
}

TEST_CASE("api: namespaces for named actors, in the driver and in workers", "[integration]") {
  Embedded cluster([](rayd::RaydConfig& c) { c.ray_namespace = "team"; });
  CHECK(rayd::GetNamespace() == "team");
  CHECK(*rayd::Task(NamespaceInWorker).Remote().Get(kGetTimeoutMs) == "team");
  rayd::Actor(Counter::Create).SetName("shared").Remote(5);
  rayd::Actor(Counter::Create).SetName("shared").SetNamespace("other").Remote(6);
  auto mine = rayd::GetActor<Counter>("shared");
  auto theirs = rayd::GetActor<Counter>("shared", "other");
  REQUIRE(mine.has_value());
  REQUIRE(theirs.has_value());
  CHECK(*mine->Task(&Counter::Get).Remote().Get(kGetTimeoutMs) == 5);
  CHECK(*theirs->Task(&Counter::Get).Remote().Get(kGetTimeoutMs) == 6);
  CHECK_FALSE(rayd::GetActor<Counter>("shared", "nobody").has_value());
  // A taken name in its namespace is refused.
  CHECK_THROWS_AS(rayd::Actor(Counter::Create).SetName("shared").Remote(7), rayd::RaydError);
}

TEST_CASE("api: runtime env variables reach job, task and actor workers", "[integration]") {
  Embedded cluster([](rayd::RaydConfig& c) {
    c.runtime_env.Set("env_vars", std::map<std::string, std::string>{{"CONTRACT_JOB", "job"},
                                                                     {"CONTRACT_BOTH", "job"}});
  });
  CHECK(*rayd::Task(Getenv).Remote("CONTRACT_JOB").Get(kGetTimeoutMs) == "job");

  rayd::RuntimeEnv task_env;
  task_env.Set("env_vars", std::map<std::string, std::string>{{"CONTRACT_BOTH", "task"}});
  CHECK(task_env.Contains("env_vars"));
  CHECK(task_env.GetJsonStr("env_vars") == R"({"CONTRACT_BOTH":"task"})");
  auto with_env = rayd::Task(Getenv).SetRuntimeEnv(task_env);
  CHECK(*with_env.Remote("CONTRACT_BOTH").Get(kGetTimeoutMs) == "task");
  CHECK(*with_env.Remote("CONTRACT_JOB").Get(kGetTimeoutMs) == "job");
  CHECK(*rayd::Task(Getenv).Remote("CONTRACT_BOTH").Get(kGetTimeoutMs) == "job");

  rayd::RuntimeEnv actor_env;
  actor_env.SetJsonStr("env_vars", R"({"CONTRACT_ACTOR": "actor"})");
  auto actor = rayd::Actor(Counter::Create).SetRuntimeEnv(actor_env).Remote(0);
  CHECK(*actor.Task(&Counter::Env).Remote("CONTRACT_ACTOR").Get(kGetTimeoutMs) == "actor");
  CHECK(*actor.Task(&Counter::Env).Remote("CONTRACT_JOB").Get(kGetTimeoutMs) == "job");

  // What rayd cannot honour is refused at submission, naming the field.
  rayd::RuntimeEnv pip;
  pip.Set("pip", std::vector<std::string>{"requests"});
  CHECK_THROWS_WITH(rayd::Task(Getenv).SetRuntimeEnv(pip).Remote("X"), Contains("'pip'"));
  rayd::RuntimeEnv bad;
  bad.SetJsonStr("env_vars", R"({"N": 1})");
  CHECK_THROWS_AS(rayd::Actor(Counter::Create).SetRuntimeEnv(bad).Remote(0),
                  rayd::RuntimeEnvError);
  CHECK_THROWS_AS(bad.SetJsonStr("env_vars", "{not json"), rayd::RuntimeEnvError);
  CHECK(bad.Remove("env_vars"));
  CHECK(bad.Empty());
}

TEST_CASE("api: local mode runs everything inside the driver", "[integration]") {
  ::unsetenv("RAYD_ADDRESS");
  rayd::RaydConfig config;
  config.local_mode = true;
  rayd::Init(config);
  CHECK(rayd::IsLocalMode());
  CHECK(*rayd::Task(OwnPid).Remote().Get() == getpid());
  CHECK(*rayd::Task(Nest).Remote(3).Get() == 4);
  auto counter = rayd::Actor(Counter::Create).SetName("local").Remote(10);
  CHECK(*counter.Task(RAYD_FUNC(&Counter::Add, int)).Remote(5).Get() == 15);
  CHECK(*counter.Task(&Counter::Pid).Remote().Get() == getpid());
  REQUIRE(rayd::GetActor<Counter>("local").has_value());
  CHECK(*rayd::Get(rayd::Put(std::string("x"))) == "x");
  CHECK_THROWS_AS(rayd::Task(Throws).Remote().Get(), rayd::RemoteError);
  CHECK_THROWS_AS(counter.Task(&Counter::Quit).Remote().Get(), rayd::ActorDiedError);
  CHECK_THROWS_AS(counter.Task(&Counter::Get).Remote().Get(), rayd::ActorDiedError);
  rayd::Shutdown();
  CHECK_FALSE(rayd::IsInitialized());
}

TEST_CASE("api: head_args configure the embedded head, default lifetime detaches actors",
          "[integration]") {
  ::unsetenv("RAYD_ADDRESS");
  TempDir dir;
  rayd::RaydConfig bad;
  bad.temp_dir = dir.path();
  bad.head_args = {"--port", "7000"};
  CHECK_THROWS_WITH(rayd::Init(bad), Contains("--port"));
  bad.head_args = {"--num-cpus", "many"};
  CHECK_THROWS_WITH(rayd::Init(bad), Contains("--num-cpus"));
  CHECK_FALSE(rayd::IsInitialized());

  rayd::RaydConfig config;
  config.temp_dir = dir.path();
  config.head_args = {"--num-cpus=3", "--resources", R"({"accelerator": 2})"};
  config.default_actor_lifetime = rayd::ActorLifetime::DETACHED;
  rayd::Init(config);
  auto resources = rayd::ClusterResources();
  CHECK(resources["CPU"] == 3);
  CHECK(resources["accelerator"] == 2);
  rayd::Actor(Counter::Create).SetName("kept").Remote(1);
  rayd::Actor(Counter::Create).SetName("not-kept").SetDetached(false).Remote(1);
  REQUIRE(rayd::GetActor<Counter>("kept").has_value());
  std::string out;
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  REQUIRE(rayd::testing::RunCommand({RAYD_BINARY, "list", "actors", "--format", "json",
                                     "--address", endpoint.gcs_address, "--token",
                                     endpoint.token},
                                    &out, {}, 30s) == 0);
  const auto actors = nlohmann::json::parse(out);
  int detached = 0, attached = 0;
  for (const auto& a : actors) {
    if (a.value("name", "") == "kept" && a.value("detached", false)) ++detached;
    if (a.value("name", "") == "not-kept" && !a.value("detached", true)) ++attached;
  }
  CHECK(detached == 1);
  CHECK(attached == 1);
  rayd::Shutdown();
}

TEST_CASE("api: application metrics reach the node's /metrics", "[integration]") {
  CliCluster cluster;
  const std::string token = "contract-metrics-token";
  const int metrics_port = FreeTcpPort();
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "2", "--token",
                 token, "--metrics-port", std::to_string(metrics_port)});
  cluster.InitDriver();
  CHECK(*rayd::Task(RecordMetrics).Remote(20).Get(kGetTimeoutMs) == 20);
  CHECK(*rayd::Task(RecordMetrics).Remote(5).Get(kGetTimeoutMs) == 5);
  rayd::Counter driver_calls("contract_calls_total", "Calls of RecordMetrics.", "calls", {"kind"});
  driver_calls.Inc(1, {{"kind", "driver"}});
  CHECK_THROWS_AS(driver_calls.Inc(-1), rayd::RaydError);
  CHECK_THROWS_AS(driver_calls.Inc(1, {{"nope", "x"}}), rayd::RaydError);
  CHECK_THROWS_AS(rayd::Gauge("contract_calls_total", "", ""), rayd::RaydError);

  std::string body;
  const bool seen = WaitFor(
      [&] {
        body = HttpGet(metrics_port, "/metrics", "Authorization: Bearer " + token + "\r\n").body;
        return body.find("kind=\"driver\"") != std::string::npos &&
               body.find("contract_sum{") != std::string::npos;
      },
      30s);
  INFO(body);
  REQUIRE(seen);
  // Two worker runs (maybe in one worker, maybe two) add up: 25 calls, buckets cumulative.
  CHECK(std::regex_search(body, std::regex(R"(contract_calls_total\{[^}]*kind="worker"[^}]*\} 25\n)")));
  CHECK(std::regex_search(body, std::regex(R"(contract_sum\{[^}]*\} 25\n)")));
  CHECK(std::regex_search(body, std::regex(R"(contract_sizes_count\{[^}]*\} 25\n)")));
  CHECK(std::regex_search(body, std::regex(R"(contract_sizes_bucket\{[^}]*le="\+Inf"[^}]*\} 25\n)")));
  CHECK(std::regex_search(body, std::regex(R"(contract_sizes_bucket\{[^}]*le="1"[^}]*\} 2\n)")));
  CHECK(std::regex_search(body, std::regex(R"(# TYPE contract_sizes histogram)")));
  CHECK(std::regex_search(body, std::regex(R"(contract_level\{[^}]*\} (20|5)\n)")));
}

TEST_CASE("api: infeasible tasks, actors and groups wait, then fail with InfeasibleError",
          "[integration]") {
  Embedded cluster([](rayd::RaydConfig& c) { c.infeasible_timeout_s = 3; });
  // The driver's log says why nothing happens, once per kind of request.
  auto log = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  spdlog::default_logger()->sinks().push_back(log);
  struct Unhook {
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
    ~Unhook() { std::erase(spdlog::default_logger()->sinks(), sink); }
  } unhook{log};
  auto warned = [&](const std::string& what) {
    for (const auto& line : log->last_formatted()) {
      if (line.find(what + " needs {unobtainium") != std::string::npos &&
          line.find("which no node of the cluster has") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  auto task = rayd::Task(Square).SetResource("unobtainium", 1).Remote(2);
  auto actor = rayd::Actor(Counter::Create).SetResource("unobtainium", 1).Remote(0);
  auto call = actor.Task(&Counter::Get).Remote();
  auto pg = rayd::CreatePlacementGroup({"", {{{"unobtainium", 1}}}, rayd::PlacementStrategy::PACK});
  // Pending while a node that fits could still join.
  CHECK_THROWS_AS(task.Get(500), rayd::TimeoutError);
  CHECK_FALSE(pg.Wait(1));
  CHECK(WaitFor([&] { return warned("task contract::Square"); }, 10s));
  CHECK(warned("actor contract::Counter::Create"));
  CHECK(warned("placement group " + pg.GetID()));
  // Then refused, all three alike.
  CHECK_THROWS_AS(task.Get(kGetTimeoutMs), rayd::InfeasibleError);
  CHECK_THROWS_AS(call.Get(kGetTimeoutMs), rayd::InfeasibleError);
  CHECK(WaitFor(
      [&] {
        try {
          pg.Wait(1);
          return false;
        } catch (const rayd::InfeasibleError&) {
          return true;
        }
      },
      30s));
  // Ray's lookups answer an empty group for what does not exist.
  CHECK(rayd::GetPlacementGroup("no-such-group").Empty());
  CHECK(rayd::GetPlacementGroupById(std::string(32, '0')).Empty());
}

TEST_CASE("api: refs inside values, lists of refs and refs returned by tasks, across nodes",
          "[integration]") {
  TwoNodes nodes;
  auto inner = rayd::Put(42);
  rayd::ObjectRef<rayd::ObjectRef<int>> outer = rayd::Put(inner);
  CHECK(*rayd::Task(ReadNested).SetNodeAffinity(nodes.second).Remote(outer).Get(kGetTimeoutMs) ==
        42);
  std::vector<rayd::ObjectRef<int>> list{inner, inner, rayd::Task(Square).Remote(3)};
  CHECK(*rayd::Task(SumRefs).SetNodeAffinity(nodes.second).Remote(1, list).Get(kGetTimeoutMs) ==
        94);
  auto reader = rayd::Actor(RefReader::Create).SetNodeAffinity(nodes.second).Remote();
  CHECK(*reader.Task(&RefReader::ReadNested).Remote(outer).Get(kGetTimeoutMs) == 42);
  CHECK(*reader.Task(&RefReader::SumRefs).Remote(inner, list).Get(kGetTimeoutMs) == 135);
  // Ray's cluster mode refuses ObjectRef parameters (std::invalid_argument); rayd passes the ref.
  CHECK(*reader.Task(&RefReader::ReadRef).Remote(inner).Get(kGetTimeoutMs) == 42);

  // A ref lives as long as a value holding it, with no other handle anywhere: one put inside a
  // value and dropped, ones in a task's argument list, one a task made and returned, ones in
  // an actor's creation arguments.
  auto only_inside = rayd::Put(rayd::Put(7));
  CHECK(*(*only_inside.Get(kGetTimeoutMs)).Get(kGetTimeoutMs) == 7);
  CHECK(*rayd::Task(ReadNested).SetNodeAffinity(nodes.second).Remote(only_inside).Get(
            kGetTimeoutMs) == 7);
  auto sum = rayd::Task(SumRefs).SetNodeAffinity(nodes.second).Remote(
      0, std::vector{rayd::Put(5), rayd::Put(6)});
  CHECK(*sum.Get(kGetTimeoutMs) == 11);
  auto made = rayd::Task(MakeRef).SetNodeAffinity(nodes.second).Remote(9);
  rayd::ObjectRef<int> returned = *made.Get(kGetTimeoutMs);
  CHECK(*returned.Get(kGetTimeoutMs) == 9);
  auto made_on_head = rayd::Task(MakeRef).SetNodeAffinity(nodes.head).Remote(10);
  CHECK(*(*made_on_head.Get(kGetTimeoutMs)).Get(kGetTimeoutMs) == 10);
  auto keeper = rayd::Actor(RefKeeper::Create)
                    .SetNodeAffinity(nodes.second)
                    .Remote(std::vector{rayd::Put(20), rayd::Put(22)});
  CHECK(*keeper.Task(&RefKeeper::Sum).Remote().Get(kGetTimeoutMs) == 42);

  // A task blocked in Get of another task's result (Ray's BlockGet / GetValue).
  auto gate = rayd::Actor(Gate::Create).SetMaxConcurrency(2).Remote();
  auto blocked = rayd::Task(BlockOnGate).Remote(gate);
  auto opened = rayd::Task(OpenThenGet).SetNodeAffinity(nodes.second).Remote(gate, blocked);
  CHECK(*opened.Get(kGetTimeoutMs));
  CHECK(*blocked.Get(kGetTimeoutMs));
}

TEST_CASE("api: an actor larger than its placement group bundle waits, then is infeasible",
          "[integration]") {
  Embedded cluster([](rayd::RaydConfig& c) { c.infeasible_timeout_s = 6; });
  auto pg = rayd::CreatePlacementGroup({"small", {{{"CPU", 1}}}, rayd::PlacementStrategy::PACK});
  REQUIRE(pg.Wait(30));
  // Ray's resources come as an unordered_map; taken as they are.
  const std::unordered_map<std::string, double> two_cpus{{"CPU", 2}};
  auto too_big =
      rayd::Actor(Counter::Create).SetResources(two_cpus).SetPlacementGroup(pg, 0).Remote(1);
  auto any_bundle =
      rayd::Actor(Counter::Create).SetResources(two_cpus).SetPlacementGroup(pg).Remote(1);
  auto call = too_big.Task(&Counter::Get).Remote();
  auto any_call = any_bundle.Task(&Counter::Get).Remote();
  // Not ready (Ray leaves it so for ever)...
  auto waited = rayd::Wait(std::vector{call, any_call}, 1, 2000);
  CHECK(waited.ready.empty());
  CHECK(waited.unready.size() == 2);
  auto fits = rayd::Actor(Counter::Create).SetResources({{"CPU", 1}}).SetPlacementGroup(pg, 0);
  CHECK(*fits.Remote(3).Task(&Counter::Get).Remote().Get(kGetTimeoutMs) == 3);
  // ...until the infeasible timeout.
  CHECK_THROWS_WITH(call.Get(kGetTimeoutMs), Contains("does not fit bundle 0"));
  CHECK_THROWS_AS(call.Get(kGetTimeoutMs), rayd::InfeasibleError);
  CHECK_THROWS_AS(any_call.Get(kGetTimeoutMs), rayd::InfeasibleError);
}

TEST_CASE("api: GetNodeIpAddressFromPerspective names the interface that routes there",
          "[integration]") {
  CHECK(rayd::GetNodeIpAddressFromPerspective("127.0.0.1:80") == "127.0.0.1");
  // What does not parse: loopback.
  CHECK(rayd::GetNodeIpAddressFromPerspective("no-port") == "127.0.0.1");
  CHECK(rayd::GetNodeIpAddressFromPerspective("") == "127.0.0.1");
  CHECK(rayd::GetNodeIpAddressFromPerspective("[::1]53") == "127.0.0.1");
  // A bracketed IPv6 address parses (loopback v4 answers where the host has no IPv6).
  const std::string v6 = rayd::GetNodeIpAddressFromPerspective("[::1]:53");
  CHECK((v6 == "::1" || v6 == "127.0.0.1"));
  // Ray's default asks for the route toward the internet: one of this host's own addresses.
  std::set<std::string> own{"127.0.0.1"};
  ifaddrs* interfaces = nullptr;
  REQUIRE(getifaddrs(&interfaces) == 0);
  for (ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    own.insert(text);
  }
  freeifaddrs(interfaces);
  const std::string mine = rayd::GetNodeIpAddressFromPerspective();
  INFO(mine);
  CHECK(own.count(mine) == 1);
}

// Whether some file under `dir` holds `text`.
bool FoundUnder(const std::string& dir, const std::string& text) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    std::ifstream in(entry.path());
    const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (content.find(text) != std::string::npos) return true;
  }
  return false;
}

// Ray's LocalRefrenceTest and DependencyRefrenceTest, in rayd's words: handles count as local
// references, a submitted task holds its ref arguments until its result exists, and an object
// nobody holds leaves the table.
TEST_CASE("api: the reference table counts handles and the tasks that hold an argument",
          "[integration]") {
  using Counts = std::unordered_map<rayd::ObjectID, std::pair<size_t, size_t>>;
  Embedded cluster;
  auto table = [] { return rayd::internal::NativeObjectStore().GetAllReferenceCounts(); };
  auto id_of = [](const auto& ref) { return rayd::ObjectID::FromBinary(ref.ID()); };
  CHECK(table().empty());
  {
    auto r1 = std::make_unique<rayd::ObjectRef<int>>(rayd::Task(Square).Remote(3));
    const rayd::ObjectID id = id_of(*r1);
    CHECK(table() == Counts{{id, {1, 0}}});
    auto r2 = std::make_unique<rayd::ObjectRef<int>>(*r1);
    CHECK(table() == Counts{{id, {2, 0}}});
    r1.reset();
    CHECK(table() == Counts{{id, {1, 0}}});
    r2.reset();
    CHECK(table().empty());
  }
  {
    rayd::ObjectRef<int> five = rayd::Put(5);
    auto r1 = rayd::Task(Square).Remote(five);
    auto r2 = rayd::Task(Square).Remote(r1);
    const Counts pending = rayd::GetAllReferenceCounts();
    CHECK(pending.at(id_of(r2)) == std::pair<size_t, size_t>{1, 0});
    CHECK(pending.at(id_of(r1)).first == 1);  // and 1 for r2's task while it waits
    CHECK(*r2.Get(kGetTimeoutMs) == 625);
    // Released before the result could be read: no window where the tasks still count.
    CHECK(table() == Counts{{id_of(five), {1, 0}}, {id_of(r1), {1, 0}}, {id_of(r2), {1, 0}}});
  }
  CHECK(table().empty());
}

TEST_CASE("api: RAYDLOG lines reach the worker's and the driver's logs", "[integration]") {
  TempDir dir;
  Embedded cluster([&](rayd::RaydConfig& c) { c.temp_dir = dir.path(); });
  const std::string marker = "raydlog-" + std::to_string(getpid());
  CHECK(*rayd::Task(LogFromWorker).Remote(marker).Get(kGetTimeoutMs) == 1);
  RAYDLOG(WARNING) << "driver says " << marker;
  int evaluated = 0;
  RAYDLOG(DEBUG) << "not written " << ++evaluated;
  const char* level = std::getenv("RAYD_LOG_LEVEL");
  if (level == nullptr || (std::string(level) != "debug" && std::string(level) != "trace")) {
    CHECK(evaluated == 0);  // below INFO: not even evaluated
  }
  CHECK(WaitFor([&] { return FoundUnder(dir.path(), "worker says " + marker); }, 20s));
  CHECK(FoundUnder(dir.path(), "driver says " + marker));
}

}  // namespace
