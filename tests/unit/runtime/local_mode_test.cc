// RaydConfig::local_mode through the public API: tasks and actor calls run concurrently on the
// runtime's threads (Ray's slow_function_test), Get and Wait block with timeouts, nested work
// never deadlocks, actors keep their order, placement groups are created, used and removed.
// Also the growing thread pool under it.

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/growing_thread_pool.h"
#include "rayd/api.h"
#include "test_util.h"

namespace local {

using Clock = std::chrono::steady_clock;

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

// A latch that tests open; tasks wait on it (bounded, so a broken test fails instead of hanging).
class Gate {
 public:
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool Wait() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};
Gate g_gate;

// Sleeps `ms` and returns when it ran: {start, end} in steady-clock microseconds.
std::vector<int64_t> Interval(int ms) {
  const int64_t start = NowMicros();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {start, NowMicros()};
}

int Plus(int a, int b) { return a + b; }

// Returns `v` once g_gate opens.
int Gated(int v) {
  if (!g_gate.Wait()) throw std::runtime_error("the gate never opened");
  return v;
}

// Each level submits the next and blocks in Get of its result: `depth` threads wait at once.
int Nest(int depth) {
  if (depth == 0) return 0;
  return 1 + *rayd::Task(Nest).Remote(depth - 1).Get(60000);
}

// Blocks in Get of a ref it was handed (the caller may have dropped its own).
int GetRef(rayd::ObjectRef<int> ref) { return *ref.Get(60000) * 10; }

int Fails() { throw std::invalid_argument("no good"); }

int OwnPid() { return getpid(); }

// Returns refs to values it Put: its own handles on them go when it returns.
std::vector<rayd::ObjectRef<int>> MakeRefs(int n) {
  std::vector<rayd::ObjectRef<int>> out;
  for (int i = 0; i < n; ++i) out.push_back(rayd::Put(i));
  return out;
}

// Adds `first` and the values of `refs` (refs inside a by-value argument).
int SumRefs(int first, std::vector<rayd::ObjectRef<int>> refs) {
  int sum = first;
  for (const auto& r : refs) sum += *r.Get(60000);
  return sum;
}

// Opens g_lingering, sleeps `ms`, then sets g_lingered.
Gate g_lingering;
std::atomic<bool> g_lingered{false};
int Linger(int ms) {
  g_lingering.Open();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  g_lingered = true;
  return ms;
}

// An actor whose calls record their order and whether two of them ever overlapped.
class Recorder {
 public:
  static Recorder* Create(int slow_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));  // a slow factory
    return new Recorder();
  }
  static Recorder* CreateFails() { throw std::runtime_error("factory refused"); }
  int Append(int i) {
    if (in_call_.fetch_add(1) != 0) overlapped_ = true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    values_.push_back(i);
    in_call_.fetch_sub(1);
    return static_cast<int>(values_.size());
  }
  std::vector<int> Values() { return values_; }
  bool Overlapped() { return overlapped_; }
  bool Initialized() { return initialized_; }
  // Waits until `n` calls are inside Meet at once: true when they met within 60 s.
  bool Meet(int n) {
    std::unique_lock lock(meet_mu_);
    ++meeting_;
    meet_cv_.notify_all();
    return meet_cv_.wait_for(lock, std::chrono::seconds(60), [&] { return meeting_ >= n; });
  }
  int Quit() { rayd::ExitActor(); }

 private:
  bool initialized_ = true;
  std::atomic<int> in_call_{0};
  bool overlapped_ = false;
  std::vector<int> values_;
  std::mutex meet_mu_;
  std::condition_variable meet_cv_;
  int meeting_ = 0;
};

}  // namespace local

RAYD_REMOTE(local::Interval, local::Plus, local::Gated, local::Nest, local::GetRef, local::Fails,
            local::OwnPid, local::Linger, local::SumRefs, local::MakeRefs, local::Recorder::Create,
            local::Recorder::CreateFails, &local::Recorder::Append, &local::Recorder::Values,
            &local::Recorder::Overlapped, &local::Recorder::Initialized, &local::Recorder::Meet,
            &local::Recorder::Quit);

namespace {

using namespace local;
using Catch::Matchers::Contains;
constexpr int kGetTimeoutMs = 60000;

// rayd::Init in local mode for one test case; Shutdown at its end (after the gate reopens, so
// no task waits on it).
struct LocalMode {
  LocalMode() {
    g_gate.Open();
    rayd::RaydConfig config;
    config.local_mode = true;
    rayd::Init(config);
  }
  ~LocalMode() { rayd::Shutdown(); }
};

// Opens g_gate when it goes, so that a failed check never leaves tasks waiting on it.
struct CloseGate {
  CloseGate() { g_gate.Close(); }
  ~CloseGate() { g_gate.Open(); }
};

// Keeps `threads` threads spinning until it goes: a busy machine.
TEST_CASE("local mode: four sleeping tasks run at the same time, beside a busy CPU", "[unit]") {
  LocalMode local_mode;
  rayd::testing::CpuBurners burners(
      static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
  std::vector<rayd::ObjectRef<std::vector<int64_t>>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(rayd::Task(Interval).Remote(1000));
  auto intervals = rayd::Get(refs, kGetTimeoutMs);
  REQUIRE(intervals.size() == 4);
  int64_t last_start = 0, first_end = INT64_MAX;
  for (const auto& interval : intervals) {
    REQUIRE(interval->size() == 2);
    last_start = std::max(last_start, (*interval)[0]);
    first_end = std::min(first_end, (*interval)[1]);
  }
  // Every interval overlaps every other: the last one started before the first one ended.
  INFO("last start " << last_start << " us, first end " << first_end << " us");
  CHECK(last_start < first_end);
}

TEST_CASE("local mode: nested tasks blocking in Get of others never deadlock", "[unit]") {
  LocalMode local_mode;
  // 24 levels, each holding a thread while it waits for the next.
  CHECK(*rayd::Task(Nest).Remote(24).Get(kGetTimeoutMs) == 24);

  // A chain of tasks each taking the one before's result by value, submitted before any ran.
  CloseGate closed;
  rayd::ObjectRef<int> chain = rayd::Task(Gated).Remote(0);
  for (int i = 0; i < 20; ++i) chain = rayd::Task(Plus).Remote(chain, 1);
  // A pending ref handed to a task and dropped by the caller at once.
  auto got = rayd::Task(GetRef).Remote(rayd::Task(Gated).Remote(7));
  CHECK(rayd::Wait(std::vector{chain, got}, 1, 0).ready.empty());
  g_gate.Open();
  CHECK(*chain.Get(kGetTimeoutMs) == 20);
  CHECK(*got.Get(kGetTimeoutMs) == 70);

  // Errors still travel through refs, into dependent tasks too.
  CHECK_THROWS_AS(rayd::Task(Fails).Remote().Get(kGetTimeoutMs), rayd::RemoteError);
  CHECK_THROWS_AS(rayd::Task(Plus).Remote(rayd::Task(Fails).Remote(), 1).Get(kGetTimeoutMs),
                  rayd::RemoteError);
}

TEST_CASE("local mode: Get times out on a slow task, Wait splits ready from not ready", "[unit]") {
  LocalMode local_mode;
  CloseGate closed;
  rayd::ObjectRef<int> slow = rayd::Task(Gated).Remote(1);
  rayd::ObjectRef<int> fast = rayd::Task(Plus).Remote(1, 1);
  CHECK_THROWS_AS(slow.Get(50), rayd::TimeoutError);
  CHECK_THROWS_AS(rayd::Get(std::vector{fast, slow}, 50), rayd::TimeoutError);

  rayd::WaitResult<int> waited = rayd::Wait(std::vector{slow, fast}, 1, kGetTimeoutMs);
  REQUIRE(waited.ready.size() == 1);
  CHECK(waited.ready[0].id() == fast.id());
  REQUIRE(waited.unready.size() == 1);
  CHECK(waited.unready[0].id() == slow.id());
  // Asking for both: the time runs out with the slow one still not ready.
  waited = rayd::Wait(std::vector{slow, fast}, 2, 50);
  CHECK(waited.ready.size() == 1);
  CHECK(waited.unready.size() == 1);

  // WhenReady answers once the task ends, not before.
  std::promise<void> called;
  rayd::internal::RequireRuntime().WhenReady(slow.id(), [&] { called.set_value(); });
  auto when = called.get_future();
  CHECK(when.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  g_gate.Open();
  CHECK(when.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(*slow.Get(kGetTimeoutMs) == 1);
  CHECK(rayd::Wait(std::vector{slow, fast}, 2, kGetTimeoutMs).ready.size() == 2);
}

TEST_CASE("local mode: a pending object outlives its dropped refs until its task ends", "[unit]") {
  LocalMode local_mode;
  CloseGate closed;
  auto& runtime = rayd::internal::RequireRuntime();
  rayd::ObjectId id;
  std::promise<void> done;
  {
    rayd::ObjectRef<int> ref = rayd::Task(Gated).Remote(3);
    id = ref.id();
    runtime.WhenReady(id, [&] { done.set_value(); });
  }
  // No handle left, but the task still runs: the object is pending, not lost.
  CHECK(runtime.Get({id}, std::chrono::milliseconds(0))[0].error ==
        rayd::internal::ErrorKind::kTimeout);
  g_gate.Open();
  REQUIRE(done.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  // Its task ended with nobody holding it: freed.
  CHECK(runtime.Get({id}, std::chrono::milliseconds(0))[0].error ==
        rayd::internal::ErrorKind::kObjectLost);
  // A held one stays.
  rayd::ObjectRef<int> kept = rayd::Task(Plus).Remote(1, 2);
  CHECK(*kept.Get(kGetTimeoutMs) == 3);
  CHECK(*kept.Get(kGetTimeoutMs) == 3);
}

TEST_CASE("local mode: the reference table counts handles and tasks holding arguments", "[unit]") {
  using Counts = std::unordered_map<rayd::ObjectID, std::pair<size_t, size_t>>;
  LocalMode local_mode;
  CloseGate closed;
  auto id_of = [](const auto& ref) { return rayd::ObjectID::FromBinary(ref.ID()); };
  {
    rayd::ObjectRef<int> first = rayd::Task(Gated).Remote(3);
    rayd::ObjectRef<int> copy = first;
    rayd::ObjectRef<int> second = rayd::Task(Plus).Remote(first, 1);
    CHECK(rayd::GetAllReferenceCounts() == Counts{{id_of(first), {2, 1}}, {id_of(second), {1, 0}}});
    g_gate.Open();
    CHECK(*second.Get(kGetTimeoutMs) == 4);
    CHECK(rayd::GetAllReferenceCounts() == Counts{{id_of(first), {2, 0}}, {id_of(second), {1, 0}}});
  }
  CHECK(rayd::GetAllReferenceCounts().empty());
}

TEST_CASE("local mode: an actor's calls run one at a time in submission order", "[unit]") {
  LocalMode local_mode;
  // The factory is slow; CreateActor returns before it ran, and its name is known at once.
  auto recorder = rayd::Actor(Recorder::Create).SetName("recorder").Remote(200);
  REQUIRE(rayd::GetActor<Recorder>("recorder").has_value());
  CHECK(*recorder.Task(&Recorder::Initialized).Remote().Get(kGetTimeoutMs));
  std::vector<rayd::ObjectRef<int>> sizes;
  for (int i = 0; i < 50; ++i) sizes.push_back(recorder.Task(&Recorder::Append).Remote(i));
  auto got = rayd::Get(sizes, kGetTimeoutMs);
  for (int i = 0; i < 50; ++i) CHECK(*got[i] == i + 1);
  std::vector<int> expected(50);
  for (int i = 0; i < 50; ++i) expected[i] = i;
  CHECK(*recorder.Task(&Recorder::Values).Remote().Get(kGetTimeoutMs) == expected);
  CHECK_FALSE(*recorder.Task(&Recorder::Overlapped).Remote().Get(kGetTimeoutMs));

  // max_concurrency 4: four calls are inside the actor at once.
  auto threaded = rayd::Actor(Recorder::Create).SetMaxConcurrency(4).Remote(0);
  std::vector<rayd::ObjectRef<bool>> met;
  for (int i = 0; i < 4; ++i) met.push_back(threaded.Task(&Recorder::Meet).Remote(4));
  for (const auto& m : rayd::Get(met, kGetTimeoutMs)) CHECK(*m);

  // Dead actors fail their calls: ExitActor, a kill, a factory that threw.
  CHECK_THROWS_AS(recorder.Task(&Recorder::Quit).Remote().Get(kGetTimeoutMs), rayd::ActorDiedError);
  CHECK_THROWS_AS(recorder.Task(&Recorder::Values).Remote().Get(kGetTimeoutMs),
                  rayd::ActorDiedError);
  CHECK_FALSE(rayd::GetActor<Recorder>("recorder").has_value());
  threaded.Kill();
  CHECK_THROWS_AS(threaded.Task(&Recorder::Values).Remote().Get(kGetTimeoutMs),
                  rayd::ActorDiedError);
  auto broken = rayd::Actor(Recorder::CreateFails).Remote();
  CHECK_THROWS_WITH(broken.Task(&Recorder::Values).Remote().Get(kGetTimeoutMs),
                    Contains("factory refused"));
  // The name of a dead actor is free again; a live one's is not.
  rayd::Actor(Recorder::Create).SetName("recorder").Remote(0);
  CHECK_THROWS_AS(rayd::Actor(Recorder::Create).SetName("recorder").Remote(0), rayd::RaydError);
}

TEST_CASE("local mode: placement groups are created, used, looked up and removed", "[unit]") {
  LocalMode local_mode;
  rayd::PlacementGroup pg =
      rayd::CreatePlacementGroup({.name = "gang",
                                  .bundles = {{{"CPU", 1}}, {{"GPU", 1}}},
                                  .strategy = rayd::PlacementStrategy::STRICT_SPREAD});
  CHECK(pg.Wait(10));
  CHECK(rayd::WaitPlacementGroupReady(pg.GetID(), 10));
  CHECK(pg.GetState() == rayd::PlacementGroupState::CREATED);
  CHECK(pg.GetBundleNodes() == std::vector<std::string>{rayd::GetNodeId(), rayd::GetNodeId()});
  CHECK(rayd::GetPlacementGroup("gang").GetID() == pg.GetID());
  CHECK(rayd::GetPlacementGroup("gang", "elsewhere").Empty());
  CHECK(rayd::GetPlacementGroupById(pg.GetID()).GetBundles().size() == 2);
  auto all = rayd::GetAllPlacementGroups();
  REQUIRE(all.size() == 1);
  CHECK(all[0].GetName() == "gang");
  std::promise<rayd::Result<bool>> answered;
  rayd::internal::RequireRuntime().WhenPlacementGroupReady(
      pg.GetID(), std::chrono::milliseconds(1000),
      [&](rayd::Result<bool> ready) { answered.set_value(std::move(ready)); });
  rayd::Result<bool> ready = answered.get_future().get();
  REQUIRE(ready.ok());
  CHECK(*ready);

  // Work in a live group runs (local mode checks no resources, GPUs included).
  CHECK(*rayd::Task(Plus).SetPlacementGroup(pg, 1).SetResource("GPU", 1).Remote(1, 2).Get(
            kGetTimeoutMs) == 3);
  CHECK(*rayd::Task(Plus).SetPlacementGroup(pg).Remote(2, 2).Get(kGetTimeoutMs) == 4);
  auto member = rayd::Actor(Recorder::Create).SetPlacementGroup(pg, 0).Remote(0);
  CHECK(*member.Task(&Recorder::Append).Remote(1).Get(kGetTimeoutMs) == 1);
  CHECK_THROWS_WITH(rayd::Task(Plus).SetPlacementGroup(pg, 5).Remote(1, 1).Get(kGetTimeoutMs),
                    Contains("has no bundle 5"));

  // Refused at creation, as on a cluster.
  CHECK_THROWS_WITH(rayd::CreatePlacementGroup({.name = "gang", .bundles = {{{"CPU", 1}}}}),
                    Contains("already exists"));
  CHECK_THROWS_AS(rayd::CreatePlacementGroup({.bundles = {}}), rayd::RaydError);
  CHECK_THROWS_AS(rayd::CreatePlacementGroup({.bundles = {{}}}), rayd::RaydError);
  CHECK_THROWS_WITH(rayd::CreatePlacementGroup({.bundles = {{{"CPU", -1}}}}), Contains("negative"));

  // Removed: twice is fine; waits, work and members fail; the name is free again.
  rayd::RemovePlacementGroup(pg.GetID());
  rayd::RemovePlacementGroup(pg.GetID());
  CHECK_THROWS_WITH(pg.Wait(10), Contains("removed"));
  CHECK(pg.GetState() == rayd::PlacementGroupState::REMOVED);
  CHECK(rayd::GetPlacementGroup("gang").Empty());
  CHECK_FALSE(rayd::GetPlacementGroupById(pg.GetID()).Empty());
  CHECK_THROWS_WITH(rayd::Task(Plus).SetPlacementGroup(pg, 0).Remote(1, 1).Get(kGetTimeoutMs),
                    Contains("placement group " + pg.GetID() + " was removed"));
  CHECK_THROWS_AS(member.Task(&Recorder::Append).Remote(2).Get(kGetTimeoutMs),
                  rayd::ActorDiedError);
  auto late = rayd::Actor(Recorder::Create).SetPlacementGroup(pg).Remote(0);
  CHECK_THROWS_WITH(late.Task(&Recorder::Values).Remote().Get(kGetTimeoutMs),
                    Contains("was removed"));
  auto again = rayd::CreatePlacementGroup({.name = "gang", .bundles = {{{"CPU", 1}}}});
  CHECK(again.Wait(10));
  CHECK(rayd::GetAllPlacementGroups().size() == 2);

  // Unknown groups.
  const std::string unknown(32, 'a');
  CHECK_THROWS_AS(rayd::RemovePlacementGroup(unknown), rayd::RaydError);
  CHECK_THROWS_AS(rayd::WaitPlacementGroupReady(unknown, 1), rayd::RaydError);
  CHECK(rayd::GetPlacementGroupById(unknown).Empty());
}

TEST_CASE("local mode: all runs in this process, with its key-value store and named actors",
          "[unit]") {
  LocalMode local_mode;
  CHECK(rayd::IsLocalMode());
  CHECK(*rayd::Task(OwnPid).Remote().Get(kGetTimeoutMs) == getpid());
  CHECK(*rayd::Get(rayd::Put(std::string("x"))) == "x");
  CHECK(rayd::KvPut("ns", "a/1", "x"));
  CHECK_FALSE(rayd::KvPut("ns", "a/1", "y", /*overwrite=*/false));
  CHECK(rayd::KvGet("ns", "a/1") == "x");
  CHECK(rayd::KvDel("ns", "a/", /*by_prefix=*/true) == 1);
  rayd::Actor(Recorder::Create).SetName("shared").SetNamespace("other").Remote(0);
  CHECK_FALSE(rayd::GetActor<Recorder>("shared").has_value());
  CHECK(rayd::GetActor<Recorder>("shared", "other").has_value());
}

TEST_CASE("local mode: Shutdown waits for running tasks and joins their threads", "[unit]") {
  LocalMode local_mode;
  g_lingering.Close();
  g_lingered = false;
  auto lingering = rayd::Task(Linger).Remote(300);
  REQUIRE(g_lingering.Wait());  // it runs now
  rayd::Shutdown();
  CHECK(g_lingered);
  CHECK_FALSE(rayd::IsInitialized());
}

TEST_CASE("local mode: refs inside a by-value argument live until the task ran", "[unit]") {
  LocalMode local_mode;
  CloseGate closed;
  // The tasks wait for their first argument while the caller's handles on the refs inside the
  // second one go (temporaries); only then do they read the refs.
  std::vector<rayd::ObjectRef<int>> sums;
  for (int i = 0; i < 10; ++i) {
    sums.push_back(rayd::Task(SumRefs).Remote(rayd::Task(Gated).Remote(i),
                                              std::vector{rayd::Put(1), rayd::Put(2)}));
  }
  g_gate.Open();
  for (int i = 0; i < 10; ++i) CHECK(*sums[i].Get(kGetTimeoutMs) == i + 3);
}

TEST_CASE("local mode: refs inside Put values and results live as long as the values", "[unit]") {
  LocalMode local_mode;
  auto& runtime = rayd::internal::RequireRuntime();
  rayd::ObjectId inner_id;
  {
    rayd::ObjectRef<rayd::ObjectRef<int>> outer;
    {
      rayd::ObjectRef<int> inner = rayd::Put(7);
      inner_id = inner.id();
      outer = rayd::Put(inner);
    }
    // Only the outer value holds the inner object now.
    CHECK(*outer.Get(kGetTimeoutMs)->Get(kGetTimeoutMs) == 7);
  }
  // The outer value and every handle read from it went: so did the inner object.
  CHECK(runtime.Get({inner_id}, std::chrono::milliseconds(0))[0].error ==
        rayd::internal::ErrorKind::kObjectLost);

  // Refs a task made and returned: its own handles went when it returned.
  auto made = rayd::Task(MakeRefs).Remote(3);
  std::vector<rayd::ObjectRef<int>> refs = *made.Get(kGetTimeoutMs);
  REQUIRE(refs.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(*refs[i].Get(kGetTimeoutMs) == i);
}

TEST_CASE("growing thread pool: grows past blocked work, ends idle threads, joins at shutdown",
          "[unit]") {
  rayd::core::GrowingThreadPool pool(std::chrono::milliseconds(50));
  // 16 items that each wait for all 16 to have started: only a pool that grows runs them.
  constexpr int kItems = 16;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::atomic<int> met{0};
  for (int i = 0; i < kItems; ++i) {
    pool.Post([&] {
      std::unique_lock lock(mu);
      ++started;
      cv.notify_all();
      if (cv.wait_for(lock, std::chrono::seconds(60), [&] { return started == kItems; })) ++met;
    });
  }
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return started == kItems; }));
  }
  CHECK(pool.ThreadCount() >= kItems);
  // Idle threads end on their own.
  CHECK(pool.WaitForThreadCount(0, std::chrono::seconds(60)));
  CHECK(met == kItems);
  // Shutdown runs what is queued, work posted by running work included.
  std::atomic<int> ran{0};
  pool.Post([&] {
    ++ran;
    pool.Post([&] { ++ran; });
  });
  pool.Shutdown();
  CHECK(ran == 2);
}

}  // namespace
