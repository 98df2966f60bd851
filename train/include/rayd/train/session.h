#pragma once
// PrepareModel and PrepareOptimizer: the part of a train loop's API that needs LibTorch headers (GetContext, Report
// and GetCheckpoint are in rayd/train/trainer.h, so function trainables without a model need
// no LibTorch).
//
// May be called only from the thread running the loop, inside a rank actor; elsewhere it
// throws rayd::RaydError.

#include <rayd/train/ddp.h>
#include <rayd/train/fsdp.h>
#include <rayd/train/mixed_precision.h>
#include <rayd/train/trainer.h>
#include <rayd/train/zero.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rayd::train {

// A model wrapped for data-parallel training on this rank's group. Owned by the rank's
// session; lives until the loop returns.
class PreparedModel {
 public:
  explicit PreparedModel(std::unique_ptr<DistributedDataParallel> ddp) : ddp_(std::move(ddp)) {}
  // Completes this step's gradient all-reduce (call after backward, before optimizer.step()).
  // Throws rayd::RaydError when a peer died or timed out, which ends the loop and the attempt.
  void FinishBackward();
  DistributedDataParallel& ddp() { return *ddp_; }

 private:
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// This run's process groups: the world (every rank), and with a mesh (ScalingConfig::mesh)
// this rank's data, pipeline and tensor groups, formed once per attempt before the loop starts
// (without a mesh the data group is the world, the others this rank alone). A group's rank is
// the rank's coordinate along its axis (GetContext().mesh). PrepareModel, ShardUnit and
// PrepareOptimizer work on the data group; a loop hands the tensor group to tensor-parallel
// layers (rayd/train/tensor_parallel.h) and the pipeline group to a PipelineStage
// (rayd/train/pipeline.h). Throws RaydError when a group cannot be formed.
ProcessGroup& GetWorldGroup();
ProcessGroup& GetGroup(MeshAxis axis);

// Clips the gradients of `stage` (this rank's part of a model on a mesh: its pipeline stage,
// its layers split over the tensor group) to `max_norm` of the whole model's L2 norm, summed
// over the tensor group and the pipeline group; a parameter every tensor rank holds whole
// (a RowParallelLinear's bias, layers left whole) counts once. Every rank calls it, after the
// step's backward (its data group's gradients averaged) and before the optimizer steps, at
// zero_stage 0 (RaydError otherwise: the gradients would be sharded over the data group too).
// Returns the norm before clipping.
double ClipGradNormOverMesh(torch::nn::Module& stage, double max_norm, int zero_stage = 0);

// Broadcasts the data group's rank 0's parameters of `module` and installs the gradient
// all-reduce over the data group. `module` must stay alive while the loop uses the returned model.
// Call once per module. Throws RaydError when the broadcast fails.
PreparedModel& PrepareModel(torch::nn::Module& module);

// An optimizer prepared for data-parallel training: ZeRO stage 0 (every rank steps every
// parameter), 1 (each rank keeps and steps its shard of the optimizer state, then shares the
// new parameters) or 2 (the gradients too are reduced only to the rank that steps them:
// rayd/train/zero.h). Owned by the rank's session.
namespace internal {
class BackgroundWriter;
}  // namespace internal

class PreparedOptimizer {
 public:
  // `group` and `writer` (the session's) outlive it.
  PreparedOptimizer(std::unique_ptr<ShardedOptimizer> zero, ProcessGroup& group,
                    internal::BackgroundWriter& writer)
      : zero_(std::move(zero)), group_(group), writer_(writer) {}
  // Steps (this rank's shard, then shares it). Throws rayd::RaydError when a peer died or timed
  // out, which ends the loop and the attempt.
  void Step();
  // With a loss scaler (fp16): unscales this rank's gradients, and steps only when no rank found
  // an inf or nan; returns whether it stepped. Call scaler.Update() after.
  bool Step(LossScaler& scaler);
  // Zeroes every parameter's gradient in place (the optimizer's own zero_grad only reaches the
  // parameters this rank steps).
  void ZeroGrad() { zero_->ZeroGrad(); }
  // Unscales this step's gradients (fp16), once, and says whether every rank's were finite: call
  // it before ClipGradNorm; Step(scaler) does when it was not.
  bool Unscale(LossScaler& scaler);
  // Clips the gradients to `max_norm` of the whole model's L2 norm, over every rank's shard
  // (ShardedOptimizer::ClipGradNorm; torch's clip_grad_norm_ over the model's parameters would
  // see only this rank's at stage 2). Every rank calls it. Returns the norm before clipping;
  // throws RaydError when a peer did not take part.
  double ClipGradNorm(double max_norm);
  int64_t state_bytes() const { return zero_->state_bytes(); }
  ShardedOptimizer& sharded() { return *zero_; }
  int stage() const { return zero_->stage(); }

  // Every rank saves its shard of the optimizer state into `dir` (on its own node; the
  // directory it reports next, from NewCheckpointDir), without waiting for the write: the state
  // is copied now and written in the background while training goes on, and a Report of `dir`
  // ships it once written. The driver persists the checkpoint with every rank's files in it, so
  // it is whole (optimizer.complete and every shard) or not there at all. Call it on every rank,
  // between steps. Throws RaydError for an optimizer whose state it does not know (SGD, Adam
  // and AdamW); a failed write fails the loop's next Report.
  void SaveState(const std::string& dir);
  // Loads the optimizer state from a checkpoint SaveState made (GetCheckpoint()'s directory),
  // taken on any number of ranks at any stage: each rank keeps its own shard's. Throws
  // RaydError when the checkpoint is incomplete or of another model.
  void LoadState(const std::string& dir);

 private:
  std::unique_ptr<ShardedOptimizer> zero_;
  ProcessGroup& group_;
  internal::BackgroundWriter& writer_;
};

// ZeRO stage 3 (rayd/train/fsdp.h): `block`'s parameters, sharded among this run's ranks (rank
// 0's values), gathered only while the unit's forward or backward runs. Put the unit in the
// model in the block's place; build the optimizer from the model's parameters (the units'
// shards, and whatever is left outside units, replicated) and prepare it at zero_stage 3.
// PrepareModel's all-reduce leaves the shards alone. Every rank wraps the same blocks in the
// same order. Throws RaydError when the parameters cannot be broadcast.
ShardedUnit ShardUnit(torch::nn::AnyModule block);

// Prepares `optimizer` (built from the prepared model's parameters) at `options.zero_stage`.
// `optimizer` must stay alive while the loop uses the result. Stages 1 and 2 need the model
// prepared first (PrepareModel), since they lay out the model's gradients anew; stage 3 needs
// the optimizer's parameters to include units' shards (ShardUnit). Throws RaydError for a stage
// other than 0 to 3. At every stage SaveState writes the state in the whole model's flat space
// (a stage-3 shard's elements where they sit in the model), so LoadState takes a checkpoint of
// any stage and world size.
PreparedOptimizer& PrepareOptimizer(torch::optim::Optimizer& optimizer, ZeroOptions options = {});
}  // namespace rayd::train
