#pragma once
// The worker-side API of the Trainer: what a train loop calls on its rank (the only part of
// rayd/train that needs LibTorch headers; rayd/train/trainer.h is the driver side).
//
// These functions may be called only from the thread running the loop, inside a rank actor;
// elsewhere they throw rayd::RaydError.

#include <rayd/train/ddp.h>
#include <rayd/train/trainer.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rayd::train {

// Where this rank sits in the job.
struct TrainContext {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;        // among the ranks on this node
  int local_world_size = 1;  // ranks on this node
  int node_rank = 0;         // nodes numbered in order of their lowest rank
  std::string run_name;
};

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

const TrainContext& GetContext();
// Broadcasts rank 0's parameters of `module` and installs the gradient all-reduce. `module`
// must stay alive while the loop uses the returned model. Call once per module. Throws RaydError
// when the broadcast fails.
PreparedModel& PrepareModel(torch::nn::Module& module);
// Records metrics (and a checkpoint directory, whose files are copied before this returns, so
// the loop may delete it afterwards). Only rank 0's reports are kept; the others' are dropped.
void Report(const std::map<std::string, double>& metrics,
            const std::optional<std::string>& checkpoint_dir = std::nullopt);
// The directory of the checkpoint this attempt resumes from (on this node), if any.
std::optional<std::string> GetCheckpoint();

}  // namespace rayd::train
