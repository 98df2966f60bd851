#include "rayd/object_store/allocator.h"

#include <algorithm>

#include "rayd/base/logging.h"

namespace rayd::object_store {

// Invariants: free_by_offset_ and free_by_size_ hold the same ranges; no two free ranges touch
// (Free merges neighbours); free and allocated ranges together tile [0, capacity_).

Allocator::Allocator(size_t capacity, size_t alignment)
    : capacity_(capacity), alignment_(alignment) {
  RAYD_CHECK_MSG(alignment > 0 && (alignment & (alignment - 1)) == 0,
                 "alignment must be a power of two");
  if (capacity_ > 0) InsertFree(0, capacity_);
}

std::optional<size_t> Allocator::Allocate(size_t size) {
  const size_t rounded = (std::max<size_t>(size, 1) + alignment_ - 1) & ~(alignment_ - 1);
  if (rounded < size) return std::nullopt;  // overflow
  // The smallest range that fits; among equal sizes, the lowest offset.
  auto best = free_by_size_.lower_bound({rounded, 0});
  if (best == free_by_size_.end()) return std::nullopt;
  const auto [range_size, offset] = *best;
  EraseFree(free_by_offset_.find(offset));
  if (range_size > rounded) InsertFree(offset + rounded, range_size - rounded);
  allocated_.emplace(offset, rounded);
  used_ += rounded;
  peak_used_ = std::max(peak_used_, used_);
  high_water_ = std::max(high_water_, offset + rounded);
  return offset;
}

void Allocator::Free(size_t offset) {
  auto it = allocated_.find(offset);
  RAYD_CHECK_MSG(it != allocated_.end(), "freeing a range that was not allocated");
  size_t start = offset;
  size_t size = it->second;
  allocated_.erase(it);
  used_ -= size;

  // Merge with the free range that ends where this one starts, and the one that starts where
  // it ends.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    auto after = std::next(next);
    EraseFree(next);
    next = after;
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
}

size_t Allocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

size_t Allocator::AllocatedSize(size_t offset) const {
  auto it = allocated_.find(offset);
  RAYD_CHECK_MSG(it != allocated_.end(), "not an allocated range");
  return it->second;
}

void Allocator::InsertFree(size_t offset, size_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Allocator::EraseFree(std::map<size_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

}  // namespace rayd::object_store
