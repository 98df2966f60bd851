#include "mlp_fixture.h"

#include <rayd/train/sampler.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace rayd::train::testing {

torch::nn::Sequential MakeMlp(const std::vector<int64_t>& widths, uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential model;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
  }
  return model;
}

Dataset MakeDataset(const MlpRun& run) {
  torch::manual_seed(run.data_seed);
  torch::Tensor inputs = torch::randn({run.dataset_size, run.widths.front()});
  torch::Tensor map = torch::randn({run.widths.front(), run.widths.back()});
  return Dataset{inputs, inputs.matmul(map).argmax(1)};
}

int64_t StepsPerEpoch(const MlpRun& run, int world_size) {
  return DistributedSampler(run.dataset_size, world_size, 0).size() / run.batch;
}

std::vector<int64_t> RankBatch(const MlpRun& run, int world_size, int rank, int epoch,
                               int64_t step) {
  DistributedSampler sampler(run.dataset_size, world_size, rank,
                             DistributedSamplerOptions{.seed = run.sampler_seed});
  sampler.SetEpoch(epoch);
  const std::vector<int64_t> shard = sampler.Indices();
  return {shard.begin() + step * run.batch, shard.begin() + (step + 1) * run.batch};
}

torch::Tensor Loss(torch::nn::Sequential& model, const Dataset& data,
                   const std::vector<int64_t>& rows) {
  torch::Tensor index = torch::tensor(rows, torch::kLong);
  return torch::nn::functional::cross_entropy(model->forward(data.inputs.index_select(0, index)),
                                              data.labels.index_select(0, index));
}

torch::optim::SGD MakeOptimizer(torch::nn::Sequential& model, const MlpRun& run) {
  return torch::optim::SGD(model->parameters(),
                           torch::optim::SGDOptions(run.learning_rate).momentum(run.momentum));
}

std::vector<float> FlatParameters(torch::nn::Module& model) {
  std::vector<torch::Tensor> pieces;
  for (const auto& p : model.parameters()) pieces.push_back(p.detach().reshape(-1));
  torch::Tensor flat = torch::cat(pieces).contiguous();
  return {flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel()};
}

bool WriteFloats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  return static_cast<bool>(out);
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

}  // namespace rayd::train::testing
