#include "host_collectives.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <fstream>
#include <string>

#include "rayd/train/process_group.h"

namespace rayd::train {
namespace {

// What makes two processes able to share a segment and see each other's pids: the same boot of
// the same kernel, the same pid namespace (peers open rank 0's segment as /proc/<pid>/fd/<fd>),
// the same mount namespace.
int64_t HostKey() {
  std::string key;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, key);
  for (const char* ns : {"/proc/self/ns/pid", "/proc/self/ns/mnt"}) {
    struct stat st {};
    if (stat(ns, &st) != 0) return 0;
    key += ":" + std::to_string(st.st_ino);
  }
  if (key.size() < 8) return 0;
  return static_cast<int64_t>(std::hash<std::string>{}(key)&0x7fff'ffff'ffff'ffff);
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool Exited(int pidfd) {
  if (pidfd < 0) return false;
  pollfd ready{.fd = pidfd, .events = POLLIN, .revents = 0};
  return poll(&ready, 1, 0) > 0;
}

constexpr int kSpins = 256;                           // before sleeping on the futex
constexpr std::chrono::milliseconds kSleepSlice{20};  // between looks at the peers' pids
constexpr size_t kNameBytes = 64;

}  // namespace

struct HostCollectives::Header {
  uint32_t wake;     // futex word: bumped at every arrival
  uint32_t waiters;  // ranks asleep on it (an arrival wakes only when some are)
};

struct alignas(64) HostCollectives::RankState {
  uint32_t arrived;   // the generation of the last barrier this rank arrived at
  uint64_t value[2];  // offered at that barrier, by the generation's parity
};

namespace {
size_t HeaderBytes(int world) {
  const size_t bytes = 64 + static_cast<size_t>(world) * 64;  // the header, then per rank
  return (bytes + 4095) / 4096 * 4096;
}
size_t SegmentBytes(int world) {
  return HeaderBytes(world) + static_cast<size_t>(world) * 2 * HostCollectives::kBufferBytes;
}
}  // namespace

Result<std::unique_ptr<HostCollectives>> HostCollectives::Create(ProcessGroup& group) {
  const int world = group.world_size(), rank = group.rank();
  if (world < 2 || group.backend() != CollectiveBackend::kGloo)
    return std::unique_ptr<HostCollectives>();
  static_assert(sizeof(RankState) == 64);
  // Who is where: each rank's host key and pid, from each rank.
  torch::Tensor table = torch::zeros({world, 2}, torch::kLong);
  table[rank][0] = HostKey();
  table[rank][1] = static_cast<int64_t>(getpid());
  RAYD_RETURN_IF_ERROR(EachRank(group, "finding which ranks share this host", [&](int r) {
    std::vector<torch::Tensor> row = {table[r]};
    c10d::BroadcastOptions from;
    from.rootRank = r;
    return group.c10d().broadcast(row, from);
  }));
  const auto* rows = table.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    if (rows[2 * r] == 0 || rows[2 * r] != rows[0]) return std::unique_ptr<HostCollectives>();
  }
  // Rank 0 makes the segment, a memfd: no size limit of /dev/shm's to fault on (a full tmpfs
  // would be SIGBUS at the first touch), and nothing named to leak. It tells the others where
  // to open it, /proc/<pid>/fd/<fd> (empty when it could not make it).
  const size_t bytes = SegmentBytes(world);
  torch::Tensor name = torch::zeros({static_cast<int64_t>(kNameBytes)}, torch::kUInt8);
  void* base = MAP_FAILED;
  int made_fd = -1;
  if (rank == 0) {
    made_fd = memfd_create("rayd-host-collectives", MFD_CLOEXEC);
    // Born 0777 and reachable through /proc: its owner's only.
    if (made_fd >= 0 && fchmod(made_fd, 0600) == 0 &&
        ftruncate(made_fd, static_cast<off_t>(bytes)) == 0) {
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, made_fd, 0);
    }
    if (base != MAP_FAILED) {
      const std::string where =
          "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(made_fd);
      std::memcpy(name.data_ptr(), where.data(), where.size());
    }
  }
  RAYD_RETURN_IF_ERROR(EachRank(group, "naming this host's shared segment", [&](int r) {
    std::vector<torch::Tensor> tensors = {name};
    return r == 0 ? group.c10d().broadcast(tensors) : c10::intrusive_ptr<c10d::Work>();
  }));
  const std::string segment(static_cast<const char*>(name.data_ptr()),
                            strnlen(static_cast<const char*>(name.data_ptr()), kNameBytes));
  if (segment.empty()) {
    if (made_fd >= 0) close(made_fd);
    return std::unique_ptr<HostCollectives>();
  }
  if (rank != 0) {
    const int fd = open(segment.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
    }
  }
  std::vector<int> peer_fds(world, -1);
  for (int r = 0; r < world; ++r) {
    if (r != rank) peer_fds[r] = PidfdOpen(static_cast<pid_t>(rows[2 * r + 1]));
  }
  // Whether every rank mapped it; then rank 0's descriptor can go (the mappings keep it).
  torch::Tensor mapped = torch::tensor({base == MAP_FAILED ? 0 : 1}, torch::kInt);
  Status agreed =
      AllReduce(group, mapped, "mapping this host's shared segment", c10d::ReduceOp::MIN);
  if (made_fd >= 0) close(made_fd);
  std::unique_ptr<HostCollectives> made;
  if (base != MAP_FAILED) {
    made.reset(new HostCollectives(rank, world, group.timeout(), base, bytes, std::move(peer_fds)));
  } else {
    for (int fd : peer_fds) {
      if (fd >= 0) close(fd);
    }
  }
  RAYD_RETURN_IF_ERROR(agreed);
  if (mapped.item<int>() == 0) return std::unique_ptr<HostCollectives>();
  return made;
}

HostCollectives::HostCollectives(int rank, int world, std::chrono::milliseconds timeout, void* base,
                                 size_t bytes, std::vector<int> peer_fds)
    : rank_(rank),
      world_(world),
      timeout_(timeout),
      base_(base),
      bytes_(bytes),
      peer_fds_(std::move(peer_fds)) {}

HostCollectives::~HostCollectives() {
  munmap(base_, bytes_);
  for (int fd : peer_fds_) {
    if (fd >= 0) close(fd);
  }
}

HostCollectives::RankState& HostCollectives::state(int rank) const {
  return reinterpret_cast<RankState*>(static_cast<uint8_t*>(base_) + 64)[rank];
}

uint8_t* HostCollectives::buffer(int rank, int which) const {
  return static_cast<uint8_t*>(base_) + HeaderBytes(world_) +
         (static_cast<size_t>(rank) * 2 + which) * kBufferBytes;
}

Status HostCollectives::Barrier(uint64_t value, std::string_view what) {
  auto& header = *static_cast<Header*>(base_);
  std::atomic_ref<uint32_t> wake(header.wake), waiters(header.waiters);
  ++generation_;
  RankState& mine = state(rank_);
  mine.value[generation_ & 1] = value;
  std::atomic_ref<uint32_t>(mine.arrived).store(generation_, std::memory_order_release);
  wake.fetch_add(1);
  if (waiters.load() > 0) {
    syscall(SYS_futex, &header.wake, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int spin = 0;; ++spin) {
    const uint32_t seen = wake.load();
    int missing = -1;
    for (int r = 0; r < world_ && missing < 0; ++r) {
      const uint32_t arrived =
          std::atomic_ref<uint32_t>(state(r).arrived).load(std::memory_order_acquire);
      if (static_cast<int32_t>(arrived - generation_) < 0) missing = r;
    }
    if (missing < 0) return Status::Ok();
    if (spin < kSpins) {
      CpuRelax();
      continue;
    }
    if (Exited(peer_fds_[missing])) {
      return Status::Unavailable(std::string(what) + ": rank " + std::to_string(missing) +
                                 " exited");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::DeadlineExceeded(std::string(what) + ": rank " + std::to_string(missing) +
                                      " did not arrive within " + std::to_string(timeout_.count()) +
                                      " ms");
    }
    const timespec slice{.tv_sec = 0, .tv_nsec = kSleepSlice.count() * 1'000'000};
    waiters.fetch_add(1);
    syscall(SYS_futex, &header.wake, FUTEX_WAIT, seen, &slice, nullptr, 0);
    waiters.fetch_sub(1);
  }
}

Result<bool> HostCollectives::Same(uint64_t value, std::string_view what) {
  RAYD_RETURN_IF_ERROR(Barrier(value, what));
  for (int r = 0; r < world_; ++r) {
    if (state(r).value[generation_ & 1] != value) return false;
  }
  return true;
}

Status HostCollectives::AllGather(const torch::Tensor& mine, const torch::Tensor& out,
                                  std::string_view what) {
  const int64_t n = mine.numel();
  if (!mine.is_contiguous() || !out.is_contiguous() || out.numel() != n * world_ ||
      mine.scalar_type() != out.scalar_type() || !mine.is_cpu() || !out.is_cpu()) {
    return Status::InvalidArgument(std::string(what) + ": all-gather of mismatched tensors");
  }
  const size_t element = out.element_size();
  const int64_t chunk = static_cast<int64_t>(kBufferBytes / element);
  const auto* from = static_cast<const uint8_t*>(mine.data_ptr());
  auto* to = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const size_t length = static_cast<size_t>(std::min(chunk, n - begin)) * element;
    const int which = static_cast<int>((generation_ + 1) & 1);  // the coming barrier's buffer
    std::memcpy(buffer(rank_, which), from + begin * element, length);
    RAYD_RETURN_IF_ERROR(Barrier(0, what));
    for (int r = 0; r < world_; ++r) {
      std::memcpy(to + (r * n + begin) * element,
                  r == rank_ ? from + begin * element : buffer(r, which), length);
    }
  }
  return Status::Ok();
}

Status HostCollectives::ReduceScatter(const torch::Tensor& in, const torch::Tensor& out,
                                      std::string_view what) {
  const int64_t n = out.numel();
  if (!in.is_contiguous() || !out.is_contiguous() || in.numel() != n * world_ ||
      in.scalar_type() != out.scalar_type() || !in.is_cpu() || !out.is_cpu()) {
    return Status::InvalidArgument(std::string(what) + ": reduce-scatter of mismatched tensors");
  }
  torch::NoGradGuard no_grad;
  const size_t element = out.element_size();
  const int64_t chunk = static_cast<int64_t>(kBufferBytes / element / world_);
  const auto* from = static_cast<const uint8_t*>(in.data_ptr());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    const size_t length = static_cast<size_t>(count) * element;
    const int which = static_cast<int>((generation_ + 1) & 1);
    for (int r = 0; r < world_; ++r) {
      std::memcpy(buffer(rank_, which) + r * length, from + (r * n + begin) * element, length);
    }
    RAYD_RETURN_IF_ERROR(Barrier(0, what));
    torch::Tensor sum = out.narrow(0, begin, count);
    for (int r = 0; r < world_; ++r) {
      torch::Tensor part = torch::from_blob(buffer(r, which) + rank_ * length, {count},
                                            out.options().requires_grad(false));
      if (r == 0) {
        sum.copy_(part);
      } else {
        sum.add_(part);
      }
    }
  }
  return Status::Ok();
}

}  // namespace rayd::train
