// Batch inference with a pool of actors (rayd/train/batch_inference.h): the actor class, and the
// driver that feeds it batches in order and writes what comes back.

#include <rayd/api.h>
#include <rayd/data/shard.h>
#include <rayd/train/batch_inference.h>
#include <rayd/train/torch_data.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "compute_threads.h"
#include "cpu_allocator.h"

namespace rayd::train::internal {

using rayd::data::Block;
using rayd::data::DType;

namespace {

// A block sent or returned as a std::vector<uint8_t> object (data/FORMAT.md), viewed where the
// object store holds it; copied first when its bytes are not 64-byte aligned (a small object
// arrives as a private copy), as Block::View's columns of numbers want them.
Result<Block> ViewBlock(const ObjectRef<std::vector<uint8_t>>& ref) {
  auto view = std::make_shared<ArrayView<uint8_t>>(rayd::GetView(ref));
  if (reinterpret_cast<uintptr_t>(view->data()) % 64 == 0) {
    return Block::View(view, view->data(), view->size());
  }
  auto copy = std::make_shared<std::vector<uint8_t>>(view->size() + 64);
  void* at = copy->data();
  size_t space = copy->size();
  std::align(64, view->size(), at, space);
  std::memcpy(at, view->data(), view->size());
  return Block::View(copy, static_cast<const uint8_t*>(at), view->size());
}

}  // namespace

// One actor of RunBatchInference's pool: a TorchScript module loaded once, in the constructor,
// then applied to one serialized block per call. Lives in its own worker process; calls run one
// at a time.
class InferenceActor {
 public:
  // `options_json`: {input_column, output_column, scale, input_shape, threads}. Throws RaydError
  // naming the model path when the module cannot be loaded (the actor then dies, and the
  // driver's first call says why).
  static InferenceActor* FactoryCreate(std::string model_path, std::string options_json) {
    return new InferenceActor(std::move(model_path), nlohmann::json::parse(options_json));
  }

  // Answers once the model is loaded: the driver's clock starts when every actor has.
  int64_t Ready() { return 0; }

  // The block at `input` (data/FORMAT.md) scored: its other columns, then output_column_ (int64
  // argmax) and "score" (float32 max softmax), serialized. Throws RaydError naming the model.
  std::vector<uint8_t> Predict(rayd::ObjectRef<std::vector<uint8_t>> input);

 private:
  InferenceActor(std::string model_path, const nlohmann::json& options)
      : model_path_(std::move(model_path)),
        input_column_(options.at("input_column").get<std::string>()),
        output_column_(options.at("output_column").get<std::string>()),
        scale_(options.at("scale").get<double>()),
        input_shape_(options.at("input_shape").get<std::vector<int64_t>>()) {
    internal::SetComputeThreads(options.at("threads").get<int>());
    internal::UseCachingCpuAllocator();
    try {
      module_ = torch::jit::load(model_path_, torch::kCPU);
    } catch (const c10::Error& e) {
      throw RaydError("cannot load the TorchScript model '" + model_path_ +
                      "': " + FirstLine(e.what_without_backtrace()));
    }
    module_.eval();
  }

  static std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }
  static std::string LastLine(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
  }
  std::string FailedOn(const std::vector<int64_t>& sizes, const std::string& why) const;

  torch::Tensor Forward(const Block& block);

  const std::string model_path_;
  const std::string input_column_;
  const std::string output_column_;
  const double scale_;
  const std::vector<int64_t> input_shape_;
  torch::jit::script::Module module_;
};

torch::Tensor InferenceActor::Forward(const Block& block) {
  const rayd::data::Column* column = block.Find(input_column_);
  if (column == nullptr || column->is_bytes()) {
    throw RaydError("model '" + model_path_ + "': the batch has no fixed column '" + input_column_ +
                    "' (it has: " + rayd::data::DescribeSchema(block.schema()) + ")");
  }
  const int64_t rows = block.num_rows();
  std::vector<int64_t> sizes{rows};
  sizes.insert(sizes.end(), input_shape_.begin(), input_shape_.end());
  torch::Tensor logits;
  // c10::Error for a bad reshape, torch::jit::JITException (a std::runtime_error, whose last
  // line says what failed) from inside the module.
  try {
    Result<Block> only = block.Select({input_column_});
    torch::Tensor x = ToTensors(*only, torch::kCPU).at(input_column_);
    x = x.to(torch::kFloat32).mul_(scale_).reshape(sizes);
    torch::NoGradGuard no_grad;
    logits = module_.forward({x}).toTensor();
  } catch (const c10::Error& e) {
    throw RaydError(FailedOn(sizes, LastLine(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    throw RaydError(FailedOn(sizes, LastLine(e.what())));
  }
  if (logits.dim() != 2 || logits.size(0) != rows) {
    throw RaydError("model '" + model_path_ + "' returned a tensor of shape " +
                    c10::str(logits.sizes()) + " for " + std::to_string(rows) +
                    " rows; batch inference needs [rows, classes]");
  }
  return logits.to(torch::kFloat32);
}

std::string InferenceActor::FailedOn(const std::vector<int64_t>& sizes,
                                     const std::string& why) const {
  return "model '" + model_path_ + "' failed on a batch of '" + input_column_ + "' as " +
         c10::str(c10::IntArrayRef(sizes)) + ": " + why;
}

std::vector<uint8_t> InferenceActor::Predict(rayd::ObjectRef<std::vector<uint8_t>> input) {
  Result<Block> block = ViewBlock(input);
  if (!block.ok()) throw RaydError("model '" + model_path_ + "': " + block.status().message());
  auto owner = std::make_shared<const Block>(*block);  // keeps the input's memory alive
  const auto [score, prediction] = torch::softmax(Forward(*block), 1).max(1);
  const int64_t rows = block->num_rows();
  rayd::data::BlockBuilder out(rows);
  for (const rayd::data::Column& c : block->columns()) {
    if (c.name() != input_column_ && c.name() != output_column_ && c.name() != "score") {
      out.AddColumn(c, owner);
    }
  }
  std::memcpy(out.AddFixed({output_column_, DType::kInt64, {}}),
              prediction.contiguous().data_ptr<int64_t>(), rows * sizeof(int64_t));
  std::memcpy(out.AddFixed({"score", DType::kFloat32, {}}), score.contiguous().data_ptr<float>(),
              rows * sizeof(float));
  const Block result = std::move(out).Finish();
  std::vector<uint8_t> bytes(result.SerializedSize());
  result.SerializeTo(bytes.data());
  return bytes;
}

RAYD_REMOTE(InferenceActor::FactoryCreate, &InferenceActor::Ready, &InferenceActor::Predict);

}  // namespace rayd::train::internal

namespace rayd::train {
namespace {

using internal::InferenceActor;
using rayd::data::Block;
using Clock = std::chrono::steady_clock;

// An actor's error as one line: a method's own message, else what rayd said.
std::string ActorMessage(const std::exception& e) {
  const auto* remote = dynamic_cast<const RemoteError*>(&e);
  std::string m = remote != nullptr ? remote->remote_message() : std::string(e.what());
  return m.substr(0, m.find('\n'));
}

// The actors of one RunBatchInference, killed when it returns.
class ActorPool {
 public:
  ActorPool() = default;
  ActorPool(const ActorPool&) = delete;
  ActorPool& operator=(const ActorPool&) = delete;
  ~ActorPool() {
    for (const ActorHandle<InferenceActor>& actor : actors_) {
      try {
        actor.Kill();
      } catch (const std::exception&) {
        // Already gone: nothing to free.
      }
    }
  }

  // Starts `options.actors` actors loading `model` and waits until every one has.
  Status Start(const std::string& model, const InferenceOptions& options) {
    const auto cpu = options.resources_per_actor.find("CPU");
    const int threads =
        std::max(1, cpu == options.resources_per_actor.end() ? 1 : static_cast<int>(cpu->second));
    const std::string args = nlohmann::json{
        {"input_column", options.input_column},
        {"output_column", options.output_column},
        {"scale", options.scale},
        {"input_shape", options.input_shape},
        {"threads", threads}}.dump();
    for (int i = 0; i < options.actors; ++i) {
      actors_.push_back(rayd::Actor(InferenceActor::FactoryCreate)
                            .SetResources(options.resources_per_actor)
                            .SetLabelSelector(options.label_selector)
                            .Remote(model, args));
    }
    std::vector<ObjectRef<int64_t>> ready;
    for (auto& actor : actors_) ready.push_back(actor.Task(&InferenceActor::Ready).Remote());
    for (size_t i = 0; i < ready.size(); ++i) {
      try {
        rayd::Get(ready[i]);
      } catch (const RaydError& e) {
        return Status::InvalidArgument("batch inference actor " + std::to_string(i) + " (model '" +
                                       model + "'): " + ActorMessage(e));
      }
    }
    return Status::Ok();
  }

  ActorHandle<InferenceActor>& at(size_t i) { return actors_[i]; }
  size_t size() const { return actors_.size(); }

 private:
  std::vector<ActorHandle<InferenceActor>> actors_;
};

// One batch sent to an actor; its input stays referenced until its result is written.
struct Call {
  ObjectRef<std::vector<uint8_t>> input;
  ObjectRef<std::vector<uint8_t>> output;
  size_t actor = 0;
};

// Waits for the oldest call and writes its block.
Status WriteOldest(std::deque<Call>& in_flight, const std::string& model,
                   rayd::data::DatasetWriter& out, int64_t* rows) {
  Call call = std::move(in_flight.front());
  in_flight.pop_front();
  Result<Block> block = Status::Internal("unset");
  try {
    block = internal::ViewBlock(call.output);
  } catch (const RaydError& e) {
    return Status::InvalidArgument("batch inference actor " + std::to_string(call.actor) +
                                   " (model '" + model + "'): " + ActorMessage(e));
  }
  if (!block.ok()) return block.status();
  *rows += block->num_rows();
  return out.Write(*block);
}

// Sends `shard`'s batches round-robin to `pool`, at most 2 per actor in flight, and writes the
// results in order.
Status ScoreAll(rayd::data::DatasetShard& shard, ActorPool& pool, const std::string& model,
                int64_t batch_size, rayd::data::DatasetWriter& out, int64_t* rows) {
  std::unique_ptr<rayd::data::BatchIterator> pass =
      shard.IterBatches({.batch_size = batch_size, .epoch = 0});
  std::deque<Call> in_flight;
  const size_t max_in_flight = 2 * pool.size();
  for (size_t next = 0;; next = (next + 1) % pool.size()) {
    RAYD_ASSIGN_OR_RETURN(std::optional<Block> batch, pass->Next());
    if (!batch) break;
    if (in_flight.size() >= max_in_flight) {
      RAYD_RETURN_IF_ERROR(WriteOldest(in_flight, model, out, rows));
    }
    std::vector<uint8_t> bytes(batch->SerializedSize());
    batch->SerializeTo(bytes.data());
    Call call{.input = rayd::Put(bytes), .actor = next};
    call.output = pool.at(next).Task(&InferenceActor::Predict).Remote(call.input);
    in_flight.push_back(std::move(call));
  }
  while (!in_flight.empty()) RAYD_RETURN_IF_ERROR(WriteOldest(in_flight, model, out, rows));
  return Status::Ok();
}

}  // namespace

Result<InferenceStats> RunBatchInference(const rayd::data::DatasetSpec& dataset,
                                         const std::string& torchscript_path,
                                         const InferenceOptions& options,
                                         rayd::data::DatasetWriter& out) {
  if (options.actors < 1) return Status::InvalidArgument("batch inference needs actors >= 1");
  if (options.batch_size < 1) {
    return Status::InvalidArgument("batch inference needs batch_size >= 1");
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(torchscript_path, ec)) {
    return Status::NotFound("TorchScript model '" + torchscript_path + "': no such file");
  }
  // Actors run in other processes, from other directories.
  const std::string model = std::filesystem::absolute(torchscript_path, ec).string();
  rayd::data::DatasetSpec spec = dataset;
  spec.options["shuffle"] = false;
  RAYD_ASSIGN_OR_RETURN(std::unique_ptr<rayd::data::DatasetShard> shard,
                        rayd::data::DatasetShard::Open(spec, {}));
  const rayd::data::Schema& schema = shard->schema();
  if (std::none_of(schema.begin(), schema.end(),
                   [&](const auto& c) { return c.name == options.input_column; })) {
    return Status::InvalidArgument("dataset '" + dataset.name + "' has no column '" +
                                   options.input_column +
                                   "' (it has: " + rayd::data::DescribeSchema(schema) + ")");
  }
  InferenceStats stats;
  try {
    ActorPool pool;
    const Clock::time_point start = Clock::now();
    RAYD_RETURN_IF_ERROR(pool.Start(model, options));
    const Clock::time_point ready = Clock::now();
    RAYD_RETURN_IF_ERROR(ScoreAll(*shard, pool, model, options.batch_size, out, &stats.rows));
    stats.startup_seconds = std::chrono::duration<double>(ready - start).count();
    stats.seconds = std::chrono::duration<double>(Clock::now() - ready).count();
  } catch (const RaydError& e) {
    return Status::Unavailable("batch inference with model '" + model + "': " + e.what());
  }
  stats.rows_per_s = stats.seconds > 0 ? stats.rows / stats.seconds : 0;
  return stats;
}

}  // namespace rayd::train
