// Allocator: best fit with lowest-offset ties, coalescing on free, fragmentation, exhaustion,
// alignment and the high-water mark.

#include "rayd/object_store/allocator.h"

#include <catch2/catch.hpp>
#include <optional>
#include <random>
#include <vector>

namespace rayd::object_store {
namespace {

size_t MustAllocate(Allocator& a, size_t size) {
  std::optional<size_t> offset = a.Allocate(size);
  REQUIRE(offset.has_value());
  return *offset;
}

TEST_CASE("allocator hands out consecutive aligned ranges from the bottom", "[allocator]") {
  Allocator a(1024, 64);
  CHECK(a.largest_free() == 1024);
  CHECK(MustAllocate(a, 10) == 0);
  CHECK(a.AllocatedSize(0) == 64);
  CHECK(MustAllocate(a, 64) == 64);
  CHECK(MustAllocate(a, 65) == 128);
  CHECK(a.AllocatedSize(128) == 128);
  const size_t zero = MustAllocate(a, 0);  // a distinct, non-empty range
  CHECK(zero == 256);
  CHECK(a.AllocatedSize(zero) == 64);
  CHECK(a.used() == 64 + 64 + 128 + 64);
  CHECK(a.free_bytes() == 1024 - a.used());
  CHECK(a.high_water() == 320);
}

TEST_CASE("allocator offsets follow a larger alignment", "[allocator]") {
  Allocator a(1 << 20, 4096);
  for (size_t size : {1, 4095, 4096, 4097, 10000}) {
    const size_t offset = MustAllocate(a, size);
    CHECK(offset % 4096 == 0);
    CHECK(a.AllocatedSize(offset) >= size);
    CHECK(a.AllocatedSize(offset) % 4096 == 0);
  }
}

TEST_CASE("allocator picks the smallest free range that fits, lowest offset first", "[allocator]") {
  Allocator a(64 * 100, 64);
  // Layout: [A 4][x 1][B 2][x 1][C 2][x 1][D 8][x 1][rest]
  const size_t ra = MustAllocate(a, 4 * 64);
  MustAllocate(a, 64);
  const size_t rb = MustAllocate(a, 2 * 64);
  MustAllocate(a, 64);
  const size_t rc = MustAllocate(a, 2 * 64);
  MustAllocate(a, 64);
  const size_t rd = MustAllocate(a, 8 * 64);
  MustAllocate(a, 64);
  a.Free(ra);
  a.Free(rb);
  a.Free(rc);
  a.Free(rd);
  CHECK(a.num_free_ranges() == 5);  // the four holes and the tail

  CHECK(MustAllocate(a, 2 * 64) == rb);  // exact fit; B and C tie, B is lower
  CHECK(MustAllocate(a, 2 * 64) == rc);
  CHECK(MustAllocate(a, 3 * 64) == ra);  // A (4) beats D (8) and the tail
  CHECK(MustAllocate(a, 5 * 64) == rd);
  CHECK(MustAllocate(a, 64) == ra + 3 * 64);  // the remainder of A
}

TEST_CASE("allocator coalesces freed ranges with their neighbours", "[allocator]") {
  Allocator a(64 * 4, 64);
  const size_t r0 = MustAllocate(a, 64);
  const size_t r1 = MustAllocate(a, 64);
  const size_t r2 = MustAllocate(a, 64);
  const size_t r3 = MustAllocate(a, 64);
  CHECK(a.num_free_ranges() == 0);
  CHECK_FALSE(a.Allocate(1).has_value());

  SECTION("with the left neighbour") {
    a.Free(r0);
    a.Free(r1);
    CHECK(a.num_free_ranges() == 1);
    CHECK(a.largest_free() == 128);
  }
  SECTION("with the right neighbour") {
    a.Free(r2);
    a.Free(r1);
    CHECK(a.num_free_ranges() == 1);
    CHECK(a.largest_free() == 128);
    CHECK(MustAllocate(a, 128) == r1);
  }
  SECTION("with both neighbours") {
    a.Free(r0);
    a.Free(r2);
    CHECK(a.num_free_ranges() == 2);
    CHECK(a.largest_free() == 64);
    a.Free(r1);
    CHECK(a.num_free_ranges() == 1);
    CHECK(a.largest_free() == 192);
    a.Free(r3);
    CHECK(a.num_free_ranges() == 1);
    CHECK(a.largest_free() == 256);
    CHECK(a.used() == 0);
  }
}

TEST_CASE("allocator fragmentation: free space in pieces is not one large range", "[allocator]") {
  constexpr size_t kN = 64;
  Allocator a(kN * 64, 64);
  std::vector<size_t> offsets;
  for (size_t i = 0; i < kN; ++i) offsets.push_back(MustAllocate(a, 64));
  for (size_t i = 0; i < kN; i += 2) a.Free(offsets[i]);  // every other one
  CHECK(a.free_bytes() == kN / 2 * 64);
  CHECK(a.largest_free() == 64);
  CHECK(a.num_free_ranges() == kN / 2);
  CHECK_FALSE(a.Allocate(128).has_value());  // half the arena is free, but only in pieces
  for (size_t i = 1; i < kN; i += 2) a.Free(offsets[i]);
  CHECK(a.num_free_ranges() == 1);
  CHECK(a.largest_free() == kN * 64);
  CHECK(MustAllocate(a, kN * 64) == 0);
}

TEST_CASE("allocator exhaustion returns nullopt and recovers after a free", "[allocator]") {
  Allocator a(1000, 64);  // not a multiple of the alignment: the tail is 1000 - 960 = 40
  const size_t big = MustAllocate(a, 960);
  CHECK_FALSE(a.Allocate(64).has_value());
  CHECK_FALSE(a.Allocate(2000).has_value());
  CHECK_FALSE(a.Allocate(SIZE_MAX).has_value());
  a.Free(big);
  CHECK(MustAllocate(a, 500) == 0);
}

TEST_CASE("allocator high water only grows", "[allocator]") {
  Allocator a(64 * 10, 64);
  const size_t r0 = MustAllocate(a, 64 * 3);
  CHECK(a.high_water() == 64 * 3);
  a.Free(r0);
  CHECK(a.high_water() == 64 * 3);
  MustAllocate(a, 64);  // reuses the bottom
  CHECK(a.high_water() == 64 * 3);
  MustAllocate(a, 64 * 5);
  CHECK(a.high_water() == 64 * 6);
}

TEST_CASE("allocator stays consistent under random allocate/free", "[allocator]") {
  constexpr size_t kCapacity = 1 << 20;
  Allocator a(kCapacity, 64);
  std::mt19937 rng(42);
  std::vector<size_t> live;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      if (auto offset = a.Allocate(rng() % 8192)) live.push_back(*offset);
    } else {
      const size_t i = rng() % live.size();
      a.Free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    size_t used = 0;
    for (size_t offset : live) used += a.AllocatedSize(offset);
    REQUIRE(used == a.used());
  }
  for (size_t offset : live) a.Free(offset);
  CHECK(a.used() == 0);
  CHECK(a.num_free_ranges() == 1);
  CHECK(a.largest_free() == kCapacity);
}

}  // namespace
}  // namespace rayd::object_store
