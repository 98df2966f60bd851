#pragma once
// Allocator: hands out byte ranges of an arena. Best fit over a free list that coalesces
// neighbours on free, ties broken by the lowest offset (so that reused memory is memory that
// is already populated). Sizes are rounded up to `alignment` (a power of two; every offset it
// returns is a multiple of it). O(log n) per operation in the number of free ranges.
//
// Not thread-safe: the object store calls it from its loop thread only.

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace rayd::object_store {

class Allocator {
 public:
  explicit Allocator(size_t capacity, size_t alignment = 64);

  // The offset of a new range of at least `size` bytes, or nullopt when no free range is large
  // enough (fragmentation included). Allocate(0) returns a distinct non-empty range too.
  std::optional<size_t> Allocate(size_t size);
  // Returns the range that starts at `offset` (from Allocate). Freeing anything else aborts.
  void Free(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }                 // bytes in allocated ranges (rounded)
  size_t free_bytes() const { return capacity_ - used_; }
  size_t largest_free() const;                          // the biggest single allocation possible
  size_t num_free_ranges() const { return free_by_offset_.size(); }
  size_t peak_used() const { return peak_used_; }       // the most bytes ever allocated at once
  size_t high_water() const { return high_water_; }     // end of the highest range ever handed out
  size_t AllocatedSize(size_t offset) const;            // the rounded size of a live range

 private:
  void InsertFree(size_t offset, size_t size);
  void EraseFree(std::map<size_t, size_t>::iterator it);

  const size_t capacity_;
  const size_t alignment_;
  size_t used_ = 0;
  size_t high_water_ = 0;
  size_t peak_used_ = 0;
  std::map<size_t, size_t> free_by_offset_;          // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  std::unordered_map<size_t, size_t> allocated_;      // offset -> size
};

}  // namespace rayd::object_store
