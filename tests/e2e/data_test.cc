// rayd Data end to end, through the `rayd` binary: the example CNN trained on the real
// Fashion-MNIST files through GetDatasetShard (data_wait_s in every result row), a Python
// command job of 2 ranks reading its shards through rayd.train.get_dataset_shard (local and
// task execution), and bad datasets refused naming the file or the key.

#include <rayd/data/order.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "data_yamls.h"
#include "test_util.h"
#include "tune_sandbox.h"

namespace {

using nlohmann::json;
using rayd::testing::Contains;
using rayd::testing::ReadFile;
using rayd::testing::ReadJsonLines;
namespace fs = std::filesystem;

const char kFashion[] = "/usr/share/datasets/fashion-mnist";

class Sandbox : public rayd::testing::TuneSandbox {
 public:
  Sandbox() : TuneSandbox(RAYD_BINARY) {}
};

void RequireFashionMnist() {
  if (!fs::exists(std::string(kFashion) + "/train-images-idx3-ubyte.gz")) {
    std::printf("skipped: no Fashion-MNIST (apt install dataset-fashion-mnist)\n");
    std::fflush(stdout);
    std::exit(77);
  }
}

// Runs `code` in Debian's Python with numpy imported as np: how these tests write their files.
void RunNumpy(const std::string& code) {
  REQUIRE(std::system(("/usr/bin/python3 -c \"import numpy as np; " + code + "\"").c_str()) == 0);
}

// `rayd train` of a 1-rank Python trial named `name`: `script` (after `import json, os` and
// `import rayd.train as rt`) leaves a dict `out`, which comes back from the trial's directory.
// `datasets` is the train.yaml's datasets: block, indented by two.
json RunReader(Sandbox& sandbox, const std::string& name, const std::string& script,
               const std::string& datasets) {
  std::ofstream(sandbox.root() + "/reader.py")
      << "import json, os\nimport rayd.train as rt\n"
      << script
      << "\nwith open(os.path.join(os.environ['RAYD_TRIAL_DIR'], 'out.json'), 'w') as f:\n"
         "    json.dump(out, f)\nrt.report({'done': 1})\n";
  const std::string file = sandbox.WriteYaml(
      name + ".yaml", "name: " + name +
                          "\ntrainable:\n  command: [/usr/bin/python3, reader.py]\n"
                          "scaling: {num_workers: 1}\ndatasets:\n" +
                          datasets + "run: {storage_path: STORAGE}\n");
  std::string output;
  const int rc = sandbox.Run({"train", file}, &output);
  INFO(output);
  REQUIRE(rc == 0);
  return json::parse(ReadFile(sandbox.results() + "/" + name + "/out.json"));
}

void RequireNumpy() {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    std::printf("skipped: /usr/bin/python3 cannot import numpy (apt install python3-numpy)\n");
    std::fflush(stdout);
    std::exit(77);
  }
}

TEST_CASE("the example CNN trains on Fashion-MNIST through rayd Data on 2 ranks",
          "[data][e2e]") {
  RequireFashionMnist();
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("fashion.yaml", R"(
name: fashion
train_loop: fashion_mnist_cnn
config: {lr: 0.1, batch_size: 32, epochs: 2}
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
datasets:
  train:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/train-*-ubyte.gz]
    transforms: [{limit: 3000}]
  validation:
    format: idx
    paths: [/usr/share/datasets/fashion-mnist/t10k-*-ubyte.gz]
    shuffle: false
    execution: tasks                  # made by rayd tasks, viewed in the object store
    transforms: [{limit: 1000}]
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"train", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  std::vector<json> results = ReadJsonLines(sandbox.results() + "/fashion/result.json");
  REQUIRE(results.size() == 2);
  // Real images: well above chance (0.1) after two short epochs.
  CHECK(results.back()["accuracy"].get<double>() > 0.5);
  for (const json& r : results) {
    REQUIRE(r.contains("data_wait_s"));
    CHECK(r["data_wait_s"].get<double>() >= 0);
  }
}

TEST_CASE("bad datasets are refused naming the key, the file or the dataset", "[data][e2e]") {
  RequireFashionMnist();
  Sandbox sandbox;
  auto train = [&](const std::string& name, const std::string& datasets, std::string* out) {
    std::string file = sandbox.WriteYaml(name + ".yaml", R"(
name: )" + name + R"(
train_loop: fashion_mnist_cnn
config: {epochs: 1}
scaling: {num_workers: 1}
datasets:
)" + datasets + R"(
run: {storage_path: STORAGE}
)");
    return sandbox.Run({"train", file}, out);
  };
  std::string out;
  CHECK(train("no_format", "  train: {paths: [x.idx]}", &out) == 2);
  CHECK(Contains(out, "no_format.yaml:7: datasets.train.format: required"));
  CHECK(train("missing", R"(  train: {format: idx, paths: [/nonexistent/train-*]}
  validation: {format: idx, paths: [/nonexistent/t10k-*]})",
              &out) != 0);
  CHECK(Contains(out, "datasets.train: paths: '/nonexistent/train-*' matches no file"));
  // The loop asks for a dataset the run does not have.
  CHECK(train("no_validation", R"(  train: {format: idx, paths: [/usr/share/datasets/fashion-mnist/t10k-*], transforms: [{limit: 64}]})",
              &out) != 0);
  CHECK(Contains(out, "the run has no dataset 'validation' (it has: train)"));
  CHECK(train("unknown_format", R"(  train: {format: tiff, paths: [/usr/share/datasets/fashion-mnist/t10k-*]}
  validation: {format: idx, paths: [/usr/share/datasets/fashion-mnist/t10k-*]})",
              &out) != 0);
  CHECK(Contains(out, "datasets.train: format: unknown format 'tiff'"));
}

TEST_CASE("rows on_error skips are counted in the result rows", "[data][e2e]") {
  RequireFashionMnist();
  Sandbox sandbox;
  // 64 JSON Lines rows of a blank 28 x 28 image and a label, the 10th with no label.
  {
    std::ofstream rows(sandbox.root() + "/rows.jsonl");
    std::string image = "[";
    for (int r = 0; r < 28; ++r) {
      image += std::string(r ? "," : "") + "[";
      for (int c = 0; c < 28; ++c) image += c ? ",0" : "0";
      image += "]";
    }
    image += "]";
    for (int i = 0; i < 64; ++i) {
      rows << "{\"image\": " << image;
      if (i != 9) rows << ", \"label\": " << i % 10;
      rows << "}\n";
    }
  }
  auto train = [&](const std::string& name, const std::string& on_error, std::string* out) {
    std::string file = sandbox.WriteYaml(name + ".yaml", R"(
name: )" + name + R"(
train_loop: fashion_mnist_cnn
config: {epochs: 1, batch_size: 16}
scaling: {num_workers: 1}
datasets:
  train: {format: jsonl, paths: [rows.jsonl], on_error: )" + on_error + R"(}
  validation: {format: idx, paths: [/usr/share/datasets/fashion-mnist/t10k-*-ubyte.gz], transforms: [{limit: 64}]}
run: {storage_path: STORAGE}
)");
    return sandbox.Run({"train", file}, out);
  };
  std::string out;
  REQUIRE(train("skip", "skip", &out) == 0);
  INFO(out);
  std::vector<json> results = ReadJsonLines(sandbox.results() + "/skip/result.json");
  REQUIRE(results.size() == 1);
  CHECK(results[0]["data_skipped_rows"] == 1);
  // Without skip, the bad row fails the run naming the file, the row and the key.
  CHECK(train("raise", "raise", &out) != 0);
  CHECK(Contains(out, "rows.jsonl: row 10 (line 10): no key 'label'"));
}

// A Python command trial that records every id it takes in its checkpoints (each attempt its
// own file, earlier attempts' carried forward) and iterates the shard's next epoch, with no code
// for resuming it. With config fail: true it fails once, after taking step 4 of epoch 1 (its last
// checkpoint was at step 2); with pace: S it sleeps S seconds after each report. 45 ids (id.npy
// in the sandbox's root), batches of 4, 3 epochs.
void WriteIdsTrial(const std::string& dir) {
  RunNumpy("np.save('" + dir + "/id.npy', np.arange(45, dtype=np.int64))");
  std::ofstream(dir + "/ids.py") << R"(import json, os, shutil, tempfile, time
import rayd.train as rt

restored = rt.get_checkpoint()
generation, carried = 0, []
if restored:
    generation = int(open(os.path.join(restored, "generation")).read()) + 1
    carried = [os.path.join(restored, f) for f in os.listdir(restored) if f.startswith("ids_")]
shard = rt.get_dataset_shard("ids")
score = rt.get_config().get("score", 0)
mine = []

def report(epoch, step):
    d = tempfile.mkdtemp()
    json.dump(mine, open(os.path.join(d, f"ids_g{generation}.json"), "w"))
    open(os.path.join(d, "generation"), "w").write(str(generation))
    for f in carried:
        shutil.copy(f, d)
    rt.report({"epoch": epoch, "step": step, "generation": generation, "score": score},
              checkpoint=d)
    shutil.rmtree(d)
    time.sleep(rt.get_config().get("pace", 0))  # so that PBT sees both trials at its boundaries

marker = os.path.join(os.environ["RAYD_TRIAL_DIR"], "failed")
while shard.next_epoch < 3:
    epoch = shard.next_epoch
    step = 0
    for batch in shard.iter_batches(batch_size=4):
        mine += [[epoch, int(i)] for i in batch["id"]]
        step += 1
        if rt.get_config().get("fail") and epoch == 1 and step == 4 and not os.path.exists(marker):
            open(marker, "w").write("failed here")
            raise SystemExit("injected failure")
        if step % 2 == 0:
            report(epoch, step)
    report(epoch, step)
)";
}

// The ids the latest checkpoint in run directory `run` holds, by epoch; `files` counts the id
// files.
std::map<int, std::vector<int64_t>> LastCheckpointIds(const std::string& run, int* files) {
  std::string last;
  for (const auto& e : fs::directory_iterator(run)) {
    const std::string name = e.path().filename();
    if (name.rfind("checkpoint_", 0) == 0 && name > fs::path(last).filename().string()) last = e.path();
  }
  REQUIRE(!last.empty());
  std::map<int, std::vector<int64_t>> by_epoch;
  *files = 0;
  for (const auto& e : fs::directory_iterator(last)) {
    if (e.path().filename().string().rfind("ids_", 0) != 0) continue;
    ++*files;
    for (const json& taken : json::parse(ReadFile(e.path()))) {
      by_epoch[taken[0].get<int>()].push_back(taken[1].get<int64_t>());
    }
  }
  return by_epoch;
}

// Every one of the 45 ids in each of the 3 epochs, once: 0 repeated, 0 missing.
void CheckEveryIdOnce(std::map<int, std::vector<int64_t>> by_epoch) {
  std::vector<int64_t> every(45);
  for (int i = 0; i < 45; ++i) every[i] = i;
  REQUIRE(by_epoch.size() == 3);
  for (auto& [epoch, ids] : by_epoch) {
    std::sort(ids.begin(), ids.end());
    INFO("epoch " << epoch);
    CHECK(ids == every);
  }
}

TEST_CASE("a Python trial that fails mid-epoch resumes its dataset exactly, every id once",
          "[data][e2e]") {
  RequireNumpy();
  Sandbox sandbox;
  WriteIdsTrial(sandbox.root());
  std::string file = sandbox.WriteYaml("resume.yaml", R"(
name: resume
trainable:
  command: [/usr/bin/python3, ids.py]
config: {fail: true}
scaling: {num_workers: 1}
datasets:
  ids: {format: npy, paths: [id.npy], seed: 5}
run: {storage_path: STORAGE, failure: {max_failures: 1}}
)");
  std::string out;
  const int rc = sandbox.Run({"train", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Contains(out, "Finished resume (1 restarts)"));
  // The last checkpoint's files: every id of every epoch once.
  int files = 0;
  CheckEveryIdOnce(LastCheckpointIds(sandbox.results() + "/resume", &files));
  CHECK(files == 2);  // the failed attempt's, carried forward, and the last one's
}

TEST_CASE("a PBT clone goes on with its donor's dataset where the donor's checkpoint left it, "
          "every id once",
          "[data][e2e]") {
  RequireNumpy();
  Sandbox sandbox;
  WriteIdsTrial(sandbox.root());
  // Two trials; at every second report the worse (score 0) clones the better's checkpoint, and
  // its ids, and goes on from where that checkpoint left the dataset.
  std::string file = sandbox.WriteYaml("pbt.yaml", R"(
name: pbt
trainable:
  command: [/usr/bin/python3, ids.py]
scaling: {num_workers: 1}
param_space:
  score: {grid_search: [0, 1]}
  lr: 0.1
  pace: 0.25
datasets:
  ids: {format: npy, paths: [id.npy], seed: 5}
tune:
  metric: score
  mode: max
  max_concurrent_trials: 2
  seed: 3
  scheduler:
    type: pbt
    time_attr: training_iteration
    perturbation_interval: 4
    quantile_fraction: 0.5
    resample_probability: 0
    hyperparam_mutations: {lr: {loguniform: [1.0e-3, 1.0]}}
run: {storage_path: STORAGE}
)");
  std::string out;
  const int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/pbt";
  int cloned = 0;
  for (const auto& e : fs::directory_iterator(experiment)) {
    if (!e.is_directory()) continue;
    std::vector<json> results = ReadJsonLines(e.path().string() + "/result.json");
    REQUIRE(!results.empty());
    if (results.back()["generation"].get<int>() > 0) ++cloned;
    INFO(e.path().string());
    int files = 0;
    CheckEveryIdOnce(LastCheckpointIds(e.path().string(), &files));
  }
  CHECK(cloned >= 1);
}

TEST_CASE("preprocessing runs on a CPU node apart from the trainers and its blocks reach them",
          "[data][e2e]") {
  RequireFashionMnist();
  Sandbox sandbox;
  // The head holds the trainers' slots (a resource only it has); a second node, labelled
  // kind=cpu, holds the only CPU a data task may take. The validation blocks need {CPU: 1} and
  // that label: made anywhere else they could not be, and the run would not finish. Both
  // datasets' images are standardized by a stateful map (examples/trainables/
  // fashion_transforms.cc) on actors that the label also puts on the CPU node.
  const int port = rayd::testing::FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  sandbox.Start({"--head", "--port", std::to_string(port), "--num-cpus", "2", "--resources",
                 R"({"trainer": 2})"});
  sandbox.Start({"--address", address, "--num-cpus", "1", "--labels", "kind=cpu"});
  const std::vector<std::string> heads = sandbox.Sessions("_head");
  REQUIRE(heads.size() == 1);
  std::map<std::string, std::string> env = sandbox.Env();
  env["RAYD_TOKEN"] = ReadFile(heads[0] + "/token").substr(0, 64);
  std::string file = sandbox.WriteYaml(
      "split.yaml", rayd::testing::SplitPreprocessingYaml("split", "STORAGE"));
  std::string out;
  const int rc = rayd::testing::RunCommand({RAYD_BINARY, "train", file, "--address", address},
                                           &out, env, std::chrono::seconds(240));
  INFO(out);
  REQUIRE(rc == 0);
  std::vector<json> results = ReadJsonLines(sandbox.results() + "/split/result.json");
  REQUIRE(results.size() == 1);
  CHECK(results[0]["accuracy"].get<double>() > 0.3);  // scored on blocks the CPU node made
  // The CPU node started workers (only data tasks can run there: the ranks need `trainer`).
  const std::vector<std::string> nodes = sandbox.Sessions("_node");
  REQUIRE(nodes.size() == 1);
  int worker_logs = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(nodes[0], ec)) {
    const std::string name = e.path().filename();
    if (name.find("worker") != std::string::npos) ++worker_logs;
  }
  CHECK(worker_logs > 0);
}

TEST_CASE("a Python command job's 2 ranks read equal, disjoint shards, as C++ deals them",
          "[data][e2e]") {
  RequireNumpy();
  Sandbox sandbox;
  // 101 rows: id, and x = [id, 2 id, 3 id] as float32.
  const std::string dir = sandbox.root();
  RunNumpy("n = 101; np.save('" + dir + "/id.npy', np.arange(n, dtype=np.int64)); "
           "np.save('" + dir + "/x.npy', (np.arange(n)[:, None] * np.array([1, 2, 3]))"
           ".astype(np.float32)); "
           "np.save('" + dir + "/pad.npy', np.zeros((n, 2048), np.float32))");
  std::ofstream(dir + "/reader.py") << R"(import json, os
import numpy as np
import rayd.train as rt

ctx = rt.get_context()
out = {}
held = []
for name in ("local", "tasks"):
    shard = rt.get_dataset_shard(name)
    for epoch in range(2):
        ids = []
        for batch in shard.iter_batches(batch_size=8, epoch=epoch):
            assert batch["x"].dtype == np.float32 and batch["x"].shape[1:] == (3,)
            assert (batch["x"][:, 1] == 2 * batch["id"]).all()
            ids += batch["id"].tolist()
            if epoch == 0 and len(held) < 3:
                held.append(batch)  # kept past the pass: its memory must stay as it was
        out[f"{name}/{epoch}"] = ids
    out[f"{name}/shared"] = shard.shared_batches
    out[f"{name}/copied"] = shard.copied_batches
# Every batch of a pass kept: more than the server's reused buffers (slots), so the later ones
# come through files; each keeps what it was. Dropped, their slots serve the next pass.
batch = None  # the last pass's last batch (3 of epoch 0's are held)
shard = rt.get_dataset_shard("local")
slots = shard.slot_batches
kept = list(shard.iter_batches(batch_size=4, epoch=2))
out["local/kept"] = [i for b in kept for i in b["id"].tolist()]
out["local/kept_slots"] = shard.slot_batches - slots
for b in kept:
    assert (b["x"][:, 1] == 2 * b["id"]).all(), "a kept batch changed"
del b, kept
slots = shard.slot_batches
passes = sum(1 for _ in shard.iter_batches(batch_size=4, epoch=3))
out["local/next_pass_slots"] = [shard.slot_batches - slots, passes]
for batch in held:
    batch["x"][0, 0] = -1  # writable, as torch wants, and the batch's own
    assert (batch["x"][:, 1] == 2 * batch["id"]).all(), "a held batch changed"
with open(os.path.join(os.environ["RAYD_TRIAL_DIR"], f"ids_{ctx.world_rank}.json"), "w") as f:
    json.dump(out, f)
rt.report({"rows": len(out["local/0"])})
)";
  std::string file = sandbox.WriteYaml("py.yaml", R"(
name: py
trainable:
  command: [/usr/bin/python3, reader.py]
  launcher: torch
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
datasets:
  local: {format: npy, paths: [id.npy, x.npy], seed: 3}
  # Blocks of 24 rows (3 batches) of 8 KiB each: over the 100 KiB rayd sends inline, so they
  # are in the object store's shared memory.
  tasks: {format: npy, paths: [id.npy, x.npy, pad.npy], seed: 3, execution: tasks,
          block_bytes: 200000}
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"train", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string run = sandbox.results() + "/py";
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::vector<int64_t> order = rayd::data::EpochOrder(101, 3, epoch, true);
    std::set<int64_t> all;
    for (int rank = 0; rank < 2; ++rank) {
      const json ids = json::parse(ReadFile(run + "/ids_" + std::to_string(rank) + ".json"));
      const std::vector<int64_t> expected = rayd::data::DealRank(order, 2, rank, 8).rows;
      for (const char* mode : {"local", "tasks"}) {
        const std::string key = std::string(mode) + "/" + std::to_string(epoch);
        CHECK(ids.at(key).get<std::vector<int64_t>>() == expected);
      }
      all.insert(expected.begin(), expected.end());
      // Task-made blocks are mapped where the object store holds them (zero-copy); blocks
      // made in the rank's process come through a file.
      // 51 or 50 rows a rank: 7 batches an epoch, in blocks of 8 (a pass's first block is one
      // step's, then each at most twice the one before), 16, 24 and 3 or 2 rows; the first and
      // last are small enough to be sent inline, and so copied.
      CHECK(ids.at("tasks/shared").get<int>() == 2 * 5);
      CHECK(ids.at("tasks/copied").get<int>() == 2 * 2);
      CHECK(ids.at("local/shared").get<int>() == 0);
      if (epoch == 0) {
        // Batches made in the rank's actor are copied into its reused buffers, 8 at most: a
        // pass of 13 batches all kept gets 8 less the 3 still held from epoch 0 (the rest come
        // through files); dropped, every batch of the next pass has a slot again.
        CHECK(ids.at("local/copied").get<int>() == 2 * 7);
        CHECK(ids.at("local/kept").get<std::vector<int64_t>>() ==
              rayd::data::DealRank(rayd::data::EpochOrder(101, 3, 2, true), 2, rank, 4).rows);
        CHECK(ids.at("local/kept_slots").get<int>() == 8 - 3);
        CHECK(ids.at("local/next_pass_slots") == json::array({13, 13}));
      }
    }
    CHECK(all.size() == 101);  // 51 and 50: every row, the last step uneven
  }
  std::vector<json> results = ReadJsonLines(run + "/result.json");
  REQUIRE(results.size() == 1);
  CHECK(results[0]["rows"] == 51);  // rank 0's
  CHECK(results[0].contains("data_wait_s"));
  // Each rank's wait, as of its latest publication (rank 1's may come after rank 0's report).
  const double own = results[0]["data_wait_s"].get<double>();
  CHECK(results[0]["data_wait_s_rank_0"].get<double>() == Approx(own).margin(1e-6));
  CHECK(results[0]["data_wait_s_max"].get<double>() >= own - 1e-6);
}

// The data server opens a run's datasets while the rank's process starts (before its first
// request): one that cannot open must cost nothing but its own error, when it is asked for.
TEST_CASE("a dataset that cannot open fails only the request for it, not the rank's other datasets",
          "[data][e2e]") {
  RequireNumpy();
  Sandbox sandbox;
  const std::string dir = sandbox.root();
  RunNumpy("np.save('" + dir + "/id.npy', np.arange(40, dtype=np.int64)); "
           "b = open('" + dir + "/id.npy', 'rb').read(); "
           "open('" + dir + "/cut.npy', 'wb').write(b[:len(b) - 100])");
  // The truncated file comes first: the server meets it first while the process starts.
  const json got = RunReader(sandbox, "cut", R"(
ids = []
for batch in rt.get_dataset_shard("good").iter_batches(batch_size=16):
    ids += batch["id"].tolist()
try:
    rt.get_dataset_shard("cut")
    error = ""
except RuntimeError as e:
    error = str(e)
out = {"ids": sorted(ids), "error": error}
)",
                             "  cut: {format: npy, paths: [cut.npy]}\n"
                             "  good: {format: npy, paths: [id.npy]}\n");
  std::vector<int64_t> all(40);
  std::iota(all.begin(), all.end(), 0);
  CHECK(got.at("ids").get<std::vector<int64_t>>() == all);
  CHECK(Contains(got.at("error").get<std::string>(), "cut.npy"));
}

// The Python client asks for each batch ahead of the loop: a pass left early, two shards read in
// step, and a checkpoint taken mid-pass must still see exactly the batches the loop took.
TEST_CASE("batches asked for ahead: a pass left early, two shards in step, a mid-pass checkpoint",
          "[data][e2e]") {
  RequireNumpy();
  Sandbox sandbox;
  const std::string dir = sandbox.root();
  RunNumpy("np.save('" + dir + "/id.npy', np.arange(40, dtype=np.int64))");
  const json got = RunReader(sandbox, "ahead", R"(
import shutil, tempfile

a, b = rt.get_dataset_shard("a"), rt.get_dataset_shard("b")
out = {}
# Left after 2 batches of epoch 0: the batch asked for ahead is dropped, epoch 1 is whole.
left = [batch["id"].tolist() for _, batch in zip(range(2), a.iter_batches(batch_size=4))]
out["left"] = sum(left, [])
out["a1"] = sum((x["id"].tolist() for x in a.iter_batches(batch_size=4, epoch=1)), [])
# Two shards in step; a checkpoint after 3 of a's batches of epoch 2 records 12 rows taken.
out["a2"], out["b0"] = [], []
for step, (x, y) in enumerate(zip(a.iter_batches(batch_size=4, epoch=2),
                                  b.iter_batches(batch_size=8, epoch=0))):
    out["a2"] += x["id"].tolist()
    out["b0"] += y["id"].tolist()
    if step == 2:
        d = tempfile.mkdtemp()
        rt.report({"step": step}, checkpoint=d)
        shutil.rmtree(d)
)",
                             "  a: {format: npy, paths: [id.npy], seed: 3}\n"
                             "  b: {format: npy, paths: [id.npy], seed: 4}\n");
  const std::string run = sandbox.results() + "/ahead";
  auto order = [](uint64_t seed, int64_t epoch, size_t n) {
    std::vector<int64_t> rows = rayd::data::EpochOrder(40, seed, epoch, true);
    rows.resize(std::min(n, rows.size()));
    return rows;
  };
  CHECK(got.at("left").get<std::vector<int64_t>>() == order(3, 0, 8));
  CHECK(got.at("a1").get<std::vector<int64_t>>() == order(3, 1, 40));
  // zip stops at the shorter: b's 5 batches of 8, a's first 5 of 4.
  CHECK(got.at("a2").get<std::vector<int64_t>>() == order(3, 2, 20));
  CHECK(got.at("b0").get<std::vector<int64_t>>() == order(4, 0, 40));
  // The mid-pass checkpoint: 12 of a's rows of epoch 2 and 24 of b's of epoch 0 were taken.
  std::string positions;
  for (const auto& e : fs::recursive_directory_iterator(run)) {
    if (e.path().filename() == ".rayd_data_positions.json") {
      positions = ReadFile(e.path().string());
    }
  }
  INFO(positions);
  REQUIRE_FALSE(positions.empty());
  const json p = json::parse(positions);
  CHECK(p.at("a") == json{{"epoch", 2}, {"cursor", 12}});
  CHECK(p.at("b") == json{{"epoch", 0}, {"cursor", 24}});
}

TEST_CASE("a sweep's four Python trials at once share one preprocessing of their dataset",
          "[data][e2e]") {
  RequireNumpy();
  Sandbox sandbox;
  const std::string dir = sandbox.root();
  RunNumpy("np.save('" + dir + "/id.npy', np.arange(101, dtype=np.int64))");
  std::ofstream(dir + "/reader.py") << R"(import rayd.train as rt

shard = rt.get_dataset_shard("ids")
ids = [i for batch in shard.iter_batches(batch_size=8) for i in batch["id"].tolist()]
rt.report({"rows": len(ids), "distinct": len(set(ids))})
)";
  // 20 rows a chunk (block_bytes 160, an int64 a row): 6 chunks in the node's cache.
  std::string file = sandbox.WriteYaml("shared.yaml", R"(
name: shared
trainable:
  command: [/usr/bin/python3, reader.py]
scaling: {num_workers: 1, resources_per_worker: {CPU: 0.5}}
param_space:
  x: {grid_search: [1, 2, 3, 4]}
tune: {metric: rows, mode: max, max_concurrent_trials: 4}
datasets:
  ids: {format: npy, paths: [id.npy], block_bytes: 160, transforms: [{cache: node}]}
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/shared";
  double made = 0, hit = 0;
  int trials = 0;
  for (const auto& entry : fs::directory_iterator(experiment)) {
    if (!entry.is_directory()) continue;
    std::vector<json> results = ReadJsonLines(entry.path().string() + "/result.json");
    REQUIRE(results.size() == 1);
    const json& r = results[0];
    INFO(r.dump());
    ++trials;
    CHECK(r["rows"] == 101);  // every row once
    CHECK(r["distinct"] == 101);
    made += r.value("data_cache_chunks_made", 0.0);
    hit += r.value("data_cache_chunks_hit", 0.0);
  }
  CHECK(trials == 4);
  CHECK(made == 6);  // each chunk made once on the node, for all four trials
  CHECK(hit > 0);
}

}  // namespace
