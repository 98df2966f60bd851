// Batch inference end to end: examples/python/fashion_ddp.py trained for one short epoch by
// `rayd train`, then examples/batch_inference scoring Fashion-MNIST's test set with its
// checkpoint's model.ts on a pool of 2 actors (rows in the dataset's order, well above chance),
// a missing model file refused in one line, and a model that fails on the images named with the
// actor's reason.

#include <rayd/data/reader.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>

#include "test_util.h"
#include "tune_sandbox.h"

namespace {

using nlohmann::json;
using rayd::testing::Contains;
using rayd::testing::ReadJsonLines;
using rayd::testing::RunCommand;
namespace fs = std::filesystem;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

void Skip(const char* why) {
  std::printf("skipped: %s\n", why);
  std::fflush(stdout);
  std::exit(77);
}

void RequireFashionMnist() {
  if (!fs::exists(kFashion + "/t10k-images-idx3-ubyte.gz")) {
    Skip("no Fashion-MNIST (apt install dataset-fashion-mnist)");
  }
}

void RequireTorch() {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
    Skip("/usr/bin/python3 cannot import torch (apt install python3-torch)");
  }
}

// Fashion-MNIST's test labels in file order, read straight from the IDX file.
std::vector<int64_t> TestLabels() {
  rayd::data::DatasetSpec spec{
      .name = "labels", .format = "idx", .paths = {kFashion + "/t10k-labels-idx1-ubyte.gz"}};
  auto reader = rayd::data::OpenReader(spec);
  REQUIRE(reader.ok());
  std::vector<int64_t> rows((*reader)->num_rows());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  auto block = (*reader)->Read(rows);
  REQUIRE(block.ok());
  const rayd::data::Column* label = block->Find("label");
  REQUIRE(label != nullptr);
  REQUIRE(label->dtype() == rayd::data::DType::kUInt8);
  return std::vector<int64_t>(label->As<uint8_t>(), label->As<uint8_t>() + block->num_rows());
}

// The lines of `output` that contain `part`.
std::vector<std::string> LinesWith(const std::string& output, const std::string& part) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (Contains(line, part)) lines.push_back(line);
  }
  return lines;
}

TEST_CASE("a fashion_ddp.py checkpoint's model.ts scores the test set in order on 2 actors",
          "[infer][e2e]") {
  RequireFashionMnist();
  RequireTorch();
  rayd::testing::TuneSandbox sandbox(RAYD_BINARY);
  const std::string file = sandbox.WriteYaml("fashion.yaml", R"(
name: fashion
trainable:
  command: [/usr/bin/python3, )" RAYD_SOURCE_DIR R"(/examples/python/fashion_ddp.py]
  launcher: torch
config: {epochs: 1, batch_size: 32, lr: 0.05}
scaling: {num_workers: 1, resources_per_worker: {CPU: 1}}
datasets:
  train:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/train-*-ubyte.gz]
    transforms: [{limit: 4000}]
  validation:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/t10k-*-ubyte.gz]
    shuffle: false
    transforms: [{limit: 500}]
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"train", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string run = sandbox.results() + "/fashion";
  const std::vector<json> results = ReadJsonLines(run + "/result.json");
  REQUIRE(results.size() == 1);
  const std::string model =
      run + "/" + results.back().at("checkpoint_dir_name").get<std::string>() + "/model.ts";
  REQUIRE(fs::exists(model));

  const std::string scored = sandbox.root() + "/scored.jsonl";
  rc = RunCommand({BATCH_INFERENCE_BINARY, model, scored, "--actors", "2"}, &out, sandbox.Env(),
                  std::chrono::seconds(180));
  INFO(out);
  REQUIRE(rc == 0);
  const std::vector<std::string> accuracy = LinesWith(out, "accuracy ");
  REQUIRE(accuracy.size() == 1);
  CHECK(std::stod(accuracy[0].substr(accuracy[0].find("accuracy ") + 9)) > 0.5);
  CHECK(LinesWith(out, "scored 10000 rows with 2 actor(s)").size() == 1);

  const std::vector<json> rows = ReadJsonLines(scored);
  const std::vector<int64_t> labels = TestLabels();
  REQUIRE(labels.size() == 10000);
  REQUIRE(rows.size() == labels.size());
  int64_t right = 0, out_of_order = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    REQUIRE(rows[i].size() == 3);  // label, prediction, score: the image is left out
    out_of_order += rows[i].at("label").get<int64_t>() != labels[i];
    const int64_t prediction = rows[i].at("prediction").get<int64_t>();
    const double score = rows[i].at("score").get<double>();
    CHECK((prediction >= 0 && prediction < 10));
    CHECK((score >= 0.1 && score <= 1.0));  // the largest of 10 probabilities
    right += prediction == labels[i];
  }
  CHECK(out_of_order == 0);
  CHECK(right > 5000);
}

TEST_CASE("a missing model file is a one-line error naming it and a non-zero exit",
          "[infer][e2e]") {
  RequireFashionMnist();
  rayd::testing::TuneSandbox sandbox(RAYD_BINARY);
  const std::string missing = sandbox.root() + "/no_such_model.ts";
  const std::string scored = sandbox.root() + "/scored.jsonl";
  std::string out;
  const int rc = RunCommand({BATCH_INFERENCE_BINARY, missing, scored}, &out, sandbox.Env(),
                            std::chrono::seconds(60));
  INFO(out);
  CHECK(rc != 0);
  const std::vector<std::string> errors = LinesWith(out, "batch_inference: ");
  REQUIRE(errors.size() == 1);
  CHECK(Contains(errors[0], "'" + missing + "': no such file"));
  CHECK(LinesWith(out, missing).size() == 1);  // named once: one line, no trace
  CHECK_FALSE(fs::exists(scored));             // nothing written
}

TEST_CASE("a model that fails on the input is one line naming the model and the reason",
          "[infer][e2e]") {
  RequireFashionMnist();
  RequireTorch();
  rayd::testing::TuneSandbox sandbox(RAYD_BINARY);
  // A network for 3-channel images: Fashion-MNIST's [rows, 1, 28, 28] does not fit its conv.
  const std::string model = sandbox.root() + "/rgb.ts";
  REQUIRE(std::system(("/usr/bin/python3 -c \"import torch; torch.jit.script(torch.nn.Sequential("
                       "torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten())).save('" +
                       model + "')\"")
                          .c_str()) == 0);
  const std::string scored = sandbox.root() + "/scored.jsonl";
  std::string out;
  const int rc = RunCommand({BATCH_INFERENCE_BINARY, model, scored, "--actors", "2"}, &out,
                            sandbox.Env(), std::chrono::seconds(120));
  INFO(out);
  CHECK(rc != 0);
  const std::vector<std::string> errors = LinesWith(out, "batch_inference: ");
  REQUIRE(errors.size() == 1);
  CHECK(Contains(errors[0],
                 "model '" + model + "' failed on a batch of 'image' as [256, 1, 28, 28]"));
  CHECK(Contains(errors[0], "to have 3 channels, but got 1 channels instead"));
  CHECK_FALSE(fs::exists(scored));
}

}  // namespace
