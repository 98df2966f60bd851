// Batch inference: a TorchScript model (e.g. the model.ts of a fashion_ddp.py checkpoint) scores
// Fashion-MNIST's test set with a pool of actors on an embedded cluster, writing one JSON line
// per image (label, prediction, score) in the dataset's order, and prints rows/s and accuracy.
//
//   batch_inference MODEL.ts OUT.jsonl [--actors N] [--batch-size B]
//
// The same executable is re-run by the node daemons as the workers, so the actor class that
// rayd_train_torch registers (rayd/train/batch_inference.h) is there too.

#include <rayd/api.h>
#include <rayd/data/reader.h>
#include <rayd/data/writer.h>
#include <rayd/train/batch_inference.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

namespace {

// The share of rows whose `prediction` equals their `label`, read back from the JSON Lines file.
rayd::Result<double> Accuracy(const std::string& jsonl) {
  rayd::data::DatasetSpec spec{.name = "scored", .format = "jsonl", .paths = {jsonl}};
  RAYD_ASSIGN_OR_RETURN(std::unique_ptr<rayd::data::Reader> reader, rayd::data::OpenReader(spec));
  std::vector<int64_t> rows(reader->num_rows());
  for (int64_t i = 0; i < reader->num_rows(); ++i) rows[i] = i;
  RAYD_ASSIGN_OR_RETURN(rayd::data::Block block, reader->Read(rows));
  const rayd::data::Column* label = block.Find("label");
  const rayd::data::Column* prediction = block.Find("prediction");
  if (label == nullptr || prediction == nullptr || label->dtype() != rayd::data::DType::kInt64 ||
      prediction->dtype() != rayd::data::DType::kInt64) {
    return rayd::Status::InvalidArgument(jsonl + ": no integer label and prediction columns");
  }
  int64_t right = 0;
  for (int64_t i = 0; i < block.num_rows(); ++i) {
    right += label->As<int64_t>()[i] == prediction->As<int64_t>()[i];
  }
  return block.num_rows() == 0 ? 0.0 : static_cast<double>(right) / block.num_rows();
}

}  // namespace

int main(int argc, char** argv) {
  rayd::Init(rayd::RaydConfig{}, argc, argv);  // a worker re-run of this binary serves here
  CLI::App app{"Scores Fashion-MNIST's test set with a TorchScript model and a pool of actors"};
  std::string model, out_path, data = "/usr/share/datasets/fashion-mnist";
  rayd::train::InferenceOptions options;
  app.add_option("model", model, "TorchScript model (torch.jit.script(model).save(...))")
      ->required();
  app.add_option("out", out_path, "JSON Lines file to write (label, prediction, score)")
      ->required();
  app.add_option("--actors", options.actors, "Actors, each holding the model (1 CPU each)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", options.batch_size, "Rows per call")->check(CLI::PositiveNumber);
  app.add_option("--data", data, "Directory of t10k-images-idx3-ubyte.gz and t10k-labels-...");
  CLI11_PARSE(app, argc, argv);

  const rayd::data::DatasetSpec test{
      .name = "t10k", .format = "idx", .paths = {data + "/t10k-*-ubyte.gz"}};
  rayd::Result<rayd::train::InferenceStats> stats = rayd::Status::Internal("not run");
  {
    rayd::data::DatasetWriter out("jsonl", out_path);
    stats = rayd::train::RunBatchInference(test, model, options, out);
    if (stats.ok()) {
      rayd::Status closed = out.Close();
      if (!closed.ok()) stats = closed;
    }
  }
  if (!stats.ok()) {
    std::fprintf(stderr, "batch_inference: %s\n", stats.status().message().c_str());
    rayd::Shutdown();
    return 1;
  }
  rayd::Result<double> accuracy = Accuracy(out_path);
  rayd::Shutdown();
  if (!accuracy.ok()) {
    std::fprintf(stderr, "batch_inference: %s\n", accuracy.status().message().c_str());
    return 1;
  }
  std::printf("scored %lld rows with %d actor(s) in %.2f s: %.0f rows/s (actors ready in %.2f s)\n",
              static_cast<long long>(stats->rows), options.actors, stats->seconds,
              stats->rows_per_s, stats->startup_seconds);
  std::printf("accuracy %.4f -> %s\n", *accuracy, out_path.c_str());
  return 0;
}
