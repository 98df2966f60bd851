#pragma once
// The data server's reused batch buffers: a few memfds it copies batches into, each mapped once by
// the rank's process (through /proc/<pid>/fd/<fd>) and kept mapped there. A slot is leased to one
// batch until the process says its arrays are gone, then holds a later one. A batch through a new
// /dev/shm file paid, each time, for the file made, written and removed, its fresh pages zeroed
// and faulted in, and the mapping made and torn down; a slot pays that once.
//
// Threading: the server thread's.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rayd::train::internal {

class BatchSlots {
 public:
  struct Slot {
    uint64_t id = 0;       // new for every memfd made: a process maps each id once
    std::string path;      // /proc/<pid>/fd/<fd>
    size_t capacity = 0;   // the memfd's size, what the process maps
    uint8_t* data = nullptr;
  };

  // At most `max_slots` memfds of `max_bytes` in all.
  explicit BatchSlots(size_t max_slots = 8, size_t max_bytes = size_t{256} << 20)
      : max_slots_(max_slots), max_bytes_(max_bytes) {}
  ~BatchSlots();
  BatchSlots(const BatchSlots&) = delete;
  BatchSlots& operator=(const BatchSlots&) = delete;

  // A slot of at least `bytes`, leased to `lease`: the smallest free one that fits, else a new
  // one, else a free one too small made again bigger (under a new id). nullopt when every slot is
  // leased and no more may be made, or a memfd cannot be made: the caller sends the batch
  // another way.
  std::optional<Slot> Take(size_t bytes, uint64_t lease);
  // The slot leased to `lease` is free again; no such lease: nothing.
  void Release(uint64_t lease);
  // Every slot is free (the process disconnected).
  void ReleaseAll();

  size_t size() const { return entries_.size(); }
  size_t leased() const;

 private:
  struct Entry {
    Slot slot;
    int fd = -1;
    std::optional<uint64_t> lease;
  };
  // A memfd of `capacity` bytes, mapped; false when it cannot be made.
  bool Make(Entry& e, size_t capacity);
  static void Unmake(Entry& e);

  const size_t max_slots_, max_bytes_;
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
  uint64_t next_id_ = 0;
};

}  // namespace rayd::train::internal
