#include "rayd/object_store/arena.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rayd/base/logging.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

namespace rayd::object_store {
namespace {

// Populating happens in chunks so that a Populate() on the loop thread waits for at most one
// chunk of the background thread's work (~20 ms at 0.32 s/GiB), not for the whole arena.
constexpr size_t kPopulateChunk = 64 << 20;

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUpToPage(size_t n) { return (n + PageSize() - 1) / PageSize() * PageSize(); }

// Kernels before 5.14 answer MADV_POPULATE_WRITE with EINVAL; from then on, touch the pages.
std::atomic<bool> populate_madvise_unsupported{false};
std::atomic<bool> populate_failure_logged{false};

// Faults in [p, p + n) for writing, one atomic no-op per page: an atomic add of zero writes the
// page without racing a client that writes the same bytes.
void TouchPages(uint8_t* p, size_t n) {
  for (size_t off = 0; off < n; off += PageSize()) {
    __atomic_fetch_add(p + off, static_cast<uint8_t>(0), __ATOMIC_RELAXED);
  }
}

bool PopulateRange(uint8_t* p, size_t n) {
  if (!populate_madvise_unsupported.load(std::memory_order_relaxed)) {
    int rc;
    do {
      rc = madvise(p, n, MADV_POPULATE_WRITE);
    } while (rc != 0 && (errno == EINTR || errno == EAGAIN));
    if (rc == 0) return true;
    if (errno != EINVAL) {
      if (!populate_failure_logged.exchange(true)) {
        spdlog::warn("populating {} bytes of the object store arena failed: {}", n,
                     std::strerror(errno));
      }
      return false;
    }
    populate_madvise_unsupported.store(true, std::memory_order_relaxed);
  }
  TouchPages(p, n);
  return true;
}

}  // namespace

Result<std::unique_ptr<Arena>> Arena::Create(size_t size, const std::string& name) {
  if (size == 0) return Status::InvalidArgument("an arena needs a non-zero size");
  size = RoundUpToPage(size);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    return Status::Internal(std::string("memfd_create(") + name +
                            ") failed: " + std::strerror(errno));
  }
  // A memfd is born 0777; it is reachable through /proc/<pid>/fd/, so make it its owner's only.
  if (fchmod(fd, 0600) != 0) {
    Status s = Status::Internal(std::string("restricting the arena to its owner failed: ") +
                                std::strerror(errno));
    close(fd);
    return s;
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    Status s =
        Status::ResourceExhausted("sizing the object store arena to " + std::to_string(size) +
                                  " bytes failed: " + std::strerror(errno));
    close(fd);
    return s;
  }
  return Map(fd, size);
}

Result<std::unique_ptr<Arena>> Arena::Map(int fd, size_t size) {
  if (size == 0) {
    close(fd);
    return Status::InvalidArgument("cannot map an arena of size 0");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s = Status::Internal("mapping the object store arena (" + std::to_string(size) +
                                " bytes) failed: " + std::strerror(errno));
    close(fd);
    return s;
  }
  return std::unique_ptr<Arena>(new Arena(fd, static_cast<uint8_t*>(p), size));
}

Arena::~Arena() {
  {
    std::lock_guard lock(async_mu_);
    async_stop_ = true;
  }
  async_cv_.notify_all();
  if (async_thread_.joinable()) async_thread_.join();
  munmap(base_, size_);
  close(fd_);
}

bool Arena::Contains(const void* p, size_t n) const {
  auto* b = static_cast<const uint8_t*>(p);
  return b >= base_ && b <= base_ + size_ && n <= static_cast<size_t>(base_ + size_ - b);
}

void Arena::Populate(size_t end) { PopulateTo(end); }

bool Arena::PopulateTo(size_t end) {
  end = std::min(RoundUpToPage(end), size_);
  while (populated() < end) {
    std::lock_guard lock(populate_mu_);
    const size_t from = populated_.load(std::memory_order_acquire);
    if (from >= end) break;
    const size_t to = std::min(from + kPopulateChunk, end);
    if (!PopulateRange(base_ + from, to - from)) return false;
    populated_.store(to, std::memory_order_release);
  }
  return true;
}

void Arena::PopulateAheadAsync(size_t end) {
  end = std::min(RoundUpToPage(end), size_);
  if (end <= populated()) return;
  {
    std::lock_guard lock(async_mu_);
    if (async_stop_ || end <= async_target_) return;
    async_target_ = end;
    if (!async_thread_.joinable()) async_thread_ = std::thread([this] { AsyncLoop(); });
  }
  async_cv_.notify_one();
}

void Arena::AsyncLoop() {
  std::unique_lock lock(async_mu_);
  while (true) {
    async_cv_.wait(lock, [&] { return async_stop_ || async_target_ > populated(); });
    if (async_stop_) return;
    const size_t target = async_target_;
    lock.unlock();
    bool ok = true;
    while (ok && populated() < target) {
      {
        std::lock_guard stop_lock(async_mu_);
        if (async_stop_) return;
      }
      ok = PopulateTo(std::min(populated() + kPopulateChunk, target));
    }
    lock.lock();
    // The kernel refused (out of memory): give this target up rather than spin; a later,
    // higher request tries again.
    if (!ok && async_target_ == target) async_target_ = populated();
  }
}

}  // namespace rayd::object_store
