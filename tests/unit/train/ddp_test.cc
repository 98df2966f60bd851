// DistributedDataParallel over Gloo. In this process, with a one-rank group: how parameters
// are bucketed and how .grad lives in the buckets. With two real rank processes (ddp_rank) on
// 127.0.0.1: after training, both ranks hold bitwise-identical parameters that match
// single-process training on the concatenated batches; a rank whose peer never comes, or dies
// mid-run, fails with a clear error within the configured collective timeout.

#include <rayd/train/ddp.h>
#include <rayd/train/fsdp.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mlp_fixture.h"
#include "test_util.h"

namespace rayd::train {
namespace {

using namespace std::chrono_literals;
using rayd::testing::ChildProcess;
using rayd::testing::TempDir;
using Clock = std::chrono::steady_clock;

constexpr auto kRunDeadline = 120s;

std::unique_ptr<ChildProcess> StartRank(const TempDir& dir, int rank,
                                        std::vector<std::string> extra_args) {
  std::vector<std::string> argv = {
      DDP_RANK_BINARY,      "--rank", std::to_string(rank),
      "--world-size",       "2",      "--port-file",
      dir.path() + "/port", "--out",  dir.path() + "/params." + std::to_string(rank)};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  return std::make_unique<ChildProcess>(argv);
}

void RequireExit(ChildProcess& rank, std::chrono::milliseconds deadline, int code) {
  INFO("rank output:\n" << rank.output());
  REQUIRE(rank.WaitExit(deadline));
  REQUIRE(rank.exit_code() == code);
}

// Trains the same MLP from rank 0's initialisation in this process, each step on rank 0's
// batch followed by rank 1's: what the two ranks' averaged gradients must reproduce.
std::vector<float> SingleProcessReference(const testing::MlpRun& run) {
  at::set_num_threads(1);
  const testing::Dataset data = testing::MakeDataset(run);
  torch::nn::Sequential model = testing::MakeMlp(run.widths, run.model_seed);
  torch::optim::SGD optimizer = testing::MakeOptimizer(model, run);
  for (int epoch = 0; epoch < run.epochs; ++epoch) {
    for (int64_t step = 0; step < testing::StepsPerEpoch(run, 2); ++step) {
      std::vector<int64_t> rows = testing::RankBatch(run, 2, 0, epoch, step);
      const std::vector<int64_t> rows1 = testing::RankBatch(run, 2, 1, epoch, step);
      rows.insert(rows.end(), rows1.begin(), rows1.end());
      optimizer.zero_grad();
      testing::Loss(model, data, rows).backward();
      optimizer.step();
    }
  }
  return testing::FlatParameters(*model);
}

// A group of one rank in this process: enough for the bucketing, which needs no peer.
std::unique_ptr<ProcessGroup> OneRankGroup() {
  auto rendezvous = Rendezvous::Host("127.0.0.1", 0, 10s);
  REQUIRE(rendezvous.ok());
  auto group = ProcessGroup::Connect(std::move(rendezvous).value(),
                                     {.rank = 0, .world_size = 1, .timeout = 10s});
  INFO(group.status().ToString());
  REQUIRE(group.ok());
  return std::move(group).value();
}

size_t BucketCount(ProcessGroup& group, DistributedDataParallelOptions options) {
  torch::nn::Sequential model = testing::MakeMlp({784, 512, 256, 10}, 0);
  auto ddp = DistributedDataParallel::Create(*model, group, options);
  REQUIRE(ddp.ok());
  return (*ddp)->bucket_count();
}

TEST_CASE("DDP buckets parameters from the last layer back, the first bucket small",
          "[train][ddp]") {
  at::set_num_threads(1);
  auto group = OneRankGroup();
  constexpr int64_t kMiB = 1024 * 1024;
  // 784-512-256-10 from the back: the last two layers and the first bias (0.5 MiB) fit the
  // 1 MiB first bucket; the first weight (1.5 MiB) opens the second.
  CHECK(BucketCount(*group, {}) == 2);
  CHECK(BucketCount(*group, {.first_bucket_cap_bytes = 25 * kMiB}) == 1);
  // A parameter larger than the cap gets a bucket of its own: here, one per parameter.
  CHECK(BucketCount(*group, {.bucket_cap_bytes = 1, .first_bucket_cap_bytes = 1}) == 6);
  CHECK(!DistributedDataParallel::Create(*testing::MakeMlp({2, 2}, 0), *group,
                                         {.bucket_cap_bytes = 0})
             .ok());
}

TEST_CASE("DDP keeps gradients in its buckets and accumulates into them", "[train][ddp]") {
  at::set_num_threads(1);
  auto group = OneRankGroup();
  const testing::MlpRun run;
  const testing::Dataset data = testing::MakeDataset(run);
  torch::nn::Sequential model = testing::MakeMlp(run.widths, run.model_seed);
  auto created = DistributedDataParallel::Create(*model, *group);
  REQUIRE(created.ok());
  DistributedDataParallel& ddp = **created;
  torch::optim::SGD optimizer = testing::MakeOptimizer(model, run);
  const std::vector<int64_t> rows = testing::RankBatch(run, 1, 0, 0, 0);

  auto grads = [&] {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad());
    return out;
  };
  auto backward = [&] {
    testing::Loss(model, data, rows).backward();
    std::vector<torch::Tensor> before;  // a world of one averages nothing away
    for (const auto& g : grads()) before.push_back(g.clone());
    REQUIRE(ddp.FinishBackward().ok());
    for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(grads()[i], before[i]));
  };

  backward();  // the first step's gradients are autograd's own tensors, copied in
  std::vector<void*> in_buckets;
  for (const auto& g : grads()) in_buckets.push_back(g.data_ptr());

  SECTION("zeroed in place, the next backward accumulates straight into the buckets") {
    optimizer.zero_grad();
    backward();
    model->zero_grad();
    backward();
    for (size_t i = 0; i < in_buckets.size(); ++i) CHECK(grads()[i].data_ptr() == in_buckets[i]);
  }
  SECTION("gradients set to none come back as bucket views") {
    model->zero_grad(/*set_to_none=*/true);
    backward();
    for (size_t i = 0; i < in_buckets.size(); ++i) CHECK(grads()[i].data_ptr() == in_buckets[i]);
  }
  SECTION("a second backward before FinishBackward is an error") {
    optimizer.zero_grad();
    testing::Loss(model, data, rows).backward();
    testing::Loss(model, data, rows).backward();
    const Status status = ddp.FinishBackward();
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK(status.message().find("second gradient") != std::string::npos);
  }
}

TEST_CASE("under NoSync gradients accumulate without communication", "[train][ddp]") {
  at::set_num_threads(1);
  auto group = OneRankGroup();
  const testing::MlpRun run;
  const testing::Dataset data = testing::MakeDataset(run);
  torch::nn::Sequential model = testing::MakeMlp(run.widths, run.model_seed);
  torch::nn::Sequential reference = testing::MakeMlp(run.widths, run.model_seed);
  auto created = DistributedDataParallel::Create(*model, *group);
  REQUIRE(created.ok());
  DistributedDataParallel& ddp = **created;
  for (bool first_step_synced : {false, true}) {
    INFO("first step synced before: " << first_step_synced);
    model->zero_grad();
    reference->zero_grad();
    // Three micro-batches: two under NoSync, the last one synced.
    for (int64_t step = 0; step < 3; ++step) {
      const std::vector<int64_t> rows = testing::RankBatch(run, 1, 0, 0, step);
      testing::Loss(reference, data, rows).backward();
      if (step < 2) {
        auto no_sync = ddp.NoSync();
        testing::Loss(model, data, rows).backward();
        CHECK(ddp.launched_bucket_count() == 0);
        REQUIRE(ddp.FinishBackward().ok());
      } else {
        testing::Loss(model, data, rows).backward();
        REQUIRE(ddp.FinishBackward().ok());
      }
    }
    // A world of one averages nothing away: .grad holds the sum of the three micro-batches.
    std::vector<torch::Tensor> ours = model->parameters();
    std::vector<torch::Tensor> theirs = reference->parameters();
    for (size_t i = 0; i < ours.size(); ++i) {
      CHECK(torch::allclose(ours[i].grad(), theirs[i].grad(), 1e-6, 1e-6));
    }
  }
}

TEST_CASE("buffers follow rank 0 after every synced step", "[train][ddp]") {
  at::set_num_threads(1);
  auto rendezvous = Rendezvous::Host("127.0.0.1", 0, 10s);
  REQUIRE(rendezvous.ok());
  const uint16_t port = (*rendezvous)->port();
  // Two ranks as two threads of this process, each with a BatchNorm model fed different data,
  // so their running statistics would drift apart without the broadcast.
  std::vector<torch::Tensor> running_mean(2);
  std::vector<Status> outcome(2, Status::Ok());
  auto rank_main = [&](int rank, std::unique_ptr<Rendezvous> own) {
    if (!own) {
      auto joined = Rendezvous::Join("127.0.0.1", port, 10s);
      if (!joined.ok()) return void(outcome[rank] = joined.status());
      own = std::move(joined).value();
    }
    auto group =
        ProcessGroup::Connect(std::move(own), {.rank = rank, .world_size = 2, .timeout = 10s});
    if (!group.ok()) return void(outcome[rank] = group.status());
    torch::manual_seed(rank);
    torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                torch::nn::Linear(8, 1));
    auto ddp = DistributedDataParallel::Create(*model, **group);
    if (!ddp.ok()) return void(outcome[rank] = ddp.status());
    for (int step = 0; step < 3; ++step) {
      torch::Tensor x = torch::randn({16, 4}) * (rank + 1) + rank * 3;
      model->forward(x).sum().backward();
      Status finished = (*ddp)->FinishBackward();
      if (!finished.ok()) return void(outcome[rank] = finished);
    }
    running_mean[rank] = model->named_buffers()["1.running_mean"].clone();
  };
  std::thread rank1(rank_main, 1, nullptr);
  rank_main(0, std::move(rendezvous).value());
  rank1.join();
  INFO(outcome[0].ToString() << " / " << outcome[1].ToString());
  REQUIRE(outcome[0].ok());
  REQUIRE(outcome[1].ok());
  REQUIRE(running_mean[0].defined());
  CHECK(torch::equal(running_mean[0], running_mean[1]));
  CHECK(running_mean[0].abs().sum().item<double>() > 0);  // the statistics did move
}

TEST_CASE("two DDP ranks stay identical and match single-process training", "[train][ddp]") {
  // Every bucket fills during backward, so all of them are in flight before FinishBackward.
  const auto [bucket_cap, buckets, launched] =
      GENERATE(table<std::string, std::string, std::string>({
          {"1024", "buckets=4", "launched_in_backward=4"},  // the test MLP in four buckets
          {"0", "buckets=1", "launched_in_backward=1"},     // the defaults: one bucket
      }));
  TempDir dir;
  auto rank0 = StartRank(dir, 0, {"--bucket-cap-bytes", bucket_cap});
  auto rank1 = StartRank(dir, 1, {"--bucket-cap-bytes", bucket_cap});
  RequireExit(*rank0, kRunDeadline, 0);
  RequireExit(*rank1, kRunDeadline, 0);
  CHECK(rank0->output().find(buckets) != std::string::npos);
  CHECK(rank0->output().find(launched) != std::string::npos);

  const std::vector<float> params0 = testing::ReadFloats(dir.path() + "/params.0");
  const std::vector<float> params1 = testing::ReadFloats(dir.path() + "/params.1");
  const std::vector<float> reference = SingleProcessReference(testing::MlpRun{});
  REQUIRE(params0.size() == reference.size());
  REQUIRE(params1.size() == reference.size());
  CHECK(std::memcmp(params0.data(), params1.data(), params0.size() * sizeof(float)) == 0);

  // Training moved the parameters away from rank 0's initialisation...
  const std::vector<float> initial = testing::FlatParameters(
      *testing::MakeMlp(testing::MlpRun{}.widths, testing::MlpRun{}.model_seed));
  float moved = 0, max_diff = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    moved = std::max(moved, std::abs(reference[i] - initial[i]));
    max_diff = std::max(max_diff, std::abs(params0[i] - reference[i]));
  }
  CHECK(moved > 0.01f);
  // ...and the ranks moved them as one process would have, up to summation order.
  CHECK(max_diff < 1e-5f);
}

TEST_CASE("a rank whose peer never comes fails with a timeout", "[train][ddp]") {
  TempDir dir;
  const auto timeout = 1500ms;
  SECTION("rank 0 waits for rank 1 to join the group") {
    const auto start = Clock::now();
    auto rank0 = StartRank(dir, 0, {"--timeout-ms", std::to_string(timeout.count())});
    RequireExit(*rank0, timeout + 30s, 2);
    const auto took = Clock::now() - start;
    INFO(rank0->output());
    CHECK(rank0->output().find("DeadlineExceeded") != std::string::npos);
    CHECK(rank0->output().find("forming a Gloo group") != std::string::npos);
    CHECK(took >= timeout);
  }
  SECTION("rank 1 waits for rank 0's store") {
    {
      std::ofstream port(dir.path() + "/port");
      port << rayd::testing::FreeTcpPort() << "\n";
    }
    auto rank1 = StartRank(dir, 1, {"--timeout-ms", std::to_string(timeout.count())});
    RequireExit(*rank1, timeout + 30s, 2);
    INFO(rank1->output());
    CHECK(rank1->output().find("DeadlineExceeded") != std::string::npos);
    CHECK(rank1->output().find("joining the rendezvous") != std::string::npos);
  }
}

TEST_CASE("a rank whose peer dies mid-training fails instead of hanging", "[train][ddp]") {
  TempDir dir;
  auto rank0 = StartRank(dir, 0, {"--timeout-ms", "5000", "--bucket-cap-bytes", "1024"});
  auto rank1 = StartRank(
      dir, 1, {"--timeout-ms", "5000", "--bucket-cap-bytes", "1024", "--exit-at-step", "3"});
  RequireExit(*rank1, kRunDeadline, 3);
  RequireExit(*rank0, 5s + 30s, 2);
  INFO(rank0->output());
  CHECK(rank0->output().find("ddp_rank 0: Unavailable: all-reducing gradient bucket") !=
        std::string::npos);
}

TEST_CASE(
    "at ZeRO stage 3 a rank whose peer dies mid-training fails naming the unit's "
    "collective instead of hanging",
    "[train][zero]") {
  TempDir dir;
  auto rank0 = StartRank(dir, 0, {"--timeout-ms", "5000", "--zero-stage", "3"});
  auto rank1 =
      StartRank(dir, 1, {"--timeout-ms", "5000", "--zero-stage", "3", "--exit-at-step", "3"});
  RequireExit(*rank1, kRunDeadline, 3);
  RequireExit(*rank0, 5s + 30s, 2);
  INFO(rank0->output());
  CHECK(rank0->output().find("sharded unit") != std::string::npos);
  // Whichever of the unit's collectives met the dead peer: the check before a gather, the
  // gather, or the reduce.
  const std::string& out = rank0->output();
  CHECK((out.find("checking that every rank is at the same sharded unit") != std::string::npos ||
         out.find("gathering a sharded unit's parameters") != std::string::npos ||
         out.find("reducing a sharded unit's gradients") != std::string::npos));
}

TEST_CASE("at ZeRO stage 3 ranks that use their units in different orders fail, never hang",
          "[train][zero]") {
  TempDir dir;
  auto rank0 = StartRank(dir, 0, {"--timeout-ms", "5000", "--zero-stage", "3"});
  auto rank1 =
      StartRank(dir, 1, {"--timeout-ms", "5000", "--zero-stage", "3", "--skew-units", "1"});
  // Each unit's gather first checks that every rank is at a unit of the same shapes: both
  // ranks refuse by name (without the check, Gloo's transport aborts the process on the size
  // mismatch). Units of equal shapes in another order are not told apart.
  for (ChildProcess* rank : {rank0.get(), rank1.get()}) {
    RequireExit(*rank, 5s + 30s, 2);
    CHECK(rank->output().find("the ranks are at different sharded units") != std::string::npos);
  }
}

TEST_CASE("DDP leaves a sharded unit's shard alone and reduces the replicated parameters",
          "[train][zero]") {
  auto group = OneRankGroup();
  torch::nn::Sequential model;
  ShardedUnit unit(torch::nn::AnyModule(torch::nn::Linear(8, 8)), *group);
  model->push_back(unit);
  model->push_back(torch::nn::Linear(8, 2));
  auto ddp = DistributedDataParallel::Create(*model, *group);
  REQUIRE(ddp.ok());
  model->forward(torch::randn({4, 8})).sum().backward();
  REQUIRE((*ddp)->FinishBackward().ok());
  // The head's gradients go through DDP's buckets; the unit's shard got its own from the unit.
  CHECK((*ddp)->gradient_bytes() == (8 * 2 + 2) * 4);
  REQUIRE(unit->shard().grad().defined());
  CHECK(unit->shard().grad().numel() == 8 * 8 + 8);
}

TEST_CASE("DDP refuses parameters that are not where the group reduces", "[train][ddp]") {
  auto group = OneRankGroup();
  torch::nn::Module model;
  model.register_parameter("sparse", torch::eye(3).to_sparse());
  auto ddp = DistributedDataParallel::Create(model, *group);
  REQUIRE_FALSE(ddp.ok());
  CHECK_THAT(ddp.status().message(), Catch::Contains("over Gloo needs dense CPU parameters"));
}

TEST_CASE("an NCCL group in a build without CUDA LibTorch is refused with the reason",
          "[train][ddp]") {
  if (NcclBuilt()) return;  // the GPU build forms real NCCL groups: tests/gpu covers them
  auto rendezvous = Rendezvous::Host("127.0.0.1", 0, 10s);
  REQUIRE(rendezvous.ok());
  auto group = ProcessGroup::Connect(
      std::move(rendezvous).value(),
      {.backend = CollectiveBackend::kNccl, .rank = 0, .world_size = 1, .timeout = 10s});
  REQUIRE_FALSE(group.ok());
  CHECK(group.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(group.status().message(), Catch::Contains("forming an NCCL group") &&
                                           Catch::Contains("-DRAYD_WITH_CUDA=ON"));
}

}  // namespace
}  // namespace rayd::train
