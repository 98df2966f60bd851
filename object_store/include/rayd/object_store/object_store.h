#pragma once
// ObjectStore: the table of objects in one node's arena (the node daemon owns one). Objects
// are created, written by their creator in place, sealed, and then immutable. Readers pin
// them (per client); pinned objects never move or disappear.
//
// Copies are either primary (the copy the owner counts on: created by a Put or a task return
// on this node) or secondary (pulled from another node; evictable). When a Create does not fit:
//   1. unpinned secondary copies, and primary copies that also have a spill file, are evicted
//      in least-recently-used order;
//   2. then unpinned primary copies are spilled (LRU first) to files in the spill directory on
//      an I/O thread; their memory is freed once the file is written;
//   3. a Create that still does not fit waits, in arrival order, for memory to be released
//      (unpins, deletes, finished spills) and fails after `create_timeout`.
// A Create larger than the whole arena fails at once; so does one while spilling is broken
// (the disk is full, the directory is not writable): the error names the reason, there are no
// endless retries. Spilled objects are restored on the next GetAndPin, transparently.
//
// Threading: every method runs on the loop thread of `loop`; callbacks run on it too, possibly
// before the method returns (when the answer is known at once). Disk I/O runs on the store's
// own I/O thread and comes back through EventLoop::Post.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/base/ids.h"
#include "rayd/base/status.h"
#include "rayd/object_store/arena.h"

namespace rayd::object_store {

using ClientId = uint64_t;  // who pins: the node daemon uses one per connection

struct StoreOptions {
  size_t capacity = 0;                  // arena bytes (> 0)
  std::string arena_name = "rayd-object-store";
  std::string spill_dir;                // created on the first spill; empty: spilling off
  Millis create_timeout{10000};         // how long a Create may wait for memory
  size_t populate_ahead = 64 << 20;     // keep this much beyond the high-water mark populated
};

// Where an object's bytes are in the arena.
struct Slice {
  size_t offset = 0;
  size_t size = 0;
};

enum class ObjectState { kCreating, kSealed, kSpilled };

struct ObjectRecord {  // for `rayd list objects`
  ObjectId id;
  size_t size = 0;
  ObjectState state = ObjectState::kCreating;
  bool primary = false;
  bool in_memory = false;               // false once spilled (until restored)
  int pins = 0;                         // over all clients
  std::string owner;                    // owner's address, as given to Create
  std::string spill_path;               // non-empty while a spill file exists
};

struct StoreStats {
  size_t capacity = 0;
  size_t used = 0;                      // allocated bytes
  size_t peak_used = 0;                 // the most bytes allocated at once since start
  size_t num_objects = 0;               // in memory or spilled
  size_t num_in_memory = 0;
  size_t num_spilled = 0;
  size_t num_primary = 0;               // primary copies (the owner counts on), in memory or spilled
  size_t spilled_bytes = 0;             // bytes currently held in spill files
  uint64_t total_evicted = 0;           // counts since start
  uint64_t total_spilled = 0;
  uint64_t total_restored = 0;
};

class ObjectStore {
 public:
  static Result<std::unique_ptr<ObjectStore>> Create(EventLoop& loop, StoreOptions options);
  ~ObjectStore();  // stops the I/O thread; removes the spill files it made

  Arena& arena() { return *arena_; }

  // Reserves `size` bytes for a new object, evicting and spilling as above. `done` gets the
  // offset once there is room, or: AlreadyExists (the id is taken), ResourceExhausted (can
  // never fit / timed out: the message says how much was needed and what holds the memory),
  // or the spill error. The object is kCreating until Seal; nobody reads it before.
  using CreateCallback = std::function<void(Result<Slice>)>;
  void CreateObject(const ObjectId& id, size_t size, bool primary, std::string owner,
                    CreateCallback done);
  // Makes a created object readable and wakes GetAndPin calls waiting for it.
  Status Seal(const ObjectId& id);
  // The creator gave up: frees an unsealed object; waiters get Aborted.
  void Abort(const ObjectId& id);

  // Pins the object for `client` (each call adds one pin) and gives its place once it is
  // sealed and in memory: at once; after a restore from its spill file; or, while it is being
  // created, once sealed. NotFound if the store doesn't have it (and isn't creating it).
  using GetCallback = std::function<void(Result<Slice>)>;
  void GetAndPin(const ObjectId& id, ClientId client, GetCallback done);
  // Pins the object only if it is sealed and in memory now (no restore, no wait); else
  // NotFound. For senders that must answer at once.
  Result<Slice> TryPin(const ObjectId& id, ClientId client);
  void Unpin(const ObjectId& id, ClientId client);
  void UnpinAll(ClientId client);  // the client went away

  // Frees the object once no client pins it; its spill file is removed. Unknown ids: no-op.
  void Delete(const ObjectId& id);

  bool Contains(const ObjectId& id) const;  // sealed (in memory or spilled)
  std::vector<ObjectRecord> List() const;
  StoreStats Stats() const;  // O(objects)
  // Stats().num_primary in O(1), for a caller that asks often (the node's heartbeat).
  size_t NumPrimary() const;

 private:
  ObjectStore(EventLoop& loop, StoreOptions options, std::unique_ptr<Arena> arena);
  struct Impl;
  EventLoop& loop_;
  StoreOptions options_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rayd::object_store
