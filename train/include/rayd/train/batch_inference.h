#pragma once
// Batch inference: a TorchScript model scoring a dataset with a pool of rayd actors (Ray Data's
// map_batches over an ActorPoolStrategy), e.g. Fashion-MNIST's test set with a sweep's best
// checkpoint (examples/batch_inference/main.cc):
//
//   rayd::data::DatasetSpec test{.name = "test", .format = "idx",
//                                .paths = {"/usr/share/datasets/fashion-mnist/t10k-*-ubyte.gz"}};
//   rayd::data::DatasetWriter out("jsonl", "scored.jsonl");
//   rayd::Result<rayd::train::InferenceStats> stats =
//       rayd::train::RunBatchInference(test, "model.ts", {.actors = 2}, out);
//
// How it works: the driver reads the dataset once, in order (a DatasetShard of world 1 with
// `shuffle: false`, so the dataset's transforms, `rows:` and `execution:` apply), cuts it into
// batches of `batch_size` rows, puts each batch's serialized block (data/FORMAT.md) into the
// object store and sends its ref round-robin to `actors` actors. Each actor loads the model once
// (torch::jit::load, when it is created), views the block where the object store holds it, turns
// `input_column` into a float32 tensor of [rows, *input_shape] (times `scale`), runs the model
// and returns a block of the input's other columns plus `output_column` (int64: the argmax of
// the model's [rows, classes] output) and `score` (float32: the largest softmax probability).
// The driver writes the returned blocks through `out` in dataset order.
//
// Backpressure: at most 2 calls per actor are in flight (one running, one queued behind it);
// the driver waits for the oldest call before it sends another, so the driver holds at most
// 2 x actors batches besides the one it is reading.
//
// Errors: a model file that does not exist is NotFound naming it (no actor is started); an
// actor's error (a file it cannot load as TorchScript, a model that fails on a batch or returns
// no [rows, classes] tensor, an actor that died) is InvalidArgument naming the actor and the
// model path, with the actor's message in one line; a dataset that cannot be read is the
// reader's error. The actors are killed when the call returns, whatever it returns. `out` is not
// closed: the caller closes it (or drops it, leaving no file) once it knows the outcome.
//
// Threading: call from a driver thread after rayd::Init; it blocks until the dataset is scored.
// The pool starts whole before the first batch is sent: `actors` that the cluster cannot place
// at once (more than its free CPUs, at 1 CPU each) wait for room, as Ray's actors do.

#include <rayd/base/status.h>
#include <rayd/data/reader.h>
#include <rayd/data/writer.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rayd::train {

struct InferenceOptions {
  int actors = 2;
  // Each actor's reservation; its CPU amount (at least 1) is also its LibTorch thread count.
  std::map<std::string, double> resources_per_actor = {{"CPU", 1}};
  std::map<std::string, std::string> label_selector;
  int64_t batch_size = 256;
  std::string input_column = "image";
  std::string output_column = "prediction";
  // How inputs become the model's tensor: float32(input) x scale, shaped [rows, *input_shape].
  double scale = 1.0 / 255;
  std::vector<int64_t> input_shape = {1, 28, 28};
};

struct InferenceStats {
  int64_t rows = 0;
  // From the first batch sent to the last one written, once every actor has loaded the model.
  double seconds = 0;
  double rows_per_s = 0;
  // Starting the actors and loading the model in each (not in `seconds`).
  double startup_seconds = 0;
};

// Scores `dataset` with the TorchScript module at `torchscript_path` (see above) and writes the
// scored rows to `out`, in dataset order.
Result<InferenceStats> RunBatchInference(const rayd::data::DatasetSpec& dataset,
                                         const std::string& torchscript_path,
                                         const InferenceOptions& options,
                                         rayd::data::DatasetWriter& out);

}  // namespace rayd::train
