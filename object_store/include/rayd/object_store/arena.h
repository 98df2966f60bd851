#pragma once
// Arena: one node's shared-memory region for object data. The node daemon creates it (a memfd,
// so nothing leaks into /dev/shm if the daemon dies); clients on the same node map the same
// file from a descriptor the daemon hands them, and read objects in place.
//
// First touch of a page costs ~10 µs on these VMs (and ~1.2 µs through MADV_POPULATE_WRITE),
// so pages are populated once and then reused: the allocator hands out low offsets first, and
// Populate() extends a watermark below which every page of this mapping is resident. The
// creator populates ahead of use on a background thread (PopulateAheadAsync).
//
// Threading: base()/size()/Contains() are immutable; Populate* are thread-safe.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rayd/base/status.h"

namespace rayd::object_store {

class Arena {
 public:
  // A new arena of `size` bytes (rounded up to whole pages), named `name` in /proc/*/fd.
  static Result<std::unique_ptr<Arena>> Create(size_t size, const std::string& name);
  // Maps an arena created by another process from its descriptor (taking ownership of `fd`).
  static Result<std::unique_ptr<Arena>> Map(int fd, size_t size);
  ~Arena();  // joins the populate thread, unmaps, closes the descriptor

  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  bool Contains(const void* p, size_t n) const;

  // Makes every page of [0, end) resident in this mapping (end is clamped to size()). Returns
  // at once if the watermark is already there.
  void Populate(size_t end);
  // Same, on a background thread; returns at once. Later requests raise the target.
  void PopulateAheadAsync(size_t end);
  size_t populated() const { return populated_.load(std::memory_order_acquire); }

 private:
  Arena(int fd, uint8_t* base, size_t size) : fd_(fd), base_(base), size_(size) {}
  // Populates [populated(), end) in chunks; false if the kernel refused (the watermark stays
  // where it got to).
  bool PopulateTo(size_t end);
  void AsyncLoop();  // the populate thread's body

  const int fd_;
  uint8_t* const base_;
  const size_t size_;
  std::mutex populate_mu_;                 // serialises Populate calls
  std::atomic<size_t> populated_{0};
  std::mutex async_mu_;                    // guards the fields below
  size_t async_target_ = 0;
  bool async_stop_ = false;
  std::condition_variable async_cv_;       // signalled on a new target and on stop
  std::thread async_thread_;
};

}  // namespace rayd::object_store
