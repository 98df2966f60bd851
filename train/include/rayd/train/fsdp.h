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
//   flat tensor the block's parameters are views of), runs the block, and frees the range's
//   bytes again. The block's autograd history is an inner graph of the unit's own (its input
//   detached); the unit records one node in the caller's graph.
// - Backward gathers the range again into the same bytes, takes the gradients of the block's
//   input and parameters from the inner graph, lays the parameters' gradients out flat in the
//   range (its values are done with), reduces each rank's part to that rank (Gloo has no
//   reduce_scatter in this torch: one reduce per rank, as stage 2 does) averaged over the
//   ranks, and frees the range. The shard's gradient is what stage 0's would be for those
//   elements; it accumulates over micro-batches as any leaf's does.
// - The block's activations stay between forward and backward, as they would without units.
//   ShardedUnitOptions::recompute keeps none (activation checkpointing): forward runs without
//   history and backward runs the block's forward again on the gathered range, under the
//   autocast state forward ran under.
// - When every rank runs on this host, the gathers, reduces and the unit check go through the
//   group's shared memory (ProcessGroup::host_collectives(): one copy in and one out, a futex
//   barrier per 1 MiB chunk) instead of Gloo's loopback TCP; otherwise through Gloo as above.
// - Between steps only the shard lives: parameter bytes are 1/N of the unit's plus padding
//   (under one element per rank). Besides, the process keeps the block of the largest range
//   freed last (CPU only) for the next gather to reuse, as a caching allocator would: one
//   unit's range at most, not counted as parameters, dropped with the last unit.
//
// Constraints (checked where they can be): the block maps one tensor to one tensor (and, when
// recomputing, is deterministic: a block with dropout would need its RNG state replayed, which
// is not done); every rank runs the same units in the same order, since each gather and reduce
// is a collective (a unit skipped on one rank hangs the others until the group's timeout, then
// fails with DeadlineExceeded, never silently; ranks at units of other shapes are refused by
// name before the forward's gather). Parameters outside every unit are ordinary parameters:
// keep them replicated (DistributedDataParallel) or wrap them too. One gather is in flight at a
// time; overlapping the next unit's gather with this one's compute (FSDP's and DeepSpeed's
// prefetch) is not done: on a machine whose cores the ranks' compute fills, as these are,
// Gloo's copies through the kernel have no idle core to run on.

#include <rayd/base/status.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace rayd::train {

namespace detail {
class UnitFunction;
}

struct ShardedUnitOptions {
  // Recompute the block's forward in backward instead of keeping its activations between the
  // two (activation checkpointing): less memory, one more forward. Needed to run backward
  // through a unit twice (retain_graph), and to keep no half-precision copy of the block's
  // weights between forward and backward under autocast.
  bool recompute = false;
};

class ShardedUnitImpl : public torch::nn::Module {
 public:
  // `block`'s parameters become rank 0's, sharded; `group` outlives the unit. Throws
  // RaydError when the broadcast fails or the block has no parameters.
  ShardedUnitImpl(torch::nn::AnyModule block, ProcessGroup& group, ShardedUnitOptions options = {});
  ~ShardedUnitImpl() override;

  torch::Tensor forward(torch::Tensor input);

  // This rank's part of the flat range (what the optimizer steps).
  const torch::Tensor& shard() const { return shard_; }
  int64_t numel() const { return total_; }  // the block's parameter elements
  // Rank r owns flat elements [r * shard_numel(), (r + 1) * shard_numel()).
  int64_t shard_numel() const { return shard_len_; }
  // Bytes of parameters this rank holds now (between steps: its shard).
  int64_t param_bytes() const;
  // Every rank calls it: the block's full parameters, flat, in its parameters' order (the
  // checkpoint of the whole model is written unit by unit from these).
  Result<torch::Tensor> GatherFull();

  void train(bool on = true) override;

 private:
  friend class detail::UnitFunction;

  int64_t Numel(size_t param) const {
    return (param + 1 < offsets_.size() ? offsets_[param + 1] : total_) - offsets_[param];
  }
  void PointParametersAtRange();
  // Every rank must be at this unit: one small all-reduce (the largest signature and the
  // smallest) before each gather. InvalidArgument naming the mismatch otherwise; without it
  // a gather of other sizes makes Gloo abort the process, and one of equal sizes mixes units.
  Status CheckSameUnit();
  // The group's shared-memory collectives when its ranks share this host (and the unit's
  // tensors are on the CPU), else null: Gloo's serve.
  HostCollectives* Host() const;
  // Allocates the range's bytes and fills them from the owners, after checking that every
  // rank is at this unit when `check` (forward checks; backward runs the units in the reverse
  // of the order forward checked). Free releases the bytes.
  Status Gather(bool check = true);
  void Free();
  // Writes the parameters' gradients (one per parameter, undefined for an unused one) into the
  // gathered range in its layout, the padding zero: the parameters' values are done with.
  void LayOutGradients(const std::vector<torch::Tensor>& grads);
  // Sums each rank's part of the laid-out gradients on that rank; this rank's part, averaged.
  Result<torch::Tensor> ReduceToOwners();

  torch::nn::AnyModule block_;  // not registered: its parameters live only while it runs
  ProcessGroup& group_;
  ShardedUnitOptions options_;
  std::vector<torch::Tensor> params_;  // the block's parameters: views of range_
  std::vector<int64_t> offsets_;       // per parameter: its first flat element
  int64_t total_ = 0;
  int64_t shard_len_ = 0;
  int64_t signature_ = 0;  // from the parameters' shapes
  torch::Tensor range_;    // the whole flat range, padded; its bytes exist only while gathered
  size_t capacity_ = 0;    // of the block range_'s bytes are in (a spare may be larger)
  torch::Tensor shard_;
};
TORCH_MODULE(ShardedUnit);

// `model` with each of its Linear layers a sharded unit made by `make` (ShardUnit in a train
// loop, or a ShardedUnit on a group of one's own), the other layers as they are; the units are
// appended to `units` in the model's order.
torch::nn::Sequential ShardLinearLayers(
    const torch::nn::Sequential& model,
    const std::function<ShardedUnit(torch::nn::AnyModule)>& make, std::vector<ShardedUnit>& units);

// Clips the gradients of `units`' shards (and `replicated`, gradients every rank holds whole)
// to `max_norm` of the whole model's L2 norm, summed over every rank's shards (one all-reduce);
// returns the norm before clipping. Every rank calls it, after backward, before the step.
Result<double> ClipShardedGradNorm(const std::vector<ShardedUnit>& units,
                                   const std::vector<torch::Tensor>& replicated, double max_norm,
                                   ProcessGroup& group);

}  // namespace rayd::train
