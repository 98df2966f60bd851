// ZeRO stages 1 and 2 over Gloo with real rank processes (ddp_rank): 2 and 3 ranks training the
// test MLP with SGD (momentum), Adam and AdamW end with stage 0's parameters (to float tolerance),
// while each rank holds about 1/N of the optimizer state (and at stage 2 of the gradients). In this process: the partition, and what Create refuses.

#include <rayd/train/process_group.h>
#include <rayd/train/zero.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mlp_fixture.h"
#include "test_util.h"

namespace rayd::train {
namespace {

using namespace std::chrono_literals;
using rayd::testing::ChildProcess;
using rayd::testing::TempDir;

// `world` ranks of ddp_rank with `args`; returns each rank's final parameters and its
// optimizer_state_bytes line.
struct RankRun {
  std::vector<std::vector<float>> params;
  std::vector<int64_t> state_bytes;
  std::vector<int64_t> grad_bytes;  // the gradients each rank holds after its last step
  std::vector<std::string> outputs;
};

int64_t Printed(const std::string& output, const std::string& key) {
  const size_t at = output.find(key + "=");
  REQUIRE(at != std::string::npos);
  return std::stoll(output.substr(at + key.size() + 1));
}

RankRun RunRanks(int world, const std::vector<std::string>& args) {
  TempDir dir;
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> argv = {DDP_RANK_BINARY,
                                     "--rank",
                                     std::to_string(rank),
                                     "--world-size",
                                     std::to_string(world),
                                     "--port-file",
                                     dir.path() + "/port",
                                     "--out",
                                     dir.path() + "/params." + std::to_string(rank)};
    argv.insert(argv.end(), args.begin(), args.end());
    ranks.push_back(std::make_unique<ChildProcess>(argv));
  }
  RankRun out;
  for (int rank = 0; rank < world; ++rank) {
    INFO("rank " << rank << " output:\n" << ranks[rank]->output());
    REQUIRE(ranks[rank]->WaitExit(120s));
    REQUIRE(ranks[rank]->exit_code() == 0);
    out.params.push_back(testing::ReadFloats(dir.path() + "/params." + std::to_string(rank)));
    const std::string output = ranks[rank]->output();
    out.state_bytes.push_back(Printed(output, "optimizer_state_bytes"));
    out.grad_bytes.push_back(Printed(output, "grad_bytes"));
    out.outputs.push_back(output);
  }
  return out;
}

TEST_CASE("ZeRO stages 1 and 2 end with stage 0's parameters, each rank holding 1/N of the state",
          "[train][zero]") {
  const int world = GENERATE(2, 3);
  const std::string optimizer = GENERATE(as<std::string>{}, "sgd", "adam", "adamw");
  const std::string stage = GENERATE(as<std::string>{}, "1", "2");
  INFO(world << " ranks, " << optimizer << ", stage " << stage);
  const std::vector<std::string> common = {"--optimizer", optimizer};
  std::vector<std::string> stage0 = common, staged = common;
  stage0.insert(stage0.end(), {"--zero-stage", "0"});
  staged.insert(staged.end(), {"--zero-stage", stage});
  // Stage 0's run is the same for stage 1 and stage 2 of one world and optimizer (the stage is
  // the innermost generator): it runs once, for both.
  static std::map<std::pair<int, std::string>, RankRun> stage0_runs;
  auto cached = stage0_runs.find({world, optimizer});
  if (cached == stage0_runs.end()) {
    cached = stage0_runs.emplace(std::pair{world, optimizer}, RunRanks(world, stage0)).first;
  }
  const RankRun& whole = cached->second;
  const RankRun sharded = RunRanks(world, staged);
  const std::vector<float>& reference = whole.params[0];
  REQUIRE_FALSE(reference.empty());
  for (int rank = 0; rank < world; ++rank) {
    REQUIRE(sharded.params[rank].size() == reference.size());
    // The owner steps what every rank steps at stage 0, from the same averaged gradient (at
    // stage 2 summed in another order), but on a slice cut at other element bounds, which
    // vectorised arithmetic may round differently at its edges: equal to float tolerance.
    float max_diff = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(sharded.params[rank][i] - reference[i]));
    }
    CHECK(max_diff < 1e-5f);
    // Every rank holds the owners' bytes.
    CHECK(std::memcmp(sharded.params[rank].data(), sharded.params[0].data(),
                      reference.size() * sizeof(float)) == 0);
  }
  int64_t total = 0, grads = 0;
  for (int rank = 0; rank < world; ++rank) {
    CHECK(whole.state_bytes[rank] == whole.state_bytes[0]);  // stage 0: all of it everywhere
    // Split by element: each rank holds its share, to one element of each state tensor.
    CHECK(sharded.state_bytes[rank] <= whole.state_bytes[0] / world + 16);
    total += sharded.state_bytes[rank];
    if (stage == "1") {
      CHECK(sharded.grad_bytes[rank] == whole.grad_bytes[rank]);  // every gradient everywhere
    } else {
      CHECK(sharded.grad_bytes[rank] <= whole.grad_bytes[0] / world + 4);
      grads += sharded.grad_bytes[rank];
    }
  }
  CHECK(total == whole.state_bytes[0]);  // the shards add up to the whole, once
  if (stage == "2") CHECK(grads == whole.grad_bytes[0]);
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
  return max_diff;
}

TEST_CASE("ZeRO stage 3 ends with stage 0's parameters, each rank holding 1/N of them",
          "[train][zero]") {
  const int world = GENERATE(2, 3, 4);
  const std::string optimizer = GENERATE(as<std::string>{}, "sgd", "adam", "adamw");
  INFO(world << " ranks, " << optimizer);
  const RankRun whole = RunRanks(world, {"--optimizer", optimizer, "--zero-stage", "0"});
  const RankRun sharded = RunRanks(world, {"--optimizer", optimizer, "--zero-stage", "3"});
  for (int rank = 0; rank < world; ++rank) {
    CHECK(MaxDiff(sharded.params[rank], whole.params[0]) < 1e-5f);
    const std::string& output = sharded.outputs[rank];
    const int64_t model_bytes = Printed(output, "model_bytes");
    // Between steps a rank holds its shard of every unit: 1/N of the model, plus at most one
    // element of padding per unit (a shard is ceil(elements / N); the MLP has 3 units).
    const double share = static_cast<double>(model_bytes) / world + 3 * 4;
    for (const char* key : {"param_bytes", "param_bytes_after"}) {
      CHECK(Printed(output, key) <= share);
    }
    CHECK(sharded.grad_bytes[rank] <= share);
    // Adam and AdamW keep two tensors per shard, SGD one.
    CHECK(sharded.state_bytes[rank] <=
          whole.state_bytes[0] / static_cast<double>(world) + 3 * 4 * 2);
  }
}

TEST_CASE("ZeRO stage 3 with clipping and 4 micro-batches matches stage 0's", "[train][zero]") {
  const std::vector<std::string> common = {"--optimizer", "adam",           "--clip-norm",
                                           "0.5",         "--accumulation", "4"};
  std::vector<std::string> stage0 = common, stage3 = common;
  stage0.insert(stage0.end(), {"--zero-stage", "0"});
  stage3.insert(stage3.end(), {"--zero-stage", "3"});
  const RankRun whole = RunRanks(2, stage0);
  const RankRun sharded = RunRanks(2, stage3);
  CHECK(MaxDiff(sharded.params[0], whole.params[0]) < 1e-5f);
  CHECK(MaxDiff(sharded.params[1], whole.params[0]) < 1e-5f);
}

TEST_CASE("ZeRO stage 3 over Gloo alone, without shared memory, matches stage 0's",
          "[train][zero]") {
  const RankRun whole = RunRanks(2, {"--optimizer", "adam", "--zero-stage", "0"});
  const RankRun sharded =
      RunRanks(2, {"--optimizer", "adam", "--zero-stage", "3", "--shared-memory", "0"});
  CHECK(MaxDiff(sharded.params[0], whole.params[0]) < 1e-5f);
  CHECK(MaxDiff(sharded.params[1], whole.params[0]) < 1e-5f);
}

TEST_CASE("ZeRO stage 3 recomputing each unit's forward in backward matches stage 0's",
          "[train][zero]") {
  const std::vector<std::string> common = {"--optimizer", "adamw", "--accumulation", "2"};
  std::vector<std::string> stage0 = common, stage3 = common;
  stage0.insert(stage0.end(), {"--zero-stage", "0"});
  stage3.insert(stage3.end(), {"--zero-stage", "3", "--recompute", "1"});
  const RankRun whole = RunRanks(3, stage0);
  const RankRun sharded = RunRanks(3, stage3);
  for (int rank = 0; rank < 3; ++rank)
    CHECK(MaxDiff(sharded.params[rank], whole.params[0]) < 1e-5f);
}

TEST_CASE("accumulating 4 micro-batches equals one batch 4x larger, at stages 0, 1 and 2",
          "[train][zero]") {
  const std::string stage = GENERATE(as<std::string>{}, "0", "1", "2");
  const RankRun whole = RunRanks(2, {"--zero-stage", stage});
  const RankRun accumulated = RunRanks(2, {"--zero-stage", stage, "--accumulation", "4"});
  const std::vector<float>& a = whole.params[0];
  const std::vector<float>& b = accumulated.params[0];
  REQUIRE(a.size() == b.size());
  float max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
  CHECK(max_diff < 1e-5f);  // the same gradient, summed in another order
  CHECK(std::memcmp(accumulated.params[0].data(), accumulated.params[1].data(),
                    b.size() * sizeof(float)) == 0);
}

TEST_CASE("clipping by the whole model's gradient norm at stages 1 and 2 matches stage 0's",
          "[train][zero]") {
  const RankRun unclipped = RunRanks(2, {"--optimizer", "adam", "--zero-stage", "0"});
  std::vector<RankRun> clipped;
  for (const char* stage : {"0", "1", "2"}) {
    clipped.push_back(RunRanks(2, {"--optimizer", "adam", "--zero-stage", stage, "--clip-norm",
                                   "0.05"}));
  }
  const std::vector<float>& reference = clipped[0].params[0];
  // The clip bites: stage 0 clipped ends elsewhere than unclipped.
  float moved = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    moved = std::max(moved, std::abs(reference[i] - unclipped.params[0][i]));
  }
  CHECK(moved > 1e-3f);
  // Sharded, each rank's norm is summed with the other's: the same clip as stage 0's.
  for (size_t stage = 1; stage < clipped.size(); ++stage) {
    INFO("stage " << stage);
    float max_diff = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(clipped[stage].params[1][i] - reference[i]));
    }
    CHECK(max_diff < 1e-5f);
  }
}

TEST_CASE("ClipGradNorm at stage 0 is torch's clip_grad_norm_", "[train][zero]") {
  auto rendezvous = Rendezvous::Host("127.0.0.1", 0, 10s);
  REQUIRE(rendezvous.ok());
  auto group = ProcessGroup::Connect(std::move(rendezvous).value(), ProcessGroupOptions{});
  REQUIRE(group.ok());
  torch::manual_seed(3);
  torch::nn::Linear ours(8, 4), theirs(8, 4);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ours->parameters().size(); ++i) {
    theirs->parameters()[i].copy_(ours->parameters()[i]);
    ours->parameters()[i].mutable_grad() = torch::randn(ours->parameters()[i].sizes());
    theirs->parameters()[i].mutable_grad() = ours->parameters()[i].grad().clone();
  }
  torch::optim::SGD sgd(ours->parameters(), torch::optim::SGDOptions(0.1));
  auto zero = ShardedOptimizer::Create(sgd, **group, {.zero_stage = 0});
  REQUIRE(zero.ok());
  Result<double> norm = (*zero)->ClipGradNorm(0.5);
  REQUIRE(norm.ok());
  const double torch_norm = torch::nn::utils::clip_grad_norm_(theirs->parameters(), 0.5);
  CHECK(*norm == Approx(torch_norm).epsilon(1e-6));
  CHECK(*norm > 0.5);  // it clipped
  for (size_t i = 0; i < ours->parameters().size(); ++i) {
    CHECK(torch::allclose(ours->parameters()[i].grad(), theirs->parameters()[i].grad(), 1e-6,
                          1e-7));
  }
}

// The whole saved state of a checkpoint directory, whatever its shards: per state name
// ("exp_avg") one flat tensor assembled from every shard's runs, which must tile it without
// overlap.
std::map<std::string, torch::Tensor> CheckpointTensors(const std::string& dir) {
  std::map<std::string, std::vector<std::pair<int64_t, torch::Tensor>>> runs;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("optimizer_shard_") || !name.ends_with(".pt")) continue;
    torch::serialize::InputArchive archive;
    archive.load_from(entry.path().string());
    for (const std::string& key : archive.keys()) {
      const size_t slash = key.find('/');
      if (slash == std::string::npos || key.ends_with("/range") || key.ends_with("/step")) continue;
      torch::Tensor range, t;
      REQUIRE(archive.try_read(key.substr(0, slash) + "/range", range));
      REQUIRE(archive.try_read(key, t));
      runs[key.substr(slash + 1)].emplace_back(range[0].item<int64_t>(), t);
    }
  }
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, pieces] : runs) {
    std::sort(pieces.begin(), pieces.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<torch::Tensor> ordered;
    int64_t next = 0;
    for (const auto& [begin, t] : pieces) {
      CHECK(begin == next);  // from the first element on, no gap, no overlap
      next = begin + t.numel();
      ordered.push_back(t);
    }
    out[name] = torch::cat(ordered);
  }
  return out;
}

TEST_CASE("a sharded optimizer checkpoint taken on 4 ranks loads on 2, and stage 0's on 3",
          "[train][zero]") {
  TempDir dir;
  const std::string four = dir.path() + "/four", two = dir.path() + "/two";
  RunRanks(4, {"--optimizer", "adam", "--zero-stage", "1", "--save-dir", four});
  CHECK(std::filesystem::exists(four + "/optimizer.complete"));
  CHECK(std::filesystem::exists(four + "/optimizer_shard_3_of_4.pt"));
  // Loaded on 2 ranks (each takes its new shard from whichever file holds it) and saved again.
  RunRanks(2, {"--optimizer", "adam", "--zero-stage", "1", "--train", "0", "--load-dir", four,
               "--save-dir", two});
  const auto saved = CheckpointTensors(four), resharded = CheckpointTensors(two);
  REQUIRE(saved.size() == 2);  // Adam's two moments
  REQUIRE(resharded.size() == saved.size());
  for (const auto& [key, tensor] : saved) {
    INFO(key);
    REQUIRE(resharded.count(key) == 1);
    CHECK(torch::equal(resharded.at(key), tensor));
  }
  // Stage 0's checkpoint is one shard (every rank holds everything); stage 1 on 3 ranks loads it.
  const std::string whole = dir.path() + "/whole", three = dir.path() + "/three";
  RunRanks(2, {"--optimizer", "sgd", "--zero-stage", "0", "--save-dir", whole});
  CHECK(std::filesystem::exists(whole + "/optimizer_shard_0_of_1.pt"));
  RunRanks(3, {"--optimizer", "sgd", "--zero-stage", "1", "--train", "0", "--load-dir", whole,
               "--save-dir", three});
  const auto sgd = CheckpointTensors(whole), sgd3 = CheckpointTensors(three);
  REQUIRE(sgd3.size() == sgd.size());
  for (const auto& [key, tensor] : sgd) CHECK(torch::equal(sgd3.at(key), tensor));
}

TEST_CASE("ZeRO's Create refuses a stage it does not have, and a sharded stage without the model",
          "[train][zero]") {
  torch::nn::Linear layer(4, 2);
  torch::optim::SGD sgd(layer->parameters(), torch::optim::SGDOptions(0.1));
  // A group of one is enough to be refused before any communication.
  auto rendezvous = Rendezvous::Host("127.0.0.1", 0, 10s);
  REQUIRE(rendezvous.ok());
  auto group = ProcessGroup::Connect(std::move(rendezvous).value(), ProcessGroupOptions{});
  REQUIRE(group.ok());
  auto refused = ShardedOptimizer::Create(sgd, **group, {.zero_stage = 3});
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("not stage 3"));
  auto no_ddp = ShardedOptimizer::Create(sgd, **group, {.zero_stage = 1});
  REQUIRE_FALSE(no_ddp.ok());
  CHECK_THAT(no_ddp.status().message(), Catch::Contains("needs the model's DistributedDataParallel"));
  auto one = ShardedOptimizer::Create(sgd, **group, {.zero_stage = 0});
  REQUIRE(one.ok());
  CHECK((*one)->bounds().empty());  // a group of one: nothing is sharded
  // A checkpoint without its completion marker is not loaded.
  TempDir dir;
  std::ofstream(dir.path() + "/optimizer_shard_0_of_1.pt") << "partial";
  Status incomplete = (*one)->LoadState(dir.path());
  CHECK(incomplete.code() == StatusCode::kNotFound);
  CHECK_THAT(incomplete.message(), Catch::Contains("no complete optimizer checkpoint"));
  // A marker naming shards that are not all there is not loaded either.
  std::ofstream(dir.path() + "/optimizer.complete") << "2\n";
  std::ofstream(dir.path() + "/optimizer_shard_0_of_2.pt") << "partial";
  incomplete = (*one)->LoadState(dir.path());
  CHECK(incomplete.code() == StatusCode::kNotFound);
  CHECK_THAT(incomplete.message(), Catch::Contains("shard 1 of 2 is missing"));
}

}  // namespace
}  // namespace rayd::train
