#include "rayd/train/process_group.h"

#include <algorithm>
#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "c10d_error.h"
#include "cuda_support.h"
#include "host_collectives.h"

namespace rayd::train {

Result<std::unique_ptr<Rendezvous>> Rendezvous::Host(const std::string& host, uint16_t port,
                                                     std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = true;
  // Return as soon as the server is bound, so the caller can publish the port; the group's
  // handshake in ProcessGroup::Connect is what waits for the other ranks.
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(host, options);
    const uint16_t bound = store->getPort();
    return std::unique_ptr<Rendezvous>(new Rendezvous(host, bound, std::move(store)));
  } catch (...) {
    return StatusFromC10dException(
        std::current_exception(), "hosting the rendezvous on " + host + ":" + std::to_string(port));
  }
}

Result<std::unique_ptr<Rendezvous>> Rendezvous::Join(const std::string& host, uint16_t port,
                                                     std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = false;
  options.timeout = timeout;
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(host, options);
    return std::unique_ptr<Rendezvous>(new Rendezvous(host, port, std::move(store)));
  } catch (...) {
    return StatusFromC10dException(
        std::current_exception(), "joining the rendezvous at " + host + ":" + std::to_string(port));
  }
}

std::unique_ptr<Rendezvous> Rendezvous::Alone() {
  return std::unique_ptr<Rendezvous>(
      new Rendezvous("localhost", 0, c10::make_intrusive<c10d::HashStore>()));
}

std::unique_ptr<Rendezvous> Rendezvous::Prefixed(const Rendezvous& base,
                                                 const std::string& prefix) {
  return std::unique_ptr<Rendezvous>(new Rendezvous(
      base.host(), base.port(), c10::make_intrusive<c10d::PrefixStore>(prefix, base.store())));
}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Subgroup(const std::vector<int>& ranks,
                                                             const std::string& name) {
  auto me = std::find(ranks.begin(), ranks.end(), rank());
  if (me == ranks.end()) {
    return Status::InvalidArgument("subgroup " + name + ": rank " + std::to_string(rank()) +
                                   " is not among its ranks");
  }
  for (int r : ranks) {
    if (r < 0 || r >= world_size()) {
      return Status::InvalidArgument("subgroup " + name + ": rank " + std::to_string(r) +
                                     " is outside a world of " + std::to_string(world_size()));
    }
  }
  ProcessGroupOptions options = options_;
  options.rank = static_cast<int>(me - ranks.begin());
  options.world_size = static_cast<int>(ranks.size());
  Result<std::unique_ptr<ProcessGroup>> formed =
      Connect(Rendezvous::Prefixed(*rendezvous_, "subgroup/" + name + "/"), options);
  if (!formed.ok()) {
    return Status(formed.status().code(), "subgroup " + name + ": " + formed.status().message());
  }
  return formed;
}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Connect(std::unique_ptr<Rendezvous> rendezvous,
                                                            const ProcessGroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(options.rank) +
                                   " is outside a world of size " +
                                   std::to_string(options.world_size));
  }
  const bool nccl = options.backend == CollectiveBackend::kNccl;
  const std::string where = "rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.world_size) + " forming " +
                            (nccl ? "an NCCL" : "a Gloo") + " group at " +
                            rendezvous->host() + ":" + std::to_string(rendezvous->port()) +
                            " (timeout " + std::to_string(options.timeout.count()) + " ms)";
  try {
    // The store's timeout bounds the handshake's waits for the peers' addresses.
    rendezvous->store()->setTimeout(options.timeout);
    if (nccl) {
      Result<c10::intrusive_ptr<C10dBackend>> group = cuda::MakeNcclGroup(
          rendezvous->store(), options.rank, options.world_size, options.timeout);
      if (!group.ok()) return Status(group.status().code(), where + ": " + group.status().message());
      return std::unique_ptr<ProcessGroup>(
          new ProcessGroup(std::move(rendezvous), std::move(group).value(), options));
    }
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.local_address));
    c10::intrusive_ptr<C10dBackend> group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        rendezvous->store(), options.rank, options.world_size, gloo_options);
    std::unique_ptr<ProcessGroup> formed(
        new ProcessGroup(std::move(rendezvous), std::move(group), options));
    // Gloo forms its mesh pair by pair: a rank may be done with its pairs while a peer is still
    // completing another. A barrier makes every pair whole before any rank goes on, so none can
    // leave (closing its pairs) under a peer still connecting.
    if (options.world_size > 1) {
      Status whole = formed->Barrier();
      if (!whole.ok()) return Status(whole.code(), where + ": " + whole.message());
    }
    if (options.shared_memory) {
      Result<std::unique_ptr<HostCollectives>> host = HostCollectives::Create(*formed);
      if (!host.ok()) return Status(host.status().code(), where + ": " + host.status().message());
      formed->host_ = std::move(host).value();
    }
    return formed;
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), where);
  }
}

ProcessGroup::ProcessGroup(std::unique_ptr<Rendezvous> rendezvous,
                           c10::intrusive_ptr<C10dBackend> group, ProcessGroupOptions options)
    : rendezvous_(std::move(rendezvous)), group_(std::move(group)), options_(std::move(options)) {}

ProcessGroup::~ProcessGroup() {
  if (group_ && options_.backend == CollectiveBackend::kNccl) cuda::ShutdownNcclGroup(*group_);
}

Status ProcessGroup::Barrier() {
  try {
    auto work = group_->barrier();
    return WaitWork(*work, options_.timeout, "barrier");
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), "barrier");
  }
}

bool NcclBuilt() { return cuda::Built(); }

Status WaitWork(c10d::Work& work, std::chrono::milliseconds timeout, std::string_view what) {
  try {
    work.wait(timeout);
    return Status::Ok();
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), what);
  }
}

Status EachRank(ProcessGroup& group, std::string_view what,
                const std::function<c10::intrusive_ptr<c10d::Work>(int rank)>& launch) {
  try {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int r = 0; r < group.world_size(); ++r) {
      if (auto work = launch(r)) works.push_back(std::move(work));
    }
    for (auto& work : works) RAYD_RETURN_IF_ERROR(WaitWork(*work, group.timeout(), what));
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), what);
  }
  return Status::Ok();
}

Status AllReduce(ProcessGroup& group, at::Tensor& tensor, std::string_view what,
                 c10d::ReduceOp op) {
  try {
    std::vector<torch::Tensor> tensors = {tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    return WaitWork(*group.c10d().allreduce(tensors, options), group.timeout(), what);
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), what);
  }
}

}  // namespace rayd::train
