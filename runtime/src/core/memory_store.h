#pragma once
// MemoryStore: the objects this process holds — values it owns (task results, Puts) and copies
// of borrowed values fetched from their owners. Small values are held here; large ones live in
// node object stores and are held here as markers (ObjectValue::in_store) with their locations.
//
// Threading: safe from any thread. User threads block in Wait(); the loop thread registers
// callbacks with WhenReady(), which always run on the loop (posted).
//
// Lifetime of an entry: created by the first Put, WhenReady, or AddRef. It is freed when its
// local reference count drops to zero after having been positive (a value that arrives for an
// entry already released is dropped), unless pinned by in-flight work (Pin/Unpin).

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/internal/runtime.h"

namespace rayd::core {

using internal::ObjectValue;

class MemoryStore {
 public:
  // `loop` runs WhenReady callbacks; it must outlive the store.
  explicit MemoryStore(EventLoop& loop) : loop_(loop) {}

  // Stores the value unless one is there already (the first value wins).
  void Put(const ObjectId& id, ObjectValue value);
  std::optional<ObjectValue> TryGet(const ObjectId& id) const;
  bool Contains(const ObjectId& id) const;

  // Blocks until at least `num_ready` of `ids` have values or `deadline` passes; returns the
  // values found (nullopt where none).
  std::vector<std::optional<ObjectValue>> Wait(const std::vector<ObjectId>& ids,
                                               size_t num_ready, Clock::time_point deadline);
  // Runs `cb` on the loop once the value exists.
  void WhenReady(const ObjectId& id, std::function<void(const ObjectValue&)> cb);

  void AddRef(const ObjectId& id);
  void RemoveRef(const ObjectId& id);
  size_t size() const;
  // Every id whose count is above zero, with its count.
  std::vector<std::pair<ObjectId, int>> RefCounts() const;

  // Records another node holding a copy of a stored value; false if there is no such marker.
  bool AddLocation(const ObjectId& id, const internal::ObjectLocation& location);
  // Forgets the value (keeping the references): the object will be produced again.
  void Reset(const ObjectId& id);
  // Whether the store has an entry for the id (a value, or a pending one someone refers to).
  bool Known(const ObjectId& id) const;
  int RefCount(const ObjectId& id) const;
  // What on_put learns of a value that came for an id.
  struct PutEvent {
    bool in_store = false;  // a marker of a value in node object stores
    bool kept = false;      // false: nobody here wants it any more (dropped, or only for
                            // threads still waiting in Wait)
    std::vector<internal::NestedRef> nested;  // the refs inside it
  };
  // Set once, before use. `on_put(id, event)` runs (on the calling thread, outside the lock)
  // after a value is stored or dropped; `on_free` runs on the loop when a marker of a stored
  // value is dropped because no reference to it remains here; `on_unreferenced` runs on the
  // thread that dropped the last reference (outside the lock) whenever the count of an id
  // reaches zero.
  // Set once, before use: `on_arrive(id)` runs on the calling thread before a value for `id`
  // is stored (so what it releases is released before anyone waiting for the value wakes).
  void SetArrivalHook(std::function<void(const ObjectId&)> on_arrive) {
    on_arrive_ = std::move(on_arrive);
  }
  void SetHooks(std::function<void(const ObjectId&, const PutEvent&)> on_put,
                std::function<void(const ObjectId&, const ObjectValue&)> on_free,
                std::function<void(const ObjectId&)> on_unreferenced) {
    on_put_ = std::move(on_put);
    on_free_ = std::move(on_free);
    on_unreferenced_ = std::move(on_unreferenced);
  }

 private:
  // A thread blocked in Wait: woken once `missing` values have arrived, not on every Put.
  // Shared, so that Put can notify it after unlocking mu_ even if its Wait has timed out and
  // returned meanwhile: woken under the lock, the waiter only ran into the held mutex (on a
  // synchronous call's path, a futex wait and wake more for both threads).
  struct Waiter {
    size_t missing = 0;  // guarded by mu_
    std::condition_variable cv;
  };
  struct Entry {
    std::optional<ObjectValue> value;
    std::vector<std::function<void(const ObjectValue&)>> callbacks;
    std::vector<std::shared_ptr<Waiter>> waiters;  // threads in Wait() still needing this value
    int refs = 0;
    bool released = false;  // refs went to zero once: the value is not wanted any more
  };

  // Stores the value (*kept), or drops it when nobody wants it any more; false if the entry
  // already had one. Waiters it completes go to *wake, for the caller to notify unlocked.
  bool PutLocked(const ObjectId& id, ObjectValue value, bool* kept,
                 std::vector<std::shared_ptr<Waiter>>* wake);
  // Drops one reference; true when the count reached zero.
  bool RemoveRefLocked(const ObjectId& id);

  EventLoop& loop_;
  std::function<void(const ObjectId&)> on_arrive_;
  std::function<void(const ObjectId&, const PutEvent&)> on_put_;
  std::function<void(const ObjectId&, const ObjectValue&)> on_free_;
  std::function<void(const ObjectId&)> on_unreferenced_;
  mutable std::mutex mu_;
  std::unordered_map<ObjectId, Entry> entries_;  // guarded by mu_
};

}  // namespace rayd::core
