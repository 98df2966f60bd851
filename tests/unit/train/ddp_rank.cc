// One rank of a data-parallel training run, as ddp_test starts it (two of these, as real
// processes): forms a Gloo group on 127.0.0.1, wraps the test MLP in DistributedDataParallel,
// trains it on this rank's shard of the synthetic dataset, and writes its final parameters.
//
// Rank 0 hosts the rendezvous on a port it picks and publishes it in --port-file (written
// whole, by rename); the other ranks poll for that file. Rank 1 deliberately starts from a
// different initialisation, so equal results show that the construction broadcast works.
//
// Exit codes: 0 trained and wrote --out; 2 a rayd::Status error, printed to stderr.

#include <rayd/train/ddp.h>
#include <rayd/train/fsdp.h>
#include <rayd/train/process_group.h>
#include <rayd/train/zero.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "mlp_fixture.h"

namespace {

using namespace rayd;
using namespace rayd::train;
using Clock = std::chrono::steady_clock;

Result<uint16_t> AwaitPort(const std::string& port_file, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port) return static_cast<uint16_t>(port);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Status::DeadlineExceeded("rank 0 did not publish its rendezvous port in " + port_file);
}

Status PublishPort(const std::string& port_file, uint16_t port) {
  const std::string partial = port_file + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << port << "\n";
    if (!out) return Status::Internal("cannot write " + partial);
  }
  if (std::rename(partial.c_str(), port_file.c_str()) != 0) {
    return Status::Internal("cannot rename " + partial);
  }
  return Status::Ok();
}

struct Flags {
  int rank = 0;
  int world_size = 2;
  std::string port_file;
  std::string out;
  int64_t timeout_ms = 60'000;
  int64_t bucket_cap_bytes = 0;  // 0: DDP's defaults; else the cap of every bucket
  int64_t exit_at_step = -1;
  int zero_stage = 0;
  int accumulation = 1;  // micro-batches per step: all but the last under NoSync
  bool train = true;
  std::string load_dir;           // the optimizer's sharded state to start from
  std::string save_dir;           // where to save it at the end
  std::string optimizer = "sgd";  // or adam, adamw
  double clip_norm = 0;           // > 0: clip the gradients' norm to it before each step
  bool skew_units = false;        // stage 3: rank 1 gathers a unit the others do not
  bool recompute = false;         // stage 3: units recompute their forward in backward
  bool shared_memory = true;      // the group's shared-memory collectives (one host)
};

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const Flags& flags,
                                                       std::vector<torch::Tensor> params,
                                                       const testing::MlpRun& run) {
  if (flags.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  }
  if (flags.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(run.learning_rate).momentum(run.momentum));
}

// ZeRO stage 3: every Linear of the test MLP a sharded unit (rayd/train/fsdp.h), the optimizer
// over the units' shards; the same steps, micro-batches and clipping as the other stages.
Status RunStage3(const Flags& flags, ProcessGroup& group) {
  const testing::MlpRun run;
  const testing::Dataset data = testing::MakeDataset(run);
  torch::nn::Sequential plain = testing::MakeMlp(run.widths, run.model_seed + flags.rank);
  std::vector<ShardedUnit> units;
  torch::nn::Sequential model = ShardLinearLayers(
      plain,
      [&](torch::nn::AnyModule layer) {
        return ShardedUnit(std::move(layer), group,
                           ShardedUnitOptions{.recompute = flags.recompute});
      },
      units);
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      MakeOptimizer(flags, model->parameters(), run);
  RAYD_ASSIGN_OR_RETURN(auto zero, ShardedOptimizer::Create(*optimizer, group, {.zero_stage = 0}));
  int64_t model_bytes = 0, param_bytes = 0;
  for (const ShardedUnit& unit : units) {
    model_bytes += unit->numel() * static_cast<int64_t>(sizeof(float));
    param_bytes += unit->param_bytes();
  }
  std::cout << "model_bytes=" << model_bytes << std::endl;
  std::cout << "param_bytes=" << param_bytes << std::endl;
  // Units used in another order on one rank: its collectives pair with other units' elsewhere.
  if (flags.skew_units && flags.rank == 1)
    RAYD_RETURN_IF_ERROR(units.back()->GatherFull().status());
  int64_t global_step = 0;
  for (int epoch = 0; flags.train && epoch < run.epochs; ++epoch) {
    for (int64_t step = 0; step < testing::StepsPerEpoch(run, flags.world_size); ++step) {
      if (global_step++ == flags.exit_at_step) _exit(3);
      zero->ZeroGrad();
      const std::vector<int64_t> rows =
          testing::RankBatch(run, flags.world_size, flags.rank, epoch, step);
      const auto per = static_cast<int64_t>(rows.size()) / flags.accumulation;
      for (int m = 0; m < flags.accumulation; ++m) {
        const std::vector<int64_t> part(rows.begin() + m * per, rows.begin() + (m + 1) * per);
        (testing::Loss(model, data, part) / flags.accumulation).backward();
      }
      if (flags.clip_norm > 0) {
        RAYD_RETURN_IF_ERROR(ClipShardedGradNorm(units, {}, flags.clip_norm, group).status());
      }
      RAYD_RETURN_IF_ERROR(zero->Step());
    }
  }
  int64_t grad_bytes = 0;
  param_bytes = 0;
  for (const ShardedUnit& unit : units) {
    param_bytes += unit->param_bytes();
    if (unit->shard().grad().defined()) {
      grad_bytes += unit->shard().grad().numel() * static_cast<int64_t>(sizeof(float));
    }
  }
  std::cout << "param_bytes_after=" << param_bytes << std::endl;
  std::cout << "optimizer_state_bytes=" << zero->state_bytes() << std::endl;
  std::cout << "grad_bytes=" << grad_bytes << std::endl;
  // The whole model, gathered unit by unit (every rank takes part), in stage 0's order.
  std::vector<float> flat;
  for (ShardedUnit& unit : units) {
    RAYD_ASSIGN_OR_RETURN(torch::Tensor full, unit->GatherFull());
    flat.insert(flat.end(), full.data_ptr<float>(), full.data_ptr<float>() + full.numel());
  }
  if (!testing::WriteFloats(flags.out, flat)) return Status::Internal("cannot write " + flags.out);
  return Status::Ok();
}

Status Run(const Flags& flags) {
  const std::chrono::milliseconds timeout(flags.timeout_ms);
  std::unique_ptr<Rendezvous> rendezvous;
  if (flags.rank == 0) {
    RAYD_ASSIGN_OR_RETURN(rendezvous, Rendezvous::Host("127.0.0.1", 0, timeout));
    RAYD_RETURN_IF_ERROR(PublishPort(flags.port_file, rendezvous->port()));
  } else {
    RAYD_ASSIGN_OR_RETURN(uint16_t port, AwaitPort(flags.port_file, timeout));
    RAYD_ASSIGN_OR_RETURN(rendezvous, Rendezvous::Join("127.0.0.1", port, timeout));
  }
  RAYD_ASSIGN_OR_RETURN(
      auto group, ProcessGroup::Connect(std::move(rendezvous),
                                        ProcessGroupOptions{.rank = flags.rank,
                                                            .world_size = flags.world_size,
                                                            .timeout = timeout,
                                                            .shared_memory = flags.shared_memory}));
  if (flags.zero_stage == 3) {
    // A unit's gather or reduce that fails throws out of forward or backward (as a train
    // loop's would, failing the attempt): reported as this rank's error.
    try {
      return RunStage3(flags, *group);
    } catch (const std::exception& e) {
      return Status::Unavailable(e.what());
    }
  }

  const testing::MlpRun run;
  const testing::Dataset data = testing::MakeDataset(run);
  torch::nn::Sequential model = testing::MakeMlp(run.widths, run.model_seed + flags.rank);
  DistributedDataParallelOptions ddp_options;
  if (flags.bucket_cap_bytes > 0) {
    ddp_options.bucket_cap_bytes = flags.bucket_cap_bytes;
    ddp_options.first_bucket_cap_bytes = flags.bucket_cap_bytes;
  }
  RAYD_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, *group, ddp_options));
  std::cout << "buckets=" << ddp->bucket_count() << std::endl;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (flags.optimizer == "adam") {
    optimizer =
        std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.01));
  } else if (flags.optimizer == "adamw") {
    optimizer = std::make_unique<torch::optim::AdamW>(
        model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(testing::MakeOptimizer(model, run));
  }
  RAYD_ASSIGN_OR_RETURN(
      auto zero,
      ShardedOptimizer::Create(*optimizer, *group, {.zero_stage = flags.zero_stage}, ddp.get()));

  if (!flags.load_dir.empty()) RAYD_RETURN_IF_ERROR(zero->LoadState(flags.load_dir));

  int64_t global_step = 0;
  for (int epoch = 0; flags.train && epoch < run.epochs; ++epoch) {
    for (int64_t step = 0; step < testing::StepsPerEpoch(run, flags.world_size); ++step) {
      if (global_step++ == flags.exit_at_step) _exit(3);
      zero->ZeroGrad();
      const std::vector<int64_t> rows =
          testing::RankBatch(run, flags.world_size, flags.rank, epoch, step);
      const auto per = static_cast<int64_t>(rows.size()) / flags.accumulation;
      for (int m = 0; m + 1 < flags.accumulation; ++m) {
        auto no_sync = ddp->NoSync();
        const std::vector<int64_t> part(rows.begin() + m * per, rows.begin() + (m + 1) * per);
        (testing::Loss(model, data, part) / flags.accumulation).backward();
        RAYD_RETURN_IF_ERROR(ddp->FinishBackward());
      }
      const std::vector<int64_t> last(rows.begin() + (flags.accumulation - 1) * per, rows.end());
      (testing::Loss(model, data, last) / flags.accumulation).backward();
      if (global_step == 1) {
        std::cout << "launched_in_backward=" << ddp->launched_bucket_count() << std::endl;
      }
      RAYD_RETURN_IF_ERROR(ddp->FinishBackward());
      if (flags.clip_norm > 0) RAYD_RETURN_IF_ERROR(zero->ClipGradNorm(flags.clip_norm).status());
      RAYD_RETURN_IF_ERROR(zero->Step());
    }
  }
  std::cout << "optimizer_state_bytes=" << zero->state_bytes() << std::endl;
  std::cout << "grad_bytes=" << ddp->gradient_bytes() << std::endl;
  if (!flags.save_dir.empty()) RAYD_RETURN_IF_ERROR(zero->SaveState(flags.save_dir));
  if (!testing::WriteFloats(flags.out, testing::FlatParameters(*model))) {
    return Status::Internal("cannot write " + flags.out);
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // one intra-op thread per rank process (DEPENDENCIES.md)
  Flags flags;
  CLI::App app("one rank of ddp_test's data-parallel run");
  app.add_option("--rank", flags.rank)->required();
  app.add_option("--world-size", flags.world_size);
  app.add_option("--port-file", flags.port_file)->required();
  app.add_option("--out", flags.out);
  app.add_option("--timeout-ms", flags.timeout_ms);
  app.add_option("--bucket-cap-bytes", flags.bucket_cap_bytes, "the cap of every bucket");
  app.add_option("--exit-at-step", flags.exit_at_step, "exit abruptly before this step");
  app.add_option("--zero-stage", flags.zero_stage,
                 "ZeRO stage of the optimizer (0, 1 or 2), or 3: every Linear a sharded unit");
  app.add_option("--optimizer", flags.optimizer, "sgd (the fixture's), adam or adamw");
  app.add_option("--accumulation", flags.accumulation,
                 "micro-batches per step (divides the batch)");
  app.add_option("--train", flags.train, "train (1) or only load and save (0)");
  app.add_option("--shared-memory", flags.shared_memory, "0: Gloo's collectives only");
  app.add_option("--recompute", flags.recompute, "stage 3: recompute each unit's forward");
  app.add_option("--skew-units", flags.skew_units, "stage 3: rank 1 gathers its last unit first");
  app.add_option("--clip-norm", flags.clip_norm, "clip the gradients' norm to this before steps");
  app.add_option("--load-dir", flags.load_dir, "start from this sharded optimizer checkpoint");
  app.add_option("--save-dir", flags.save_dir,
                 "save the optimizer's sharded state here at the end");
  CLI11_PARSE(app, argc, argv);

  const rayd::Status status = Run(flags);
  if (!status.ok()) {
    std::cerr << "ddp_rank " << flags.rank << ": " << status.ToString() << std::endl;
    return 2;
  }
  return 0;
}
