#pragma once
// ZeRO (Rajbhandari et al., 2020), stages 1 and 2, for a LibTorch optimizer under data
// parallelism: the optimizer state (Adam's two moments, SGD's momentum buffer) is split among
// the ranks, so each holds 1/N of it; at stage 2 the gradients are too. Python's counterparts
// are torch.distributed.optim.ZeroRedundancyOptimizer (stage 1) and DeepSpeed's ZeRO.
//
//   torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
//   auto zero = rayd::train::ShardedOptimizer::Create(adam, group, {.zero_stage = 2}, ddp.get());
//   ... loss.backward(); ddp->FinishBackward(); zero->Step(); zero->ZeroGrad();
//
// How it works (stages 1 and 2; stage 0 is plain data parallelism: Step steps the whole
// optimizer, so a loop can take the stage from its config):
// - The partition is by element, as real ZeRO's: the parameters, in the optimizer's order, make
//   one flat space of T elements, and rank r steps elements [T*r/N, T*(r+1)/N). Every rank
//   holds the same share (to one element), however unequal the parameters' sizes.
// - Create moves every parameter's data into one flat tensor (Tensor::set_data: the modules,
//   autograd and the caller's handles keep working), and replaces the optimizer's parameters
//   by this rank's slices of them: 1-D tensors on that flat storage, one per parameter in its
//   range (each group keeps its own). The optimizer's step and its state touch those only.
// - The model's DistributedDataParallel lays its gradients out in the same flat space
//   (DistributedDataParallel::UseFlatLayout), so the slice's .grad is a slice of its buckets'
//   storage: at stage 1 every bucket is all-reduced; at stage 2 each bucket is reduced to the
//   rank owning its range only, and the other ranks free it as soon as that reduce is done.
// - Step steps the slice, then every rank's slice is broadcast from its owner into every
//   rank's flat parameters, in place (an all-gather; no flat copies).
//
// The owner computes what every rank computes without sharding, from the same averaged
// gradient, so the parameters match stage 0's to floating-point tolerance: not bit for bit,
// since vectorised arithmetic may round a slice's edge elements differently from the whole
// parameter's (and at stage 2 a reduce may add in another order than an all-reduce). Every rank
// ends with the owners' bytes.
//
// Stage 3 (parameters sharded too) is rayd/train/fsdp.h: each sharded unit keeps its own flat
// range; the optimizer steps the units' shards as a plain (stage 0) optimizer does.

#include <rayd/base/status.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rayd::train {

struct ZeroOptions {
  int zero_stage = 0;  // 0, 1 or 2 here; 3 through PrepareOptimizer and sharded units (fsdp.h)
};

class DistributedDataParallel;

// Where one optimizer parameter's elements sit in the whole model's flat space, when that is not
// the parameter itself: at ZeRO stage 3 a unit's shard holds `count` elements of the model from
// `begin` (then padding); a replicated parameter holds its own, like every rank.
struct FlatPlacement {
  int64_t begin = 0;
  int64_t count = 0;
  bool replicated = false;  // every rank holds it: only rank 0 checkpoints it
};

// The optimizer state of one rank's shard, copied off the live tensors (to the CPU), so that
// writing it may overlap the next steps (ShardedOptimizer::Snapshot, WriteSnapshot).
struct OptimizerSnapshot {
  int rank = 0;    // the rank it was taken on
  int shards = 1;  // the shards a complete checkpoint has: the world size, or 1 at stage 0,
                   // where rank 0's is the whole and the others write nothing
  int64_t elements = 0;  // of the whole model's flat space
  int runs = 0;          // runs of flat elements: "r0/..." to "r<runs-1>/..."
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // "p<index>/<name>"
};

// Scales `split` (gradients each rank holds a different part of: their squares are summed over
// `group`'s ranks; null: this rank's alone) and `whole` (gradients every rank holds alike:
// counted once) so that their joint L2 norm is at most `max_norm`, by torch's clip_grad_norm_
// rule (times max_norm / (norm + 1e-6) when that is below 1); returns the norm before. With a
// group, every rank calls it.
Result<double> ClipByGlobalNorm(const std::vector<torch::Tensor>& split,
                                const std::vector<torch::Tensor>& whole, double max_norm,
                                ProcessGroup* group);

class ShardedOptimizer {
 public:
  // `optimizer` holds the trainable parameters of the model (as built from
  // model->parameters()), before its first step, and must outlive the returned object, as must
  // `group`. Stages 1 and 2 need `ddp`, the model's DistributedDataParallel, holding exactly
  // those parameters and outliving the returned object: Create lays its gradients out anew.
  // The optimizer's state from before Create is dropped (load a checkpoint after Create).
  // InvalidArgument for another stage, a missing `ddp`, mixed dtypes, or parameters on a device
  // the group's backend does not reduce.
  static Result<std::unique_ptr<ShardedOptimizer>> Create(
      torch::optim::Optimizer& optimizer, ProcessGroup& group, ZeroOptions options = {},
      DistributedDataParallel* ddp = nullptr);
  // Stage 3 (rayd/train/fsdp.h): `optimizer` steps sharded units' shards (and replicated
  // parameters) as a plain optimizer does; `placements` (one per parameter, in the optimizer's
  // order) say where each sits in the model's `elements`, so that checkpoints are in the same
  // flat space as every other stage's and load across stages and world sizes.
  static Result<std::unique_ptr<ShardedOptimizer>> CreateStage3(
      torch::optim::Optimizer& optimizer, ProcessGroup& group,
      std::vector<FlatPlacement> placements, int64_t elements);

  // Steps this rank's slices and brings every rank every parameter's new value.
  // DeadlineExceeded or Unavailable when a peer did not take part (as FinishBackward).
  Status Step();
  // Zeroes every gradient this rank holds, in place.
  void ZeroGrad();
  // Scales this step's gradients so that their L2 norm over the whole model is at most
  // `max_norm` (torch.nn.utils.clip_grad_norm_'s rule: multiplied by max_norm / (norm + 1e-6)
  // when that is below 1); returns the norm before clipping. At stages 1 and 2 no rank holds
  // every gradient, so the norm is summed over every rank's slices (an all-reduce of one
  // number): torch's clip_grad_norm_ over model->parameters() would see only this rank's. Every
  // rank calls it, after FinishBackward and before Step (with a loss scaler, after Unscale).
  Result<double> ClipGradNorm(double max_norm);

  int stage() const { return options_.zero_stage; }
  // The optimizer, holding this rank's slices of the parameters.
  torch::optim::Optimizer& optimizer() { return optimizer_; }
  // Rank r steps flat elements [bounds()[r], bounds()[r + 1]); empty when nothing is sharded.
  const std::vector<int64_t>& bounds() const { return bounds_; }
  size_t parameter_count() const { return params_.size(); }
  // Bytes of optimizer state on this rank (SGD's momentum buffers, Adam's and AdamW's moments;
  // other optimizers' state is not counted).
  int64_t state_bytes() const;

  // Checkpoints of the optimizer state, sharded (SGD, Adam and AdamW). Every rank writes the
  // state of the elements it steps to `dir`/optimizer_shard_<rank>_of_<world>.pt at once;
  // rank 0 then writes `dir`/optimizer.complete (the world size), after a barrier, so a
  // checkpoint lacking it is incomplete. Every rank must call it. At stage 0 each rank holds
  // everything: rank 0's shard is the whole. A shard holds runs of flat elements ("r<k>/range",
  // "r<k>/exp_avg", ...), whatever the parameters' shapes.
  Status SaveState(const std::string& dir);
  // SaveState in two halves, for a save that overlaps training: Snapshot copies this rank's
  // shard of the state (on the loop's thread, between steps); WriteSnapshot writes it to `dir`
  // from any thread: the shard file, renamed into place whole, and on rank 0 the marker. Without
  // SaveState's barrier the marker does not prove the other shards are written, so LoadState
  // also checks that every shard the marker names is there.
  Result<OptimizerSnapshot> Snapshot() const;
  static Status WriteSnapshot(const OptimizerSnapshot& snapshot, const std::string& dir);
  // Loads a complete checkpoint from `dir`, taken on any number of ranks at any stage: each
  // rank reads every shard and assembles the state of the elements it steps now (re-sharding a
  // 4-rank checkpoint onto 2 ranks, say). NotFound for an incomplete checkpoint (no marker, or a
  // shard it names missing); InvalidArgument for one of another model or optimizer.
  Status LoadState(const std::string& dir);
  // Whether `dir` holds a saved optimizer state (complete or not): a checkpoint from before a
  // loop saved one has none, and LoadState would refuse it.
  static bool HasSavedState(const std::string& dir);

 private:
  // This rank's slice of one parameter.
  struct Shard {
    int64_t begin = 0, end = 0;  // flat elements
    torch::Tensor param;         // on flat_params_'s storage; what the optimizer steps
  };

  ShardedOptimizer(torch::optim::Optimizer& optimizer, ProcessGroup& group, ZeroOptions options)
      : optimizer_(optimizer), group_(group), options_(options) {}
  bool sharded() const { return !bounds_.empty(); }
  // Moves every parameter's data into flat_params_.
  void Flatten();

  torch::optim::Optimizer& optimizer_;
  ProcessGroup& group_;
  ZeroOptions options_;
  std::vector<torch::Tensor> params_;       // every parameter, in the optimizer's order
  std::vector<int64_t> offsets_;            // per parameter: its first flat element
  int64_t total_ = 0;                       // flat elements
  std::vector<int64_t> bounds_;             // sharded: world size + 1 element bounds
  torch::Tensor flat_params_;               // sharded: every parameter's data, back to back
  std::vector<Shard> shards_;               // sharded: per parameter with elements in our range
  std::vector<FlatPlacement> placements_;   // stage 3: per parameter
};

}  // namespace rayd::train
