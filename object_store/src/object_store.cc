// How it works. Every object is an Entry in `entries_`, from CreateObject until it is freed.
// Memory comes from the Allocator over the arena. Requests for memory (creates, and restores
// of spilled objects, which are internal creates) wait in `pending_`, a FIFO keyed by arrival
// number; ProcessPending() serves the head whenever memory may have been released, making room
// first by evicting (LRU) and then by starting spills. An entry's bytes never move or go while
// the I/O thread reads or writes them (io != kNone) or a client pins them.
//
// Invariants:
//   - An entry is in `lru_` iff it is sealed, in memory, unpinned, not deleted and without
//     I/O in flight; the front is the least recently used (touch = last unpin, seal, restore).
//   - `allocated` entries own the range at `offset` in `allocator_`.
//   - `spilling_bytes_` sums the sizes of entries being written; `spilled_bytes_` those with a
//     spill file; `num_primary_` counts the primary entries not deleted.

#include "rayd/object_store/object_store.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <filesystem>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "rayd/base/lifetime_guard.h"
#include "rayd/base/logging.h"
#include "rayd/object_store/allocator.h"
#include "spill.h"

namespace rayd::object_store {
namespace {

constexpr size_t kAlignment = 64;
// After a spill fails, creates that need spilling fail at once for this long instead of
// trying (and failing) again; then one more attempt is allowed.
constexpr auto kSpillRetryAfter = std::chrono::seconds(10);

size_t RoundUp(size_t n) { return (std::max<size_t>(n, 1) + kAlignment - 1) & ~(kAlignment - 1); }

std::string FormatBytes(size_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int unit = -1;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string Obj(const ObjectId& id) { return "object " + id.Hex(); }

}  // namespace

struct ObjectStore::Impl {
  enum class Io { kNone, kWaitingForMemory, kReading, kWriting };

  struct Waiter {
    ClientId client;
    GetCallback done;
  };

  struct Entry {
    ObjectId id;
    size_t size = 0;
    bool primary = false;
    std::string owner;
    ObjectState state = ObjectState::kCreating;
    bool allocated = false;  // owns [offset, offset + size) in the allocator
    bool in_memory = false;  // ... and the bytes there are the object's (or being written)
    size_t offset = 0;
    int pins = 0;
    bool deleted = false;  // invisible; freed once unpinned and without I/O
    Io io = Io::kNone;
    std::string spill_path;    // non-empty while a complete spill file exists
    uint64_t pending_seq = 0;  // its request in pending_, or 0
    std::vector<Waiter> waiters;
    bool in_lru = false;
    std::list<ObjectId>::iterator lru_it;
  };

  // A request for memory: a create, or a restore of a spilled object.
  struct Pending {
    ObjectId id;
    size_t size = 0;  // rounded
    bool restore = false;
    CreateCallback done;           // creates only
    std::unique_ptr<Timer> timer;  // armed once the request has to wait
  };

  Impl(EventLoop& loop, const StoreOptions& options, Arena& arena)
      : loop_(loop),
        options_(options),
        arena_(arena),
        allocator_(options.capacity, kAlignment),
        io_(std::make_unique<IoThread>()) {}
  ~Impl();

  void CreateObject(const ObjectId& id, size_t size, bool primary, std::string owner,
                    CreateCallback done);
  Status Seal(const ObjectId& id);
  void Abort(const ObjectId& id);
  void GetAndPin(const ObjectId& id, ClientId client, GetCallback done);
  Result<Slice> TryPin(const ObjectId& id, ClientId client);
  void Unpin(const ObjectId& id, ClientId client);
  void UnpinAll(ClientId client);
  void Delete(const ObjectId& id);
  bool Contains(const ObjectId& id) const;
  std::vector<ObjectRecord> List() const;
  StoreStats Stats() const;
  size_t num_primary() const { return num_primary_; }

 private:
  void Pin(Entry& e, ClientId client);
  void ReleasePins(Entry& e, int n);
  void RefreshLru(Entry& e);
  bool Evictable(const Entry& e) const { return !e.primary || !e.spill_path.empty(); }
  bool Spillable(const Entry& e) const {
    return e.primary && e.spill_path.empty() && !options_.spill_dir.empty();
  }
  std::vector<Waiter> TakeWaiters(Entry& e);
  static void FailWaiters(std::vector<Waiter>& waiters, const Status& status);
  void EraseEntry(Entry& e);

  void Enqueue(Pending p);
  std::optional<Pending> TakePending(uint64_t seq);
  void ProcessPending();
  bool MakeRoom(size_t needed, Status* fatal);
  void Grant(Pending p, size_t offset);
  void FailPending(Pending p, const Status& status);
  void OnPendingTimeout(uint64_t seq);
  Status TimeoutStatus(size_t needed) const;

  void Evict(Entry& e);
  void StartSpill(Entry& e);
  void OnSpillDone(const ObjectId& id, const std::string& path, const Status& status);
  void StartRead(Entry& e);
  void OnReadDone(const ObjectId& id, const Status& status);

  // Member declaration order follows the dependency order.
  EventLoop& loop_;
  const StoreOptions& options_;
  Arena& arena_;
  Allocator allocator_;
  std::unordered_map<ObjectId, Entry> entries_;
  std::unordered_map<ClientId, std::unordered_map<ObjectId, int>> client_pins_;
  std::list<ObjectId> lru_;
  std::map<uint64_t, Pending> pending_;  // by arrival: begin() is served first
  uint64_t next_seq_ = 1;
  bool processing_ = false;  // ProcessPending is on the stack
  bool reprocess_ = false;   // ... and something changed under it
  size_t spilling_bytes_ = 0;
  size_t spilled_bytes_ = 0;
  size_t num_primary_ = 0;
  std::optional<Status> spill_error_;  // the last spill failure, until a spill succeeds
  Clock::time_point spill_error_at_;
  std::unordered_set<std::string> spill_files_;  // written (or being written), not yet removed
  uint64_t total_evicted_ = 0;
  uint64_t total_spilled_ = 0;
  uint64_t total_restored_ = 0;
  // Posted I/O completions may run after the store is gone. Loop thread only.
  LifetimeGuard guard_;
  std::unique_ptr<IoThread> io_;
};

ObjectStore::Impl::~Impl() {
  guard_.Invalidate();
  io_.reset();  // joins; queued file removals still run
  for (const auto& path : spill_files_) RemoveSpillFile(path);
}

// ---- Public operations -------------------------------------------------------------------

void ObjectStore::Impl::CreateObject(const ObjectId& id, size_t size, bool primary,
                                     std::string owner, CreateCallback done) {
  if (auto it = entries_.find(id); it != entries_.end()) {
    done(Status::AlreadyExists(Obj(id) + (it->second.deleted
                                              ? " is being deleted (a client still pins it)"
                                              : " already exists in the object store")));
    return;
  }
  if (size > allocator_.capacity() || RoundUp(size) > allocator_.capacity()) {
    done(Status::ResourceExhausted(
        fmt::format("object of {} can never fit in the object store ({})", FormatBytes(size),
                    FormatBytes(allocator_.capacity()))));
    return;
  }
  Entry& e = entries_[id];
  e.id = id;
  e.size = size;
  e.primary = primary;
  if (primary) ++num_primary_;
  e.owner = std::move(owner);
  Pending p;
  p.id = id;
  p.size = RoundUp(size);
  p.done = std::move(done);
  Enqueue(std::move(p));
}

Status ObjectStore::Impl::Seal(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return Status::NotFound(Obj(id) + " is not in the object store");
  Entry& e = it->second;
  if (e.state != ObjectState::kCreating) return Status::InvalidArgument(Obj(id) + " is sealed");
  if (!e.in_memory) {
    return Status::InvalidArgument(Obj(id) + " cannot be sealed: its create is still waiting");
  }
  if (e.deleted) {
    EraseEntry(e);
    ProcessPending();
    return Status::NotFound(Obj(id) + " was deleted before it was sealed");
  }
  e.state = ObjectState::kSealed;
  std::vector<Waiter> waiters = TakeWaiters(e);
  for (auto& w : waiters) Pin(e, w.client);
  RefreshLru(e);
  const Slice slice{e.offset, e.size};
  for (auto& w : waiters) w.done(slice);
  ProcessPending();  // an unpinned sealed object may be what a waiting create can evict
  return Status::Ok();
}

void ObjectStore::Impl::Abort(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != ObjectState::kCreating) return;
  Entry& e = it->second;
  std::vector<Waiter> waiters = TakeWaiters(e);
  std::optional<Pending> p;
  if (e.pending_seq != 0) p = TakePending(e.pending_seq);
  EraseEntry(e);
  const Status cancelled = Status::Cancelled("the creation of " + Obj(id) + " was aborted");
  FailWaiters(waiters, cancelled);
  if (p) p->done(cancelled);
  ProcessPending();
}

void ObjectStore::Impl::GetAndPin(const ObjectId& id, ClientId client, GetCallback done) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.deleted) {
    done(Status::NotFound(Obj(id) + " is not in the object store"));
    return;
  }
  Entry& e = it->second;
  if (e.state == ObjectState::kSealed && e.in_memory) {
    Pin(e, client);
    done(Slice{e.offset, e.size});
    return;
  }
  // Being created, or spilled: answered by Seal or by the restore.
  e.waiters.push_back({client, std::move(done)});
  if (e.state == ObjectState::kSpilled && e.io == Io::kNone) {
    e.io = Io::kWaitingForMemory;
    Pending p;
    p.id = id;
    p.size = RoundUp(e.size);
    p.restore = true;
    Enqueue(std::move(p));
  }
}

Result<Slice> ObjectStore::Impl::TryPin(const ObjectId& id, ClientId client) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.deleted || it->second.state != ObjectState::kSealed ||
      !it->second.in_memory) {
    return Status::NotFound(Obj(id) + " is not in this node's memory");
  }
  Pin(it->second, client);
  return Slice{it->second.offset, it->second.size};
}

void ObjectStore::Impl::Unpin(const ObjectId& id, ClientId client) {
  auto cit = client_pins_.find(client);
  if (cit == client_pins_.end()) return;
  auto oit = cit->second.find(id);
  if (oit == cit->second.end()) return;
  if (--oit->second == 0) cit->second.erase(oit);
  if (cit->second.empty()) client_pins_.erase(cit);
  ReleasePins(entries_.at(id), 1);
  ProcessPending();
}

void ObjectStore::Impl::UnpinAll(ClientId client) {
  // Requests of this client that are still waiting will never be unpinned: answer them now.
  std::vector<Waiter> dropped;
  for (auto& [id, e] : entries_) {
    auto mine = std::stable_partition(e.waiters.begin(), e.waiters.end(),
                                      [&](const Waiter& w) { return w.client != client; });
    std::move(mine, e.waiters.end(), std::back_inserter(dropped));
    e.waiters.erase(mine, e.waiters.end());
  }
  if (auto cit = client_pins_.find(client); cit != client_pins_.end()) {
    auto pins = std::move(cit->second);
    client_pins_.erase(cit);
    for (const auto& [id, n] : pins) ReleasePins(entries_.at(id), n);
  }
  FailWaiters(dropped, Status::Cancelled("the client went away"));
  ProcessPending();
}

void ObjectStore::Impl::Delete(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.deleted) return;
  Entry& e = it->second;
  e.deleted = true;
  if (e.primary) --num_primary_;
  RefreshLru(e);
  std::vector<Waiter> waiters = TakeWaiters(e);
  std::optional<Pending> p;
  if (e.pending_seq != 0) {
    p = TakePending(e.pending_seq);
    if (p->restore) e.io = Io::kNone;
  }
  // A created object stays until its creator seals or aborts it: the creator writes into it.
  const bool creator_writing = e.state == ObjectState::kCreating && e.in_memory;
  const bool free_now = e.pins == 0 && e.io == Io::kNone && !creator_writing;
  if (free_now) EraseEntry(e);
  FailWaiters(waiters, Status::NotFound(Obj(id) + " was deleted"));
  if (p && !p->restore) p->done(Status::Cancelled(Obj(id) + " was deleted while it waited"));
  if (free_now) ProcessPending();
}

bool ObjectStore::Impl::Contains(const ObjectId& id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && !it->second.deleted && it->second.state != ObjectState::kCreating;
}

std::vector<ObjectRecord> ObjectStore::Impl::List() const {
  std::vector<ObjectRecord> out;
  for (const auto& [id, e] : entries_) {
    if (e.deleted) continue;
    out.push_back({id, e.size, e.state, e.primary, e.in_memory, e.pins, e.owner, e.spill_path});
  }
  return out;
}

StoreStats ObjectStore::Impl::Stats() const {
  StoreStats s;
  s.capacity = allocator_.capacity();
  s.used = allocator_.used();
  s.peak_used = allocator_.peak_used();
  for (const auto& [id, e] : entries_) {
    if (e.deleted) continue;
    ++s.num_objects;
    if (e.in_memory) ++s.num_in_memory;
    if (e.state == ObjectState::kSpilled) ++s.num_spilled;
  }
  s.num_primary = num_primary_;
  s.spilled_bytes = spilled_bytes_;
  s.total_evicted = total_evicted_;
  s.total_spilled = total_spilled_;
  s.total_restored = total_restored_;
  return s;
}

// ---- Entries --------------------------------------------------------------------------------

void ObjectStore::Impl::Pin(Entry& e, ClientId client) {
  ++e.pins;
  ++client_pins_[client][e.id];
  RefreshLru(e);
}

void ObjectStore::Impl::ReleasePins(Entry& e, int n) {
  e.pins -= n;
  RAYD_CHECK(e.pins >= 0);
  if (e.pins > 0) return;
  if (e.deleted && e.io == Io::kNone) {
    EraseEntry(e);
  } else {
    RefreshLru(e);
  }
}

void ObjectStore::Impl::RefreshLru(Entry& e) {
  const bool want = e.state == ObjectState::kSealed && e.in_memory && e.pins == 0 && !e.deleted &&
                    e.io == Io::kNone;
  if (e.in_lru && !want) {
    lru_.erase(e.lru_it);
    e.in_lru = false;
  } else if (!e.in_lru && want) {
    e.lru_it = lru_.insert(lru_.end(), e.id);
    e.in_lru = true;
  }
}

std::vector<ObjectStore::Impl::Waiter> ObjectStore::Impl::TakeWaiters(Entry& e) {
  std::vector<Waiter> out;
  out.swap(e.waiters);
  return out;
}

void ObjectStore::Impl::FailWaiters(std::vector<Waiter>& waiters, const Status& status) {
  for (auto& w : waiters) w.done(status);
  waiters.clear();
}

// Frees everything the entry holds and forgets it. The caller runs ProcessPending afterwards.
void ObjectStore::Impl::EraseEntry(Entry& e) {
  RAYD_CHECK(e.pins == 0 && e.io == Io::kNone && e.pending_seq == 0);
  if (e.primary && !e.deleted) --num_primary_;
  if (e.allocated) allocator_.Free(e.offset);
  if (!e.spill_path.empty()) {
    spilled_bytes_ -= e.size;
    spill_files_.erase(e.spill_path);
    io_->Submit([path = e.spill_path] { RemoveSpillFile(path); }, /*run_at_shutdown=*/true);
  }
  if (e.in_lru) lru_.erase(e.lru_it);
  const ObjectId id = e.id;
  entries_.erase(id);
}

// ---- Waiting for memory ---------------------------------------------------------------------

void ObjectStore::Impl::Enqueue(Pending p) {
  const uint64_t seq = next_seq_++;
  entries_.at(p.id).pending_seq = seq;
  pending_.emplace(seq, std::move(p));
  ProcessPending();
  auto it = pending_.find(seq);
  if (it == pending_.end()) return;
  uv_update_time(loop_.uv());  // the timeout counts from now, not from this iteration's start
  it->second.timer = std::make_unique<Timer>(loop_);
  it->second.timer->Start(options_.create_timeout, Millis(0),
                          [this, seq] { OnPendingTimeout(seq); });
}

std::optional<ObjectStore::Impl::Pending> ObjectStore::Impl::TakePending(uint64_t seq) {
  auto it = pending_.find(seq);
  if (it == pending_.end()) return std::nullopt;
  Pending p = std::move(it->second);
  pending_.erase(it);
  entries_.at(p.id).pending_seq = 0;
  return p;
}

// Serves waiting requests in arrival order while memory can be found for the head. Re-entrant
// calls (from callbacks, or from frees inside) only ask the outer call to go round again.
void ObjectStore::Impl::ProcessPending() {
  if (processing_) {
    reprocess_ = true;
    return;
  }
  processing_ = true;
  do {
    reprocess_ = false;
    while (!pending_.empty()) {
      const uint64_t seq = pending_.begin()->first;
      const size_t size = pending_.begin()->second.size;
      std::optional<size_t> offset = allocator_.Allocate(size);
      Status fatal;
      if (!offset && MakeRoom(size, &fatal)) offset = allocator_.Allocate(size);
      if (!fatal.ok()) {
        FailPending(std::move(*TakePending(seq)), fatal);
        continue;
      }
      if (!offset) break;  // the head waits; so does everyone behind it
      Grant(std::move(*TakePending(seq)), *offset);
    }
  } while (reprocess_);
  processing_ = false;
}

// Evicts, then starts spills, for a request of `needed` bytes. True when it fits now; false
// when it has to wait, with `fatal` set when it can never be served because spilling is broken.
bool ObjectStore::Impl::MakeRoom(size_t needed, Status* fatal) {
  for (auto it = lru_.begin(); it != lru_.end() && allocator_.largest_free() < needed;) {
    Entry& e = entries_.at(*it++);  // advance first: Evict unlinks e
    if (Evictable(e)) Evict(e);
  }
  if (allocator_.largest_free() >= needed) return true;
  // Spills in flight may be enough: wait for them before spilling more.
  if (spilling_bytes_ > 0 && allocator_.largest_free() + spilling_bytes_ >= needed) return false;
  bool any_spillable = false;
  for (const ObjectId& id : lru_) any_spillable = any_spillable || Spillable(entries_.at(id));
  if (!any_spillable) return false;  // only unpins and deletes can help
  if (spill_error_ && Clock::now() - spill_error_at_ < kSpillRetryAfter) {
    *fatal = *spill_error_;
    return false;
  }
  for (auto it = lru_.begin();
       it != lru_.end() && allocator_.largest_free() + spilling_bytes_ < needed;) {
    Entry& e = entries_.at(*it++);  // advance first: StartSpill unlinks e
    if (Spillable(e)) StartSpill(e);
  }
  return false;
}

void ObjectStore::Impl::Grant(Pending p, size_t offset) {
  Entry& e = entries_.at(p.id);
  e.allocated = true;
  e.offset = offset;
  // Cheap when the background thread got there first, which it usually has.
  arena_.Populate(offset + p.size);
  arena_.PopulateAheadAsync(allocator_.high_water() + options_.populate_ahead);
  if (p.restore) {
    StartRead(e);
    return;
  }
  e.in_memory = true;
  p.done(Slice{offset, e.size});
}

void ObjectStore::Impl::FailPending(Pending p, const Status& status) {
  Entry& e = entries_.at(p.id);
  std::vector<Waiter> waiters = TakeWaiters(e);
  if (p.restore) {
    e.io = Io::kNone;
    FailWaiters(waiters, status.WithContext("restoring " + Obj(p.id)));
    return;
  }
  EraseEntry(e);
  FailWaiters(waiters,
              Status::Cancelled("the creation of " + Obj(p.id) + " failed: " + status.message()));
  p.done(status);
}

void ObjectStore::Impl::OnPendingTimeout(uint64_t seq) {
  std::optional<Pending> p = TakePending(seq);
  if (!p) return;
  spdlog::warn("{} of {} waited {} ms for memory; giving up", p->restore ? "restore" : "create",
               Obj(p->id), options_.create_timeout.count());
  // `p` owns the timer running this callback; it is safe to close it from here.
  Status status = TimeoutStatus(p->size);
  FailPending(std::move(*p), status);
}

Status ObjectStore::Impl::TimeoutStatus(size_t needed) const {
  size_t pinned = 0, creating = 0;
  for (const auto& [id, e] : entries_) {
    if (!e.allocated) continue;
    if (e.pins > 0) pinned += e.size;
    if (e.state == ObjectState::kCreating) creating += e.size;
  }
  return Status::ResourceExhausted(fmt::format(
      "no room for {} in the object store after {} ms: {} of {} in use ({} pinned by readers, "
      "{} being created, {} being spilled), largest free range {}",
      FormatBytes(needed), options_.create_timeout.count(), FormatBytes(allocator_.used()),
      FormatBytes(allocator_.capacity()), FormatBytes(pinned), FormatBytes(creating),
      FormatBytes(spilling_bytes_), FormatBytes(allocator_.largest_free())));
}

// ---- Eviction, spilling and restoring -------------------------------------------------------

void ObjectStore::Impl::Evict(Entry& e) {
  ++total_evicted_;
  spdlog::debug("evicting {} ({})", Obj(e.id), FormatBytes(e.size));
  if (!e.primary) {
    EraseEntry(e);
    return;
  }
  // A primary copy with a spill file: the file is the copy now.
  allocator_.Free(e.offset);
  e.allocated = e.in_memory = false;
  e.state = ObjectState::kSpilled;
  RefreshLru(e);
}

void ObjectStore::Impl::StartSpill(Entry& e) {
  e.io = Io::kWriting;
  RefreshLru(e);
  spilling_bytes_ += e.size;
  std::string path = (std::filesystem::path(options_.spill_dir) / e.id.Hex()).string();
  spill_files_.insert(path);
  // The bytes stay put until OnSpillDone: nothing frees an entry with I/O in flight.
  auto done = guard_([this, id = e.id, path, size = e.size](const Status& s, int64_t ms) {
    if (s.ok()) spdlog::info("spilled {} ({}) to {} in {} ms", Obj(id), FormatBytes(size), path, ms);
    OnSpillDone(id, path, s);
  });
  io_->Submit([this, done, path, dir = options_.spill_dir, data = arena_.base() + e.offset,
               size = e.size] {
    const auto start = Clock::now();
    Status s = WriteSpillFile(dir, path, data, size);
    const auto ms = std::chrono::duration_cast<Millis>(Clock::now() - start).count();
    loop_.Post([done, s, ms] { done(s, static_cast<int64_t>(ms)); });
  });
}

void ObjectStore::Impl::OnSpillDone(const ObjectId& id, const std::string& path,
                                    const Status& status) {
  Entry& e = entries_.at(id);  // entries with I/O in flight are never erased
  spilling_bytes_ -= e.size;
  e.io = Io::kNone;
  if (!status.ok()) {
    spdlog::warn("{}: {}", Obj(id), status.message());
    spill_files_.erase(path);
    spill_error_ = status;
    spill_error_at_ = Clock::now();
  } else {
    spill_error_.reset();
    e.spill_path = path;
    spilled_bytes_ += e.size;
    ++total_spilled_;
    // A client that pinned it meanwhile keeps it in memory; the file makes it evictable later.
    if (!e.deleted && e.pins == 0) {
      allocator_.Free(e.offset);
      e.allocated = e.in_memory = false;
      e.state = ObjectState::kSpilled;
    }
  }
  if (e.deleted && e.pins == 0) {
    EraseEntry(e);
  } else {
    RefreshLru(e);
  }
  ProcessPending();
}

void ObjectStore::Impl::StartRead(Entry& e) {
  e.io = Io::kReading;
  auto done = guard_([this, id = e.id, path = e.spill_path, size = e.size](const Status& s,
                                                                            int64_t ms) {
    if (s.ok()) {
      spdlog::info("restored {} ({}) from {} in {} ms", Obj(id), FormatBytes(size), path, ms);
    }
    OnReadDone(id, s);
  });
  io_->Submit([this, done, path = e.spill_path, out = arena_.base() + e.offset, size = e.size] {
    const auto start = Clock::now();
    Status s = ReadSpillFile(path, out, size);
    const auto ms = std::chrono::duration_cast<Millis>(Clock::now() - start).count();
    loop_.Post([done, s, ms] { done(s, static_cast<int64_t>(ms)); });
  });
}

void ObjectStore::Impl::OnReadDone(const ObjectId& id, const Status& status) {
  Entry& e = entries_.at(id);  // entries with I/O in flight are never erased
  e.io = Io::kNone;
  if (e.deleted) {  // its waiters were answered by Delete
    EraseEntry(e);
    ProcessPending();
    return;
  }
  std::vector<Waiter> waiters = TakeWaiters(e);
  if (!status.ok()) {
    spdlog::warn("{}: {}", Obj(id), status.message());
    allocator_.Free(e.offset);
    e.allocated = false;
    FailWaiters(waiters, status);
    ProcessPending();
    return;
  }
  e.in_memory = true;
  e.state = ObjectState::kSealed;
  ++total_restored_;
  for (auto& w : waiters) Pin(e, w.client);
  RefreshLru(e);
  const Slice slice{e.offset, e.size};
  for (auto& w : waiters) w.done(slice);
}

// ---- ObjectStore ----------------------------------------------------------------------------

Result<std::unique_ptr<ObjectStore>> ObjectStore::Create(EventLoop& loop, StoreOptions options) {
  if (options.capacity == 0) return Status::InvalidArgument("the object store needs a capacity");
  RAYD_ASSIGN_OR_RETURN(auto arena, Arena::Create(options.capacity, options.arena_name));
  return std::unique_ptr<ObjectStore>(new ObjectStore(loop, std::move(options), std::move(arena)));
}

ObjectStore::ObjectStore(EventLoop& loop, StoreOptions options, std::unique_ptr<Arena> arena)
    : loop_(loop),
      options_(std::move(options)),
      arena_(std::move(arena)),
      impl_(std::make_unique<Impl>(loop_, options_, *arena_)) {
  arena_->PopulateAheadAsync(options_.populate_ahead);
}

ObjectStore::~ObjectStore() = default;

void ObjectStore::CreateObject(const ObjectId& id, size_t size, bool primary, std::string owner,
                               CreateCallback done) {
  impl_->CreateObject(id, size, primary, std::move(owner), std::move(done));
}
Status ObjectStore::Seal(const ObjectId& id) { return impl_->Seal(id); }
void ObjectStore::Abort(const ObjectId& id) { impl_->Abort(id); }
void ObjectStore::GetAndPin(const ObjectId& id, ClientId client, GetCallback done) {
  impl_->GetAndPin(id, client, std::move(done));
}
Result<Slice> ObjectStore::TryPin(const ObjectId& id, ClientId client) {
  return impl_->TryPin(id, client);
}
void ObjectStore::Unpin(const ObjectId& id, ClientId client) { impl_->Unpin(id, client); }
void ObjectStore::UnpinAll(ClientId client) { impl_->UnpinAll(client); }
void ObjectStore::Delete(const ObjectId& id) { impl_->Delete(id); }
bool ObjectStore::Contains(const ObjectId& id) const { return impl_->Contains(id); }
std::vector<ObjectRecord> ObjectStore::List() const { return impl_->List(); }
StoreStats ObjectStore::Stats() const { return impl_->Stats(); }

size_t ObjectStore::NumPrimary() const { return impl_->num_primary(); }

}  // namespace rayd::object_store
