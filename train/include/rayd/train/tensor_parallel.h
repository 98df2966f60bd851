#pragma once
// Tensor parallelism (Megatron-LM, Shoeybi et al., 2019): one layer's matrices split among the
// ranks of a tensor-parallel group, so that each rank holds and multiplies 1/N of them.
//
//   // Megatron's MLP: the first layer split by output features, the second by input features;
//   // one all-reduce in forward (after the second) and one in backward (before the first).
//   rayd::train::ColumnParallelLinear up(torch::nn::Linear(784, 4096), group);
//   rayd::train::RowParallelLinear down(torch::nn::Linear(4096, 784), group);
//   y = down(torch::relu(up(x)));
//
// How it works:
// - ColumnParallelLinear keeps rows [r*out/N, (r+1)*out/N) of the weight (out x in) and of the
//   bias: rank r computes its slice of the output features. Its input passes through
//   CopyToTensorParallel (identity forward; the input's gradient, which every rank has a part of,
//   is all-reduced backward). With gather_output, the slices are all-gathered into the whole
//   output (GatherFromTensorParallel: all-gather forward, this rank's slice of the gradient
//   backward); without it the output stays split, for a RowParallelLinear to take.
// - RowParallelLinear keeps columns [r*in/N, (r+1)*in/N) of the weight and the whole bias: rank
//   r multiplies its slice of the input features, the partial outputs are summed by
//   ReduceFromTensorParallel (all-reduce forward, identity backward), then the bias is added
//   once. Its input is already split (a ColumnParallelLinear's output) unless
//   input_is_parallel is false, when each rank takes its slice of a whole input.
// - Both are made from a whole torch::nn::Linear that every rank builds alike (the same seed,
//   or loaded from the same checkpoint): each keeps its part, so a tensor-parallel model starts
//   from the values a single-device one would, and trains to the same values up to summation
//   order. The split sizes must divide the features (RaydError naming them otherwise).
//
// The group is the tensor-parallel group (a mesh's, or a whole small world): its collectives
// run inside forward and backward, so every rank of it runs the same layers in the same order.
// A failed collective throws RaydError out of forward or backward, naming the layer's step.

#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <cstdint>

namespace rayd::train {

// Identity forward; all-reduce (sum) of the gradient over `group` backward (Megatron's f).
torch::Tensor CopyToTensorParallel(const torch::Tensor& input, ProcessGroup& group);
// All-reduce (sum) over `group` forward; identity backward (Megatron's g).
torch::Tensor ReduceFromTensorParallel(const torch::Tensor& input, ProcessGroup& group);
// All-gather along the last dimension forward, in rank order; this rank's slice of the
// gradient backward.
torch::Tensor GatherFromTensorParallel(const torch::Tensor& input, ProcessGroup& group);

struct ColumnParallelLinearOptions {
  // All-gather the output slices into the whole output (for a last layer); otherwise each rank
  // returns its slice of the output features.
  bool gather_output = false;
};

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // This rank's rows of `whole` (and of its bias, if it has one). Throws RaydError when the
  // group's size does not divide whole's out_features.
  ColumnParallelLinearImpl(const torch::nn::Linear& whole, ProcessGroup& group,
                           ColumnParallelLinearOptions options = {});
  torch::Tensor forward(torch::Tensor input);

  torch::Tensor weight;  // [out / N, in]
  torch::Tensor bias;    // [out / N], undefined without one

 private:
  ProcessGroup& group_;
  ColumnParallelLinearOptions options_;
};
TORCH_MODULE(ColumnParallelLinear);

struct RowParallelLinearOptions {
  // The input is already split along its last dimension (a ColumnParallelLinear's output);
  // false: each rank takes its slice of the whole input.
  bool input_is_parallel = true;
};

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  // This rank's columns of `whole`, and its whole bias. Throws RaydError when the group's size
  // does not divide whole's in_features.
  RowParallelLinearImpl(const torch::nn::Linear& whole, ProcessGroup& group,
                        RowParallelLinearOptions options = {});
  torch::Tensor forward(torch::Tensor input);

  torch::Tensor weight;  // [out, in / N]
  torch::Tensor bias;    // [out], undefined without one

 private:
  ProcessGroup& group_;
  RowParallelLinearOptions options_;
};
TORCH_MODULE(RowParallelLinear);

// Megatron's split of a Sequential of Linear layers and layers without parameters
// (activations), whose input and output stay whole, so it can take the place of the whole one
// (a model, or a pipeline stage of one): a Linear followed, past layers without parameters, by
// another Linear becomes a ColumnParallelLinear (its output left split, through the
// activations between) and that next one a RowParallelLinear; a Linear left over (the last one
// of an odd count) becomes a RowParallelLinear taking its slice of the whole input. Other
// layers with parameters are kept whole (replicated on every rank). Every rank gets the same
// values as `whole` has. Throws RaydError when the group's size does not divide a split
// layer's features (naming the layer's index and size).
torch::nn::Sequential TensorParallelSequential(const torch::nn::Sequential& whole,
                                               ProcessGroup& group);

}  // namespace rayd::train
