// Pipeline stages over c10d send/recv: the schedules, the shape header and the micro-batches'
// bookkeeping (see rayd/train/pipeline.h).

#include <rayd/api/errors.h>
#include <rayd/train/pipeline.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

namespace rayd::train {
namespace {

// Tags: one header per step, then one per micro-batch and direction.
constexpr int kHeaderTag = 0;
int ForwardTag(int micro_batch) { return 1 + 2 * micro_batch; }
int BackwardTag(int micro_batch) { return 2 + 2 * micro_batch; }

// Header: dtype, number of trailing dims, up to kMaxTrailing of them, then each micro-batch's
// rows.
constexpr int kMaxTrailing = 8;
constexpr int kHeaderFixed = 2 + kMaxTrailing;

int64_t ParameterCount(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace

// One step's view of the activations entering this stage (and, once known, leaving it).
struct PipelineStage::Shapes {
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> trailing;  // the dims after the batch's
  std::vector<int64_t> rows;      // each micro-batch's
  std::vector<int64_t> Of(int micro_batch) const {
    std::vector<int64_t> shape{rows[micro_batch]};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    return shape;
  }
};

struct PipelineStage::MicroBatch {
  torch::Tensor input;   // a leaf with requires_grad on stages after the first
  torch::Tensor output;  // this stage's, until its backward ran
};

PipelineSchedule ParsePipelineSchedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  throw RaydError("unknown pipeline schedule '" + name + "': expected gpipe or 1f1b");
}

std::vector<torch::nn::Sequential> SplitEvenly(const torch::nn::Sequential& model, int stages) {
  const int n = static_cast<int>(model->size());
  if (stages < 1 || n < stages) {
    throw RaydError("cannot split a model of " + std::to_string(n) + " layers into " +
                    std::to_string(stages) + " pipeline stages: each stage needs a layer");
  }
  std::vector<torch::nn::AnyModule> layers(model->begin(), model->end());
  std::vector<int64_t> cumulative;
  int64_t total = 0;
  for (const auto& layer : layers) {
    total += ParameterCount(*layer.ptr());
    cumulative.push_back(total);
  }
  auto params_of = [&](int i) { return cumulative[i] - (i > 0 ? cumulative[i - 1] : 0); };
  std::vector<torch::nn::Sequential> parts;
  int start = 0;
  for (int k = 0; k < stages; ++k) {
    int end = n;
    if (k < stages - 1) {
      const int last_end = n - (stages - k - 1);  // leave a layer for each later stage
      const double target = static_cast<double>(total) * (k + 1) / stages;
      end = start + 1;
      while (end < last_end && static_cast<double>(cumulative[end - 1]) < target) ++end;
      // Layers without parameters (activations) stay with the layer before them.
      while (end < last_end && params_of(end) == 0) ++end;
    }
    torch::nn::Sequential part;
    for (int i = start; i < end; ++i) part->push_back(layers[i]);
    parts.push_back(part);
    start = end;
  }
  return parts;
}

std::vector<torch::Tensor> PipelineStage::MicroBatches(const torch::Tensor& whole,
                                                       const char* what) const {
  const int m = options_.micro_batches;
  if (!whole.defined() || whole.size(0) < m) {
    throw RaydError(std::string("pipeline: the ") + what + " needs at least micro_batches (" +
                    std::to_string(m) + ") rows");
  }
  return whole.tensor_split(m, 0);  // exactly m parts, their rows differing by at most one
}

PipelineStage::PipelineStage(torch::nn::Sequential stage, ProcessGroup& group,
                             PipelineOptions options)
    : stage_(std::move(stage)),
      group_(group),
      options_(options),
      rank_(group.rank()),
      stages_(group.world_size()) {
  if (options_.micro_batches < 1) {
    throw RaydError("pipeline micro_batches must be at least 1, not " +
                    std::to_string(options_.micro_batches));
  }
}

void PipelineStage::Send(const torch::Tensor& tensor, int peer, int tag, const char* what,
                         int micro_batch) {
  std::vector<torch::Tensor> buffer{tensor.contiguous()};
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = group_.c10d().send(buffer, peer, tag);
  } catch (const std::exception& e) {
    throw RaydError("pipeline stage " + std::to_string(rank_) + ": sending micro-batch " +
                    std::to_string(micro_batch) + "'s " + what + " to stage " +
                    std::to_string(peer) + ": " + e.what());
  }
  sends_.emplace_back(std::move(work), std::move(buffer[0]));
}

torch::Tensor PipelineStage::Receive(const std::vector<int64_t>& shape, c10::ScalarType dtype,
                                     int peer, int tag, const char* what, int micro_batch) {
  std::vector<torch::Tensor> buffer{torch::empty(shape, torch::TensorOptions().dtype(dtype))};
  Status status;
  const auto began = std::chrono::steady_clock::now();
  try {
    status = WaitWork(*group_.c10d().recv(buffer, peer, tag), group_.timeout(), "receiving");
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  idle_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (!status.ok()) {  // the message is made only for a failure: receives are per micro-batch
    throw RaydError("pipeline stage " + std::to_string(rank_) + ": receiving micro-batch " +
                    std::to_string(micro_batch) + "'s " + what + " from stage " +
                    std::to_string(peer) + ": " + status.message());
  }
  return buffer[0];
}

void PipelineStage::SendShapes(const Shapes& shapes) {
  if (shapes.trailing.size() > static_cast<size_t>(kMaxTrailing)) {
    throw RaydError("pipeline stage " + std::to_string(rank_) + ": an activation of " +
                    std::to_string(shapes.trailing.size() + 1) + " dimensions (at most " +
                    std::to_string(kMaxTrailing + 1) + ")");
  }
  std::vector<int64_t> header(kHeaderFixed + options_.micro_batches, 0);
  header[0] = static_cast<int64_t>(shapes.dtype);
  header[1] = static_cast<int64_t>(shapes.trailing.size());
  std::copy(shapes.trailing.begin(), shapes.trailing.end(), header.begin() + 2);
  std::copy(shapes.rows.begin(), shapes.rows.end(), header.begin() + kHeaderFixed);
  Send(torch::tensor(header, torch::kLong), rank_ + 1, kHeaderTag, "shapes", 0);
}

PipelineStage::Shapes PipelineStage::ReceiveShapes() {
  torch::Tensor header = Receive({kHeaderFixed + options_.micro_batches}, c10::kLong, rank_ - 1,
                                 kHeaderTag, "shapes", 0);
  const int64_t* h = header.data_ptr<int64_t>();
  Shapes shapes;
  shapes.dtype = static_cast<c10::ScalarType>(h[0]);
  shapes.trailing.assign(h + 2, h + 2 + h[1]);
  shapes.rows.assign(h + kHeaderFixed, h + kHeaderFixed + options_.micro_batches);
  return shapes;
}

void PipelineStage::WaitSends() {
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, torch::Tensor>> sends;
  sends.swap(sends_);
  for (auto& [work, tensor] : sends) {
    const Status sent =
        WaitWork(*work, group_.timeout(), "pipeline stage " + std::to_string(rank_) + ": sending");
    if (!sent.ok()) throw RaydError(sent.message());
  }
}

void PipelineStage::ForwardOne(int i, const std::vector<torch::Tensor>& inputs, bool grad,
                               std::vector<MicroBatch>& batches, Shapes& shapes) {
  MicroBatch& mb = batches[i];
  if (is_first()) {
    mb.input = inputs[i];
  } else {
    if (i == 0) shapes = ReceiveShapes();
    mb.input = Receive(shapes.Of(i), shapes.dtype, rank_ - 1, ForwardTag(i), "activation", i);
    if (grad) mb.input.requires_grad_(true);
  }
  mb.output = stage_->forward(mb.input);
  if (!is_last()) {
    if (i == 0) {
      Shapes out;
      out.dtype = mb.output.scalar_type();
      out.trailing.assign(mb.output.sizes().begin() + 1, mb.output.sizes().end());
      out.rows = is_first() ? std::vector<int64_t>{} : shapes.rows;
      if (is_first()) {
        for (const auto& input : inputs) out.rows.push_back(input.size(0));
      }
      SendShapes(out);
    }
    Send(mb.output.detach(), rank_ + 1, ForwardTag(i), "activation", i);
  }
}

void PipelineStage::Differentiate(const std::function<void()>& backward, int micro_batch) {
  DistributedDataParallel* ddp = options_.data_parallel;
  if (ddp == nullptr) return backward();
  Status finished;
  if (++backwards_ < options_.micro_batches) {
    auto no_sync = ddp->NoSync();
    backward();
    finished = ddp->FinishBackward();
  } else {
    backward();
    finished = ddp->FinishBackward();  // averages the whole batch's gradients
  }
  if (!finished.ok()) {
    throw RaydError("pipeline stage " + std::to_string(rank_) + ", micro-batch " +
                    std::to_string(micro_batch) +
                    ": averaging gradients over the data group: " + finished.message());
  }
}

void PipelineStage::BackwardOne(int i, const std::vector<torch::Tensor>& targets,
                                const PipelineLoss& loss_fn, std::vector<MicroBatch>& batches,
                                double& loss_sum) {
  MicroBatch& mb = batches[i];
  if (is_last()) {
    // A mean loss per micro-batch, weighted by its share of the batch: the batch's mean.
    const double weight =
        static_cast<double>(targets[i].size(0)) / static_cast<double>(batch_rows_);
    torch::Tensor loss = loss_fn(mb.output, targets[i]);
    loss_sum += loss.item<double>() * weight;
    Differentiate([&] { (loss * weight).backward(); }, i);
  } else {
    torch::Tensor grad = Receive(mb.output.sizes().vec(), mb.output.scalar_type(), rank_ + 1,
                                 BackwardTag(i), "gradient", i);
    Differentiate([&] { mb.output.backward(grad); }, i);
  }
  if (!is_first()) Send(mb.input.grad(), rank_ - 1, BackwardTag(i), "gradient", i);
  mb = MicroBatch{};  // its activations go now
}

double PipelineStage::Step(const torch::Tensor& input, const torch::Tensor& target,
                           const PipelineLoss& loss_fn) {
  const int m = options_.micro_batches;
  std::vector<torch::Tensor> inputs, targets;
  if (is_first()) inputs = MicroBatches(input, "first stage's batch");
  if (is_last()) {
    targets = MicroBatches(target, "last stage's target");
    batch_rows_ = target.size(0);
  }
  std::vector<MicroBatch> batches(m);
  Shapes shapes;
  double loss_sum = 0;
  backwards_ = 0;
  idle_seconds_ = 0;
  const auto began = std::chrono::steady_clock::now();
  int in_flight = 0;
  max_in_flight_ = 0;
  auto forward = [&](int i) {
    ForwardOne(i, inputs, true, batches, shapes);
    max_in_flight_ = std::max(max_in_flight_, ++in_flight);
  };
  auto backward = [&](int i) {
    BackwardOne(i, targets, loss_fn, batches, loss_sum);
    --in_flight;
  };
  if (options_.schedule == PipelineSchedule::kGPipe) {
    for (int i = 0; i < m; ++i) forward(i);
    for (int i = 0; i < m; ++i) backward(i);
  } else {
    const int warmup = std::min(stages_ - rank_ - 1, m);
    int next_forward = 0, next_backward = 0;
    while (next_forward < warmup) forward(next_forward++);
    while (next_forward < m) {
      forward(next_forward++);
      backward(next_backward++);
    }
    while (next_backward < m) backward(next_backward++);
  }
  WaitSends();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  idle_fraction_ = seconds > 0 ? idle_seconds_ / seconds : 0;
  if (stages_ == 1) return loss_sum;
  // Every stage learns the loss (the mesh's rank 0, which reports, is on the first).
  torch::Tensor shared = torch::tensor({is_last() ? loss_sum : 0.0}, torch::kFloat64);
  if (Status status = AllReduce(group_, shared,
                                "pipeline stage " + std::to_string(rank_) + ": sharing the loss");
      !status.ok()) {
    throw RaydError(status.message());
  }
  return shared.item<double>();
}

torch::Tensor PipelineStage::Forward(const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  const int m = options_.micro_batches;
  std::vector<torch::Tensor> inputs;
  if (is_first()) inputs = MicroBatches(input, "first stage's batch");
  std::vector<MicroBatch> batches(m);
  Shapes shapes;
  std::vector<torch::Tensor> outputs;
  for (int i = 0; i < m; ++i) {
    ForwardOne(i, inputs, false, batches, shapes);
    if (is_last()) outputs.push_back(batches[i].output);
    batches[i] = MicroBatch{};
  }
  WaitSends();
  return is_last() ? torch::cat(outputs, 0) : torch::Tensor();
}

}  // namespace rayd::train
