// Arena and ObjectStore against a real memfd arena, real spill files in a temporary directory
// and a real EventLoop. Tests synchronise by running the loop until a condition holds (with
// deadlines), never by sleeping.

#include "rayd/object_store/object_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rayd/object_store/arena.h"
#include "test_util.h"

namespace rayd::object_store {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr Millis kWait{10000};
constexpr size_t kMiB = 1 << 20;

// Runs `start(callback)`, then the loop until the callback has run; returns what it got.
template <typename T, typename Start>
Result<T> Await(EventLoop& loop, Start&& start) {
  auto got = std::make_shared<std::optional<Result<T>>>();
  start([got](Result<T> r) {
    CHECK_FALSE(got->has_value());  // callbacks run exactly once
    got->emplace(std::move(r));
  });
  REQUIRE(loop.RunUntil([&] { return got->has_value(); }, kWait));
  return std::move(**got);
}

uint8_t PatternByte(int seed, size_t i) {
  return static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 12));
}

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t PatternChecksum(int seed, size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = PatternByte(seed, i);
  return Fnv1a(bytes.data(), size);
}

size_t CountFiles(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) n += entry.is_regular_file() ? 1 : 0;
  return n;
}

// One store over a small arena, with synchronous wrappers for readable tests. The loop is
// declared first so that it outlives the store.
class Fixture {
 public:
  explicit Fixture(size_t capacity, Millis create_timeout = kWait, std::string spill_dir = "") {
    StoreOptions options;
    options.capacity = capacity;
    options.arena_name = "rayd-object-store-test";
    options.spill_dir = spill_dir.empty() ? tmp_.path() + "/spill" : spill_dir;
    options.create_timeout = create_timeout;
    options.populate_ahead = 1 * kMiB;
    spill_dir_ = options.spill_dir;
    auto store = ObjectStore::Create(loop_, options);
    REQUIRE(store.ok());
    store_ = std::move(*store);
  }

  EventLoop& loop() { return loop_; }
  ObjectStore& store() { return *store_; }
  const std::string& spill_dir() const { return spill_dir_; }
  const std::string& tmp() const { return tmp_.path(); }
  void DestroyStore() { store_.reset(); }

  Result<Slice> Create(const ObjectId& id, size_t size, bool primary = true) {
    return Await<Slice>(loop_, [&](auto cb) { store_->CreateObject(id, size, primary, "me", cb); });
  }
  Result<Slice> Get(const ObjectId& id, ClientId client = 1) {
    return Await<Slice>(loop_, [&](auto cb) { store_->GetAndPin(id, client, cb); });
  }
  // Creates, fills with the pattern for `seed`, and seals.
  ObjectId Put(size_t size, int seed, bool primary = true) {
    ObjectId id = ObjectId::FromRandom();
    auto slice = Create(id, size, primary);
    REQUIRE(slice.ok());
    uint8_t* p = store_->arena().base() + slice->offset;
    for (size_t i = 0; i < size; ++i) p[i] = PatternByte(seed, i);
    REQUIRE(store_->Seal(id).ok());
    return id;
  }
  // Pins, checks the bytes against the pattern for `seed`, and unpins.
  void Verify(const ObjectId& id, size_t size, int seed, ClientId client = 7) {
    auto slice = Get(id, client);
    REQUIRE(slice.ok());
    REQUIRE(slice->size == size);
    CHECK(Fnv1a(store_->arena().base() + slice->offset, size) == PatternChecksum(seed, size));
    store_->Unpin(id, client);
  }
  std::optional<ObjectRecord> Record(const ObjectId& id) {
    for (auto& r : store_->List())
      if (r.id == id) return r;
    return std::nullopt;
  }

 private:
  testing::TempDir tmp_;
  std::string spill_dir_;
  EventLoop loop_;
  std::unique_ptr<ObjectStore> store_;
};

// ---- Arena ------------------------------------------------------------------------------

TEST_CASE("arena populates up to a watermark and is shared through its descriptor", "[arena]") {
  auto arena = Arena::Create(8 * kMiB + 1, "rayd-arena-test");
  REQUIRE(arena.ok());
  Arena& a = **arena;
  CHECK(a.size() == 8 * kMiB + static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  CHECK(a.populated() == 0);  // nothing touched at creation
  a.Populate(100);
  CHECK(a.populated() == static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  a.Populate(a.size() * 2);  // clamped
  CHECK(a.populated() == a.size());
  CHECK(a.Contains(a.base(), a.size()));
  CHECK_FALSE(a.Contains(a.base() + 1, a.size()));
  CHECK_FALSE(a.Contains(a.base() - 1, 1));

  std::memcpy(a.base() + 4096, "hello", 5);
  auto mapped = Arena::Map(dup(a.fd()), a.size());
  REQUIRE(mapped.ok());
  CHECK(std::memcmp((*mapped)->base() + 4096, "hello", 5) == 0);
  (*mapped)->base()[10] = 42;  // and back
  CHECK(a.base()[10] == 42);
}

TEST_CASE("arena populates ahead on a background thread", "[arena]") {
  auto arena = Arena::Create(16 * kMiB, "rayd-arena-test");
  REQUIRE(arena.ok());
  (*arena)->PopulateAheadAsync(4 * kMiB);
  (*arena)->PopulateAheadAsync(12 * kMiB);  // raises the target
  CHECK(testing::WaitFor([&] { return (*arena)->populated() >= 12 * kMiB; }, kWait));
  CHECK((*arena)->populated() <= 16 * kMiB);
  // Destroying it while the thread waits for work joins cleanly (the test would hang if not).
}

TEST_CASE("arena rejects bad sizes and descriptors", "[arena]") {
  CHECK(Arena::Create(0, "x").status().code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(Arena::Map(-1, 4096).ok());
}

// ---- Store basics -------------------------------------------------------------------------

TEST_CASE("store creates, seals, pins, unpins and deletes objects", "[store]") {
  Fixture f(8 * kMiB);
  ObjectStore& store = f.store();
  const ObjectId id = ObjectId::FromRandom();

  auto slice = f.Create(id, 1000);
  REQUIRE(slice.ok());
  CHECK(slice->size == 1000);
  CHECK(slice->offset % 64 == 0);
  CHECK_FALSE(store.Contains(id));  // not sealed yet
  auto rec = f.Record(id);
  REQUIRE(rec);
  CHECK(rec->state == ObjectState::kCreating);
  CHECK(rec->owner == "me");
  CHECK(rec->primary);

  uint8_t* p = store.arena().base() + slice->offset;
  for (size_t i = 0; i < 1000; ++i) p[i] = PatternByte(3, i);
  REQUIRE(store.Seal(id).ok());
  CHECK(store.Seal(id).code() == StatusCode::kInvalidArgument);
  CHECK(store.Contains(id));
  CHECK(f.Create(id, 10).status().code() == StatusCode::kAlreadyExists);

  auto got = f.Get(id, 1);
  REQUIRE(got.ok());
  CHECK(got->offset == slice->offset);
  CHECK(Fnv1a(store.arena().base() + got->offset, 1000) == PatternChecksum(3, 1000));
  REQUIRE(f.Get(id, 2).ok());
  REQUIRE(f.Get(id, 2).ok());
  CHECK(f.Record(id)->pins == 3);
  store.Unpin(id, 2);
  store.Unpin(id, 9);  // not pinned by 9: ignored
  CHECK(f.Record(id)->pins == 2);
  store.UnpinAll(2);
  store.UnpinAll(1);
  CHECK(f.Record(id)->pins == 0);

  StoreStats stats = store.Stats();
  CHECK(stats.capacity == 8 * kMiB);
  CHECK(stats.used == 1024);
  CHECK(stats.num_objects == 1);
  CHECK(stats.num_in_memory == 1);
  CHECK(stats.num_primary == 1);
  CHECK(store.NumPrimary() == 1);

  store.Delete(id);
  CHECK_FALSE(store.Contains(id));
  CHECK(store.Stats().used == 0);
  CHECK(store.NumPrimary() == 0);
  CHECK(store.List().empty());
  CHECK(f.Get(id).status().code() == StatusCode::kNotFound);
  store.Delete(id);  // unknown: no-op
  CHECK(f.Get(ObjectId::FromRandom()).status().code() == StatusCode::kNotFound);
}

TEST_CASE("store answers GetAndPin on a creating object at Seal, and Abort cancels", "[store]") {
  Fixture f(8 * kMiB);
  ObjectStore& store = f.store();
  const ObjectId id = ObjectId::FromRandom();
  REQUIRE(f.Create(id, 4096).ok());

  std::vector<Result<Slice>> answers;
  store.GetAndPin(id, 1, [&](Result<Slice> r) { answers.push_back(std::move(r)); });
  store.GetAndPin(id, 2, [&](Result<Slice> r) { answers.push_back(std::move(r)); });
  CHECK(answers.empty());

  SECTION("seal wakes and pins every waiter") {
    REQUIRE(store.Seal(id).ok());
    REQUIRE(answers.size() == 2);
    CHECK(answers[0].ok());
    CHECK(answers[1].ok());
    CHECK(f.Record(id)->pins == 2);
  }
  SECTION("abort fails the waiters with Cancelled and frees the memory") {
    store.Abort(id);
    REQUIRE(answers.size() == 2);
    CHECK(answers[0].status().code() == StatusCode::kCancelled);
    CHECK(answers[1].status().code() == StatusCode::kCancelled);
    CHECK(store.Stats().used == 0);
    CHECK(store.List().empty());
    CHECK(f.Get(id).status().code() == StatusCode::kNotFound);
  }
}

TEST_CASE("store defers deleting a pinned object until the last unpin", "[store]") {
  Fixture f(8 * kMiB);
  ObjectStore& store = f.store();
  const ObjectId id = f.Put(kMiB, 1);
  REQUIRE(f.Get(id, 1).ok());
  REQUIRE(f.Get(id, 2).ok());
  store.Delete(id);
  CHECK_FALSE(store.Contains(id));
  CHECK(f.Get(id, 3).status().code() == StatusCode::kNotFound);
  CHECK(store.List().empty());
  CHECK(store.Stats().used == kMiB);  // still held by the readers
  // The bytes are still there for the readers.
  CHECK(store.arena().base()[0] == PatternByte(1, 0));
  store.Unpin(id, 1);
  CHECK(store.Stats().used == kMiB);
  store.Unpin(id, 2);
  CHECK(store.Stats().used == 0);
  // The id is free again.
  CHECK(f.Create(id, 10).ok());
}

TEST_CASE("store rejects an object larger than the arena at once", "[store]") {
  Fixture f(8 * kMiB);
  std::optional<Result<Slice>> got;
  f.store().CreateObject(ObjectId::FromRandom(), 16 * kMiB, true, "me",
                         [&](Result<Slice> r) { got.emplace(std::move(r)); });
  REQUIRE(got.has_value());  // no waiting at all
  CHECK(got->status().code() == StatusCode::kResourceExhausted);
  CHECK(got->status().message() ==
        "object of 16.0 MiB can never fit in the object store (8.0 MiB)");
}

// ---- Eviction ------------------------------------------------------------------------------

TEST_CASE("store evicts unpinned secondary copies in LRU order", "[store]") {
  Fixture f(3 * kMiB);
  ObjectStore& store = f.store();
  const ObjectId a = f.Put(kMiB, 1, /*primary=*/false);
  const ObjectId b = f.Put(kMiB, 2, false);
  const ObjectId c = f.Put(kMiB, 3, false);
  f.Verify(a, kMiB, 1);  // touch a: b is now the least recently used

  const ObjectId d = f.Put(kMiB, 4, false);
  CHECK_FALSE(store.Contains(b));
  CHECK(store.Contains(a));
  CHECK(store.Contains(c));
  CHECK(store.Stats().total_evicted == 1);

  const ObjectId e = f.Put(kMiB, 5, false);
  CHECK_FALSE(store.Contains(c));
  CHECK(store.Contains(a));
  f.Verify(a, kMiB, 1);
  f.Verify(d, kMiB, 4);
  f.Verify(e, kMiB, 5);
  CHECK(store.Stats().total_evicted == 2);
  CHECK(CountFiles(f.spill_dir()) == 0);  // secondary copies are dropped, never spilled
}

TEST_CASE("store never evicts or spills pinned objects, and a create that cannot fit times out",
          "[store]") {
  Fixture f(8 * kMiB, 200ms);
  ObjectStore& store = f.store();
  const ObjectId primary = f.Put(3 * kMiB, 1, true);
  const ObjectId secondary = f.Put(3 * kMiB, 2, false);
  REQUIRE(f.Get(primary, 1).ok());
  REQUIRE(f.Get(secondary, 1).ok());

  const auto start = Clock::now();
  auto r = f.Create(ObjectId::FromRandom(), 3 * kMiB);
  CHECK(Clock::now() - start >= 190ms);  // libuv timers have millisecond resolution
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(r.status().message(), Catch::Contains("6.0 MiB pinned"));
  CHECK(store.Stats().total_evicted == 0);
  CHECK(store.Stats().total_spilled == 0);
  CHECK(CountFiles(f.spill_dir()) == 0);
  CHECK(store.Stats().num_objects == 2);  // the failed create left nothing behind

  SECTION("a waiting create is served when an unpin makes room") {
    std::optional<Result<Slice>> got;
    const ObjectId late = ObjectId::FromRandom();
    store.CreateObject(late, 3 * kMiB, true, "me",
                       [&](Result<Slice> s) { got.emplace(std::move(s)); });
    CHECK_FALSE(got.has_value());
    store.Unpin(secondary, 1);  // evictable now
    REQUIRE(f.loop().RunUntil([&] { return got.has_value(); }, kWait));
    CHECK(got->ok());
    CHECK_FALSE(store.Contains(secondary));
    f.Verify(primary, 3 * kMiB, 1);
  }
  SECTION("an unpinned primary copy is spilled for a waiting create") {
    std::optional<Result<Slice>> got;
    store.CreateObject(ObjectId::FromRandom(), 3 * kMiB, true, "me",
                       [&](Result<Slice> s) { got.emplace(std::move(s)); });
    store.UnpinAll(1);
    REQUIRE(f.loop().RunUntil([&] { return got.has_value(); }, kWait));
    CHECK(got->ok());
    f.Verify(primary, 3 * kMiB, 1);
  }
}

// ---- Spilling --------------------------------------------------------------------------------

TEST_CASE("store spills primary copies under memory pressure and restores them on Get", "[store]") {
  Fixture f(8 * kMiB);
  ObjectStore& store = f.store();
  constexpr size_t kSize = 3 * kMiB;
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(f.Put(kSize, 10 + i));

  StoreStats stats = store.Stats();
  CHECK(stats.num_objects == 5);
  CHECK(stats.num_in_memory == 2);
  CHECK(stats.num_spilled == 3);
  CHECK(stats.total_spilled == 3);
  CHECK(stats.spilled_bytes == 3 * kSize);
  CHECK(CountFiles(f.spill_dir()) == 3);
  auto first = f.Record(ids[0]);  // the least recently used went first
  REQUIRE(first);
  CHECK(first->state == ObjectState::kSpilled);
  CHECK_FALSE(first->in_memory);
  CHECK(first->spill_path == f.spill_dir() + "/" + ids[0].Hex());
  CHECK(fs::file_size(first->spill_path) == kSize);
  for (const auto& id : ids) CHECK(store.Contains(id));

  for (int i = 0; i < 5; ++i) f.Verify(ids[i], kSize, 10 + i);
  const StoreStats after_first_round = store.Stats();
  CHECK(after_first_round.total_restored == 4);  // 0, 1, 2 and 3, which made room for 0
  CHECK(after_first_round.total_spilled == 4);
  for (int i = 0; i < 5; ++i) f.Verify(ids[i], kSize, 10 + i);
  stats = store.Stats();
  CHECK(stats.total_restored > after_first_round.total_restored);
  // Restored copies keep their file: they are evicted again, not rewritten.
  CHECK(stats.total_spilled == after_first_round.total_spilled);
  CHECK(CountFiles(f.spill_dir()) == stats.total_spilled);

  // Deleting a spilled object removes its file.
  const ObjectId gone = ids[0];
  const std::string path = f.spill_dir() + "/" + gone.Hex();
  REQUIRE(fs::exists(path));
  store.Delete(gone);
  CHECK_FALSE(store.Contains(gone));
  CHECK(testing::WaitFor([&] { return !fs::exists(path); }, kWait));

  f.DestroyStore();  // removes the spill files it made
  CHECK(CountFiles(f.spill_dir()) == 0);
}

TEST_CASE("concurrent Gets of a spilled object share one restore", "[store]") {
  Fixture f(8 * kMiB);
  ObjectStore& store = f.store();
  const ObjectId a = f.Put(3 * kMiB, 1);
  f.Put(3 * kMiB, 2);
  f.Put(3 * kMiB, 3);  // spills a
  REQUIRE(f.Record(a)->state == ObjectState::kSpilled);

  std::vector<Result<Slice>> answers;
  for (ClientId c : {1, 2, 3}) {
    store.GetAndPin(a, c, [&](Result<Slice> r) { answers.push_back(std::move(r)); });
  }
  REQUIRE(f.loop().RunUntil([&] { return answers.size() == 3; }, kWait));
  for (auto& r : answers) {
    REQUIRE(r.ok());
    CHECK(r->offset == answers[0]->offset);
  }
  CHECK(Fnv1a(store.arena().base() + answers[0]->offset, 3 * kMiB) == PatternChecksum(1, 3 * kMiB));
  CHECK(store.Stats().total_restored == 1);
  auto rec = f.Record(a);
  CHECK(rec->pins == 3);
  CHECK(rec->in_memory);
  CHECK(rec->state == ObjectState::kSealed);
  CHECK_FALSE(rec->spill_path.empty());
}

TEST_CASE("store reports a broken spill directory instead of hanging", "[store]") {
  testing::TempDir tmp;
  const std::string not_a_dir = tmp.path() + "/file";
  std::ofstream(not_a_dir) << "x";
  Fixture f(8 * kMiB, kWait, not_a_dir + "/spill");
  ObjectStore& store = f.store();
  const ObjectId a = f.Put(3 * kMiB, 1);
  f.Put(3 * kMiB, 2);

  const auto start = Clock::now();
  auto r = f.Create(ObjectId::FromRandom(), 3 * kMiB);
  CHECK(Clock::now() - start < kWait / 2);  // the spill error, not the create timeout
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(r.status().message(), Catch::Contains("spilling to " + not_a_dir + "/spill failed"));
  CHECK_THAT(r.status().message(), Catch::Contains("Not a directory"));

  // The next create that needs spilling fails at once, without another attempt.
  std::optional<Result<Slice>> got;
  store.CreateObject(ObjectId::FromRandom(), 3 * kMiB, true, "me",
                     [&](Result<Slice> s) { got.emplace(std::move(s)); });
  REQUIRE(got.has_value());
  CHECK_THAT(got->status().message(), Catch::Contains("spilling to"));

  // Objects are intact, and a delete lets creates in again.
  f.Verify(a, 3 * kMiB, 1);
  CHECK(store.Stats().total_spilled == 0);
  store.Delete(a);
  CHECK(f.Create(ObjectId::FromRandom(), 3 * kMiB).ok());
}

TEST_CASE("store waits for unpins when spilling is off", "[store]") {
  // An empty spill_dir turns spilling off.
  EventLoop loop;
  StoreOptions options;
  options.capacity = 4 * kMiB;
  options.create_timeout = 100ms;
  auto store = ObjectStore::Create(loop, options);
  REQUIRE(store.ok());
  auto create = [&](const ObjectId& id) {
    return Await<Slice>(loop, [&](auto cb) { (*store)->CreateObject(id, 3 * kMiB, true, "", cb); });
  };
  const ObjectId a = ObjectId::FromRandom();
  REQUIRE(create(a).ok());
  REQUIRE((*store)->Seal(a).ok());
  auto r = create(ObjectId::FromRandom());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK((*store)->Contains(a));
  (*store)->Delete(a);
  CHECK(create(ObjectId::FromRandom()).ok());
}

TEST_CASE("a client that goes away loses its pins and its waiting Gets", "[store]") {
  Fixture f(8 * kMiB);
  ObjectStore& store = f.store();
  const ObjectId sealed = f.Put(kMiB, 1);
  const ObjectId creating = ObjectId::FromRandom();
  REQUIRE(f.Create(creating, kMiB).ok());
  REQUIRE(f.Get(sealed, 5).ok());
  std::optional<Result<Slice>> waiting;
  store.GetAndPin(creating, 5, [&](Result<Slice> r) { waiting.emplace(std::move(r)); });
  store.UnpinAll(5);
  CHECK(f.Record(sealed)->pins == 0);
  REQUIRE(waiting.has_value());
  CHECK(waiting->status().code() == StatusCode::kCancelled);
  REQUIRE(store.Seal(creating).ok());
  CHECK(f.Record(creating)->pins == 0);
}

}  // namespace
}  // namespace rayd::object_store
