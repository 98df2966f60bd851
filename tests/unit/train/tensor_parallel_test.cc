// Tensor parallelism (rayd/train/tensor_parallel.h): Megatron's column- and row-parallel
// linear layers on 2 and 4 thread-ranks, each with its own Gloo group, against the same layers
// whole in one process: the same outputs, and each rank's gradients are its part of the whole
// layers' (the input's gradient whole on every rank).

#include <rayd/api/errors.h>
#include <rayd/train/tensor_parallel.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "thread_groups.h"

namespace rayd::train {
namespace {

struct Whole {
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::Tensor input, output;
};

// The MLP 12 -> 8 -> 6, whole, with its output and gradients for a fixed loss.
Whole RunWhole() {
  Whole whole;
  torch::manual_seed(7);
  whole.up = torch::nn::Linear(12, 8);
  whole.down = torch::nn::Linear(8, 6);
  whole.input = torch::randn({5, 12}).requires_grad_(true);
  whole.output = whole.down(torch::relu(whole.up(whole.input)));
  whole.output.pow(2).sum().backward();
  return whole;
}

// Loss-free comparison with a tolerance for summation order.
bool Close(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6);
}

TEST_CASE("a column-parallel then row-parallel MLP equals the whole one, gradients split",
          "[train][tensor]") {
  const int world = GENERATE(2, 4);
  INFO(world << " ranks");
  const Whole whole = RunWhole();
  auto groups = testing::FormThreadGroups(world);
  std::vector<Status> statuses = testing::OnEachThreadRank(world, [&](int rank) {
    ProcessGroup& group = *groups[rank];
    ColumnParallelLinear up(whole.up, group);
    RowParallelLinear down(whole.down, group);
    torch::Tensor input = whole.input.detach().clone().requires_grad_(true);
    torch::Tensor output = down(torch::relu(up(input)));
    output.pow(2).sum().backward();
    const int64_t rows = 8 / world;
    auto fail = [&](const std::string& what) {
      return Status::Internal("rank " + std::to_string(rank) + ": " + what);
    };
    if (!Close(output, whole.output)) return fail("output");
    if (!Close(input.grad(), whole.input.grad())) return fail("input gradient");
    if (!Close(up->weight.grad(), whole.up->weight.grad().narrow(0, rank * rows, rows))) {
      return fail("column layer's weight gradient");
    }
    if (!Close(up->bias.grad(), whole.up->bias.grad().narrow(0, rank * rows, rows))) {
      return fail("column layer's bias gradient");
    }
    if (!Close(down->weight.grad(), whole.down->weight.grad().narrow(1, rank * rows, rows))) {
      return fail("row layer's weight gradient");
    }
    if (!Close(down->bias.grad(), whole.down->bias.grad())) return fail("row layer's bias");
    return Status::Ok();
  });
  for (const Status& status : statuses) CHECK(status.ToString() == Status::Ok().ToString());
}

TEST_CASE("a column-parallel layer gathers its output, and a row-parallel one splits its input",
          "[train][tensor]") {
  const Whole whole = RunWhole();
  auto groups = testing::FormThreadGroups(2);
  std::vector<Status> statuses = testing::OnEachThreadRank(2, [&](int rank) {
    ProcessGroup& group = *groups[rank];
    // Each layer alone: a whole output from the column layer, a whole input to the row layer.
    ColumnParallelLinear up(whole.up, group, ColumnParallelLinearOptions{.gather_output = true});
    RowParallelLinear down(whole.down, group, RowParallelLinearOptions{.input_is_parallel = false});
    torch::Tensor input = whole.input.detach().clone().requires_grad_(true);
    torch::Tensor hidden = torch::relu(up(input));
    torch::Tensor output = down(hidden);
    output.pow(2).sum().backward();
    if (hidden.size(1) != 8) return Status::Internal("the gathered output is not whole");
    if (!Close(output, whole.output)) return Status::Internal("output");
    if (!Close(input.grad(), whole.input.grad())) return Status::Internal("input gradient");
    if (!Close(up->weight.grad(), whole.up->weight.grad().narrow(0, rank * 4, 4))) {
      return Status::Internal("column layer's weight gradient");
    }
    return Status::Ok();
  });
  for (const Status& status : statuses) CHECK(status.ToString() == Status::Ok().ToString());
}

TEST_CASE("a tensor split that does not divide the features is refused naming them",
          "[train][tensor]") {
  auto groups = testing::FormThreadGroups(3);
  torch::nn::Linear layer(12, 8);
  std::vector<Status> statuses = testing::OnEachThreadRank(3, [&](int rank) {
    try {
      ColumnParallelLinear up(layer, *groups[rank]);
    } catch (const RaydError& e) {
      if (std::string(e.what()).find("a column-parallel layer's out_features 8 is not "
                                     "divisible by the tensor-parallel size 3") ==
          std::string::npos) {
        return Status::Internal(e.what());
      }
      RowParallelLinear down(layer, *groups[rank]);  // in_features 12: divisible
      return Status::Ok();
    }
    return Status::Internal("not refused");
  });
  for (const Status& status : statuses) CHECK(status.ToString() == Status::Ok().ToString());
}

TEST_CASE("TensorParallelSequential splits a model's Linear layers in Megatron's pairs",
          "[train][tensor]") {
  const int world = GENERATE(2, 4);
  INFO(world << " ranks");
  torch::manual_seed(5);
  torch::nn::Sequential whole(torch::nn::Linear(12, 8), torch::nn::ReLU(), torch::nn::Linear(8, 8),
                              torch::nn::ReLU(), torch::nn::Linear(8, 6));
  const torch::Tensor x = torch::randn({5, 12});
  torch::Tensor input = x.clone().requires_grad_(true);
  const torch::Tensor output = whole->forward(input);
  output.pow(2).sum().backward();
  auto groups = testing::FormThreadGroups(world);
  std::vector<Status> statuses = testing::OnEachThreadRank(world, [&](int rank) -> Status {
    torch::nn::Sequential split = TensorParallelSequential(whole, *groups[rank]);
    // Column, ReLU, Row, ReLU, then the odd one out: a row layer over its slice of the input.
    if (!split[0]->as<ColumnParallelLinearImpl>() || !split[2]->as<RowParallelLinearImpl>() ||
        !split[4]->as<RowParallelLinearImpl>()) {
      return Status::Internal("rank " + std::to_string(rank) + ": unexpected layers");
    }
    torch::Tensor in = x.clone().requires_grad_(true);
    torch::Tensor out = split->forward(in);
    out.pow(2).sum().backward();
    if (!Close(out, output)) return Status::Internal("rank " + std::to_string(rank) + ": output");
    if (!Close(in.grad(), input.grad())) {
      return Status::Internal("rank " + std::to_string(rank) + ": input gradient");
    }
    return Status::Ok();
  });
  for (const Status& status : statuses) CHECK(status.ToString() == Status::Ok().ToString());
  torch::nn::Sequential odd(torch::nn::Linear(12, 7), torch::nn::ReLU(), torch::nn::Linear(7, 4));
  auto pair = testing::FormThreadGroups(2);
  std::vector<Status> refused = testing::OnEachThreadRank(2, [&](int rank) -> Status {
    try {
      TensorParallelSequential(odd, *pair[rank]);
    } catch (const RaydError& e) {
      return Status::InvalidArgument(e.what());
    }
    return Status::Ok();
  });
  CHECK_THAT(refused[0].message(), Catch::Matchers::Contains("layer 0 (Linear 12 -> 7)"));
}

}  // namespace
}  // namespace rayd::train
