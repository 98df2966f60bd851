// The resources a Trainer's worker group asks for, kept apart from trainer.cc (which needs
// LibTorch) so the tune.yaml loader and its fuzzer can check a scaling block without it.
#include <rayd/api/errors.h>
#include <rayd/train/trainer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

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

std::string CheckElastic(const ScalingConfig& scaling) {
  if (scaling.min_workers == 0) return "";
  if (scaling.min_workers < 1 || scaling.min_workers > scaling.num_workers) {
    return "an elastic run's bounds must satisfy 1 <= min <= max, got [" +
           std::to_string(scaling.min_workers) + ", " + std::to_string(scaling.num_workers) + "]";
  }
  if (!(scaling.mesh == MeshShape{})) return "an elastic run cannot have a mesh (yet)";
  if (!(scaling.resize_interval_s > 0)) return "resize_interval_s must be above 0";
  return "";
}

int WorkersThatFit(const ScalingConfig& scaling, const std::map<std::string, double>& resources) {
  int fit = std::numeric_limits<int>::max();
  for (const auto& [name, amount] : WorkerBundle(scaling)) {
    if (amount <= 0) continue;
    auto it = resources.find(name);
    const double held = it == resources.end() ? 0.0 : it->second;
    fit = std::min(fit, static_cast<int>(std::floor(held / amount + 1e-9)));
  }
  return fit == std::numeric_limits<int>::max() ? 0 : fit;
}

int ElasticWorkers(const ScalingConfig& scaling, const std::map<std::string, double>& available,
                   int own) {
  const int fit = std::min(WorkersThatFit(scaling, available), scaling.num_workers);
  return std::clamp(fit + own, scaling.min_workers, scaling.num_workers);
}

}  // namespace rayd::train

namespace rayd::train {

std::string CheckMesh(const ScalingConfig& scaling) {
  const MeshShape& mesh = scaling.mesh;
  if (mesh == MeshShape{}) return "";
  if (mesh.data < 0 || mesh.pipeline < 1 || mesh.tensor < 1) {
    return "every size must be at least 1 (data may be left out), got data " +
           std::to_string(mesh.data) + ", pipeline " + std::to_string(mesh.pipeline) + ", tensor " +
           std::to_string(mesh.tensor);
  }
  const int workers = scaling.num_workers;
  if (workers < 1) return "a mesh needs num_workers given, not " + std::to_string(workers);
  const int model_parallel = mesh.pipeline * mesh.tensor;
  const int data = mesh.data > 0 ? mesh.data : workers / model_parallel;
  if (data * model_parallel != workers) {
    std::ostringstream why;
    why << "data x pipeline x tensor must equal num_workers (" << workers << "), but ";
    if (mesh.data > 0) {
      why << mesh.data << " x " << mesh.pipeline << " x " << mesh.tensor << " = "
          << mesh.data * model_parallel;
    } else {
      why << "pipeline x tensor = " << model_parallel << " does not divide it";
    }
    return why.str();
  }
  return "";
}

MeshShape ResolveMesh(const ScalingConfig& scaling) {
  if (std::string why = CheckMesh(scaling); !why.empty()) {
    throw RaydError("ScalingConfig.mesh: " + why);
  }
  MeshShape mesh = scaling.mesh;
  if (mesh.data == 0) mesh.data = std::max(scaling.num_workers, 1) / (mesh.pipeline * mesh.tensor);
  return mesh;
}

MeshCoordinates MeshCoordinatesOf(const MeshShape& mesh, int rank) {
  MeshCoordinates at;
  at.data = mesh.data;
  at.pipeline = mesh.pipeline;
  at.tensor = mesh.tensor;
  at.tensor_rank = rank % mesh.tensor;
  at.data_rank = (rank / mesh.tensor) % mesh.data;
  at.pipeline_rank = rank / (mesh.tensor * mesh.data);
  return at;
}

std::vector<int> MeshGroupRanks(const MeshShape& mesh, int rank, MeshAxis axis) {
  const MeshCoordinates at = MeshCoordinatesOf(mesh, rank);
  auto rank_of = [&](int data, int pipeline, int tensor) {
    return (pipeline * mesh.data + data) * mesh.tensor + tensor;
  };
  std::vector<int> ranks;
  switch (axis) {
    case MeshAxis::kData:
      for (int d = 0; d < mesh.data; ++d)
        ranks.push_back(rank_of(d, at.pipeline_rank, at.tensor_rank));
      break;
    case MeshAxis::kPipeline:
      for (int p = 0; p < mesh.pipeline; ++p)
        ranks.push_back(rank_of(at.data_rank, p, at.tensor_rank));
      break;
    case MeshAxis::kTensor:
      for (int t = 0; t < mesh.tensor; ++t)
        ranks.push_back(rank_of(at.data_rank, at.pipeline_rank, t));
      break;
  }
  return ranks;
}

}  // namespace rayd::train
