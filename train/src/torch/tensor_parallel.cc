#include "rayd/train/tensor_parallel.h"

#include <rayd/api/errors.h>

#include <string>
#include <vector>

namespace rayd::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ProcessGroup& SavedGroup(AutogradContext* ctx) {
  return *reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
}

void SaveGroup(AutogradContext* ctx, ProcessGroup& group) {
  ctx->saved_data["group"] = reinterpret_cast<int64_t>(&group);
}

// The sum over the group, as a new tensor; throws RaydError naming `what` when it fails.
torch::Tensor AllReduced(const torch::Tensor& tensor, ProcessGroup& group, const char* what) {
  if (group.world_size() == 1) return tensor;
  torch::Tensor sum = tensor.contiguous().clone();  // the input is autograd's, not ours
  if (Status done = AllReduce(group, sum, what); !done.ok()) {
    throw RaydError("tensor parallel: " + done.message());
  }
  return sum;
}

// This rank's slice of `tensor`'s last dimension.
torch::Tensor MySlice(const torch::Tensor& tensor, ProcessGroup& group) {
  return tensor.chunk(group.world_size(), -1)[group.rank()].contiguous();
}

torch::Tensor AllGatheredLastDim(const torch::Tensor& tensor, ProcessGroup& group) {
  if (group.world_size() == 1) return tensor;
  torch::Tensor mine = tensor.contiguous();
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < group.world_size(); ++r) outputs[0].push_back(torch::empty_like(mine));
  std::vector<torch::Tensor> inputs = {mine};
  Status done = EachRank(group, "all-gathering a column-parallel output",
                         [&](int r) -> c10::intrusive_ptr<c10d::Work> {
                           if (r != 0) return {};
                           return group.c10d().allgather(outputs, inputs);
                         });
  if (!done.ok()) throw RaydError("tensor parallel: " + done.message());
  return torch::cat(outputs[0], -1);
}

class CopyTo : public torch::autograd::Function<CopyTo> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, ProcessGroup* group) {
    SaveGroup(ctx, *group);
    return input.view_as(input);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {
        AllReduced(grads[0], SavedGroup(ctx), "all-reducing a column-parallel input's gradient"),
        torch::Tensor()};
  }
};

class ReduceFrom : public torch::autograd::Function<ReduceFrom> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, ProcessGroup* group) {
    (void)ctx;
    return AllReduced(input, *group, "all-reducing a row-parallel output");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    (void)ctx;
    return {grads[0], torch::Tensor()};
  }
};

class GatherFrom : public torch::autograd::Function<GatherFrom> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, ProcessGroup* group) {
    SaveGroup(ctx, *group);
    return AllGatheredLastDim(input, *group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {MySlice(grads[0], SavedGroup(ctx)), torch::Tensor()};
  }
};

// This rank's slice forward; the whole gradient, gathered, backward (Megatron's scatter).
class ScatterTo : public torch::autograd::Function<ScatterTo> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, ProcessGroup* group) {
    SaveGroup(ctx, *group);
    return MySlice(input, *group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {AllGatheredLastDim(grads[0], SavedGroup(ctx)), torch::Tensor()};
  }
};

void CheckDivides(int64_t features, const char* which, ProcessGroup& group) {
  if (features % group.world_size() != 0) {
    throw RaydError(std::string(which) + " " + std::to_string(features) +
                    " is not divisible by the tensor-parallel size " +
                    std::to_string(group.world_size()));
  }
}

}  // namespace

torch::Tensor CopyToTensorParallel(const torch::Tensor& input, ProcessGroup& group) {
  return CopyTo::apply(input, &group);
}

torch::Tensor ReduceFromTensorParallel(const torch::Tensor& input, ProcessGroup& group) {
  return ReduceFrom::apply(input, &group);
}

torch::Tensor GatherFromTensorParallel(const torch::Tensor& input, ProcessGroup& group) {
  return GatherFrom::apply(input, &group);
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const torch::nn::Linear& whole,
                                                   ProcessGroup& group,
                                                   ColumnParallelLinearOptions options)
    : group_(group), options_(options) {
  torch::NoGradGuard no_grad;
  const int64_t out = whole->weight.size(0);
  CheckDivides(out, "a column-parallel layer's out_features", group);
  const int64_t part = out / group.world_size();
  weight = register_parameter("weight", whole->weight.narrow(0, part * group.rank(), part).clone());
  if (whole->bias.defined()) {
    bias = register_parameter("bias", whole->bias.narrow(0, part * group.rank(), part).clone());
  }
}

torch::Tensor ColumnParallelLinearImpl::forward(torch::Tensor input) {
  torch::Tensor output =
      torch::nn::functional::linear(CopyToTensorParallel(input, group_), weight, bias);
  return options_.gather_output ? GatherFromTensorParallel(output, group_) : output;
}

RowParallelLinearImpl::RowParallelLinearImpl(const torch::nn::Linear& whole, ProcessGroup& group,
                                             RowParallelLinearOptions options)
    : group_(group), options_(options) {
  torch::NoGradGuard no_grad;
  const int64_t in = whole->weight.size(1);
  CheckDivides(in, "a row-parallel layer's in_features", group);
  const int64_t part = in / group.world_size();
  weight = register_parameter("weight", whole->weight.narrow(1, part * group.rank(), part).clone());
  if (whole->bias.defined()) bias = register_parameter("bias", whole->bias.clone());
}

torch::Tensor RowParallelLinearImpl::forward(torch::Tensor input) {
  torch::Tensor mine = options_.input_is_parallel ? input : ScatterTo::apply(input, &group_);
  torch::Tensor output =
      ReduceFromTensorParallel(torch::nn::functional::linear(mine, weight), group_);
  return bias.defined() ? output + bias : output;
}

torch::nn::Sequential TensorParallelSequential(const torch::nn::Sequential& whole,
                                               ProcessGroup& group) {
  std::vector<torch::nn::AnyModule> layers(whole->begin(), whole->end());
  auto linear = [&](size_t i) { return layers[i].ptr()->as<torch::nn::LinearImpl>(); };
  auto has_parameters = [&](size_t i) { return !layers[i].ptr()->parameters().empty(); };
  torch::nn::Sequential split;
  bool column_open = false;  // a ColumnParallelLinear's split output awaits its row layer
  for (size_t i = 0; i < layers.size(); ++i) {
    torch::nn::LinearImpl* layer = linear(i);
    if (layer == nullptr) {
      split->push_back(layers[i]);
      continue;
    }
    const torch::nn::Linear whole_layer(
        std::dynamic_pointer_cast<torch::nn::LinearImpl>(layers[i].ptr()));
    const std::string which = "layer " + std::to_string(i) + " (Linear " +
                              std::to_string(layer->options.in_features()) + " -> " +
                              std::to_string(layer->options.out_features()) + ")";
    try {
      if (column_open) {
        split->push_back(RowParallelLinear(whole_layer, group));
        column_open = false;
        continue;
      }
      size_t next = i + 1;
      while (next < layers.size() && linear(next) == nullptr && !has_parameters(next)) ++next;
      if (next < layers.size() && linear(next) != nullptr) {
        split->push_back(ColumnParallelLinear(whole_layer, group));
        column_open = true;
      } else {
        RowParallelLinearOptions options;
        options.input_is_parallel = false;
        split->push_back(RowParallelLinear(whole_layer, group, options));
      }
    } catch (const RaydError& e) {
      throw RaydError("tensor-parallel split of " + which + ": " + e.what());
    }
  }
  return split;
}

}  // namespace rayd::train
