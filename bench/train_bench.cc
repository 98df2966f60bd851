// Data-parallel training figures for rayd::train on this machine, with every rank a real
// process on 127.0.0.1 (the bench re-runs itself as the ranks), one intra-op thread each:
//
//   samples/s   the MLP 784-512-256-10, batch 64 per rank, SGD, through DistributedDataParallel,
//               for 1 and 2 ranks (and, for 1, plain LibTorch without DDP)
//   all-reduce  25 MiB of float gradients between 2 ranks: a raw c10d Gloo allreduce of one
//               tensor, next to a step through our bucketed path (backward of a 25 MiB
//               parameter + FinishBackward), next to that backward alone
//
//   zero        ZeRO: a ~50M-parameter MLP (784, then 12 layers of 2048x2048, then 10) with Adam on
//               2 ranks (--zero-ranks) at stages 0, 1, 2 and 3 (every Linear a sharded unit,
//               rayd/train/fsdp.h): samples/s and each rank's peak memory (the process's
//               peak resident set less what it held before building the model), next to
//               bench/peers/torch_zero.py (Python torch's Adam and ZeroRedundancyOptimizer), run
//               after them. Peaks depend on the allocator: glibc keeps freed chunks of the sizes
//               it last freed resident (its dynamic mmap threshold), which blurs them by ~100 MB;
//               MALLOC_MMAP_THRESHOLD_=1048576 in the environment makes them repeat (and every
//               large allocation an mmap: ~10% slower), for rayd and the peer alike.
//
//   tensor      tensor parallelism (--only tensor): 4 of Megatron's MLP blocks (1024 -> 4096
//               column-parallel, ReLU, 4096 -> 1024 row-parallel; 33.6M parameters), SGD, batch
//               64, on 1 rank (the layers whole) and on 2 (each rank half of every matrix, the
//               same batch): samples/s. Python torch 1.13 has no tensor parallelism to compare.
//
//   pipeline    pipeline parallelism (--only pipeline): an MLP of 8 Linear 1024 x 1024 layers
//               (8.4M parameters), SGD, batch --pipeline-batch (256), whole on 1 rank, then in 2
//               and 4 stages under GPipe and 1F1B with 4, 8 and 16 micro-batches: samples/s, the
//               most micro-batches' activations stage 0 held at once, and the bubble: the stages'
//               mean share of a step spent waiting to receive (PipelineStage::idle_fraction),
//               next to the formula (stages - 1) / (micro_batches + stages - 1). 4 stages on a
//               2-core machine share cores, and a stage waiting for a core to compute its
//               neighbour's part counts that as idle. Python torch 1.13 has no pipeline
//               schedule to compare.
//
//   mesh        memory per rank on a mesh (--only mesh): 6 Linear 2048 x 2048 layers (25.2M
//               parameters, 101 MB), SGD with momentum, batch 64, one step, on meshes
//               {pipeline, tensor} = {1,1}, {2,1}, {1,2}, {2,2} (each rank its stage's Linear
//               layers split over its tensor group): each rank's parameter, gradient and
//               momentum bytes and its resident set above its baseline after the step, next to
//               the whole model's / (pipeline x tensor). Every rank builds the whole model
//               before keeping its part (the API's way), so the resident set keeps some of
//               that: glibc does not hand every freed page back.
//
//   train_bench [--steps 400] [--iters 20] [--zero-steps 8] [--zero-ranks 2]
//               [--zero-stages 0,1,2,3] [--only zero|tensor|pipeline|mesh] [--no-peer]
//               [--pipeline-batch 256]
//
// Prints figures only; asserts nothing.

#include <rayd/train/ddp.h>
#include <rayd/train/fsdp.h>
#include <rayd/train/pipeline.h>
#include <rayd/train/process_group.h>
#include <rayd/train/sampler.h>
#include <rayd/train/tensor_parallel.h>
#include <rayd/train/trainer.h>
#include <rayd/train/zero.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace rayd;
using namespace rayd::train;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 64;
constexpr int64_t kDatasetSize = kBatch * 64;
constexpr int64_t kAllReduceFloats = 25 * 1024 * 1024 / sizeof(float);

struct Flags {
  std::string mode;  // "" for the driver; "train", "plain" or "allreduce" for a rank
  int rank = 0;
  int world_size = 1;
  std::string port_file;
  int64_t steps = 400;
  int iters = 20;
  int64_t zero_steps = 8;
  int zero_stage = 0;
  std::vector<int> zero_stages = {0, 1, 2, 3};
  int zero_ranks = 2;
  int micro_batches = 1;  // a pipeline run's (its schedule in zero_stage: 0 gpipe, 1 1f1b)
  int pipeline = 1;       // a mesh run's pipeline size (its tensor size: world / pipeline)
  int64_t pipeline_batch = 256;  // a pipeline run's batch, split into its micro-batches
  std::string only;  // "zero": the ZeRO figures alone; "tensor": tensor parallelism's
  bool no_peer = false;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<std::unique_ptr<ProcessGroup>> FormGroup(const Flags& flags) {
  std::unique_ptr<Rendezvous> rendezvous;
  if (flags.rank == 0) {
    RAYD_ASSIGN_OR_RETURN(rendezvous, Rendezvous::Host("127.0.0.1", 0));
    const std::string partial = flags.port_file + ".partial";
    std::ofstream(partial) << rendezvous->port() << "\n";
    std::rename(partial.c_str(), flags.port_file.c_str());
  } else {
    const auto deadline = Clock::now() + kDefaultCollectiveTimeout;
    int port = 0;
    while (!(std::ifstream(flags.port_file) >> port)) {
      if (Clock::now() > deadline) return Status::DeadlineExceeded("no rendezvous port");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    RAYD_ASSIGN_OR_RETURN(rendezvous, Rendezvous::Join("127.0.0.1", static_cast<uint16_t>(port)));
  }
  return ProcessGroup::Connect(
      std::move(rendezvous),
      ProcessGroupOptions{.rank = flags.rank, .world_size = flags.world_size});
}

torch::nn::Sequential MakeMlp() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(784, 512), torch::nn::ReLU(),
                               torch::nn::Linear(512, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, 10));
}

// Trains the MLP for flags.steps (after a warm-up), through DDP unless `plain`; rank 0 prints
// the samples/s of the whole group.
Status RunTrain(const Flags& flags, bool plain) {
  std::unique_ptr<ProcessGroup> group;
  std::unique_ptr<DistributedDataParallel> ddp;
  torch::nn::Sequential model = MakeMlp();
  if (!plain) {
    RAYD_ASSIGN_OR_RETURN(group, FormGroup(flags));
    RAYD_ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(*model, *group));
  }
  torch::manual_seed(1);
  const torch::Tensor inputs = torch::randn({kDatasetSize, 784});
  const torch::Tensor labels = torch::randint(10, {kDatasetSize});
  DistributedSampler sampler(kDatasetSize, flags.world_size, flags.rank);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));

  const int64_t warmup = 20;
  std::vector<int64_t> order;
  Clock::time_point start;
  for (int64_t step = 0; step < warmup + flags.steps; ++step) {
    if (step == warmup) {
      if (group) RAYD_RETURN_IF_ERROR(group->Barrier());
      start = Clock::now();
    }
    const int64_t per_epoch = sampler.size() / kBatch;
    if (step % per_epoch == 0) {
      sampler.SetEpoch(step / per_epoch);
      order = sampler.Indices();
    }
    const int64_t first = (step % per_epoch) * kBatch;
    torch::Tensor rows = torch::tensor(
        std::vector<int64_t>(order.begin() + first, order.begin() + first + kBatch), torch::kLong);
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(inputs.index_select(0, rows)),
                                         labels.index_select(0, rows))
        .backward();
    if (ddp) RAYD_RETURN_IF_ERROR(ddp->FinishBackward());
    optimizer.step();
  }
  if (group) RAYD_RETURN_IF_ERROR(group->Barrier());
  const double seconds = Seconds(Clock::now() - start);
  if (flags.rank == 0) {
    std::printf(
        "%-34s %9.0f samples/s  (%lld steps of %lld per rank)\n",
        plain ? "mlp 1 rank, plain LibTorch"
              : ("mlp " + std::to_string(flags.world_size) + " rank(s), DDP over Gloo").c_str(),
        static_cast<double>(flags.steps * kBatch * flags.world_size) / seconds,
        static_cast<long long>(flags.steps), static_cast<long long>(kBatch));
  }
  return Status::Ok();
}

// The process's resident set now and at its peak, in bytes (/proc/self/status).
std::pair<int64_t, int64_t> ResidentBytes() {
  std::ifstream status("/proc/self/status");
  int64_t now = 0, peak = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) now = std::stoll(line.substr(6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) peak = std::stoll(line.substr(6)) * 1024;
  }
  return {now, peak};
}

constexpr int64_t kZeroBatch = 32;
constexpr int kZeroLayers = 12;
constexpr int64_t kZeroWidth = 2048;

// ZeRO at flags.zero_stage: the big MLP, Adam, DDP over Gloo; each rank prints its peak memory
// above its baseline, rank 0 the group's samples/s.
Status RunZero(const Flags& flags) {
  RAYD_ASSIGN_OR_RETURN(auto group, FormGroup(flags));
  const int64_t baseline = ResidentBytes().first;
  torch::manual_seed(0);
  torch::nn::Sequential model;
  model->push_back(torch::nn::Linear(784, kZeroWidth));
  for (int i = 0; i < kZeroLayers; ++i) {
    model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::Linear(kZeroWidth, kZeroWidth));
  }
  model->push_back(torch::nn::ReLU());
  model->push_back(torch::nn::Linear(kZeroWidth, 10));
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  // Stage 3: every Linear a sharded unit (rayd/train/fsdp.h), no replicated parameter left for
  // DDP; the optimizer steps the units' shards.
  std::vector<ShardedUnit> units;
  if (flags.zero_stage == 3) {
    model = ShardLinearLayers(
        model, [&](torch::nn::AnyModule layer) { return ShardedUnit(std::move(layer), *group); },
        units);
  }
  std::unique_ptr<DistributedDataParallel> ddp;
  if (units.empty()) {
    RAYD_ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(*model, *group));
  }
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-4));
  RAYD_ASSIGN_OR_RETURN(
      auto zero,
      ShardedOptimizer::Create(adam, *group, {.zero_stage = units.empty() ? flags.zero_stage : 0},
                               ddp.get()));
  auto gradient_bytes = [&] {
    if (ddp) return ddp->gradient_bytes();
    int64_t bytes = 0;
    for (const ShardedUnit& unit : units) {
      if (unit->shard().grad().defined()) bytes += unit->shard().grad().numel() * 4;
    }
    return bytes;
  };
  torch::manual_seed(1 + flags.rank);
  const torch::Tensor inputs = torch::randn({kZeroBatch, 784});
  const torch::Tensor labels = torch::randint(10, {kZeroBatch});
  const int64_t warmup = 2;
  Clock::time_point start;
  for (int64_t step = 0; step < warmup + flags.zero_steps; ++step) {
    if (step == warmup) {
      RAYD_RETURN_IF_ERROR(group->Barrier());
      start = Clock::now();
    }
    zero->ZeroGrad();
    try {
      torch::nn::functional::cross_entropy(model->forward(inputs), labels).backward();
    } catch (const std::exception& e) {
      return Status::Unavailable(e.what());  // a unit's gather or reduce failed
    }
    if (ddp) RAYD_RETURN_IF_ERROR(ddp->FinishBackward());
    RAYD_RETURN_IF_ERROR(zero->Step());
  }
  RAYD_RETURN_IF_ERROR(group->Barrier());
  const double seconds = Seconds(Clock::now() - start);
  const int64_t peak = ResidentBytes().second - baseline;
  // One line per rank, rank 0's last, so the figures come out together.
  if (flags.rank != 0) {
    std::printf(
        "  rank %d: peak %5.0f MB above baseline, optimizer state %4.0f MB, gradients "
        "%4.0f MB\n",
        flags.rank, peak / 1e6, zero->state_bytes() / 1e6, gradient_bytes() / 1e6);
    std::fflush(stdout);
  }
  RAYD_RETURN_IF_ERROR(group->Barrier());
  if (flags.rank == 0) {
    std::printf(
        "  rank 0: peak %5.0f MB above baseline, optimizer state %4.0f MB, gradients "
        "%4.0f MB\n",
        peak / 1e6, zero->state_bytes() / 1e6, gradient_bytes() / 1e6);
    // The ZeRO paper's model states per rank (its section 3, for fp32 Adam here: 4 bytes of
    // parameters, 4 of gradients and 8 of optimizer state per parameter), stage by stage
    // divided among the N ranks: the state from stage 1, the gradients from 2, the
    // parameters at 3. The peak adds activations and the buffers in flight.
    const double n = flags.world_size, psi = static_cast<double>(parameters);
    const int stage = flags.zero_stage;
    const double predicted =
        psi * ((stage >= 3 ? 4 / n : 4) + (stage >= 2 ? 4 / n : 4) + (stage >= 1 ? 8 / n : 8));
    std::printf("  the ZeRO paper's formula: %5.0f MB of model states per rank\n", predicted / 1e6);
    std::printf("%-34s %9.1f samples/s  (%.1fM parameters, Adam, batch %lld per rank)\n",
                ("zero stage " + std::to_string(flags.zero_stage) + ", " +
                 std::to_string(flags.world_size) + " ranks")
                    .c_str(),
                static_cast<double>(flags.zero_steps * kZeroBatch * flags.world_size) / seconds,
                parameters / 1e6, static_cast<long long>(kZeroBatch));
  }
  return Status::Ok();
}

// Runs `step` 3 times to warm up, then flags.zero_steps times between two barriers of `group`;
// returns the seconds those took. A collective failing inside `step` (an exception) is
// Unavailable.
Result<double> TimedSteps(ProcessGroup& group, int64_t steps, const std::function<void()>& step) {
  const int64_t warmup = 3;
  Clock::time_point start;
  try {
    for (int64_t i = 0; i < warmup + steps; ++i) {
      if (i == warmup) {
        RAYD_RETURN_IF_ERROR(group.Barrier());
        start = Clock::now();
      }
      step();
    }
  } catch (const std::exception& e) {
    return Status::Unavailable(e.what());
  }
  RAYD_RETURN_IF_ERROR(group.Barrier());
  return Seconds(Clock::now() - start);
}

constexpr int64_t kTensorBatch = 64;
constexpr int64_t kTensorWidth = 1024;
constexpr int kTensorBlocks = 4;

// Tensor parallelism on flags.world_size ranks (1: the same layers whole): kTensorBlocks of
// Megatron's MLP block (1024 -> 4096 column-parallel, ReLU, 4096 -> 1024 row-parallel), SGD,
// every rank on the same batch; rank 0 prints samples/s.
Status RunTensor(const Flags& flags) {
  RAYD_ASSIGN_OR_RETURN(auto group, FormGroup(flags));
  torch::manual_seed(0);
  torch::nn::Sequential model;
  int64_t parameters = 0;
  for (int block = 0; block < kTensorBlocks; ++block) {
    torch::nn::Linear up(kTensorWidth, 4 * kTensorWidth), down(4 * kTensorWidth, kTensorWidth);
    parameters += up->weight.numel() + up->bias.numel() + down->weight.numel() + down->bias.numel();
    model->push_back(ColumnParallelLinear(up, *group));
    model->push_back(torch::nn::ReLU());
    model->push_back(RowParallelLinear(down, *group));
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.001));
  torch::manual_seed(1);
  const torch::Tensor inputs = torch::randn({kTensorBatch, kTensorWidth});
  RAYD_ASSIGN_OR_RETURN(const double seconds, TimedSteps(*group, flags.zero_steps, [&] {
                          optimizer.zero_grad();
                          model->forward(inputs).pow(2).mean().backward();
                          optimizer.step();
                        }));
  if (flags.rank == 0) {
    std::printf("%-34s %9.1f samples/s  (%.1fM parameters, %.1fM per rank, batch %lld)\n",
                ("tensor parallel, " + std::to_string(flags.world_size) + " rank" +
                 (flags.world_size > 1 ? "s" : ""))
                    .c_str(),
                static_cast<double>(flags.zero_steps * kTensorBatch) / seconds, parameters / 1e6,
                parameters / 1e6 / flags.world_size, static_cast<long long>(kTensorBatch));
  }
  return Status::Ok();
}

constexpr int64_t kPipelineWidth = 1024;
constexpr int kPipelineLayers = 8;

// Pipeline parallelism on flags.world_size stages (1: the model whole), schedule
// flags.zero_stage (0 GPipe, 1 1F1B), flags.micro_batches; rank 0 prints samples/s.
Status RunPipeline(const Flags& flags) {
  RAYD_ASSIGN_OR_RETURN(auto group, FormGroup(flags));
  torch::manual_seed(0);
  torch::nn::Sequential model;
  for (int layer = 0; layer < kPipelineLayers; ++layer) {
    model->push_back(torch::nn::Linear(kPipelineWidth, kPipelineWidth));
    model->push_back(torch::nn::ReLU());
  }
  const int64_t parameters = kPipelineLayers * (kPipelineWidth + 1) * kPipelineWidth;
  torch::nn::Sequential stage = SplitEvenly(model, flags.world_size)[flags.rank];
  torch::optim::SGD optimizer(stage->parameters(), torch::optim::SGDOptions(0.001));
  const PipelineSchedule schedule =
      flags.zero_stage == 0 ? PipelineSchedule::kGPipe : PipelineSchedule::k1F1B;
  PipelineStage pipeline(stage, *group,
                         {.micro_batches = flags.micro_batches, .schedule = schedule});
  torch::manual_seed(1);
  const torch::Tensor inputs = torch::randn({flags.pipeline_batch, kPipelineWidth});
  const torch::Tensor targets = torch::randn({flags.pipeline_batch, kPipelineWidth});
  auto loss = [](const torch::Tensor& out, const torch::Tensor& target) {
    return (out - target).pow(2).mean();
  };
  double idle = 0;  // this stage's idle share, summed over the steps
  int64_t steps = 0;
  RAYD_ASSIGN_OR_RETURN(const double seconds, TimedSteps(*group, flags.zero_steps, [&] {
                          optimizer.zero_grad();
                          pipeline.Step(inputs, targets, loss);
                          optimizer.step();
                          idle += pipeline.idle_fraction();
                          ++steps;
                        }));
  // The stages' mean idle share of a step (the 3 warm-up steps included).
  torch::Tensor idle_sum = torch::tensor({idle / static_cast<double>(steps)}, torch::kFloat64);
  RAYD_RETURN_IF_ERROR(AllReduce(*group, idle_sum, "summing the stages' idle shares"));
  const double measured = idle_sum.item<double>() / flags.world_size;
  if (flags.rank == 0) {
    const int stages = flags.world_size;
    const double bubble =
        static_cast<double>(stages - 1) / static_cast<double>(flags.micro_batches + stages - 1);
    const std::string what =
        stages == 1 ? std::string("pipeline, 1 rank (whole)")
                    : std::string(schedule == PipelineSchedule::kGPipe ? "gpipe" : "1f1b") + ", " +
                          std::to_string(stages) + " stages, " +
                          std::to_string(flags.micro_batches) + " micro";
    std::printf(
        "%-34s %9.1f samples/s  (%.1fM parameters; stage 0 held %d micro-batches; bubble "
        "measured %.0f%%, formula %.0f%%)\n",
        what.c_str(), static_cast<double>(flags.zero_steps * flags.pipeline_batch) / seconds,
        parameters / 1e6, pipeline.max_in_flight(), 100 * measured, 100 * bubble);
  }
  return Status::Ok();
}

// One rank of a {pipeline: flags.pipeline, tensor: world / pipeline} mesh: its part of 6
// Linear 2048 x 2048 layers, one SGD step; prints its bytes.
Status RunMesh(const Flags& flags) {
  constexpr int64_t kWidth = 2048, kLayers = 6, kBatch = 64;
  const int64_t baseline = ResidentBytes().first;
  RAYD_ASSIGN_OR_RETURN(auto world, FormGroup(flags));
  const MeshShape mesh{
      .data = 1, .pipeline = flags.pipeline, .tensor = flags.world_size / flags.pipeline};
  std::unique_ptr<ProcessGroup> groups[2];
  for (MeshAxis axis : {MeshAxis::kPipeline, MeshAxis::kTensor}) {
    std::string name = axis == MeshAxis::kPipeline ? "pipeline" : "tensor";
    const std::vector<int> ranks = MeshGroupRanks(mesh, flags.rank, axis);
    for (int r : ranks) name += "-" + std::to_string(r);
    RAYD_ASSIGN_OR_RETURN(groups[axis == MeshAxis::kTensor], world->Subgroup(ranks, name));
  }
  ProcessGroup& pipeline_group = *groups[0];
  ProcessGroup& tensor_group = *groups[1];
  const MeshCoordinates at = MeshCoordinatesOf(mesh, flags.rank);
  torch::nn::Sequential stage;
  {
    torch::manual_seed(0);
    torch::nn::Sequential whole;
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      whole->push_back(torch::nn::Linear(kWidth, kWidth));
      if (layer + 1 < kLayers) whole->push_back(torch::nn::ReLU());
    }
    stage =
        TensorParallelSequential(SplitEvenly(whole, mesh.pipeline)[at.pipeline_rank], tensor_group);
  }
  torch::optim::SGD sgd(stage->parameters(), torch::optim::SGDOptions(0.001).momentum(0.9));
  PipelineStage pipeline(stage, pipeline_group, {.micro_batches = 2});
  torch::manual_seed(1);
  const torch::Tensor inputs = torch::randn({kBatch, kWidth});
  try {
    sgd.zero_grad();
    pipeline.Step(inputs, inputs, [](const torch::Tensor& out, const torch::Tensor& target) {
      return (out - target).pow(2).mean();
    });
    sgd.step();
  } catch (const std::exception& e) {
    return Status::Unavailable(e.what());
  }
  int64_t params = 0, grads = 0, momentum = 0;
  for (const torch::Tensor& p : stage->parameters()) {
    params += p.numel() * 4;
    if (p.grad().defined()) grads += p.grad().numel() * 4;
  }
  momentum = params;  // SGD's momentum buffer: one per parameter, after the first step
  const int64_t resident = ResidentBytes().first - baseline;
  const double whole_mb = kLayers * (kWidth + 1) * kWidth * 4 / 1e6;
  RAYD_RETURN_IF_ERROR(world->Barrier());
  for (int rank = 0; rank < flags.world_size; ++rank) {
    if (rank == flags.rank) {
      std::printf(
          "mesh {pipeline %d, tensor %d} rank %d (stage %d, tensor %d): parameters %5.1f "
          "MB, gradients %5.1f, momentum %5.1f; resident +%5.0f MB  (whole model %.1f "
          "MB, / %d = %.1f)\n",
          mesh.pipeline, mesh.tensor, flags.rank, at.pipeline_rank, at.tensor_rank, params / 1e6,
          grads / 1e6, momentum / 1e6, resident / 1e6, whole_mb, mesh.pipeline * mesh.tensor,
          whole_mb / (mesh.pipeline * mesh.tensor));
      std::fflush(stdout);
    }
    RAYD_RETURN_IF_ERROR(world->Barrier());
  }
  return Status::Ok();
}

// A module with one 25 MiB parameter: its gradient fills exactly one default bucket.
struct Blob : torch::nn::Module {
  Blob() { weight = register_parameter("weight", torch::randn({kAllReduceFloats})); }
  torch::Tensor weight;
};

Status RunAllReduce(const Flags& flags) {
  RAYD_ASSIGN_OR_RETURN(auto group, FormGroup(flags));
  torch::Tensor tensor = torch::randn({kAllReduceFloats});
  auto blob = std::make_shared<Blob>();
  RAYD_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*blob, *group));
  const torch::Tensor upstream = torch::randn({kAllReduceFloats});

  std::vector<double> raw, bucketed, backward_only;
  for (int i = 0; i < flags.iters + 2; ++i) {  // two warm-up rounds, dropped
    RAYD_RETURN_IF_ERROR(group->Barrier());
    auto t0 = Clock::now();
    std::vector<torch::Tensor> tensors{tensor};
    RAYD_RETURN_IF_ERROR(WaitWork(*group->c10d().allreduce(tensors), group->timeout(), "raw"));
    auto t1 = Clock::now();

    RAYD_RETURN_IF_ERROR(group->Barrier());
    blob->zero_grad();
    auto t2 = Clock::now();
    (blob->weight * upstream).sum().backward();
    RAYD_RETURN_IF_ERROR(ddp->FinishBackward());
    auto t3 = Clock::now();
    if (i >= 2) {
      raw.push_back(Seconds(t1 - t0));
      bucketed.push_back(Seconds(t3 - t2));
    }
  }
  // The same backward without DDP: what the bucketed figure spends outside communication.
  ddp.reset();
  for (int i = 0; i < flags.iters; ++i) {
    blob->zero_grad();
    auto t0 = Clock::now();
    (blob->weight * upstream).sum().backward();
    backward_only.push_back(Seconds(Clock::now() - t0));
  }
  if (flags.rank == 0) {
    const double mib = 25.0;
    std::printf("allreduce 25 MiB, 2 ranks, raw c10d Gloo   %7.2f ms  %5.2f GB/s\n",
                1e3 * Median(raw), mib * 1.048576e-3 / Median(raw));
    std::printf(
        "allreduce 25 MiB, 2 ranks, DDP bucketed    %7.2f ms  (backward + FinishBackward)\n",
        1e3 * Median(bucketed));
    std::printf("  of which backward alone (no DDP)         %7.2f ms\n",
                1e3 * Median(backward_only));
  }
  return Status::Ok();
}

// Runs `world_size` copies of this program as the ranks of `mode` and waits for them.
bool RunRanks(const std::string& self, const Flags& flags, const std::string& mode, int world_size,
              int zero_stage = 0) {
  const std::string port_file =
      "/tmp/train_bench." + std::to_string(getpid()) + "." + mode + std::to_string(world_size);
  std::remove(port_file.c_str());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> args = {self,
                                     "--mode",
                                     mode,
                                     "--rank",
                                     std::to_string(rank),
                                     "--world-size",
                                     std::to_string(world_size),
                                     "--port-file",
                                     port_file,
                                     "--steps",
                                     std::to_string(flags.steps),
                                     "--iters",
                                     std::to_string(flags.iters),
                                     "--zero-steps",
                                     std::to_string(flags.zero_steps),
                                     "--zero-stage",
                                     std::to_string(zero_stage),
                                     "--micro-batches",
                                     std::to_string(flags.micro_batches),
                                     "--pipeline",
                                     std::to_string(flags.pipeline),
                                     "--pipeline-batch",
                                     std::to_string(flags.pipeline_batch)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return false;
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  std::remove(port_file.c_str());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // one intra-op/BLAS thread per rank process (DEPENDENCIES.md)
  Flags flags;
  CLI::App app("rayd::train data-parallel figures");
  app.add_option("--mode", flags.mode, "internal: run as one rank of train|plain|allreduce");
  app.add_option("--rank", flags.rank);
  app.add_option("--world-size", flags.world_size);
  app.add_option("--port-file", flags.port_file);
  app.add_option("--steps", flags.steps, "measured training steps per run");
  app.add_option("--iters", flags.iters, "measured all-reduces");
  app.add_option("--zero-steps", flags.zero_steps, "measured steps of each ZeRO run");
  app.add_option("--zero-stage", flags.zero_stage, "internal: the zero run's stage");
  app.add_option("--zero-ranks", flags.zero_ranks, "ranks of the ZeRO runs");
  app.add_option("--zero-stages", flags.zero_stages, "the ZeRO runs' stages, in order")
      ->delimiter(',')
      ->check(CLI::Range(0, 3));
  app.add_option("--micro-batches", flags.micro_batches, "internal: a pipeline run's");
  app.add_option("--pipeline", flags.pipeline, "internal: a mesh run's pipeline size");
  app.add_option("--pipeline-batch", flags.pipeline_batch,
                 "pipeline: the batch (rows) each step splits into micro-batches")
      ->check(CLI::PositiveNumber);
  app.add_option("--only", flags.only,
                 "zero: only the ZeRO figures; tensor: only tensor parallelism's; pipeline: only "
                 "pipeline parallelism's; mesh: memory per rank on meshes")
      ->check(CLI::IsMember({"", "zero", "tensor", "pipeline", "mesh"}));
  app.add_flag("--no-peer", flags.no_peer, "leave out the Python torch peer of the ZeRO figures");
  CLI11_PARSE(app, argc, argv);

  if (!flags.mode.empty()) {
    Status status = flags.mode == "allreduce"  ? RunAllReduce(flags)
                    : flags.mode == "zero"     ? RunZero(flags)
                    : flags.mode == "tensor"   ? RunTensor(flags)
                    : flags.mode == "pipeline" ? RunPipeline(flags)
                    : flags.mode == "mesh"     ? RunMesh(flags)
                                               : RunTrain(flags, flags.mode == "plain");
    if (!status.ok()) {
      std::fprintf(stderr, "train_bench rank %d: %s\n", flags.rank, status.ToString().c_str());
      return 1;
    }
    return 0;
  }
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
  if (flags.only == "tensor") {
    return RunRanks(self, flags, "tensor", 1) && RunRanks(self, flags, "tensor", 2) ? 0 : 1;
  }
  if (flags.only == "mesh") {
    bool ok = true;
    for (auto [pipeline, tensor] :
         std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}}) {
      flags.pipeline = pipeline;
      ok = ok && RunRanks(self, flags, "mesh", pipeline * tensor);
    }
    return ok ? 0 : 1;
  }
  if (flags.only == "pipeline") {
    bool ok = RunRanks(self, flags, "pipeline", 1);
    for (int stages : {2, 4}) {
      for (int micro : {4, 8, 16}) {
        flags.micro_batches = micro;
        for (int schedule : {0, 1}) ok = ok && RunRanks(self, flags, "pipeline", stages, schedule);
      }
    }
    return ok ? 0 : 1;
  }
  bool ok = true;
  if (flags.only != "zero") {
    ok = RunRanks(self, flags, "plain", 1) && RunRanks(self, flags, "train", 1) &&
         RunRanks(self, flags, "train", 2) && RunRanks(self, flags, "allreduce", 2);
  }
  for (size_t i = 0; ok && i < flags.zero_stages.size(); ++i) {
    ok = RunRanks(self, flags, "zero", flags.zero_ranks, flags.zero_stages[i]);
  }
  // The peer, in the same run: Python torch's Adam and ZeroRedundancyOptimizer on the same model.
  if (ok && !flags.no_peer) {
    const std::string peer = std::string("/usr/bin/python3 ") + RAYD_TORCH_ZERO_PEER + " --steps " +
                             std::to_string(flags.zero_steps);
    if (std::system(peer.c_str()) != 0) {
      std::printf("(the Python torch peer did not run: %s needs Debian's python3-torch)\n",
                  RAYD_TORCH_ZERO_PEER);
    }
  }
  return ok ? 0 : 1;
}
