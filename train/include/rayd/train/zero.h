#pragma once
// ZeRO (Rajbhandari et al., 2020), stages 1 and 2, for a LibTorch optimizer under data parallelism:
// each parameter's optimizer state (Adam's two moments, SGD's momentum buffer) lives on one
// rank only, its owner, so each rank holds about 1/N of it. After the gradients are averaged
// (DistributedDataParallel::FinishBackward), every rank steps the parameters it owns, then each
// parameter is broadcast from its owner, in place (no flat copies: they would cost the memory
// the shards save). Python's counterpart is
// torch.distributed.optim.ZeroRedundancyOptimizer.
//
//   torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
//   auto zero = rayd::train::ShardedOptimizer::Create(adam, group, {.zero_stage = 1}).value();
//   ... loss.backward(); ddp->FinishBackward(); zero->Step(); zero->ZeroGrad();
//
// Partition: parameters are dealt to ranks largest first, each to the rank with the fewest
// elements so far (ties: the lower rank), the same way on every rank. Create takes the other
// ranks' parameters out of the optimizer's parameter groups, so its step touches, and its state
// holds, this rank's shard only. Every parameter must have one dtype and live on the group's
// device kind (CPU for Gloo, CUDA for NCCL).
//
// The owner computes exactly what every rank computes without sharding, from the same averaged
// gradient, and its result is copied bit for bit: parameters match stage 0's exactly.
//
// Stage 2 shards the gradients too: Create hands the partition to the model's
// DistributedDataParallel, whose buckets then hold one owner's parameters each and are reduced
// to that owner only (not all-reduced); the other ranks free a bucket as soon as its reduce is
// done, so between steps each rank holds only the gradients of the parameters it steps. The
// owner's gradient is the same sum as stage 0's all-reduce gives, so stage 2 too ends with stage
// 0's parameters (to floating-point tolerance: a reduce may add in another order than an
// all-reduce).
//
// Stage 0 is plain data parallelism (Step steps the whole optimizer), so a loop can take the
// stage from its config.
//
// Stage 3 (parameters sharded too) is not here. It would take gathering each layer's parameters
// from their owners just before its forward and again before its backward (module pre-hooks,
// which LibTorch's C++ modules lack: a wrapper module per layer), freeing them after, and a flat,
// element-wise partition so that a layer's gather is one collective.

#include <rayd/base/status.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rayd::train {

struct ZeroOptions {
  int zero_stage = 0;  // 0, 1 or 2
};

class DistributedDataParallel;

// The optimizer state of one rank's shard, copied off the live tensors (to the CPU), so that
// writing it may overlap the next steps (ShardedOptimizer::Snapshot, WriteSnapshot).
struct OptimizerSnapshot {
  int rank = 0;    // the rank it was taken on
  int shards = 1;  // the shards a complete checkpoint has: the world size, or 1 at stage 0,
                   // where rank 0's is the whole and the others write nothing
  int64_t parameters = 0;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // "p<index>/<name>"
};

class ShardedOptimizer {
 public:
  // `optimizer` holds every trainable parameter (as built from model->parameters()) and must
  // outlive the returned object, as must `group`. Stage 2 needs `ddp`, the model's
  // DistributedDataParallel (which must hold every parameter of the optimizer and outlive the
  // returned object); Create reshapes its buckets. InvalidArgument for another stage, stage 2
  // without `ddp`, mixed dtypes, or parameters on a device the group's backend does not reduce.
  static Result<std::unique_ptr<ShardedOptimizer>> Create(
      torch::optim::Optimizer& optimizer, ProcessGroup& group, ZeroOptions options = {},
      DistributedDataParallel* ddp = nullptr);

  // Steps this rank's shard and brings every rank every parameter's new value. DeadlineExceeded
  // or Unavailable when a peer did not take part (as FinishBackward).
  Status Step();
  // Zeroes every parameter's gradient in place (the owned and the others').
  void ZeroGrad();

  int stage() const { return options_.zero_stage; }
  // The optimizer, holding this rank's shard of the parameters.
  torch::optim::Optimizer& optimizer() { return optimizer_; }
  // The rank that steps parameter `index` (in the optimizer's original order).
  int owner(size_t index) const { return owners_.at(index); }
  size_t parameter_count() const { return params_.size(); }
  // Bytes of optimizer state on this rank (SGD's momentum buffers, Adam's and AdamW's moments;
  // other optimizers' state is not counted).
  int64_t state_bytes() const;

  // Checkpoints of the optimizer state, sharded (SGD, Adam and AdamW). Every rank writes the
  // state of the parameters it steps to `dir`/optimizer_shard_<rank>_of_<world>.pt at once;
  // rank 0 then writes `dir`/optimizer.complete (the world size), after a barrier, so a
  // checkpoint lacking it is incomplete. Every rank must call it. At stage 0 each rank holds
  // everything: rank 0's shard is the whole.
  Status SaveState(const std::string& dir);
  // SaveState in two halves, for a save that overlaps training: Snapshot copies this rank's
  // shard of the state (on the loop's thread, between steps); WriteSnapshot writes it to `dir`
  // from any thread: the shard file, renamed into place whole, and on rank 0 the marker. Without
  // SaveState's barrier the marker does not prove the other shards are written, so LoadState
  // also checks that every shard the marker names is there.
  Result<OptimizerSnapshot> Snapshot() const;
  static Status WriteSnapshot(const OptimizerSnapshot& snapshot, const std::string& dir);
  // Loads a complete checkpoint from `dir`, taken on any number of ranks: each rank reads every
  // shard and keeps the state of the parameters it steps now (re-sharding a 4-rank checkpoint
  // onto 2 ranks, say). NotFound for an incomplete checkpoint (no marker, or a shard it names
  // missing); InvalidArgument for one of another model or optimizer.
  Status LoadState(const std::string& dir);

 private:
  ShardedOptimizer(torch::optim::Optimizer& optimizer, ProcessGroup& group, ZeroOptions options)
      : optimizer_(optimizer), group_(group), options_(options) {}

  torch::optim::Optimizer& optimizer_;
  ProcessGroup& group_;
  ZeroOptions options_;
  std::vector<torch::Tensor> params_;  // every parameter, in the optimizer's order
  std::vector<int> owners_;            // per parameter
};

}  // namespace rayd::train
