#pragma once
// Pipeline parallelism (GPipe, Huang et al., 2019; 1F1B, PipeDream-Flush, Narayanan et al.,
// 2021): a model's layers cut into stages, one stage per rank of a pipeline group, and each
// batch split into micro-batches that flow through the stages, activations forward and their
// gradients backward between neighbouring ranks.
//
//   // Every rank builds the whole model alike (the same seed), then keeps its stage.
//   torch::nn::Sequential model = BuildModel();
//   auto stage = rayd::train::PipelineStage(
//       rayd::train::SplitEvenly(model, group.world_size())[group.rank()], group,
//       {.micro_batches = 4, .schedule = rayd::train::PipelineSchedule::k1F1B});
//   double loss = stage.Step(x, y, [](auto& out, auto& y) {
//     return torch::nll_loss(out, y); });  // the batch's mean, on every stage
//   optimizer.step();                       // each rank steps its own stage's parameters
//
// How a step runs (Step):
// - The first stage splits `input` along dim 0 into `micro_batches` parts (torch's
//   tensor_split: their rows differ by at most one); the last stage splits `target` alike.
//   Other stages ignore them.
// - Stage r > 0 receives each micro-batch's activation from r - 1; stage r < S - 1 sends its
//   output to r + 1. Backward runs the other way: the last stage differentiates
//   loss_fn(output, target) / micro_batches, each stage sends its input's gradient to r - 1.
//   The parameters' gradients so accumulate to those of the whole batch's mean loss, as on one
//   device (only the summation order differs).
// - Shapes: before its first activation of a step, each stage sends the next one a header
//   with the dtype, the trailing dimensions and the rows of every micro-batch (a stage keeps
//   dim 0, the batch), so a receiver allocates before the data arrives. Gradients have the
//   shapes of the activations they belong to.
// - Schedules: kGPipe runs every micro-batch's forward, then every backward, so a stage keeps
//   all `micro_batches` activations alive. k1F1B runs S - r - 1 forwards ahead, then alternates
//   one forward and one backward, so stage r keeps at most S - r micro-batches' activations
//   alive (max_in_flight()), whatever micro_batches is; both give the same gradients.
// - Sends are posted without waiting (each buffer kept until the step ends); receives wait
//   within the group's timeout. A peer that died or hung ends Step with RaydError naming the
//   stage, the micro-batch and the direction.
//
// The group is the pipeline group (a mesh's, or a whole world of S ranks): every rank of it
// calls Step with the same micro_batches and schedule, at the same points.

#include <rayd/train/ddp.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace rayd::train {

enum class PipelineSchedule {
  kGPipe,  // all forwards, then all backwards
  k1F1B,   // one forward, one backward: at most `stages` micro-batches alive per stage
};

// "gpipe" or "1f1b" (RaydError naming the choices otherwise).
PipelineSchedule ParsePipelineSchedule(const std::string& name);

struct PipelineOptions {
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  // The stage's data parallelism across mesh replicas (PrepareModel(stage).ddp()), if any:
  // every micro-batch's backward but the last accumulates without communicating (no_sync), and
  // the last one's averages the whole batch's gradients over the data group, as gradient
  // accumulation does. Step then needs no FinishBackward after it.
  DistributedDataParallel* data_parallel = nullptr;
};

// The loss of one micro-batch, from the last stage's output and the matching slice of target.
using PipelineLoss =
    std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

// Cuts `model` into `stages` consecutive parts with about equal parameter counts (each part at
// least one layer); the parts share the model's layers (modules, not copies). Throws RaydError
// when the model has fewer layers than stages.
std::vector<torch::nn::Sequential> SplitEvenly(const torch::nn::Sequential& model, int stages);

class PipelineStage {
 public:
  // This rank's stage (`group.rank()` of `group.world_size()` stages). `stage` stays alive
  // while this does. Throws RaydError for micro_batches < 1.
  PipelineStage(torch::nn::Sequential stage, ProcessGroup& group, PipelineOptions options = {});

  // One training step over a batch (see above): gradients accumulate into this stage's
  // parameters (zero them before, step the optimizer after). Returns the batch's mean loss,
  // on every stage (the last stage's, shared by an all-reduce over the group). The first stage
  // needs `input`, the last `target`.
  double Step(const torch::Tensor& input, const torch::Tensor& target, const PipelineLoss& loss_fn);

  // Forward only, without autograd (evaluation): the last stage returns the whole batch's
  // output (the micro-batches' concatenated), the others an undefined tensor.
  torch::Tensor Forward(const torch::Tensor& input);

  bool is_first() const { return rank_ == 0; }
  bool is_last() const { return rank_ == stages_ - 1; }
  int stage_index() const { return rank_; }
  int num_stages() const { return stages_; }
  torch::nn::Sequential& module() { return stage_; }
  // The most micro-batches whose activations this stage held at once in the last Step.
  int max_in_flight() const { return max_in_flight_; }
  // The share of the last Step's time this stage spent waiting to receive an activation or a
  // gradient: its pipeline bubble (ideally (stages - 1) / (micro_batches + stages - 1) when
  // every stage takes the same time), plus any wait for a slower neighbour.
  double idle_fraction() const { return idle_fraction_; }

 private:
  struct MicroBatch;
  struct Shapes;

  // Forward of micro-batch `i`: receives its input (or slices `input`), runs the stage, keeps
  // what backward needs, sends the output on.
  void ForwardOne(int i, const std::vector<torch::Tensor>& inputs, bool grad,
                  std::vector<MicroBatch>& batches, Shapes& shapes);
  // Backward of micro-batch `i`: the loss's (last stage) or the received gradient, then the
  // input's gradient sent back.
  void BackwardOne(int i, const std::vector<torch::Tensor>& targets, const PipelineLoss& loss_fn,
                   std::vector<MicroBatch>& batches, double& loss_sum);
  // Runs one micro-batch's backward, under the data group's no_sync for all but the step's
  // last (with options_.data_parallel).
  void Differentiate(const std::function<void()>& backward, int micro_batch);
  // `whole` split into micro_batches parts along dim 0; RaydError naming `what` when it has
  // fewer rows than that.
  std::vector<torch::Tensor> MicroBatches(const torch::Tensor& whole, const char* what) const;
  void Send(const torch::Tensor& tensor, int peer, int tag, const char* what, int micro_batch);
  torch::Tensor Receive(const std::vector<int64_t>& shape, c10::ScalarType dtype, int peer, int tag,
                        const char* what, int micro_batch);
  void SendShapes(const Shapes& shapes);
  Shapes ReceiveShapes();
  void WaitSends();

  torch::nn::Sequential stage_;
  ProcessGroup& group_;
  PipelineOptions options_;
  int rank_;
  int stages_;
  int max_in_flight_ = 0;
  int backwards_ = 0;        // micro-batches differentiated in this Step
  int64_t batch_rows_ = 0;   // the last stage's: this Step's target rows
  double idle_seconds_ = 0;  // spent in Receive during this Step
  double idle_fraction_ = 0;
  // Sends posted and not yet waited for, with the tensors they read.
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, torch::Tensor>> sends_;
};

}  // namespace rayd::train
