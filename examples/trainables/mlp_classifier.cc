// mlp_classifier: a data-parallel MLP classifier on a dataset this file generates (no
// downloads), the train loop the README's sweep tunes.
//
// The data: 10 classes in 784 dimensions, each a fixed random prototype; a sample is its class's
// prototype scaled by `signal` plus unit Gaussian noise, so the classes overlap and the loss
// falls over several epochs rather than at once. Each epoch draws fresh training samples (an
// endless stream, so the model cannot memorise them and the validation loss keeps falling); every
// rank draws the same ones from `data_seed` and the epoch, and trains on its DistributedSampler
// shard.
//
// Config keys (all optional): lr (0.02), momentum (0.9), hidden (128), layers (2: hidden layers,
// `hidden` wide but the last, hidden/2: 784-hidden-hidden/2-10), batch_size per worker (64),
// epochs (10), train_size (8192 per epoch), val_size (1024), max_grad_norm (0: no clipping; else
// the gradients are clipped to this norm of the whole model's before each step; not with fp16),
// signal (0.08), data_seed (0), precision (fp32 | bf16 | fp16: the forward under autocast;
// fp16 needs a GPU and scales the loss dynamically), accumulation_steps (1: each step's
// gradients are summed over that many micro-batches of batch_size, communicating only on the
// last), zero_stage (0 | 1 | 2 | 3: ZeRO stage 1 splits the optimizer state among the ranks,
// stage 2 the gradients too, stage 3 the parameters too: each Linear a sharded unit),
// micro_batches (1) and schedule (1f1b | gpipe) for a pipeline mesh (below). One epoch
// is one training_iteration: rank 0 reports the validation loss and accuracy and the mean
// training loss, the parameter, gradient and optimizer-state bytes it holds between steps
// (param_bytes, grad_bytes, optimizer_state_bytes), with a checkpoint (model.pt, at stage 3
// gathered unit by unit; the epoch; every rank's shard of the optimizer state), and a resumed
// run continues after its checkpoint's epoch, on any number of ranks, at any stage.
//
// Under a mesh (scaling.mesh: {data, pipeline, tensor}), the model is cut into `pipeline`
// stages by parameter count (rayd::train::SplitEvenly), each stage's Linear layers split among
// its tensor group in Megatron's pairs (TensorParallelSequential), batches flow through the
// stages as `micro_batches` micro-batches under `schedule` (rayd::train::PipelineStage), and
// each stage is data-parallel over its data group (batch_size per data replica, the sampler's
// shards by data rank). With the same seed and global batch the losses equal the one-rank run's
// up to summation order. The last stage's loss and metrics are shared over the pipeline group,
// so the mesh's rank 0 (first stage) reports them. A checkpoint holds each part's model and
// optimizer state (model_p<P>_t<T>.pt, optimizer_p<P>_t<T>/) and the mesh; it resumes on the
// same pipeline and tensor sizes, on any data size. Not with a mesh: zero_stage 3, fp16,
// max_grad_norm above zero_stage 0, accumulation_steps with a pipeline (micro_batches
// accumulate instead).
//
// With use_gpu the rank trains on its GPU (GetContext().device): the data is drawn there (so
// its samples differ from a CPU run's: each device has its own generator), the loss is summed
// there and read once per epoch. Checkpoints hold CPU tensors, so a run may resume on either.

#include <rayd/train/mixed_precision.h>
#include <rayd/train/pipeline.h>
#include <rayd/train/sampler.h>
#include <rayd/train/session.h>
#include <rayd/train/tensor_parallel.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

namespace fs = std::filesystem;
namespace rt = rayd::train;

constexpr int64_t kInputs = 784;
constexpr int64_t kClasses = 10;

struct Dataset {
  torch::Tensor x;  // [n, 784]
  torch::Tensor y;  // [n] int64
};

// Samples of the generated classification task, drawn on `device`; `offset` keeps train and
// validation draws apart.
Dataset Generate(int64_t n, double signal, int64_t seed, int64_t offset, torch::Device device) {
  const auto on = torch::TensorOptions().device(device);
  torch::manual_seed(seed);
  torch::Tensor prototypes = torch::randn({kClasses, kInputs}, on);
  torch::manual_seed(seed * 1'000'003 + offset);
  torch::Tensor y = torch::randint(kClasses, {n}, on.dtype(torch::kInt64));
  torch::Tensor x = prototypes.index_select(0, y) * signal + torch::randn({n, kInputs}, on);
  return {x, y};
}

// 784, then `layers` hidden layers (`hidden` wide but the last, hidden/2), then 10.
torch::nn::Sequential MakeModel(int64_t hidden, int layers) {
  torch::nn::Sequential model;
  int64_t width = kInputs;
  for (int layer = 0; layer < layers; ++layer) {
    const int64_t next = layer + 1 < layers ? hidden : hidden / 2;
    model->push_back(torch::nn::Linear(width, next));
    model->push_back(torch::nn::ReLU());
    width = next;
  }
  model->push_back(torch::nn::Linear(width, kClasses));
  return model;
}

// What a run under a mesh needs of the config (MlpClassifier reads and checks it).
struct MeshRun {
  double lr, momentum;
  int64_t hidden;
  int layers;
  int64_t batch_size;
  int epochs;
  int64_t train_size;
  double signal;
  int64_t data_seed;
  int zero_stage;
  rt::Precision precision;
  int micro_batches;
  rt::PipelineSchedule schedule;
  double max_grad_norm;
};

std::string PartName(const rt::MeshCoordinates& mesh) {
  return "p" + std::to_string(mesh.pipeline_rank) + "_t" + std::to_string(mesh.tensor_rank);
}

// Sums `value` over `group` (each of its ranks gives its own; the others give zeros).
double SumOver(rt::ProcessGroup& group, double value, const char* what) {
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  if (rayd::Status s = rt::AllReduce(group, t, what); !s.ok()) {
    throw std::runtime_error(std::string(what) + ": " + s.message());
  }
  return t.item<double>();
}

// Training on a mesh: this rank's pipeline stage, its Linear layers split over the tensor
// group, data-parallel over the data group (see the file's comment).
void TrainOnMesh(const MeshRun& run, const Dataset& val, torch::Device device) {
  const rt::TrainContext& context = rt::GetContext();
  const rt::MeshCoordinates& mesh = context.mesh;
  if (run.zero_stage == 3) {
    throw std::invalid_argument(
        "config.zero_stage: 3 does not run under a pipeline or tensor mesh yet; use 0 to 2");
  }
  for (int64_t width : {run.hidden, run.layers > 1 ? run.hidden / 2 : run.hidden}) {
    if (width % mesh.tensor != 0) {
      throw std::invalid_argument("config.hidden: " + std::to_string(run.hidden) +
                                  " does not split into " + std::to_string(mesh.tensor) +
                                  " tensor-parallel parts (each hidden width, " +
                                  std::to_string(width) + ", must divide by it)");
    }
  }
  if (run.layers * 2 + 1 < mesh.pipeline) {
    throw std::invalid_argument("config.layers: " + std::to_string(run.layers) +
                                " hidden layers are too few for " + std::to_string(mesh.pipeline) +
                                " pipeline stages");
  }
  rt::ProcessGroup& pipeline_group = rt::GetGroup(rt::MeshAxis::kPipeline);
  rt::ProcessGroup& tensor_group = rt::GetGroup(rt::MeshAxis::kTensor);

  // Every rank builds the whole model alike, then keeps its part of it.
  torch::manual_seed(42);
  torch::nn::Sequential whole = MakeModel(run.hidden, run.layers);
  torch::nn::Sequential stage = rt::TensorParallelSequential(
      rt::SplitEvenly(whole, mesh.pipeline)[mesh.pipeline_rank], tensor_group);
  int start_epoch = 0;
  const std::optional<std::string> checkpoint = rt::GetCheckpoint();
  if (checkpoint) {
    int pipeline = 0, tensor = 0;
    std::ifstream(*checkpoint + "/mesh") >> pipeline >> tensor;
    if (pipeline != mesh.pipeline || tensor != mesh.tensor) {
      throw std::invalid_argument("scaling.mesh: the checkpoint was taken with pipeline " +
                                  std::to_string(pipeline) + " and tensor " +
                                  std::to_string(tensor) +
                                  " (0: without a mesh); it resumes only on "
                                  "the same pipeline and tensor sizes (the data size may differ)");
    }
    torch::load(stage, *checkpoint + "/model_" + PartName(mesh) + ".pt",
                torch::Device(torch::kCPU));
    std::ifstream(*checkpoint + "/epoch") >> start_epoch;
    ++start_epoch;
  }
  rt::PreparedModel& ddp = rt::PrepareModel(*stage);  // over the data group, to `device`
  torch::optim::SGD sgd(stage->parameters(),
                        torch::optim::SGDOptions(run.lr).momentum(run.momentum));
  rt::PreparedOptimizer& optimizer = rt::PrepareOptimizer(sgd, {.zero_stage = run.zero_stage});
  if (checkpoint) optimizer.LoadState(*checkpoint + "/optimizer_" + PartName(mesh));
  rt::PipelineStage pipeline(
      stage, pipeline_group,
      {.micro_batches = run.micro_batches, .schedule = run.schedule, .data_parallel = &ddp.ddp()});
  rt::DistributedSampler sampler(run.train_size, mesh.data, mesh.data_rank);
  auto loss_fn = [](const torch::Tensor& output, const torch::Tensor& target) {
    return torch::nn::functional::cross_entropy(output.to(torch::kFloat), target);
  };

  for (int epoch = start_epoch; epoch < run.epochs; ++epoch) {
    Dataset train = Generate(run.train_size, run.signal, run.data_seed, epoch + 1, device);
    sampler.SetEpoch(epoch);
    std::vector<int64_t> indices = sampler.Indices();
    torch::Tensor order = torch::tensor(indices, torch::kInt64).to(device);
    double train_loss = 0;
    int64_t steps = 0;
    stage->train();
    const auto shard = static_cast<int64_t>(indices.size());
    for (int64_t begin = 0; begin < shard; begin += run.batch_size) {
      torch::Tensor batch = order.slice(0, begin, begin + run.batch_size);
      optimizer.ZeroGrad();
      {
        rt::AutocastGuard autocast(run.precision, device);
        train_loss +=
            pipeline.Step(train.x.index_select(0, batch), train.y.index_select(0, batch), loss_fn);
      }
      // By the whole model's norm, over every stage and tensor shard.
      if (run.max_grad_norm > 0) rt::ClipGradNormOverMesh(*stage, run.max_grad_norm);
      optimizer.Step();
      ++steps;
    }
    stage->eval();
    double val_loss = 0, accuracy = 0;
    {
      torch::NoGradGuard no_grad;
      torch::Tensor logits = pipeline.Forward(val.x);
      if (pipeline.is_last()) {
        val_loss = torch::nn::functional::cross_entropy(logits, val.y).item<double>();
        accuracy = logits.argmax(1).eq(val.y).to(torch::kFloat64).mean().item<double>();
      }
    }
    val_loss = SumOver(pipeline_group, val_loss, "sharing the validation loss");
    accuracy = SumOver(pipeline_group, accuracy, "sharing the accuracy");
    int64_t param_bytes = 0;
    for (const torch::Tensor& param : stage->parameters()) {
      param_bytes += param.numel() * static_cast<int64_t>(param.element_size());
    }
    std::map<std::string, double> metrics = {
        {"loss", val_loss},
        {"accuracy", accuracy},
        // The mean over every data replica's part of each global batch.
        {"train_loss",
         SumOver(rt::GetGroup(rt::MeshAxis::kData), train_loss, "averaging the training loss") /
             mesh.data / std::max<int64_t>(steps, 1)},
        {"epoch", epoch},
        {"param_bytes", static_cast<double>(param_bytes)},
        {"optimizer_state_bytes", static_cast<double>(optimizer.state_bytes())},
        {"grad_bytes", static_cast<double>(ddp.ddp().gradient_bytes())}};
    // Each part's first data replica saves the part's model; every rank its optimizer shard,
    // in the part's folder; the mesh's rank 0 the epoch and the mesh.
    const std::string dir = rt::NewCheckpointDir();
    if (mesh.data_rank == 0) {
      torch::save(stage, dir + "/model_" + PartName(mesh) + ".pt");
    }
    if (context.world_rank == 0) {
      std::ofstream(dir + "/epoch") << epoch;
      std::ofstream(dir + "/mesh") << mesh.pipeline << " " << mesh.tensor;
    }
    fs::create_directories(dir + "/optimizer_" + PartName(mesh));
    optimizer.SaveState(dir + "/optimizer_" + PartName(mesh));
    rt::Report(metrics, dir);
  }
}

void MlpClassifier(const nlohmann::json& config) {
  torch::set_num_threads(1);  // one BLAS thread per rank: ranks share the node's cores
  const double lr = config.value("lr", 0.02);
  const double momentum = config.value("momentum", 0.9);
  const int64_t hidden = std::max<int64_t>(config.value("hidden", 128), 2);
  const int layers = config.value("layers", 2);
  if (layers < 1) {
    throw std::invalid_argument("config.layers: expected at least 1, got " +
                                std::to_string(layers));
  }
  const double max_grad_norm = config.value("max_grad_norm", 0.0);
  if (max_grad_norm < 0) {
    throw std::invalid_argument("config.max_grad_norm: expected 0 (no clipping) or more, got " +
                                std::to_string(max_grad_norm));
  }
  const int64_t batch_size = std::max<int64_t>(config.value("batch_size", 64), 1);
  const int epochs = config.value("epochs", 10);
  const int64_t train_size = config.value("train_size", 8192);
  const int64_t val_size = config.value("val_size", 1024);
  const double signal = config.value("signal", 0.08);
  const int64_t data_seed = config.value("data_seed", 0);
  const int64_t accumulation = config.value("accumulation_steps", 1);
  if (accumulation < 1) {
    throw std::invalid_argument("config.accumulation_steps: expected at least 1, got " +
                                std::to_string(accumulation));
  }
  const int zero_stage = config.value("zero_stage", 0);
  if (zero_stage < 0 || zero_stage > 3) {
    throw std::invalid_argument("config.zero_stage: expected 0, 1, 2 or 3, got " +
                                std::to_string(zero_stage));
  }
  const std::string precision_name = config.value("precision", "fp32");
  const std::optional<rt::Precision> precision = rt::ParsePrecision(precision_name);
  if (!precision) {
    throw std::invalid_argument("config.precision: expected fp32, bf16 or fp16, got '" +
                                precision_name + "'");
  }

  const rt::TrainContext& context = rt::GetContext();
  const torch::Device device(context.device);
  if (*precision == rt::Precision::kFp16 && !device.is_cuda()) {
    throw std::invalid_argument(
        "config.precision: fp16 needs a GPU (scaling.use_gpu: true); on CPUs use bf16");
  }
  if (*precision == rt::Precision::kFp16 && max_grad_norm > 0) {
    throw std::invalid_argument(
        "config.max_grad_norm: clipping is not done with fp16's scaled gradients; use bf16");
  }
  rt::LossScaler scaler({.enabled = *precision == rt::Precision::kFp16});
  Dataset val = Generate(val_size, signal, data_seed, 0, device);
  const int micro_batches = config.value("micro_batches", 1);
  if (micro_batches < 1) {
    throw std::invalid_argument("config.micro_batches: expected at least 1, got " +
                                std::to_string(micro_batches));
  }
  const std::string schedule_name = config.value("schedule", "1f1b");
  if (schedule_name != "1f1b" && schedule_name != "gpipe") {
    throw std::invalid_argument("config.schedule: expected 1f1b or gpipe, got '" + schedule_name +
                                "'");
  }
  if (context.mesh.pipeline > 1 || context.mesh.tensor > 1) {
    if (*precision == rt::Precision::kFp16) {
      throw std::invalid_argument("config.precision: fp16 not yet under a pipeline or tensor mesh");
    }
    if (max_grad_norm > 0 && zero_stage > 0) {
      throw std::invalid_argument(
          "config.max_grad_norm: under a pipeline or tensor mesh, clipping needs zero_stage 0");
    }
    if (accumulation > 1 && context.mesh.pipeline > 1) {
      throw std::invalid_argument(
          "config.accumulation_steps: under a pipeline, micro_batches accumulate instead");
    }
    TrainOnMesh({.lr = lr,
                 .momentum = momentum,
                 .hidden = hidden,
                 .layers = layers,
                 .batch_size = batch_size * accumulation,
                 .epochs = epochs,
                 .train_size = train_size,
                 .signal = signal,
                 .data_seed = data_seed,
                 .zero_stage = zero_stage,
                 .precision = *precision,
                 // Accumulation without a pipeline: as many more micro-batches, of a batch
                 // that many times larger (the same mean loss per step).
                 .micro_batches = micro_batches * static_cast<int>(accumulation),
                 .schedule = rt::ParsePipelineSchedule(schedule_name),
                 .max_grad_norm = max_grad_norm},
                val, device);
    return;
  }

  // Rank 0's initial parameters are broadcast anyway; the seed makes runs repeatable.
  torch::manual_seed(42);
  torch::nn::Sequential model = MakeModel(hidden, layers);
  int start_epoch = 0;
  if (std::optional<std::string> checkpoint = rt::GetCheckpoint()) {
    torch::load(model, *checkpoint + "/model.pt", torch::Device(torch::kCPU));
    std::ifstream(*checkpoint + "/epoch") >> start_epoch;
    ++start_epoch;
  }
  // Stage 3: every Linear a sharded unit (each rank keeps 1/N of it between steps); the other
  // stages replicate the model, whose gradients PrepareModel all-reduces.
  std::vector<rt::ShardedUnit> units;
  if (zero_stage == 3) model = rt::ShardLinearLayers(model, rt::ShardUnit, units);
  rt::PreparedModel* ddp = units.empty() ? &rt::PrepareModel(*model) : nullptr;  // to `device`
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
  rt::PreparedOptimizer& optimizer = rt::PrepareOptimizer(sgd, {.zero_stage = zero_stage});
  // The momentum of the run it resumes, taken on any number of ranks at any stage (checkpoints
  // from before optimizer state was saved have none: the momentum starts at zero).
  if (std::optional<std::string> checkpoint = rt::GetCheckpoint();
      checkpoint && rt::ShardedOptimizer::HasSavedState(*checkpoint)) {
    optimizer.LoadState(*checkpoint);
  }
  rt::DistributedSampler sampler(train_size, context.world_size, context.world_rank);

  for (int epoch = start_epoch; epoch < epochs; ++epoch) {
    Dataset train = Generate(train_size, signal, data_seed, epoch + 1, device);
    sampler.SetEpoch(epoch);
    std::vector<int64_t> indices = sampler.Indices();
    torch::Tensor order = torch::tensor(indices, torch::kInt64).to(device);
    torch::Tensor train_loss = torch::zeros({}, torch::TensorOptions().device(device));
    int64_t steps = 0;
    model->train();
    const auto shard = static_cast<int64_t>(indices.size());
    for (int64_t begin = 0; begin < shard; begin += batch_size * accumulation) {
      optimizer.ZeroGrad();
      // The step's micro-batches: all but the last only accumulate into .grad (no all-reduce).
      const int64_t micro = std::min(accumulation, (shard - begin + batch_size - 1) / batch_size);
      for (int64_t m = 0; m < micro; ++m) {
        torch::Tensor batch = order.slice(0, begin + m * batch_size, begin + (m + 1) * batch_size);
        torch::Tensor loss;
        {
          rt::AutocastGuard autocast(*precision, device);
          loss = torch::nn::functional::cross_entropy(
              model->forward(train.x.index_select(0, batch)).to(torch::kFloat),
              train.y.index_select(0, batch));
        }
        torch::Tensor scaled = scaler.Scale(micro > 1 ? loss / static_cast<double>(micro) : loss);
        if (ddp == nullptr) {
          scaled.backward();  // each unit reduces its gradients to their owners as it goes
        } else if (m + 1 < micro) {
          auto no_sync = ddp->ddp().NoSync();
          scaled.backward();
          ddp->FinishBackward();
        } else {
          scaled.backward();
          ddp->FinishBackward();
        }
        train_loss += loss.detach();
        ++steps;
      }
      // By the whole model's norm, over every rank's shards at stages 2 and 3.
      if (max_grad_norm > 0) optimizer.ClipGradNorm(max_grad_norm);
      optimizer.Step(scaler);
      scaler.Update();
    }
    model->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = model->forward(val.x);
    const double val_loss = torch::nn::functional::cross_entropy(logits, val.y).item<double>();
    const double accuracy = logits.argmax(1).eq(val.y).to(torch::kFloat64).mean().item<double>();
    int64_t param_bytes = 0, grad_bytes = ddp != nullptr ? ddp->ddp().gradient_bytes() : 0;
    for (const rt::ShardedUnit& unit : units) {
      param_bytes += unit->param_bytes();
      const torch::Tensor& grad = unit->shard().grad();
      if (grad.defined()) grad_bytes += grad.numel() * static_cast<int64_t>(grad.element_size());
    }
    if (units.empty()) {
      for (const torch::Tensor& param : model->parameters()) {
        param_bytes += param.numel() * static_cast<int64_t>(param.element_size());
      }
    }
    std::map<std::string, double> metrics = {
        {"loss", val_loss},
        {"accuracy", accuracy},
        {"train_loss", train_loss.item<double>() / std::max<int64_t>(steps, 1)},
        {"epoch", epoch},
        {"param_bytes", static_cast<double>(param_bytes)},
        {"optimizer_state_bytes", static_cast<double>(optimizer.state_bytes())},
        {"grad_bytes", static_cast<double>(grad_bytes)}};
    // Every rank checkpoints: rank 0 the model and the epoch, each rank its shard of the
    // optimizer state, written in the background while the next epoch trains; the driver keeps
    // the checkpoint once every rank's files are in (only rank 0's metrics are kept).
    const std::string checkpoint = rt::NewCheckpointDir();
    if (!units.empty()) {
      // The whole model on rank 0, gathered one unit at a time (every rank takes part): rank 0
      // holds the model once, plus one unit's range while it is copied.
      const bool keeper = context.world_rank == 0;
      torch::nn::Sequential whole = keeper ? MakeModel(hidden, layers) : torch::nn::Sequential();
      std::vector<torch::Tensor> to = whole->parameters();
      size_t next = 0;
      for (rt::ShardedUnit& unit : units) {
        rayd::Result<torch::Tensor> full = unit->GatherFull();
        if (!full.ok()) throw std::runtime_error("gathering the model: " + full.status().message());
        if (!keeper) continue;
        torch::Tensor flat = full->to(torch::kCPU);
        for (int64_t offset = 0; offset < flat.numel(); offset += to[next++].numel()) {
          to[next].copy_(flat.narrow(0, offset, to[next].numel()).view(to[next].sizes()));
        }
      }
      if (keeper) {
        torch::save(whole, checkpoint + "/model.pt");
        std::ofstream(checkpoint + "/epoch") << epoch;
      }
    } else if (context.world_rank == 0) {
      if (device.is_cpu()) {
        torch::save(model, checkpoint + "/model.pt");
      } else {
        torch::nn::Sequential on_cpu = MakeModel(hidden, layers);  // a copy any device can load
        auto from = model->parameters();
        auto to = on_cpu->parameters();
        for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
        torch::save(on_cpu, checkpoint + "/model.pt");
      }
      std::ofstream(checkpoint + "/epoch") << epoch;
    }
    optimizer.SaveState(checkpoint);
    rt::Report(metrics, checkpoint);
  }
}

}  // namespace

namespace {
// Registered under the name tune.yaml files use.
const bool registered_mlp_classifier =
    rayd::train::RegisterTrainLoop("mlp_classifier", MlpClassifier);
}  // namespace
