#pragma once
// Copying fixed-size rows from scattered places into one column: what a gather does for a
// shuffled epoch (rows of a mapped file, or of the node cache's chunks, in a random order).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rayd::data::internal {

// Copies `n` rows of `row_bytes` each, row i from `from(i)` (a const uint8_t*), to `to`, one
// after another. Rows in a random order each miss the caches (and the TLB) and the hardware
// prefetcher follows only sequential lines, so the first lines of the row a few places on are
// asked for while this one is copied: several misses in flight instead of one.
template <typename From>
void CopyRows(uint8_t* to, size_t n, size_t row_bytes, From&& from) {
  constexpr size_t kAhead = 6;    // rows
  constexpr size_t kLines = 4;    // of 64 bytes, at most: the prefetcher follows the rest
  const size_t lines = std::min(kLines, (row_bytes + 63) / 64);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const uint8_t* ahead = from(i + kAhead);
      for (size_t l = 0; l < lines; ++l) __builtin_prefetch(ahead + 64 * l);
    }
    std::memcpy(to, from(i), row_bytes);
    to += row_bytes;
  }
}

}  // namespace rayd::data::internal
