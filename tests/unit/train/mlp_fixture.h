#pragma once
// What ddp_rank (one rank of a 2-process DDP run) and ddp_test (the single-process reference)
// must agree on: the model, the synthetic dataset, and which rows each rank trains on at each
// step. Both sides build everything from fixed seeds, so they see the same numbers.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rayd::train::testing {

struct MlpRun {
  std::vector<int64_t> widths = {20, 32, 16, 4};  // inputs, hidden..., classes
  int64_t dataset_size = 256;
  int64_t batch = 16;  // per rank and step
  int epochs = 2;
  uint64_t data_seed = 1;
  uint64_t model_seed = 7;
  uint64_t sampler_seed = 3;
  double learning_rate = 0.05;
  double momentum = 0.9;
};

// Linear layers of `widths` with ReLU between them, initialised from `seed`.
torch::nn::Sequential MakeMlp(const std::vector<int64_t>& widths, uint64_t seed);

struct Dataset {
  torch::Tensor inputs;  // [n, widths.front()]
  torch::Tensor labels;  // [n], the argmax of a fixed random linear map of the inputs
};
Dataset MakeDataset(const MlpRun& run);

// Steps per epoch when the dataset is shared among `world_size` ranks.
int64_t StepsPerEpoch(const MlpRun& run, int world_size);
// The dataset rows `rank` trains on at (epoch, step), from its DistributedSampler shard.
std::vector<int64_t> RankBatch(const MlpRun& run, int world_size, int rank, int epoch,
                               int64_t step);
// Mean cross-entropy of `model` on the rows `rows` of `data`.
torch::Tensor Loss(torch::nn::Sequential& model, const Dataset& data,
                   const std::vector<int64_t>& rows);
torch::optim::SGD MakeOptimizer(torch::nn::Sequential& model, const MlpRun& run);

// All parameters, flattened in registration order.
std::vector<float> FlatParameters(torch::nn::Module& model);
bool WriteFloats(const std::string& path, const std::vector<float>& values);
std::vector<float> ReadFloats(const std::string& path);

}  // namespace rayd::train::testing
