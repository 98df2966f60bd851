// The user-facing flow of ARCHITECTURE.md section 8 (placement groups aside) against a fake
// runtime that runs every task synchronously in this process through the registry.

#include <catch2/catch.hpp>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

#include "fake_runtime.h"
#include "rayd/api.h"
#include "remote_functions.h"

// As in the example: global names, registered in this file.
int Plus(int a, int b) { return a + b; }
RAYD_REMOTE(Plus);

class Tally {
 public:
  explicit Tally(int start) : n_(start) {}
  static Tally* FactoryCreate(int start) { return new Tally(start); }
  int Add(int x) { return n_ += x; }

 private:
  int n_;
};
RAYD_REMOTE(Tally::FactoryCreate, &Tally::Add);

namespace flowtest {

struct Boom : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int Explode(int code) { throw Boom("boom " + std::to_string(code)); }
void Log(std::string line) {
  if (line.empty()) throw std::invalid_argument("empty line");
}
int AddThrough(rayd::ActorHandle<Tally> counter, int x) {
  return *rayd::Get(counter.Task(&Tally::Add).Remote(x));
}
std::vector<rayd::ObjectRef<int>> MakeRefs(int n) {
  std::vector<rayd::ObjectRef<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(rayd::Put(i));
  return refs;
}
int NotRemote(int x) { return x; }

class Gpu {
 public:
  static Gpu* Create() { return new Gpu; }
  static Gpu* CreateFailing() { throw std::runtime_error("no device"); }
  int Ping() { return 1; }
};

}  // namespace flowtest

RAYD_REMOTE(flowtest::Explode, flowtest::Log, flowtest::AddThrough, flowtest::MakeRefs);
RAYD_REMOTE(flowtest::Gpu::Create, flowtest::Gpu::CreateFailing, &flowtest::Gpu::Ping);

namespace rayd {
namespace {

using Catch::Matchers::Contains;
using testing::FakeRuntime;

TEST_CASE("the section-8 example runs end to end", "[api][flow]") {
  FakeRuntime fake;
  {
    rayd::ObjectRef<int> sum = rayd::Task(Plus).Remote(1, 2);
    int three = *rayd::Get(sum);
    CHECK(three == 3);
    rayd::ActorHandle<Tally> counter =
        rayd::Actor(Tally::FactoryCreate).SetName("c").SetMaxRestarts(2).Remote(0);
    CHECK(fake.last_actor_options.name == "c");
    CHECK(fake.last_actor_options.max_restarts == 2);
    auto five = counter.Task(&Tally::Add).Remote(5);
    rayd::WaitResult<int> w = rayd::Wait(std::vector{five}, 1, /*timeout_ms=*/1000);
    REQUIRE(w.ready.size() == 1);
    CHECK(w.unready.empty());
    CHECK(*rayd::Get(w.ready[0]) == 5);
    CHECK(*rayd::Get(counter.Task(&Tally::Add).Remote(2)) == 7);  // state kept
    auto big = rayd::Put(std::vector<float>(1 << 20));
    CHECK(rayd::Get(big)->size() == (1u << 20));
    CHECK(sum.ID().size() == 32);
    CHECK(sum.ID() == sum.id().Hex());
  }
  CHECK(fake.TotalRefCount() == 0);
  CHECK(fake.adds == fake.removes);
  CHECK_FALSE(fake.used_after_release);
}

TEST_CASE("functions registered in another translation unit", "[api][flow]") {
  FakeRuntime fake;
  CHECK(*Get(Task(othertu::Square).Remote(9)) == 81);
  CHECK(*Get(Task(othertu::Square).Remote(Task(othertu::Square).Remote(3))) == 81);  // kRef
}

TEST_CASE("task options reach the runtime", "[api][flow]") {
  FakeRuntime fake;
  auto caller = Task(Plus);
  caller.SetResource("CPU", 2).SetResources({{"GPU", 0.5}, {"CPU", 4}}).SetMaxRetries(0);
  caller.SetName("adder");
  CHECK(*Get(caller.Remote(2, 2)) == 4);
  CHECK(fake.last_task_options.resources ==
        std::map<std::string, double>{{"CPU", 4}, {"GPU", 0.5}});
  CHECK(fake.last_task_options.max_retries == 0);
  CHECK(fake.last_task_options.name == "adder");
  Task(Plus).Remote(1, 1);
  CHECK(fake.last_task_options.resources.empty());
  CHECK(fake.last_task_options.max_retries == 3);
  CHECK(fake.last_task_args.size() == 2);
}

TEST_CASE("refs as arguments: resolved to values or passed as refs", "[api][flow]") {
  FakeRuntime fake;
  ObjectRef<int> four = Put(4);
  ObjectRef<int> eight = Task(Plus).Remote(four, four);
  CHECK(fake.last_task_args[0].kind == internal::TaskArg::Kind::kRef);
  CHECK(*Get(eight) == 8);
  CHECK(*Get(Task(othertu::Deref).Remote(eight)) == 8);
  CHECK(fake.last_task_args[0].kind == internal::TaskArg::Kind::kRefAsRef);
  CHECK(fake.borrowed.back().first == eight.id());
  // Refs nested in a value: registered as borrowed on the way in, fetched inside the task.
  std::vector<ObjectRef<int>> refs{Put(1), Put(2), four};
  size_t borrowed_before = fake.borrowed.size();
  CHECK(*Get(Task(othertu::SumAll).Remote(refs)) == 7);
  CHECK(fake.borrowed.size() == borrowed_before + 3);
  CHECK_FALSE(fake.used_after_release);
  // Refs in a return value come back as live refs. (Keeping the objects alive after the task's
  // own handles are gone is the runtime's job; the fake keeps every value.)
  auto made = Get(Task(flowtest::MakeRefs).Remote(3));
  REQUIRE(made->size() == 3);
  CHECK(*Get((*made)[2]) == 2);
  // A failed dependency fails the task that needs its value.
  ObjectRef<int> failed = Task(flowtest::Explode).Remote(1);
  CHECK_THROWS_AS(Get(Task(Plus).Remote(failed, 1)), RemoteError);
}

TEST_CASE("actor handles can be passed to tasks and found by name", "[api][flow]") {
  FakeRuntime fake;
  auto counter = Actor(Tally::FactoryCreate).SetName("shared", "ns").Remote(10);
  CHECK(*Get(Task(flowtest::AddThrough).Remote(counter, 5)) == 15);
  std::optional<ActorHandle<Tally>> found = GetActor<Tally>("shared", "ns");
  REQUIRE(found.has_value());
  CHECK(found->ID() == counter.ID());
  CHECK(*Get(found->Task(&Tally::Add).Remote(1)) == 16);
  CHECK_FALSE(GetActor<Tally>("shared").has_value());  // another namespace
  CHECK_FALSE(GetActor<Tally>("nobody", "ns").has_value());

  counter.Kill();
  CHECK(fake.last_kill_no_restart);
  CHECK_THROWS_AS(Get(counter.Task(&Tally::Add).Remote(1)), ActorDiedError);
  CHECK_FALSE(GetActor<Tally>("shared", "ns").has_value());
  counter.Kill(false);
  CHECK_FALSE(fake.last_kill_no_restart);
  CHECK_THROWS_AS(ActorHandle<Tally>(ActorId::FromRandom()).Kill(), RaydError);
  CHECK_THROWS_AS(ActorHandle<Tally>().Task(&Tally::Add).Remote(1), RaydError);
}

TEST_CASE("actor options and creation errors", "[api][flow]") {
  FakeRuntime fake;
  auto gpu = Actor(flowtest::Gpu::Create)
                 .SetNamespace("n")
                 .SetMaxTaskRetries(-1)
                 .SetMaxConcurrency(4)
                 .SetResources({{"CPU", 1}})
                 .SetDetached(true)
                 .Remote();
  CHECK(fake.last_actor_options.ray_namespace == "n");
  CHECK(fake.last_actor_options.max_task_retries == -1);
  CHECK(fake.last_actor_options.max_concurrency == 4);
  CHECK(fake.last_actor_options.resources == std::map<std::string, double>{{"CPU", 1}});
  CHECK(fake.last_actor_options.detached);
  CHECK(*Get(gpu.Task(&flowtest::Gpu::Ping).Remote()) == 1);

  CHECK_THROWS_AS(Actor(flowtest::Gpu::Create).SetResource("GPU", 1).Remote(), InfeasibleError);
  CHECK_THROWS_WITH(Actor(flowtest::Gpu::Create).SetResource("GPU", 1).Remote(),
                    Contains("infeasible"));
  Actor(flowtest::Gpu::Create).SetName("once").Remote();
  CHECK_THROWS_WITH(Actor(flowtest::Gpu::Create).SetName("once").Remote(), Contains("taken"));
  auto broken = Actor(flowtest::Gpu::CreateFailing).Remote();
  CHECK_THROWS_WITH(Get(broken.Task(&flowtest::Gpu::Ping).Remote()), Contains("no device"));
}

TEST_CASE("exceptions in remote code surface as RemoteError", "[api][flow][errors]") {
  FakeRuntime fake;
  ObjectRef<int> ref = Task(flowtest::Explode).Remote(7);
  try {
    Get(ref);
    FAIL("Get did not throw");
  } catch (const RemoteError& e) {
    CHECK(e.remote_type() == "flowtest::Boom");
    CHECK(std::string(e.what()) == "flowtest::Boom: boom 7");
    CHECK(e.remote_message() == "boom 7");
  }
  try {
    Get(Task(othertu::At).Remote(std::vector<int>{1}, 5));
    FAIL("Get did not throw");
  } catch (const RemoteError& e) {
    CHECK(e.remote_type() == "std::out_of_range");
  }
  // void functions: Get only waits and rethrows.
  ObjectRef<void> fine = Task(flowtest::Log).Remote("line");
  Get(fine);
  ObjectRef<void> bad = Task(flowtest::Log).Remote(std::string());
  CHECK_THROWS_AS(Get(bad), RemoteError);
  CHECK_THROWS_AS(Get(std::vector{fine, bad}), RemoteError);
  // Get of many throws the first error even when an earlier object is fine.
  CHECK_THROWS_AS(Get(std::vector{Put(1), ref}), RemoteError);
}

TEST_CASE("Get and Wait: timeouts, many refs, bad arguments", "[api][flow][errors]") {
  FakeRuntime fake;
  ObjectRef<int> pending = ObjectRef<int>(fake.NewPendingObject(), "");
  CHECK_THROWS_AS(Get(pending, 10), TimeoutError);
  CHECK(fake.last_get_timeout == std::chrono::milliseconds(10));
  ObjectRef<int> one = Put(1);
  Get(one);
  CHECK(fake.last_get_timeout == std::chrono::milliseconds(-1));
  CHECK(*Get(one, 5) == 1);

  std::vector<ObjectRef<int>> refs{one, pending, Put(2), Put(3)};
  WaitResult<int> w = Wait(refs, 2, 100);
  REQUIRE(w.ready.size() == 2);
  CHECK(w.ready[0] == one);
  CHECK(w.ready[1] == refs[2]);
  REQUIRE(w.unready.size() == 2);
  CHECK(w.unready[0] == pending);
  CHECK(w.unready[1] == refs[3]);
  CHECK_THROWS_AS(Wait(refs, 5, 100), RaydError);
  CHECK_THROWS_AS(Wait(refs, -1, 100), RaydError);

  auto values = Get(std::vector{one, refs[2], refs[3]});
  REQUIRE(values.size() == 3);
  CHECK(*values[2] == 3);
  CHECK_THROWS_AS(Get(refs, 10), TimeoutError);
  CHECK_THROWS_AS(Get(ObjectRef<int>()), RaydError);
  // A value that does not decode as the ref's type.
  auto wrong = ObjectRef<std::string>(fake.Put(internal::Serialize(12)), "");
  CHECK_THROWS_WITH(Get(wrong), Contains("does not decode as std::"));
}

TEST_CASE("unregistered functions and a missing runtime are RaydErrors", "[api][flow][errors]") {
  CHECK_THROWS_WITH(Task(Plus).Remote(1, 2), Contains("not initialised"));
  CHECK_THROWS_AS(Put(1), RaydError);
  CHECK_THROWS_AS(GetNodeId(), RaydError);
  ObjectRef<int> orphan(ObjectId::FromRandom(), "x:1");  // no runtime: no counting, no crash
  ObjectRef<int> copy = orphan;
  CHECK(copy == orphan);

  FakeRuntime fake;
  // Ray's rule: an unregistered function is refused at Task(f), before any Remote().
  CHECK_THROWS_WITH(Task(flowtest::NotRemote), "function is not registered with RAYD_REMOTE");
  CHECK(GetNodeId() == "fake-node");
  CHECK(GetGpuIds() == std::vector<int>{3});
}

TEST_CASE("local ref counting is balanced", "[api][flow][refs]") {
  FakeRuntime fake;
  ObjectId id;
  {
    ObjectRef<int> a = Put(1);
    id = a.id();
    CHECK(fake.RefCount(id) == 1);
    {
      ObjectRef<int> b = a;             // copy
      ObjectRef<int> c = std::move(b);  // move: no new ref
      CHECK(fake.RefCount(id) == 2);
      std::vector<ObjectRef<int>> many(3, c);
      CHECK(fake.RefCount(id) == 5);
      many[0] = ObjectRef<int>();  // assignment releases
      CHECK(fake.RefCount(id) == 4);
      c = a;  // same object: release one, take one
      CHECK(fake.RefCount(id) == 4);
    }
    CHECK(fake.RefCount(id) == 1);
    ObjectRef<int> r = Task(Plus).Remote(a, a);
    Get(Task(othertu::SumAll).Remote(std::vector{a, r, a}));
    Get(Task(othertu::Deref).Remote(r));
    Wait(std::vector{a, r}, 2, 0);
    auto counter = Actor(Tally::FactoryCreate).Remote(0);
    Get(counter.Task(&Tally::Add).Remote(r));
    CHECK(*Get(Task(Plus).Remote(Put(1), Put(2))) == 3);  // temporaries live through Remote
    Get(Task(flowtest::MakeRefs).Remote(4));
  }
  CHECK(fake.RefCount(id) == 0);
  CHECK(fake.TotalRefCount() == 0);
  CHECK(fake.adds == fake.removes);
  CHECK_FALSE(fake.went_negative);
  CHECK_FALSE(fake.used_after_release);
}

TEST_CASE("refs are copied and dropped from many threads", "[api][flow][refs]") {
  FakeRuntime fake;
  ObjectRef<int> shared = Put(7);
  std::vector<std::thread> threads;
  std::atomic<int> sum{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        ObjectRef<int> copy = shared;
        std::vector<ObjectRef<int>> more(3, copy);
        sum += *Get(more[1]);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(sum == 4 * 200 * 7);
  CHECK(fake.RefCount(shared.id()) == 1);
}

TEST_CASE("refs counted in one runtime are not released into the next", "[api][flow][refs]") {
  std::optional<ObjectRef<int>> survivor;
  {
    FakeRuntime first;
    survivor = Put(1);
    ObjectRef<int> copy = *survivor;
    CHECK(first.RefCount(survivor->id()) == 2);
  }
  FakeRuntime second;
  ObjectRef<int> copy = *survivor;  // counted in the second runtime
  survivor.reset();                 // counted in the first: releases nothing
  CHECK(second.removes == 0);
  CHECK(second.RefCount(copy.id()) == 1);
}

}  // namespace
}  // namespace rayd
