#pragma once
// Collectives through shared memory, for the ranks of a Gloo group that all run on one host.
//
// Gloo moves every byte between two ranks of one host through loopback TCP: a copy into the
// kernel, a copy out, and the wakeups between, all on the cores the ranks compute on. Here each
// rank copies its part into a buffer of its own in one shared segment, the ranks meet at a
// barrier, and each copies (or sums) what it needs straight out of the others' buffers: one
// copy in, one out, no system call on the way but the barrier's futex when a rank must sleep.
//
// The segment: a header (a futex word bumped at every arrival, and per rank its barrier
// generation, the values it offered for comparison, its pid) and per rank two buffers of
// kBufferBytes. Operations larger than a buffer go in chunks, alternating the two buffers, so
// one barrier per chunk suffices: a rank writes a buffer again only two barriers later, which no
// rank passes before it has read the buffer's previous chunk.
//
// Failure: a wait gives up with DeadlineExceeded after the group's timeout, or at once with
// Unavailable when a peer process has exited (a pidfd per peer, polled while waiting), naming
// the operation. Every rank must call the same operations in the same order, as with any
// collective. The segment is a memfd of rank 0's, which the others open through /proc and
// rank 0 closes once every rank has mapped it: it goes with the last mapping, even when a rank
// is killed, and nothing is ever named in /dev/shm (whose size limit would make a full tmpfs a
// SIGBUS at the first touch).
//
// Threading: one thread at a time, as the ProcessGroup that made it.

#include <rayd/base/status.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace rayd::train {

class ProcessGroup;

class HostCollectives {
 public:
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  // Every rank of `group` calls it at the same point (it runs collectives on the group). Null
  // when there is nothing to do here: one rank, or ranks on more than one host (or in other pid
  // or mount namespaces), or a segment that cannot be made or opened; the group's own
  // collectives serve then. An error only when the group's collectives fail.
  static Result<std::unique_ptr<HostCollectives>> Create(ProcessGroup& group);
  ~HostCollectives();
  HostCollectives(const HostCollectives&) = delete;
  HostCollectives& operator=(const HostCollectives&) = delete;

  // Whether every rank offered the same `value`.
  Result<bool> Same(uint64_t value, std::string_view what);
  // `out` (contiguous, world x n elements) gets every rank's `mine` (contiguous, n elements of
  // out's dtype), rank r's at [r * n, (r + 1) * n).
  Status AllGather(const torch::Tensor& mine, const torch::Tensor& out, std::string_view what);
  // `out` (contiguous, n elements) gets the sum over the ranks of their `in`'s (contiguous,
  // world x n elements of out's dtype) part for this rank, [rank * n, (rank + 1) * n), summed in
  // rank order.
  Status ReduceScatter(const torch::Tensor& in, const torch::Tensor& out, std::string_view what);

 private:
  struct Header;
  struct RankState;

  HostCollectives(int rank, int world, std::chrono::milliseconds timeout, void* base, size_t bytes,
                  std::vector<int> peer_fds);
  RankState& state(int rank) const;
  uint8_t* buffer(int rank, int which) const;
  // Arrives at the next barrier, offering `value`, and waits for every rank to arrive.
  Status Barrier(uint64_t value, std::string_view what);

  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  void* base_;
  size_t bytes_;
  std::vector<int> peer_fds_;  // pidfds, -1 for this rank
  uint32_t generation_ = 0;    // of the last barrier this rank arrived at
};

}  // namespace rayd::train
