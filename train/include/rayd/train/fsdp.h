#pragma once
// ZeRO stage 3 (Rajbhandari et al., 2020; PyTorch's FSDP): a model's parameters themselves are
// split among the ranks, so that between steps each holds 1/N of every sharded unit's
// parameters, gradients and optimizer state.
//
//   auto unit = rayd::train::ShardedUnit(torch::nn::AnyModule(torch::nn::Linear(784, 4096)),
//   group); model->push_back(unit);                        // a torch::nn::Sequential of units, say
//   torch::optim::Adam adam(model->parameters());  // the units' shards: 1/N of the model
//   ... loss.backward(); ClipShardedGradNorm(...); adam.step();
//
// How it works:
// - A unit wraps a block of the model (FSDP's "unit"): its parameters, in the block's order,
//   make one flat range, padded to a multiple of the world size, of which rank r owns the r-th
//   N-th: the unit's only registered parameter, `shard`, which the optimizer steps. At
//   construction the block's parameters are rank 0's (broadcast), as PrepareModel makes them.
// - Forward gathers the full range from its owners (a broadcast per rank, in place into one
//   flat tensor), points the block's parameters at it, runs the block without recording
//   autograd history, and frees the range again. The unit records one autograd node instead.
// - Backward gathers the range again, runs the block's forward once more with history (the
//   activations inside a unit are recomputed, as activation checkpointing does, so none are
//   kept between forward and backward), takes the gradients of the block's input and
//   parameters, reduces each rank's part of the parameters' gradients to that rank (Gloo has no
//   reduce_scatter in this torch: one reduce per rank, as stage 2 does) averaged over the
//   ranks, and frees the range. The shard's gradient is what stage 0's would be for those
//   elements; it accumulates over micro-batches as any leaf's does.
// - Between steps only the shard lives: parameter bytes are 1/N of the unit's plus padding
//   (under one element per rank).
//
// Constraints (checked where they can be): the block maps one tensor to one tensor and is
// deterministic (recomputation must repeat its forward: a block with dropout would need its RNG
// state replayed, which is not done); every rank runs the same units in the same order, since
// each gather and reduce is a collective (a unit skipped on one rank hangs the others until the
// group's timeout, then fails with DeadlineExceeded, never silently; ranks at units of other
// shapes are refused by name before the gather). Parameters outside every
// unit are ordinary parameters: keep them replicated (DistributedDataParallel) or wrap them too.
// One gather is in flight at a time; overlapping the next unit's gather with this one's compute
// (FSDP's and DeepSpeed's prefetch) is not done.

#include <rayd/base/status.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace rayd::train {

class ShardedUnitImpl : public torch::nn::Module {
 public:
  // `block`'s parameters become rank 0's, sharded; `group` outlives the unit. Throws
  // RaydError when the broadcast fails or the block has no parameters.
  ShardedUnitImpl(torch::nn::AnyModule block, ProcessGroup& group);

  torch::Tensor forward(torch::Tensor input);

  // This rank's part of the flat range (what the optimizer steps).
  const torch::Tensor& shard() const { return shard_; }
  int64_t numel() const { return total_; }  // the block's parameter elements
  // Rank r owns flat elements [r * shard_numel(), (r + 1) * shard_numel()).
  int64_t shard_numel() const { return shard_len_; }
  // Bytes of parameters this rank holds between steps.
  int64_t param_bytes() const;
  // Every rank calls it: the block's full parameters, flat, in its parameters' order (the
  // checkpoint of the whole model is written unit by unit from these).
  Result<torch::Tensor> GatherFull();
  // Gathers the range, points the block's parameters at it, and frees it again (the autograd
  // function's halves; public for it).
  Status Materialize(torch::Tensor& full);
  void Release();
  Result<torch::Tensor> ReduceToOwners(torch::Tensor flat_grad);
  std::vector<torch::Tensor>& block_parameters() { return params_; }
  int64_t Numel(size_t param) const {
    return (param + 1 < offsets_.size() ? offsets_[param + 1] : total_) - offsets_[param];
  }
  torch::nn::AnyModule& block() { return block_; }

  void train(bool on = true) override;

 private:
  // Every rank must be at this unit: one small all-reduce (the largest signature and the
  // smallest) before each gather. InvalidArgument naming the mismatch otherwise; without it
  // a gather of other sizes makes Gloo abort the process, and one of equal sizes mixes units.
  Status CheckSameUnit();

  torch::nn::AnyModule block_;  // not registered: its parameters live only while it runs
  ProcessGroup& group_;
  std::vector<torch::Tensor> params_;         // the block's parameters (their handles)
  std::vector<int64_t> offsets_;              // per parameter: its first flat element
  std::vector<std::vector<int64_t>> shapes_;  // per parameter
  int64_t total_ = 0;
  int64_t shard_len_ = 0;
  int64_t signature_ = 0;  // from the parameters' shapes
  torch::Tensor shard_;
};
TORCH_MODULE(ShardedUnit);

// Clips the gradients of `units`' shards (and `replicated`, gradients every rank holds whole)
// to `max_norm` of the whole model's L2 norm, summed over every rank's shards (one all-reduce);
// returns the norm before clipping. Every rank calls it, after backward, before the step.
Result<double> ClipShardedGradNorm(const std::vector<ShardedUnit>& units,
                                   const std::vector<torch::Tensor>& replicated, double max_norm,
                                   ProcessGroup& group);

}  // namespace rayd::train
