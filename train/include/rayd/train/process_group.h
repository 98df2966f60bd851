#pragma once
// A c10d process group for one rank of a data-parallel job, and the rendezvous that forms it.
//
// How it works: rank 0 hosts a c10d TCPStore (the rendezvous) on a port it picks; every other
// rank connects to that host:port. Rank 0 must publish the bound port before the others can
// join (the Trainer will publish it through the GCS KV; tests write it to a file), which is why
// forming a group takes two steps: Host/Join a Rendezvous, then ProcessGroup::Connect on it.
// Connect runs Gloo's full-mesh handshake through the store and blocks until every rank has
// arrived or `timeout` passes.
//
// The same `timeout` bounds every later collective: a peer that dies or hangs makes the others
// fail with DeadlineExceeded after it (default 60 s), not after Ray's 30 minutes.
//
// Errors: c10d reports failures by throwing c10::Error / std::exception; they are caught here,
// at the one place that calls c10d to form the group, and returned as rayd::Status with
// c10d's message kept.
//
// Backends: Gloo for CPU tensors (every build), NCCL for CUDA tensors (only when rayd is built
// against a LibTorch with CUDA and NCCL: -DRAYD_WITH_CUDA=ON, see docs/gpu.md). An NCCL group
// runs with c10d's asynchronous error handling, so a collective that outlives the timeout
// aborts the communicator and fails instead of hanging.
//
// Threading: a ProcessGroup is used by one thread at a time (the rank's train loop, or the
// autograd thread running its gradient hooks during backward). Gloo runs the collectives on
// its own threads (NCCL on its own CUDA stream); the c10d Work handles they return may be
// waited on from any thread.

#include <rayd/base/status.h>
#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>

namespace rayd::train {

// The c10d class that Gloo's and NCCL's groups derive from and that runs collectives:
// ProcessGroup up to PyTorch 1.13 (Debian's LibTorch), Backend from 2.0 on, where ProcessGroup
// became a dispatcher over backends. allreduce, broadcast and barrier read the same on both.
#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{60'000};

// The c10d store every rank of one group meets at. Rank 0 owns the server; the store lives as
// long as the ProcessGroup made from it (Gloo keeps using it while the group lives).
class Rendezvous {
 public:
  // Rank 0: serves the store on `host`:`port` (port 0 picks a free one; see port()). Returns
  // at once; joiners may connect any time within `timeout`.
  static Result<std::unique_ptr<Rendezvous>> Host(
      const std::string& host, uint16_t port,
      std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);
  // Ranks 1..n-1: connects to rank 0's store, retrying until `timeout` if it is not up yet.
  static Result<std::unique_ptr<Rendezvous>> Join(
      const std::string& host, uint16_t port,
      std::chrono::milliseconds timeout = kDefaultCollectiveTimeout);
  // A group of one rank: the store lives in this process (no server, no port, nothing to
  // publish), so a single-rank run pays for no rendezvous.
  static std::unique_ptr<Rendezvous> Alone();
  // The same store seen under `prefix` (c10d's PrefixStore): another group formed through it
  // (ProcessGroup::Subgroup) keys its handshake apart from the base's. Keeps the store alive.
  static std::unique_ptr<Rendezvous> Prefixed(const Rendezvous& base, const std::string& prefix);

  const std::string& host() const { return host_; }
  // The port the store listens on (the bound one when Host was given 0).
  uint16_t port() const { return port_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

 private:
  Rendezvous(std::string host, uint16_t port, c10::intrusive_ptr<c10d::Store> store)
      : host_(std::move(host)), port_(port), store_(std::move(store)) {}

  std::string host_;
  uint16_t port_;
  c10::intrusive_ptr<c10d::Store> store_;
};

enum class CollectiveBackend {
  kGloo,  // CPU tensors
  kNccl,  // CUDA tensors, one device per rank
};

struct ProcessGroupOptions {
  CollectiveBackend backend = CollectiveBackend::kGloo;
  int rank = 0;
  int world_size = 1;
  // The address this rank's Gloo device binds and advertises to its peers: loopback for a
  // single machine, the node's address when ranks span nodes.
  std::string local_address = "127.0.0.1";
  // Bounds forming the group and every collective on it.
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  // When every rank of a Gloo group runs on one host, also map a segment of shared memory
  // among them, through which sharded units (fsdp.h) gather and reduce instead of Gloo's
  // loopback TCP (see host_collectives()).
  bool shared_memory = true;
};

class HostCollectives;  // train/src/torch/host_collectives.h

// One rank's membership in a Gloo or NCCL process group.
class ProcessGroup {
 public:
  // Forms the group: blocks until all `options.world_size` ranks have connected through
  // `rendezvous`, or fails with DeadlineExceeded after `options.timeout`.
  static Result<std::unique_ptr<ProcessGroup>> Connect(std::unique_ptr<Rendezvous> rendezvous,
                                                       const ProcessGroupOptions& options);

  CollectiveBackend backend() const { return options_.backend; }
  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  // An NCCL group ends its communicator here (c10d warns about one left to its destructor).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // The c10d group, for collectives of its own (DistributedDataParallel uses it).
  C10dBackend& c10d() { return *group_; }

  // Blocks until every rank has reached the barrier (or the timeout passes).
  Status Barrier();

  // A group of the ranks `ranks` of this one (this rank among them, in the order given: its
  // rank there is its index), formed through this group's store under `name`, with this
  // group's backend, address, timeout and shared-memory choice (torch.distributed's
  // new_group). Every member calls it with the same ranks and name, a name no other group of
  // this one uses; it blocks until all have connected, as Connect does.
  Result<std::unique_ptr<ProcessGroup>> Subgroup(const std::vector<int>& ranks,
                                                 const std::string& name);

  // Collectives through shared memory among the ranks, when they all run on this host and
  // the options asked for them; null otherwise.
  HostCollectives* host_collectives() { return host_.get(); }

 private:
  ProcessGroup(std::unique_ptr<Rendezvous> rendezvous, c10::intrusive_ptr<C10dBackend> group,
               ProcessGroupOptions options);

  // Declared in dependency order: the group talks through the rendezvous's store.
  std::unique_ptr<Rendezvous> rendezvous_;
  c10::intrusive_ptr<C10dBackend> group_;
  ProcessGroupOptions options_;
  std::unique_ptr<HostCollectives> host_;
};

// Whether this build can form NCCL groups: rayd built against a LibTorch with CUDA and NCCL
// (-DRAYD_WITH_CUDA=ON, docs/gpu.md). Debian's LibTorch is CPU-only.
bool NcclBuilt();

// Waits for a c10d Work to finish within `timeout`, turning c10d's exceptions into a Status
// ("<what>: <c10d's message>"): DeadlineExceeded when it timed out, Unavailable when a peer's
// connection broke, Internal otherwise.
Status WaitWork(c10d::Work& work, std::chrono::milliseconds timeout, std::string_view what);

// One collective per rank r (`launch(r)`: a broadcast from r, a reduce to r, ...; null to skip
// r), all launched in rank order before any is waited for, then waited for within the group's
// timeout; c10d's exceptions become a Status naming `what`, as WaitWork's.
Status EachRank(ProcessGroup& group, std::string_view what,
                const std::function<c10::intrusive_ptr<c10d::Work>(int rank)>& launch);

// One all-reduce of `tensor` in place over the group, waited for within its timeout; c10d's
// exceptions become a Status naming `what`, as WaitWork's.
Status AllReduce(ProcessGroup& group, at::Tensor& tensor, std::string_view what,
                 c10d::ReduceOp op = c10d::ReduceOp::SUM);

}  // namespace rayd::train
