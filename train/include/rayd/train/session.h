#pragma once
// PrepareModel: the part of a train loop's API that needs LibTorch headers (GetContext, Report
// and GetCheckpoint are in rayd/train/trainer.h, so function trainables without a model need
// no LibTorch).
//
// May be called only from the thread running the loop, inside a rank actor; elsewhere it
// throws rayd::RaydError.

#include <rayd/train/ddp.h>
#include <rayd/train/trainer.h>
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

// Broadcasts rank 0's parameters of `module` and installs the gradient all-reduce. `module`
// must stay alive while the loop uses the returned model. Call once per module. Throws RaydError
// when the broadcast fails.
PreparedModel& PrepareModel(torch::nn::Module& module);
}  // namespace rayd::train
