// GPU training figures for rayd::train on one device, next to Python torch's (bench/peers/
// torch_gpu.py, run by scripts/gpu-check.sh in the same session):
//
//   setup       forming a 1-rank NCCL group: the rendezvous and group, then the first
//               collective (NCCL makes its communicator lazily, on the first one)
//   samples/s   a model trained through DistributedDataParallel on cuda:0 over that group, and
//               the same model in plain LibTorch (no DDP), SGD with momentum, data resident on
//               the device; the example MLP (784-128-64-10, batch 64) and a large one
//               (784-4096x4-10, ~54M parameters, batch 256)
//
//   gpu_bench [--steps 300] [--json]
//
// Needs rayd built against CUDA LibTorch and a GPU; elsewhere it says so and exits 77.

#include <rayd/train/ddp.h>
#include <rayd/train/process_group.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace rayd;
using namespace rayd::train;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const char* what, const Status& status) {
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Model {
  const char* name;
  std::vector<int64_t> widths;
  int64_t batch;
};

torch::nn::Sequential MakeMlp(const std::vector<int64_t>& widths) {
  torch::nn::Sequential model;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    model->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) model->push_back(torch::nn::ReLU());
  }
  return model;
}

// Samples per second over `steps` steps after a warm-up, through DDP when `group` is set.
double Train(const Model& spec, ProcessGroup* group, int steps) {
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(0);
  torch::nn::Sequential model = MakeMlp(spec.widths);
  model->to(device);
  std::unique_ptr<DistributedDataParallel> ddp;
  if (group != nullptr) {
    auto made = DistributedDataParallel::Create(*model, *group);
    if (!made.ok()) {
      Die("DDP", made.status());
    }
    ddp = std::move(made).value();
  }
  constexpr int kBatches = 16;
  const auto on = torch::TensorOptions().device(device);
  torch::Tensor x = torch::randn({kBatches, spec.batch, spec.widths.front()}, on);
  torch::Tensor y =
      torch::randint(spec.widths.back(), {kBatches, spec.batch}, on.dtype(torch::kInt64));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto step = [&](int i) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x[i % kBatches]), y[i % kBatches])
        .backward();
    if (ddp) {
      Status s = ddp->FinishBackward();
      if (!s.ok()) {
        Die("FinishBackward", s);
      }
    }
    optimizer.step();
  };
  for (int i = 0; i < 20; ++i) step(i);
  torch::cuda::synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step(i);
  torch::cuda::synchronize();
  return static_cast<double>(steps) * spec.batch / Seconds(Clock::now() - start);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rayd GPU training figures"};
  int steps = 300;
  bool json = false;
  app.add_option("--steps", steps, "timed steps per figure");
  app.add_flag("--json", json, "one JSON object instead of lines");
  CLI11_PARSE(app, argc, argv);
  if (!NcclBuilt() || !torch::cuda::is_available()) {
    std::printf("skipped: %s\n", !NcclBuilt() ? "rayd was built against a CPU-only LibTorch"
                                              : "no CUDA device answers");
    return 77;
  }
  const auto t0 = Clock::now();
  auto rendezvous = Rendezvous::Host("127.0.0.1", 0);
  if (!rendezvous.ok()) Die("rendezvous", rendezvous.status());
  auto group =
      ProcessGroup::Connect(std::move(rendezvous).value(),
                            {.backend = CollectiveBackend::kNccl, .rank = 0, .world_size = 1});
  if (!group.ok()) Die("NCCL group", group.status());
  const double group_s = Seconds(Clock::now() - t0);
  std::vector<torch::Tensor> probe{torch::ones({1024}, torch::Device(torch::kCUDA, 0))};
  const auto t1 = Clock::now();
  Status first =
      WaitWork(*(*group)->c10d().allreduce(probe), (*group)->timeout(), "first all-reduce");
  if (!first.ok()) Die("first all-reduce", first);
  const double first_s = Seconds(Clock::now() - t1);

  const std::vector<Model> models = {{"example_mlp", {784, 128, 64, 10}, 64},
                                     {"mlp_54m", {784, 4096, 4096, 4096, 4096, 10}, 256}};
  std::vector<std::pair<std::string, double>> figures = {{"nccl_group_setup_s", group_s},
                                                         {"nccl_first_allreduce_s", first_s}};
  for (const Model& m : models) {
    figures.emplace_back(std::string(m.name) + "_ddp_samples_per_s", Train(m, group->get(), steps));
    figures.emplace_back(std::string(m.name) + "_plain_samples_per_s", Train(m, nullptr, steps));
  }
  if (json) {
    std::printf("{");
    for (size_t i = 0; i < figures.size(); ++i) {
      std::printf("%s\"%s\": %.6g", i ? ", " : "", figures[i].first.c_str(), figures[i].second);
    }
    std::printf("}\n");
  } else {
    for (const auto& [name, value] : figures) std::printf("%-36s %.6g\n", name.c_str(), value);
  }
  return 0;
}
