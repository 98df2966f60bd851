// fashion_mnist_cnn: a small convolutional network trained data-parallel on Fashion-MNIST read
// through rayd Data: the train loop of the README's sweep (examples/tune.yaml) and of the longer
// sweep for a good model (examples/tune_fashion_mnist.yaml).
//
// Datasets (the run's `datasets:`, rayd/train/data.h): `train` (required) and `validation`
// (required), each with columns image (uint8 [28, 28], or float32 after a to_float32 transform)
// and label; `test` (optional) is scored once, after the last epoch, and reported as
// test_accuracy. Each rank trains on its shard of `train` (a new order each epoch) and scores
// its shard of `validation`; the counts are summed over the ranks.
//
// The network: conv(channels, 3x3) - ReLU - maxpool 2 - conv(2 x channels, 3x3) - ReLU - maxpool 2 -
// linear(hidden) - ReLU - dropout - linear(10).
//
// Config keys (all optional): lr (0.05), momentum (0.9), weight_decay (0), channels (8), hidden
// (64), dropout (0), batch_size per worker (64), epochs (5), batch_norm (false: batch norm after
// each convolution), augment (0: each training image shifted by up to this many pixels, a new
// shift each time it is seen), flip (false: each training image mirrored left to right with
// probability 1/2, each time it is seen; scores then average each image's and its mirror's
// logits), lr_schedule (constant, or cosine: lr annealed towards 0 over
// the epochs). One epoch is one
// training_iteration: rank 0 reports the validation accuracy and loss (accuracy, loss), the mean
// training loss, the epoch's training pace over the gang (samples_per_s), and with a checkpoint
// (model.pt, epoch) from which a resumed run continues after that epoch, on any number of ranks.
// data_wait_s (seconds the loop waited for batches) is added by rayd.

#include <rayd/train/data.h>
#include <rayd/train/session.h>
#include <rayd/train/torch_data.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

namespace rt = rayd::train;

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t channels, int64_t hidden, double dropout, bool batch_norm)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, channels, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 2 * channels, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(2 * channels * 7 * 7, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 10))),
        drop(register_module("drop", torch::nn::Dropout(dropout))) {
    if (batch_norm) {
      bn1 = register_module("bn1", torch::nn::BatchNorm2d(channels));
      bn2 = register_module("bn2", torch::nn::BatchNorm2d(2 * channels));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    x = conv1(x);
    if (bn1) x = bn1(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    x = conv2(x);
    if (bn2) x = bn2(x);
    x = torch::max_pool2d(torch::relu(x), 2);
    x = drop(torch::relu(fc1(x.flatten(1))));
    return fc2(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
  torch::nn::Dropout drop;
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
};
TORCH_MODULE(Net);

// Images as the network takes them: [n, 1, 28, 28] float in [0, 1] (uint8 columns scaled here;
// a to_float32 transform may have scaled them already).
torch::Tensor Images(const rt::TensorBatch& batch) {
  auto it = batch.find("image");
  if (it == batch.end()) throw std::invalid_argument("the dataset has no 'image' column");
  torch::Tensor x = it->second;
  if (x.scalar_type() == torch::kUInt8) x = x.to(torch::kFloat32).div_(255.0);
  return x.to(torch::kFloat32).view({-1, 1, 28, 28});
}

// Each image shifted by up to `pixels` in x and y (zero-filled), each its own random shift: the
// augmentation of the dataset's table's better entries.
torch::Tensor Shift(const torch::Tensor& x, int64_t pixels) {
  if (pixels <= 0) return x;
  const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  torch::Tensor padded = torch::nn::functional::pad(
      x, torch::nn::functional::PadFuncOptions({pixels, pixels, pixels, pixels}));
  torch::Tensor offsets = torch::randint(0, 2 * pixels + 1, {n, 2}, torch::kInt64);
  auto at = offsets.accessor<int64_t, 2>();
  std::vector<torch::Tensor> rows;
  rows.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    rows.push_back(padded[i].narrow(1, at[i][0], h).narrow(2, at[i][1], w));
  }
  return torch::stack(rows);
}

// Each image mirrored left to right with probability 1/2 (clothes look the same mirrored).
torch::Tensor Flip(const torch::Tensor& x, bool flip) {
  if (!flip) return x;
  const torch::Tensor mirrored = torch::rand({x.size(0), 1, 1, 1}) < 0.5;
  return torch::where(mirrored, x.flip({3}), x);
}

torch::Tensor Labels(const rt::TensorBatch& batch) {
  auto it = batch.find("label");
  if (it == batch.end()) throw std::invalid_argument("the dataset has no 'label' column");
  return it->second.to(torch::kInt64);
}

// Accuracy and mean loss of `model` on this rank's shard of `dataset`, summed over the ranks.
// With `mirrored` (a model trained with flip), each image's logits are the mean of the image's
// and its mirror image's (test-time augmentation).
std::pair<double, double> Score(Net& model, const std::string& dataset, int64_t batch_size,
                                bool mirrored) {
  torch::NoGradGuard no_grad;
  model->eval();
  // [correct, loss sum, rows]
  torch::Tensor totals = torch::zeros({3}, torch::kFloat64);
  rayd::data::DatasetShard& shard = rt::GetDatasetShard(dataset);
  for (rt::TensorBatch& batch : rt::IterTorchBatches(shard, {.batch_size = batch_size, .epoch = 0})) {
    const torch::Tensor x = Images(batch);
    torch::Tensor logits = model->forward(x);
    if (mirrored) logits = (logits + model->forward(x.flip({3}))) / 2;
    torch::Tensor y = Labels(batch);
    totals[0] += logits.argmax(1).eq(y).sum().item<double>();
    totals[1] += torch::nn::functional::cross_entropy(
                     logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                     .item<double>();
    totals[2] += static_cast<double>(y.size(0));
  }
  if (rayd::Status s = rt::AllReduce(rt::GetWorldGroup(), totals, "summing the scores"); !s.ok()) {
    throw std::runtime_error(s.message());
  }
  const double rows = std::max(totals[2].item<double>(), 1.0);
  return {totals[0].item<double>() / rows, totals[1].item<double>() / rows};
}

void FashionMnistCnn(const nlohmann::json& config) {
  torch::set_num_threads(1);  // one BLAS thread per rank: ranks share the node's cores
  const double lr = config.value("lr", 0.05);
  const double momentum = config.value("momentum", 0.9);
  const double weight_decay = config.value("weight_decay", 0.0);
  const int64_t channels = config.value("channels", 8);
  const int64_t hidden = config.value("hidden", 64);
  const double dropout = config.value("dropout", 0.0);
  const int64_t batch_size = config.value("batch_size", 64);
  const int epochs = config.value("epochs", 5);
  const int64_t augment = config.value("augment", 0);
  const bool flip = config.value("flip", false);
  const bool batch_norm = config.value("batch_norm", false);
  const std::string lr_schedule = config.value("lr_schedule", std::string("constant"));
  if (lr_schedule != "constant" && lr_schedule != "cosine") {
    throw std::invalid_argument("config.lr_schedule: expected constant or cosine, got '" +
                                lr_schedule + "'");
  }
  if (channels < 1 || hidden < 1 || batch_size < 1) {
    throw std::invalid_argument("config: channels, hidden and batch_size must be at least 1");
  }
  if (dropout < 0 || dropout >= 1) {
    throw std::invalid_argument("config.dropout: expected [0, 1), got " + std::to_string(dropout));
  }

  torch::manual_seed(42);  // rank 0's initial parameters are broadcast anyway
  Net model(channels, hidden, dropout, batch_norm);
  int start_epoch = 0;
  if (std::optional<std::string> checkpoint = rt::GetCheckpoint()) {
    torch::load(model, *checkpoint + "/model.pt");
    std::ifstream(*checkpoint + "/epoch") >> start_epoch;
    ++start_epoch;
  }
  rt::PreparedModel& ddp = rt::PrepareModel(*model);
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(weight_decay));
  rayd::data::DatasetShard& train = rt::GetDatasetShard("train");
  const int rank = rt::GetContext().world_rank;

  for (int epoch = start_epoch; epoch < epochs; ++epoch) {
    if (lr_schedule == "cosine") {  // annealed from lr towards 0 over the run's epochs
      for (auto& group : sgd.param_groups()) {
        static_cast<torch::optim::SGDOptions&>(group.options())
            .lr(lr * 0.5 * (1 + std::cos(M_PI * epoch / epochs)));
      }
    }
    model->train();
    torch::Tensor train_loss = torch::zeros({});
    int64_t steps = 0, rows = 0;
    const auto started = std::chrono::steady_clock::now();
    for (rt::TensorBatch& batch : rt::IterTorchBatches(train, {.batch_size = batch_size, .epoch = epoch})) {
      sgd.zero_grad();
      torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(Flip(Shift(Images(batch), augment), flip)), Labels(batch));
      loss.backward();
      ddp.FinishBackward();
      sgd.step();
      train_loss += loss.detach();
      ++steps;
      rows += Labels(batch).size(0);
    }
    const double train_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const auto [accuracy, val_loss] = Score(model, "validation", 512, flip);
    std::map<std::string, double> metrics = {
        {"accuracy", accuracy},
        {"loss", val_loss},
        {"train_loss", train_loss.item<double>() / std::max<int64_t>(steps, 1)},
        {"epoch", epoch},
        // Rank 0's pace over the whole gang (every rank takes as many rows).
        {"samples_per_s", static_cast<double>(rows * rt::GetContext().world_size) / train_s}};
    if (epoch + 1 == epochs) {
      const std::vector<std::string> names = rt::DatasetNames();
      if (std::find(names.begin(), names.end(), "test") != names.end()) metrics["test_accuracy"] = Score(model, "test", 512, flip).first;
    }
    std::optional<std::string> checkpoint;
    if (rank == 0) {
      checkpoint = rt::NewCheckpointDir();
      torch::save(model, *checkpoint + "/model.pt");
      std::ofstream(*checkpoint + "/epoch") << epoch;
    }
    rt::Report(metrics, checkpoint);
  }
}

const bool registered_fashion_mnist_cnn =
    rayd::train::RegisterTrainLoop("fashion_mnist_cnn", FashionMnistCnn);

}  // namespace
