// The resources a Trainer's worker group asks for, kept apart from trainer.cc (which needs
// LibTorch) so the tune.yaml loader and its fuzzer can check a scaling block without it.
#include <rayd/train/trainer.h>

#include <cmath>
#include <sstream>

namespace rayd::train {

std::map<std::string, double> WorkerBundle(const ScalingConfig& scaling) {
  std::map<std::string, double> bundle = scaling.resources_per_worker;
  if (bundle.empty()) bundle = {{"CPU", 1}};
  if (scaling.use_gpu && !bundle.count("GPU")) bundle["GPU"] = 1;
  return bundle;
}

std::string CheckGpuSharing(const ScalingConfig& scaling) {
  if (!scaling.use_gpu || scaling.num_workers == 1) return "";
  const double gpus = WorkerBundle(scaling).at("GPU");
  if (gpus >= 1 && gpus == std::floor(gpus)) return "";
  std::ostringstream amount;
  amount << gpus;
  return amount.str() +
         " would put ranks of one group on the same GPU, which NCCL refuses; give each worker "
         "whole GPUs, or share a GPU between single-worker trials (num_workers: 1)";
}

}  // namespace rayd::train
