// Pipeline parallelism (rayd/train/pipeline.h): a 5-layer MLP cut into 2 and 3 stages on
// thread-ranks, each with its own Gloo group, under GPipe and 1F1B, against the whole model in
// one process: the same mean loss, the same gradients in every layer, the same evaluation
// output; 1F1B keeps at most `stages - r` micro-batches alive on stage r, GPipe all of them.

#include <rayd/api/errors.h>
#include <rayd/train/pipeline.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "thread_groups.h"

namespace rayd::train {
namespace {

using Catch::Matchers::Contains;

torch::nn::Sequential MakeModel() {
  torch::manual_seed(11);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 4));
}

torch::nn::Sequential Clone(const torch::nn::Sequential& model) {
  return torch::nn::Sequential(
      std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
}

torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

bool AllClose(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6);
}

TEST_CASE("pipeline stages under GPipe and 1F1B equal the whole model", "[train][pipeline]") {
  const int stages = GENERATE(2, 3);
  const auto schedule = GENERATE(PipelineSchedule::kGPipe, PipelineSchedule::k1F1B);
  // 10 rows: micro-batches of 3, 3, 2 and 2; 5 rows: 2, 1, 1 and 1 (torch::chunk would make 3)
  const int rows = GENERATE(12, 10, 5);
  const int micro_batches = 4;
  INFO(stages << " stages, " << (schedule == PipelineSchedule::kGPipe ? "gpipe" : "1f1b") << ", "
              << rows << " rows");

  torch::nn::Sequential whole = MakeModel();
  torch::manual_seed(12);
  const torch::Tensor x = torch::randn({rows, 8});
  const torch::Tensor y = torch::randint(0, 4, {rows}, torch::kLong);
  const torch::Tensor whole_loss = Loss(whole->forward(x), y);
  whole_loss.backward();
  torch::Tensor whole_output;
  {
    torch::NoGradGuard no_grad;
    whole_output = whole->forward(x);
  }

  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < stages; ++r) {
    models.push_back(Clone(whole));
    for (auto& p : models.back()->parameters()) p.mutable_grad() = torch::Tensor();
  }
  auto groups = testing::FormThreadGroups(stages);
  std::vector<double> losses(stages);
  std::vector<int> in_flight(stages);
  std::vector<double> idle(stages, -1);
  std::vector<torch::Tensor> outputs(stages);
  std::vector<Status> statuses = testing::OnEachThreadRank(stages, [&](int rank) {
    try {
      auto parts = SplitEvenly(models[rank], stages);
      PipelineStage stage(parts[rank], *groups[rank],
                          {.micro_batches = micro_batches, .schedule = schedule});
      losses[rank] = stage.Step(stage.is_first() ? x : torch::Tensor(),
                                stage.is_last() ? y : torch::Tensor(), Loss);
      in_flight[rank] = stage.max_in_flight();
      idle[rank] = stage.idle_fraction();
      outputs[rank] = stage.Forward(stage.is_first() ? x : torch::Tensor());
    } catch (const std::exception& e) {
      return Status::Internal("rank " + std::to_string(rank) + ": " + e.what());
    }
    return Status::Ok();
  });
  for (const Status& s : statuses) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  for (double loss : losses) CHECK(loss == Approx(whole_loss.item<double>()).epsilon(1e-5));
  CHECK(AllClose(outputs.back(), whole_output));
  for (int r = 0; r + 1 < stages; ++r) CHECK_FALSE(outputs[r].defined());
  for (int r = 0; r < stages; ++r) {
    INFO("stage " << r);
    // Every stage waits for some micro-batch at some point (its bubble).
    CHECK(idle[r] > 0);
    CHECK(idle[r] < 1);
    CHECK(in_flight[r] == (schedule == PipelineSchedule::kGPipe
                               ? micro_batches
                               : std::min(stages - r, micro_batches)));
  }
  // Each rank's own stage got the whole model's gradients; the layers of other stages none.
  const auto whole_params = whole->parameters();
  for (int r = 0; r < stages; ++r) {
    auto parts = SplitEvenly(models[r], stages);
    std::vector<const void*> own;
    for (const auto& p : parts[r]->parameters()) own.push_back(p.unsafeGetTensorImpl());
    const auto params = models[r]->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      INFO("stage " << r << ", parameter " << i);
      const bool mine =
          std::find(own.begin(), own.end(), params[i].unsafeGetTensorImpl()) != own.end();
      if (mine) {
        REQUIRE(params[i].grad().defined());
        CHECK(AllClose(params[i].grad(), whole_params[i].grad()));
      } else {
        CHECK_FALSE(params[i].grad().defined());
      }
    }
  }
}

TEST_CASE("SplitEvenly balances parameters and keeps activations with their layer",
          "[train][pipeline]") {
  torch::nn::Sequential model = MakeModel();  // 144, 0, 544, 0, 132 parameters
  auto two = SplitEvenly(model, 2);
  REQUIRE(two.size() == 2);
  CHECK(two[0]->size() == 4);  // Linear, ReLU, Linear, ReLU
  CHECK(two[1]->size() == 1);
  auto five = SplitEvenly(model, 5);
  for (const auto& part : five) CHECK(part->size() == 1);
  CHECK_THROWS_WITH(SplitEvenly(model, 6), Contains("5 layers into 6 pipeline stages"));
}

TEST_CASE("pipeline options are checked", "[train][pipeline]") {
  CHECK(ParsePipelineSchedule("gpipe") == PipelineSchedule::kGPipe);
  CHECK(ParsePipelineSchedule("1f1b") == PipelineSchedule::k1F1B);
  CHECK_THROWS_WITH(ParsePipelineSchedule("interleaved"),
                    Contains("'interleaved'") && Contains("gpipe or 1f1b"));
  auto groups = testing::FormThreadGroups(1);
  CHECK_THROWS_WITH(PipelineStage(MakeModel(), *groups[0], {.micro_batches = 0}),
                    Contains("at least 1"));
  PipelineStage alone(MakeModel(), *groups[0], {.micro_batches = 4});
  CHECK_THROWS_WITH(alone.Step(torch::randn({3, 8}), torch::zeros({3}, torch::kLong), Loss),
                    Contains("at least micro_batches (4) rows"));
}

TEST_CASE("a pipeline stage whose neighbour is gone fails naming the micro-batch",
          "[train][pipeline]") {
  auto groups = testing::FormThreadGroups(2, true, std::chrono::milliseconds(1500));
  torch::nn::Sequential model = MakeModel();
  auto parts = SplitEvenly(model, 2);
  // Only the last stage runs: it waits for the first's shapes, which never come.
  PipelineStage last(parts[1], *groups[1], {.micro_batches = 2});
  CHECK_THROWS_WITH(last.Step({}, torch::zeros({4}, torch::kLong), Loss),
                    Contains("pipeline stage 1: receiving micro-batch 0's shapes from stage 0"));
}

}  // namespace
}  // namespace rayd::train
