// BatchSlots (see batch_slots.h).

#include "batch_slots.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace rayd::train::internal {

namespace {

// Slots are made in steps of this, so that a pass's smaller last batch fits a slot made for
// the others and a slightly bigger batch does not make a new one each time.
constexpr size_t kGranule = size_t{64} << 10;

}  // namespace

BatchSlots::~BatchSlots() {
  for (Entry& e : entries_) Unmake(e);
}

std::optional<BatchSlots::Slot> BatchSlots::Take(size_t bytes, uint64_t lease) {
  const size_t capacity = std::max(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
  Entry* best = nullptr;
  Entry* small = nullptr;  // a free one too small
  for (Entry& e : entries_) {
    if (e.lease) continue;
    if (e.slot.capacity < bytes) {
      small = &e;
    } else if (best == nullptr || e.slot.capacity < best->slot.capacity) {
      best = &e;
    }
  }
  if (best == nullptr && entries_.size() < max_slots_ && bytes_ + capacity <= max_bytes_) {
    Entry e;
    if (!Make(e, capacity)) return std::nullopt;
    entries_.push_back(std::move(e));
    best = &entries_.back();
  }
  if (best == nullptr && small != nullptr &&
      bytes_ - small->slot.capacity + capacity <= max_bytes_) {
    Unmake(*small);
    bytes_ -= small->slot.capacity;
    small->slot.capacity = 0;
    if (!Make(*small, capacity)) {
      entries_.erase(entries_.begin() + (small - entries_.data()));
      return std::nullopt;
    }
    best = small;
  }
  if (best == nullptr) return std::nullopt;
  best->lease = lease;
  return best->slot;
}

void BatchSlots::Release(uint64_t lease) {
  for (Entry& e : entries_) {
    if (e.lease == lease) e.lease.reset();
  }
}

void BatchSlots::ReleaseAll() {
  for (Entry& e : entries_) e.lease.reset();
}

size_t BatchSlots::leased() const {
  return static_cast<size_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.lease; }));
}

bool BatchSlots::Make(Entry& e, size_t capacity) {
  const int fd = ::memfd_create("rayd-batch-slot", MFD_CLOEXEC);
  if (fd < 0) return false;
  if (::ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    ::close(fd);
    return false;
  }
  void* data = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    ::close(fd);
    return false;
  }
  e.fd = fd;
  e.lease.reset();
  e.slot = Slot{next_id_++, "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd),
                capacity, static_cast<uint8_t*>(data)};
  bytes_ += capacity;
  return true;
}

void BatchSlots::Unmake(Entry& e) {
  if (e.slot.data != nullptr) ::munmap(e.slot.data, e.slot.capacity);
  if (e.fd >= 0) ::close(e.fd);
  e.slot.data = nullptr;
  e.fd = -1;
}

}  // namespace rayd::train::internal
