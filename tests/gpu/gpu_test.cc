// The Trainer and the Tuner on a real GPU (label `gpu`; skipped where none answers, see
// gpu_test_main.cc): a 1-rank NCCL run matches a CPU run of the same seed; four 0.25-GPU trials
// of the example run at once under ASHA; device memory comes back after a stopped run and after
// a reused gang's run; an NCCL collective whose peer stops calling fails within the timeout
// (two GPUs needed: skipped on a one-GPU machine, where NCCL cannot form a 2-rank group).

#include <rayd/api.h>
#include <rayd/train/session.h>
#include <rayd/tune/tuner.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.h"
#include "test_util.h"

namespace gpu {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;
namespace rt = rayd::train;
namespace tune = rayd::tune;
using Clock = std::chrono::steady_clock;

// One embedded cluster per test (each test runs in its own process under CTest).
class Cluster {
 public:
  Cluster() {
    rayd::RaydConfig config;
    config.temp_dir = dir_.path();
    config.num_cpus = 8;  // the GPU machine has 16 cores; GPUs are detected
    rayd::Init(config);
  }
  ~Cluster() { rayd::Shutdown(); }

 private:
  TempDir dir_;
};

// 40 SGD steps of a small MLP on data drawn on the CPU (the same for every device), then the
// parameters, flattened on the CPU, into out_dir/params.<device>.
void ParityLoop(const json& config) {
  const rt::TrainContext& context = rt::GetContext();
  const torch::Device device(context.device);
  torch::manual_seed(7);
  torch::nn::Sequential model(torch::nn::Linear(32, 64), torch::nn::Tanh(),
                              torch::nn::Linear(64, 4));
  torch::Tensor x = torch::randn({512, 32});
  torch::Tensor y = torch::randint(4, {512}, torch::kInt64);
  rt::PreparedModel& ddp = rt::PrepareModel(*model);
  x = x.to(device);
  y = y.to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 40; ++step) {
    torch::Tensor rows = torch::arange(step % 8 * 64, step % 8 * 64 + 64, torch::kInt64).to(device);
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x.index_select(0, rows)),
                                         y.index_select(0, rows))
        .backward();
    ddp.FinishBackward();
    optimizer.step();
  }
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().to(torch::kCPU).reshape(-1));
  torch::Tensor all = torch::cat(flat).contiguous();
  std::ofstream out(
      config.at("out_dir").get<std::string>() + "/params." + (device.is_cuda() ? "cuda" : "cpu"),
      std::ios::binary);
  out.write(static_cast<const char*>(all.data_ptr()), all.numel() * sizeof(float));
  rt::Report({{"done", 1}});
}
RAYD_TRAIN_LOOP(ParityLoop);

// Holds `gib` GiB on the rank's device, reports, and (with hold) keeps reporting until stopped.
void MemoryLoop(const json& config) {
  const torch::Device device(rt::GetContext().device);
  const int64_t bytes = static_cast<int64_t>(config.value("gib", 4.0) * (1LL << 30));
  torch::Tensor block =
      torch::ones({bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
  rt::Report({{"allocated_gib", static_cast<double>(bytes) / (1LL << 30)}});
  for (int i = 0; config.value("hold", false) && i < 600; ++i) {
    std::this_thread::sleep_for(100ms);
    rt::Report({{"held", block.sum().item<double>() > 0}});
  }
}
RAYD_TRAIN_LOOP(MemoryLoop);

// Rank 1 stops calling collectives after a few steps; rank 0 goes on.
void StallLoop(const json&) {
  const rt::TrainContext& context = rt::GetContext();
  torch::nn::Linear model(16, 16);
  rt::PreparedModel& ddp = rt::PrepareModel(*model);
  for (int step = 0;; ++step) {
    if (context.world_rank == 1 && step == 3) std::this_thread::sleep_for(10min);
    model->forward(torch::randn({8, 16}, torch::Device(context.device))).sum().backward();
    ddp.FinishBackward();
    if (step % 10 == 0) rt::Report({{"step", step}});
  }
}
RAYD_TRAIN_LOOP(StallLoop);

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> values;
  for (float v; in.read(reinterpret_cast<char*>(&v), sizeof v);) values.push_back(v);
  return values;
}

TEST_CASE("a 1-rank NCCL Trainer matches a CPU run of the same seed", "[gpu]") {
  Cluster cluster;
  TempDir out;
  TempDir storage;
  for (bool use_gpu : {true, false}) {
    rt::TrainResult result =
        rt::Trainer("ParityLoop", {{"out_dir", out.path()}}, {.num_workers = 1, .use_gpu = use_gpu},
                    {.name = use_gpu ? "gpu" : "cpu", .storage_path = storage.path()})
            .Fit();
    INFO(result.error);
    REQUIRE(result.ok());
  }
  const std::vector<float> gpu = ReadFloats(out.path() + "/params.cuda");
  const std::vector<float> cpu = ReadFloats(out.path() + "/params.cpu");
  REQUIRE(gpu.size() == cpu.size());
  REQUIRE(!gpu.empty());
  double worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i)
    worst = std::max(worst, double(std::fabs(gpu[i] - cpu[i])));
  INFO("largest difference " << worst);
  CHECK(worst < 1e-3);  // TF32 and reduction order differ between the devices
  rayd::gpu_test::Figure("parity_max_abs_diff", worst, "");
}

TEST_CASE("four 0.25-GPU trials of the example run at once under ASHA", "[gpu]") {
  Cluster cluster;
  TempDir storage;
  tune::Trainable trainable{
      "mlp_classifier",
      {.num_workers = 1, .use_gpu = true, .resources_per_worker = {{"CPU", 1}, {"GPU", 0.25}}}};
  tune::ParamSpace space = {
      {{"lr"}, tune::Domain::LogUniform(0.005, 0.1)}, {{"epochs"}, 6}, {{"train_size"}, 16384}};
  tune::TuneConfig config{.metric = "loss", .mode = "min", .num_samples = 4, .seed = 1};
  config.scheduler = tune::AshaConfig{.max_t = 6, .grace_period = 2, .reduction_factor = 2};
  tune::ResultGrid grid =
      tune::Tuner(trainable, space, config, {.name = "shared", .storage_path = storage.path()})
          .Fit();
  REQUIRE(grid.size() == 4);
  CHECK(grid.num_errors() == 0);
  // Every trial's first epoch began before any trial's last report: all four ran at once.
  double latest_start = 0;
  double earliest_end = 1e300;
  for (const auto& trial : grid.trials()) {
    INFO(trial.trial_id << ": " << trial.error);
    REQUIRE(!trial.history.empty());
    const auto& first = trial.history.front();
    latest_start = std::max(latest_start, first.at("timestamp") - first.at("time_this_iter_s"));
    earliest_end = std::min(earliest_end, trial.history.back().at("timestamp"));
  }
  CHECK(latest_start < earliest_end);
}

TEST_CASE("device memory comes back after a stopped run and after a reused gang's run", "[gpu]") {
  Cluster cluster;
  TempDir storage;
  const int64_t baseline = rayd::gpu_test::DeviceBytesUsed();
  REQUIRE(baseline >= 0);
  constexpr int64_t kGiB = 1LL << 30;

  // Stopped: the scheduler's stop kills the rank; its memory is the driver's again.
  rt::FitOptions stop_at_first{.on_report = [](const rt::ReportedResult&) { return false; }};
  rt::TrainResult stopped =
      rt::Trainer("MemoryLoop", {{"gib", 8}, {"hold", true}}, {.num_workers = 1, .use_gpu = true},
                  {.name = "stopped", .storage_path = storage.path()})
          .Fit(stop_at_first);
  REQUIRE(stopped.stopped);
  const auto stop_returned = Clock::now();
  CHECK(WaitFor([&] { return rayd::gpu_test::DeviceBytesUsed() < baseline + kGiB / 2; }, 10s));
  rayd::gpu_test::Figure("memory_back_after_stop_s",
                         std::chrono::duration<double>(Clock::now() - stop_returned).count(), "s");

  // Reused: the gang stays (its process keeps a CUDA context) but not the run's 8 GiB.
  auto pool = std::make_shared<rt::GangPool>();
  for (int run = 0; run < 2; ++run) {
    rt::TrainResult done =
        rt::Trainer("MemoryLoop", {{"gib", 8}}, {.num_workers = 1, .use_gpu = true},
                    {.name = "reused" + std::to_string(run), .storage_path = storage.path()})
            .Fit({.reuse = pool});
    INFO(done.error);
    REQUIRE(done.ok());
    const int64_t held = rayd::gpu_test::DeviceBytesUsed() - baseline;
    INFO("held by the idle gang: " << held << " bytes");
    CHECK(held < 2 * kGiB);  // a CUDA context and NCCL's buffers, not the 8 GiB
    rayd::gpu_test::Figure("idle_gang_device_bytes", static_cast<double>(held), "B");
  }
}

TEST_CASE("an NCCL collective whose peer stops calling fails within the timeout", "[gpu]") {
  rayd::gpu_test::SkipIf(torch::cuda::device_count() < 2
                             ? "two GPUs needed: NCCL refuses two ranks of one group on one GPU"
                             : "");
  Cluster cluster;
  TempDir storage;
  const auto started = Clock::now();
  rt::TrainResult result =
      rt::Trainer("StallLoop", {}, {.num_workers = 2, .use_gpu = true, .collective_timeout_s = 20},
                  {.name = "stall", .storage_path = storage.path()})
          .Fit();
  const double took = std::chrono::duration<double>(Clock::now() - started).count();
  INFO(result.error);
  CHECK_FALSE(result.ok());
  CHECK(took < 20 + 60);
  rayd::gpu_test::Figure("nccl_stall_detected_s", took, "s");
}

}  // namespace
}  // namespace gpu
