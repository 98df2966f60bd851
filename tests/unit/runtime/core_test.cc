// The core worker's own pieces, without a cluster: the reference counter over a real memory
// store.

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "core/memory_store.h"
#include "core/reference_counter.h"

namespace rayd::core {
namespace {

internal::TaskArg ValueArg(std::string bytes) {
  internal::TaskArg a;
  a.value = std::move(bytes);
  return a;
}

internal::TaskArg RefArg(const ObjectId& id) {
  internal::TaskArg a;
  a.kind = internal::TaskArg::Kind::kRef;
  a.ref = id;
  a.owner_address = "127.0.0.1:1";
  return a;
}

TaskSpec Spec(std::vector<internal::TaskArg> args, int max_retries = 0) {
  TaskSpec spec;
  spec.task_id = TaskId::FromRandom();
  spec.function_name = "F";
  spec.args = std::move(args);
  spec.return_id = ObjectId::FromRandom();
  spec.max_retries = max_retries;
  return spec;
}

internal::ObjectValue Value(std::string data) {
  internal::ObjectValue v;
  v.data = std::move(data);
  return v;
}

struct Fixture {
  EventLoop loop;
  MemoryStore store{loop};
  ReferenceCounter refs{store};
};

}  // namespace

TEST_CASE("a task's ref arguments stay alive until its result arrives, then go", "[core]") {
  Fixture f;
  const ObjectId arg = ObjectId::FromRandom();
  f.store.AddRef(arg);  // the caller's handle
  f.store.Put(arg, Value("x"));
  const TaskSpec spec = Spec({RefArg(arg), ValueArg("1"), RefArg(arg)});

  f.refs.PinArgs(spec);
  CHECK(f.store.RefCount(arg) == 3);  // the handle and one per ref argument
  f.store.RemoveRef(arg);             // the caller drops its handle while the task runs
  CHECK(f.store.Contains(arg));
  CHECK(f.refs.num_pinned_tasks() == 1);

  f.refs.ReleaseArgs(spec.return_id);
  CHECK_FALSE(f.store.Known(arg));  // the last reference went: freed
  CHECK(f.refs.num_pinned_tasks() == 0);
  f.refs.ReleaseArgs(spec.return_id);  // a second result (a retry's) releases nothing more
  CHECK_FALSE(f.store.Known(arg));

  f.refs.PinArgs(Spec({ValueArg("only values")}));
  CHECK(f.refs.num_pinned_tasks() == 0);
}

TEST_CASE("lineage: only tasks of value arguments with retries left run again", "[core]") {
  Fixture f;
  TaskSpec twice = Spec({ValueArg("a")}, 2);
  f.refs.RecordLineage(twice);
  auto first = f.refs.TakeRetry(twice.return_id);
  REQUIRE(first);
  CHECK(first->attempt == 1);
  CHECK(first->function_name == "F");
  auto second = f.refs.TakeRetry(twice.return_id);
  REQUIRE(second);
  CHECK(second->attempt == 2);
  CHECK_FALSE(f.refs.TakeRetry(twice.return_id));  // no attempts left
  f.refs.RecordLineage(*second);  // the rerun's result, stored again: the count stays spent
  CHECK_FALSE(f.refs.TakeRetry(twice.return_id));
  CHECK(ReferenceCounter::CanReconstruct(twice));

  TaskSpec no_retries = Spec({ValueArg("a")}, 0);
  f.refs.RecordLineage(no_retries);
  CHECK_FALSE(f.refs.HasLineage(no_retries.return_id));

  TaskSpec with_ref = Spec({RefArg(ObjectId::FromRandom())}, 3);
  f.refs.RecordLineage(with_ref);  // its argument may be gone by the time it is lost
  CHECK_FALSE(f.refs.HasLineage(with_ref.return_id));
  CHECK_FALSE(ReferenceCounter::CanReconstruct(with_ref));

  TaskSpec unlimited = Spec({}, -1);
  f.refs.RecordLineage(unlimited);
  for (int i = 1; i <= 50; ++i) {
    auto retry = f.refs.TakeRetry(unlimited.return_id);
    REQUIRE(retry);
    CHECK(retry->attempt == i);
  }
  f.refs.ForgetLineage(unlimited.return_id);
  CHECK_FALSE(f.refs.TakeRetry(unlimited.return_id));
}

TEST_CASE("each borrower holds one reference on the owner's object until it is done", "[core]") {
  Fixture f;
  const ObjectId id = ObjectId::FromRandom();
  f.store.AddRef(id);  // the owner's handle
  f.store.Put(id, Value("v"));

  CHECK(f.refs.AddBorrower(id, "10.0.0.2:7000"));
  CHECK(f.refs.AddBorrower(id, "10.0.0.2:7000"));  // said twice, counted once
  CHECK(f.refs.AddBorrower(id, "10.0.0.3:7000"));
  CHECK(f.refs.num_borrowers(id) == 2);
  CHECK(f.store.RefCount(id) == 3);

  const ObjectId unknown = ObjectId::FromRandom();
  CHECK_FALSE(f.refs.AddBorrower(unknown, "10.0.0.2:7000"));  // freed already, or never ours
  CHECK_FALSE(f.store.Known(unknown));

  f.store.RemoveRef(id);  // the owner drops its handle: the borrowers keep the value
  CHECK(f.store.Contains(id));
  f.refs.RemoveBorrower(id, "10.0.0.9:7000");  // not a borrower: nothing changes
  CHECK(f.store.RefCount(id) == 2);
  f.refs.RemoveBorrower(id, "10.0.0.2:7000");
  f.refs.RemoveBorrower(id, "10.0.0.2:7000");  // done twice, released once
  CHECK(f.store.RefCount(id) == 1);
  f.refs.RemoveBorrower(id, "10.0.0.3:7000");
  CHECK_FALSE(f.store.Known(id));
  CHECK(f.refs.num_borrowers(id) == 0);
}

TEST_CASE("refs a task kept are registered once per owner and released when unreferenced",
          "[core]") {
  Fixture f;
  std::vector<std::string> told;  // owners told "done", as the core worker's hook does
  f.store.SetHooks(nullptr, nullptr, [&](const ObjectId& id) {
    if (auto owner = f.refs.ReleaseBorrow(id)) told.push_back(*owner);
  });
  const ObjectId kept_a = ObjectId::FromRandom(), kept_b = ObjectId::FromRandom();
  const ObjectId dropped = ObjectId::FromRandom(), ownerless = ObjectId::FromRandom();
  for (const ObjectId& id : {kept_a, kept_b, ownerless}) f.store.AddRef(id);
  std::vector<std::pair<ObjectId, std::string>> received = {
      {kept_a, "owner-1"}, {dropped, "owner-1"}, {kept_b, "owner-2"}, {ownerless, ""}};

  auto by_owner = f.refs.KeepBorrows(received);
  REQUIRE(by_owner.size() == 2);
  CHECK(by_owner["owner-1"] == std::vector<ObjectId>{kept_a});
  CHECK(by_owner["owner-2"] == std::vector<ObjectId>{kept_b});
  CHECK(f.refs.KeepBorrows(received).empty());  // registered already

  CHECK_FALSE(f.refs.ReleaseBorrow(kept_a));  // still referenced here
  f.store.RemoveRef(kept_a);
  CHECK(told == std::vector<std::string>{"owner-1"});
  f.store.AddRef(kept_a);
  f.store.RemoveRef(kept_a);  // unreferenced again: the owner was told once
  CHECK(told.size() == 1);
  f.store.RemoveRef(ownerless);  // never registered: nobody to tell
  f.store.RemoveRef(kept_b);
  CHECK(told == std::vector<std::string>{"owner-1", "owner-2"});
}

TEST_CASE("pins taken and released from many threads balance", "[core]") {
  Fixture f;
  const ObjectId shared = ObjectId::FromRandom();
  f.store.AddRef(shared);
  f.store.Put(shared, Value("s"));
  constexpr int kThreads = 4, kTasks = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&f, &shared] {
      for (int i = 0; i < kTasks; ++i) {
        TaskSpec spec = Spec({RefArg(shared)});
        f.refs.PinArgs(spec);
        f.refs.ReleaseArgs(spec.return_id);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(f.store.RefCount(shared) == 1);
  CHECK(f.refs.num_pinned_tasks() == 0);
}

}  // namespace rayd::core
