// `rayd tune` and `rayd train` as a user runs them: a YAML file, an embedded cluster, real
// worker processes running the example trainables (Gloo training of the example MLP, the toy
// objective), results on disk in Ray Tune's layout.
//
// Each test runs in a fresh temp root (RAYD_TEMP_DIR) with its results under it; the Sandbox
// guard stops whatever daemons are left.

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tune_sandbox.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::ReadFile;
using rayd::testing::RunCommand;
using rayd::testing::WaitFor;
namespace fs = std::filesystem;

class Sandbox : public rayd::testing::TuneSandbox {
 public:
  Sandbox() : TuneSandbox(RAYD_BINARY) {}

  // Runs `rayd tune file`, which must succeed, and returns the experiment_state.json of the
  // experiment `name`, which must hold `trials` trials.
  nlohmann::json Sweep(const std::string& file, const std::string& name, size_t trials) {
    std::string out;
    const int rc = Run({"tune", file}, &out);
    INFO(out);
    REQUIRE(rc == 0);
    nlohmann::json state =
        rayd::testing::ReadJson(results() + "/" + name + "/experiment_state.json");
    REQUIRE(state["trials"].size() == trials);
    return state;
  }
};

using rayd::testing::Contains;
using rayd::testing::ReadJson;
using rayd::testing::SomeTrialReported;
using rayd::testing::TrialDir;

std::vector<json> ReadLines(const std::string& path) {
  return rayd::testing::ReadJsonLines(path);
}

TEST_CASE("ASHA sweep of 2-worker Gloo trials stops some early and finds a good config",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("asha.yaml", R"(
name: asha
trainable: mlp_classifier
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
param_space:
  lr: {loguniform: [1.0e-3, 1.0e-1]}
  hidden: {grid_search: [64]}
  momentum: 0.9
  epochs: 4
  train_size: 2048
tune:
  metric: loss
  mode: min
  num_samples: 5
  seed: 7
  scheduler: {type: asha, max_t: 4, grace_period: 1, reduction_factor: 2}
run:
  storage_path: STORAGE
  checkpoint: {num_to_keep: 1}
)");
  std::string out;
  int rc = sandbox.Run({"tune", file, "--progress-interval", "1"}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Contains(out, "Trial name"));  // the live table
  CHECK(Contains(out, "Best trial"));

  const std::string experiment = sandbox.results() + "/asha";
  json state = ReadJson(experiment + "/experiment_state.json");
  REQUIRE(state["trials"].size() == 5);
  int stopped_early = 0;
  int finished = 0;
  double best = 1e9;
  std::vector<double> first_rung;
  for (const json& trial : state["trials"]) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(experiment, trial);
    // Ray Tune's layout.
    CHECK(ReadJson(dir + "/params.json") == trial["config"]);
    std::vector<json> results = ReadLines(dir + "/result.json");
    REQUIRE(!results.empty());
    CHECK(results.front()["trial_id"] == trial["id"]);
    CHECK(results.front()["config"] == trial["config"]);
    CHECK(Contains(ReadFile(dir + "/progress.csv"), "training_iteration"));
    CHECK(fs::exists(dir + "/" + results.back()["checkpoint_dir_name"].get<std::string>()));
    // TensorBoard's event file, as Ray Tune writes one (its format: tests/unit/tune).
    int event_files = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("events.out.tfevents.") && fs::file_size(entry.path()) > 0) {
        ++event_files;
      }
    }
    CHECK(event_files == 1);
    first_rung.push_back(results.front()["loss"].get<double>());
    int iterations = results.back()["training_iteration"].get<int>();
    if (iterations < 4) ++stopped_early;
    if (iterations == 4) {
      ++finished;
      best = std::min(best, results.back()["loss"].get<double>());
    }
  }
  CHECK(stopped_early >= 1);
  CHECK(finished >= 1);
  // The config it found trains well: better than every trial's first epoch.
  CHECK(best < *std::min_element(first_rung.begin(), first_rung.end()));
}

TEST_CASE(
    "an ASHA sweep of elastic trials starts each at its least and ends with the top "
    "trial at its most",
    "[tune][e2e][elastic]") {
  Sandbox sandbox;
  // Two 1-to-2-worker trials on 2 CPUs: both start at 1. The 2-epoch one ends before ASHA's
  // first rung; its freed worker goes to the other, which restarts at 2 from a checkpoint and
  // finishes there (every epoch once). Epochs of 16384 samples take long enough (0.3 s or
  // more here) that the growth comes well before the last.
  std::string file = sandbox.WriteYaml("elastic.yaml", R"(
name: elastic-asha
trainable: mlp_classifier
scaling: {num_workers: [1, 2], resources_per_worker: {CPU: 1}, resize_interval_s: 0.5}
param_space:
  epochs: {grid_search: [2, 12]}
  hidden: 32
  lr: 0.05
  train_size: 16384
tune:
  metric: loss
  mode: min
  max_concurrent_trials: 2
  scheduler: {type: asha, max_t: 12, grace_period: 4, reduction_factor: 2}
run: {storage_path: STORAGE}
)");
  const std::string experiment = sandbox.results() + "/elastic-asha";
  json state = sandbox.Sweep(file, "elastic-asha", 2);
  std::optional<std::vector<json>> longer;
  for (const json& trial : state["trials"]) {
    CHECK(trial["status"] == "TERMINATED");
    std::vector<json> rows = ReadLines(TrialDir(experiment, trial) + "/result.json");
    REQUIRE(!rows.empty());
    CHECK(rows.front()["world_size"] == 1);  // a trial starts at its least
    if (trial["config"]["epochs"] == 12) longer = rows;
  }
  REQUIRE(longer);
  REQUIRE(longer->size() == 12);
  for (size_t i = 0; i < longer->size(); ++i) CHECK((*longer)[i]["epoch"] == static_cast<int>(i));
  CHECK(longer->back()["world_size"] == 2);  // the top trial ends at its most
  CHECK(longer->back()["loss"].get<double>() < longer->front()["loss"].get<double>());
}

constexpr int kPbtIterations = 12;  // the sweep's `iterations`

TEST_CASE("PBT sweep exploits and cloned trials resume from the donor's checkpoint",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("pbt.yaml", R"(
name: pbt
trainable: toy_objective
param_space:
  x: {uniform: [0.0, 6.0]}
  lr: {choice: [0.05, 0.1, 0.2, 0.4]}
  iterations: 12
  work_ms: 40
tune:
  metric: loss
  mode: min
  num_samples: 4
  max_concurrent_trials: 4
  seed: 3
  scheduler:
    type: pbt
    time_attr: training_iteration
    perturbation_interval: 3
    quantile_fraction: 0.25
    resample_probability: 0.5
    hyperparam_mutations:
      x: {uniform: [0.0, 6.0]}
      lr: [0.05, 0.1, 0.2, 0.4]
run:
  storage_path: STORAGE
)");
  std::string out;
  int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/pbt";
  std::vector<json> exploits = ReadLines(experiment + "/pbt_global.txt");
  REQUIRE(!exploits.empty());

  json state = ReadJson(experiment + "/experiment_state.json");
  std::map<std::string, json> trials;
  for (const json& t : state["trials"]) trials[t["id"].get<std::string>()] = t;
  // Every exploited trial's next run restored the donor's checkpoint (the toy's own iteration
  // counter at the donor's result PBT ranked) and ran with the new config. training_iteration
  // counts each trial's own results, so the donor's is looked up in its result.json.
  for (const json& exploit : exploits) {
    // [target, donor, target iteration, donor iteration, donor config, new config]
    const std::string target = exploit[0].get<std::string>();
    const std::string donor = exploit[1].get<std::string>();
    REQUIRE(trials.count(target));
    REQUIRE(trials.count(donor));
    int donor_state = -1;
    for (const json& r : ReadLines(TrialDir(experiment, trials[donor]) + "/result.json")) {
      if (r["training_iteration"] == exploit[3]) donor_state = r["iteration"].get<int>();
    }
    bool resumed = false;
    for (const json& r : ReadLines(TrialDir(experiment, trials[target]) + "/result.json")) {
      resumed = resumed ||
                (r["restored_iteration"].get<int>() == donor_state && r["config"] == exploit[5]);
    }
    INFO("exploit " << exploit.dump() << " donor state " << donor_state);
    CHECK(donor_state > 0);
    CHECK(fs::exists(experiment + "/pbt_policy_" + target + ".txt"));
    // A donor ranked at its last iteration (its final result can come in just before its loop
    // ends, so it is still in the population) leaves the target nothing to run: restored at 12
    // of 12, it ends at once without a new result.
    if (donor_state == kPbtIterations) continue;
    CHECK(resumed);
  }
  for (const auto& [id, t] : trials) CHECK(t["status"] == "TERMINATED");
}

TEST_CASE("ASHA in the paper's promotion form pauses at rungs and resumes the top third",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("promotion.yaml", R"(
name: promotion
trainable: toy_objective
param_space: {x: {uniform: [0.0, 6.0]}, lr: {choice: [0.05, 0.1, 0.2]}, iterations: 9, work_ms: 20}
tune:
  metric: loss
  mode: min
  num_samples: 9
  seed: 1
  max_concurrent_trials: 3
  scheduler: {type: asha, max_t: 9, grace_period: 1, reduction_factor: 3, promotion: true}
run: {storage_path: STORAGE}
)");
  json state = sandbox.Sweep(file, "promotion", 9);
  std::multiset<int> reached;
  for (const json& t : state["trials"]) {
    CHECK(t["status"] == "TERMINATED");
    const int iterations = t["last_result"]["training_iteration"].get<int>();
    reached.insert(iterations);
    // A promoted trial resumed from the checkpoint of the rung it paused at.
    if (iterations > 1) CHECK(t["last_result"]["restored_iteration"].get<int>() >= 1);
  }
  // 9 trials reach rung 1; the best 3 are promoted to rung 3; the best of those to max_t.
  CHECK(reached.count(1) == 6);
  CHECK(reached.count(3) == 2);
  CHECK(reached.count(9) == 1);
}

TEST_CASE("Ctrl-C stops a sweep and --resume finishes it without redoing finished work",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("resume.yaml", R"(
name: resume
trainable: toy_objective
param_space:
  x: {grid_search: [1.0, 2.0, 3.0, 4.0]}
  iterations: 8
  work_ms: 150
tune:
  metric: loss
  mode: min
  max_concurrent_trials: 2
run:
  storage_path: STORAGE
)");
  const std::string experiment = sandbox.results() + "/resume";
  {
    ChildProcess sweep({RAYD_BINARY, "tune", file}, sandbox.Env());
    // Interrupt once a trial has reported a few results.
    REQUIRE(WaitFor([&] { return SomeTrialReported(experiment, 3); }, 120s));
    sweep.Signal(SIGINT);  // the terminal's Ctrl-C: the driver's whole process group
    REQUIRE(sweep.WaitExit(60s));
    INFO(sweep.output());
    CHECK(sweep.exit_code() == 130);
    CHECK(Contains(sweep.output(), "--resume"));
  }
  json interrupted = ReadJson(experiment + "/experiment_state.json");
  int unfinished = 0;
  for (const json& t : interrupted["trials"]) unfinished += t["status"] != "TERMINATED";
  CHECK(unfinished >= 1);

  std::string out;
  int rc = sandbox.Run({"tune", file, "--resume"}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  json state = ReadJson(experiment + "/experiment_state.json");
  REQUIRE(state["trials"].size() == 4);
  bool some_restored = false;
  for (const json& t : state["trials"]) {
    CHECK(t["status"] == "TERMINATED");
    std::vector<json> results = ReadLines(TrialDir(experiment, t) + "/result.json");
    // Each iteration ran once: 8 results, numbered 1..8, over the interrupted and resumed runs.
    REQUIRE(results.size() == 8);
    for (size_t i = 0; i < results.size(); ++i) {
      CHECK(results[i]["training_iteration"].get<size_t>() == i + 1);
      CHECK(results[i]["iteration"].get<size_t>() == i + 1);
    }
    some_restored = some_restored || results.back()["restored_iteration"].get<int>() > 0;
  }
  CHECK(some_restored);
}

// rayd workers started under `root` (RAYD_TEMP_DIR in their environment) whose memory maps
// hold `library`, each with its maps.
std::map<pid_t, std::string> WorkersWith(const std::string& root, const std::string& library) {
  std::map<pid_t, std::string> found;
  const std::string temp_dir = "RAYD_TEMP_DIR=" + root + std::string(1, '\0');
  const std::string worker = std::string("RAYD_WORKER_MODE=1") + '\0';
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const pid_t pid = std::atoi(entry.path().filename().c_str());
    if (pid <= 0) continue;
    const std::string environ = ReadFile(entry.path().string() + "/environ");
    if (!Contains(environ, temp_dir) || !Contains(environ, worker)) continue;
    const std::string maps = ReadFile(entry.path().string() + "/maps");
    if (Contains(maps, library)) found.emplace(pid, maps);
  }
  return found;
}

TEST_CASE("a sweep of a torch-free example loop never loads LibTorch into its ranks",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("light.yaml", R"(
name: light
trainable: toy_objective
param_space:
  x: {grid_search: [1.0, 2.0]}
  iterations: 8
  work_ms: 250
tune: {metric: loss, mode: min, max_concurrent_trials: 2}
run: {storage_path: STORAGE}
)");
  ChildProcess sweep({RAYD_BINARY, "tune", file}, sandbox.Env());
  // Its ranks while they run: they hold the torch-free examples' library, and nothing of torch.
  std::map<pid_t, std::string> ranks;
  REQUIRE(WaitFor(
      [&] {
        ranks = WorkersWith(sandbox.root(), "libexample_loops.so");
        return !ranks.empty();
      },
      60s));
  for (const auto& [pid, maps] : ranks) {
    INFO("rank process " << pid);
    CHECK_FALSE(Contains(maps, "libtorch_cpu"));
    CHECK_FALSE(Contains(maps, "libexample_trainables.so"));
  }
  REQUIRE(sweep.WaitExit(120s));
  INFO(sweep.output());
  CHECK(sweep.exit_code() == 0);
}

TEST_CASE("a SIGKILLed driver's sweep resumes from the saved state and checkpoints",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("killed.yaml", R"(
name: killed
trainable: toy_objective
param_space:
  x: {grid_search: [1.0, 2.0, 3.0]}
  iterations: 8
  work_ms: 150
tune: {metric: loss, mode: min, max_concurrent_trials: 2}
run: {storage_path: STORAGE}
)");
  const std::string experiment = sandbox.results() + "/killed";
  {
    // The driver, its embedded cluster and its workers share one process group: all die.
    ChildProcess sweep({RAYD_BINARY, "tune", file}, sandbox.Env());
    REQUIRE(WaitFor([&] { return SomeTrialReported(experiment, 3); }, 120s));
    sweep.Signal(SIGKILL);
    REQUIRE(sweep.WaitExit(30s));
  }
  std::string out;
  int rc = sandbox.Run({"tune", file, "--resume"}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  json state = ReadJson(experiment + "/experiment_state.json");
  REQUIRE(state["trials"].size() == 3);
  for (const json& t : state["trials"]) {
    CHECK(t["status"] == "TERMINATED");
    std::vector<json> results = ReadLines(TrialDir(experiment, t) + "/result.json");
    REQUIRE(!results.empty());
    CHECK(results.back()["iteration"] == 8);
    // No iteration ran twice: the resumed run went on from the last checkpoint.
    std::set<int> seen;
    for (const json& r : results) CHECK(seen.insert(r["iteration"].get<int>()).second);
  }
}

TEST_CASE("A malformed tune.yaml is rejected naming the key and line before anything starts",
          "[tune][e2e]") {
  Sandbox sandbox;
  struct Case {
    std::string yaml;
    std::vector<std::string> expected;
  };
  std::vector<Case> cases = {
      {"name: bad\ntrainable: toy_objective\ntune:\n  metric: loss\n  num_smples: 3\n",
       {"bad.yaml:5:", "num_smples"}},
      {"name: bad\ntrainable: toy_objective\ntune:\n  metric: loss\n  scheduler: {type: ashaa}\n",
       {"bad.yaml:5:", "ashaa"}},
      {"name: bad\ntrainable: toy_objective\nparam_space:\n  lr: {uniform: [1.0, 0.1]}\n",
       {"bad.yaml:4:", "lr"}},
      {"name: bad\ntrainable: no_such_loop\n", {"no_such_loop", "toy_objective"}},
      {"name: bad\ntrainable: toy_objective\ntune: {num_samples: eight}\n",
       {"bad.yaml:3:", "num_samples"}},
  };
  for (const Case& c : cases) {
    std::string file = sandbox.WriteYaml("bad.yaml", c.yaml);
    std::string out;
    int rc = sandbox.Run({"tune", file}, &out, 60s);
    INFO(c.yaml << "\n-> " << out);
    CHECK(rc == 2);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    for (const auto& part : c.expected) CHECK(Contains(out, part));
    CHECK(!fs::exists(sandbox.results()));  // nothing started, nothing written
  }
  std::string out;
  CHECK(sandbox.Run({"tune", sandbox.root() + "/missing.yaml"}, &out, 60s) == 2);
  CHECK(Contains(out, "missing.yaml"));
}

TEST_CASE("the example MLP trains at ZeRO stage 2 in bf16 with accumulation, and refuses an "
          "unknown stage or precision naming the key",
          "[train][e2e]") {
  Sandbox sandbox;
  auto train = [&](const std::string& name, const std::string& extra, std::string* out) {
    std::string file = sandbox.WriteYaml(name + ".yaml", R"(
name: )" + name + R"(
train_loop: mlp_classifier
config: {lr: 0.05, hidden: 64, batch_size: 16, epochs: 3, train_size: 2048, )" + extra + R"(}
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
run: {storage_path: STORAGE}
)");
    return sandbox.Run({"train", file}, out);
  };
  std::string out;
  int rc = train("whole", "precision: bf16, accumulation_steps: 2", &out);
  INFO(out);
  REQUIRE(rc == 0);
  rc = train("large", "zero_stage: 2, precision: bf16, accumulation_steps: 2", &out);
  REQUIRE(rc == 0);
  std::vector<json> results = ReadLines(sandbox.results() + "/large/result.json");
  REQUIRE(results.size() == 3);
  CHECK(results.back()["loss"].get<double>() < results.front()["loss"].get<double>());
  // Rank 0 holds only its shard of SGD's momentum buffers, and of the gradients.
  const json whole = ReadLines(sandbox.results() + "/whole/result.json").back();
  const double state = results.back()["optimizer_state_bytes"].get<double>();
  const double grads = results.back()["grad_bytes"].get<double>();
  CHECK(state > 0);
  CHECK(state < 0.8 * whole["optimizer_state_bytes"].get<double>());
  CHECK(grads > 0);
  CHECK(grads < 0.8 * whole["grad_bytes"].get<double>());
  json params = ReadJson(sandbox.results() + "/large/params.json");
  CHECK(params["config"]["zero_stage"] == 2);
  CHECK(params["config"]["precision"] == "bf16");

  CHECK(train("bad_stage", "zero_stage: 5", &out) != 0);
  CHECK(Contains(out, "config.zero_stage: expected 0, 1, 2 or 3, got 5"));
  CHECK(train("bad_layers", "layers: 0", &out) != 0);
  CHECK(Contains(out, "config.layers: expected at least 1, got 0"));
  CHECK(train("bad_clip", "max_grad_norm: -1", &out) != 0);
  CHECK(Contains(out, "config.max_grad_norm: expected 0 (no clipping) or more"));
  CHECK(train("bad_precision", "precision: fp8", &out) != 0);
  CHECK(Contains(out, "config.precision: expected fp32, bf16 or fp16, got 'fp8'"));
  CHECK(train("fp16_cpu", "precision: fp16", &out) != 0);
  CHECK(Contains(out, "config.precision: fp16 needs a GPU"));
}

TEST_CASE(
    "the example MLP at ZeRO stage 3 matches stage 0 with half the parameters per rank, "
    "and its checkpoints load at any stage and world size",
    "[train][e2e]") {
  Sandbox sandbox;
  auto train = [&](const std::string& name, int workers, int stage, int epochs,
                   const std::string& extra = "") {
    std::string file = sandbox.WriteYaml(name + ".yaml", R"(
name: )" + name + R"(
train_loop: mlp_classifier
config: {lr: 0.05, hidden: 64, batch_size: 16, train_size: 1024, epochs: )" +
                                                             std::to_string(epochs) +
                                                             ", zero_stage: " +
                                                             std::to_string(stage) + extra + R"(}
scaling: {num_workers: )" + std::to_string(workers) + R"(, resources_per_worker: {CPU: 0.5}}
run: {storage_path: STORAGE}
)");
    std::string out;
    // "hop", "wide" and "narrow" go on from their own checkpoints.
    const int rc = sandbox.Run({"train", file, "--resume"}, &out);
    INFO(out);
    REQUIRE(rc == 0);
    return ReadLines(sandbox.results() + "/" + name + "/result.json");
  };
  const std::vector<json> whole = train("whole", 2, 0, 2);
  std::vector<json> sharded = train("sharded", 2, 3, 2);
  REQUIRE(sharded.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    // The same steps from the same gradients.
    CHECK(std::abs(sharded[i]["loss"].get<double>() - whole[i]["loss"].get<double>()) < 1e-5);
    for (const char* key : {"param_bytes", "grad_bytes", "optimizer_state_bytes"}) {
      INFO(key);
      CHECK(sharded[i][key].get<double>() > 0);
      // 1/N of the model's, plus at most one element of padding per unit (3 units).
      CHECK(sharded[i][key].get<double>() <= whole[i][key].get<double>() / 2 + 3 * 4);
    }
  }
  // In bf16 with accumulation and clipping too, on a deeper model (6 units).
  const std::string bf16 =
      ", precision: bf16, accumulation_steps: 2, layers: 5, max_grad_norm: 0.5";
  const std::vector<json> whole16 = train("whole16", 2, 0, 2, bf16);
  const std::vector<json> sharded16 = train("sharded16", 2, 3, 2, bf16);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(std::abs(sharded16[i]["loss"].get<double>() - whole16[i]["loss"].get<double>()) < 1e-4);
    CHECK(sharded16[i]["param_bytes"].get<double>() <=
          whole16[i]["param_bytes"].get<double>() / 2 + 6 * 4);
  }
  CHECK(std::abs(sharded16[1]["loss"].get<double>() - sharded[1]["loss"].get<double>()) > 1e-6);
  // Checkpoints (the gathered model.pt and the optimizer's shards, in the model's flat space)
  // load at any stage: a run that hops 3 -> 0 -> 3 on 2 ranks has the losses of one that never
  // stopped, momentum included.
  const std::vector<json> straight = train("straight", 2, 0, 4);
  train("hop", 2, 3, 2);
  train("hop", 2, 0, 3);
  const std::vector<json> hop = train("hop", 2, 3, 4);
  REQUIRE(hop.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO("epoch " << i);
    CHECK(std::abs(hop[i]["loss"].get<double>() - straight[i]["loss"].get<double>()) < 1e-5);
  }
  // Across world sizes at stage 3: a 4-rank checkpoint resumes on 2, the curve going on.
  train("wide", 4, 3, 2);
  const std::vector<json> wide = train("wide", 2, 3, 4);
  REQUIRE(wide.size() == 4);
  CHECK(wide[2]["loss"].get<double>() < wide[1]["loss"].get<double>() * 1.02);
  CHECK(wide[3]["loss"].get<double>() < wide[0]["loss"].get<double>());
  CHECK(wide[3]["param_bytes"].get<double>() <= whole[0]["param_bytes"].get<double>() / 2 + 3 * 4);
  // And on another world size: a 2-rank stage-3 checkpoint on 1 rank at stage 0.
  train("narrow", 2, 3, 2);
  const std::vector<json> narrow = train("narrow", 1, 0, 3);
  REQUIRE(narrow.size() == 3);
  CHECK(narrow[2]["param_bytes"].get<double>() == whole[0]["param_bytes"].get<double>());
  CHECK(narrow[2]["loss"].get<double>() < narrow[0]["loss"].get<double>());
}

TEST_CASE(
    "the example MLP under pipeline, tensor and 3D meshes has the one-rank run's losses, "
    "checkpoints per part, and refuses bad meshes naming the key",
    "[train][e2e]") {
  Sandbox sandbox;
  auto run = [&](const std::string& name, int workers, const std::string& mesh,
                 const std::string& extra, int epochs, std::string* out) {
    std::string file = sandbox.WriteYaml(
        name + ".yaml", R"(
name: )" + name + R"(
train_loop: mlp_classifier
config: {lr: 0.05, layers: 3, train_size: 512, val_size: 256, epochs: )" +
                            std::to_string(epochs) +
                            (Contains(extra, "hidden") ? "" : ", hidden: 32") +
                            (Contains(extra, "batch_size") ? "" : ", batch_size: 32") + extra +
                            R"(}
scaling: {num_workers: )" + std::to_string(workers) +
                            R"(, resources_per_worker: {CPU: 0.5})" + mesh + R"(}
run: {storage_path: STORAGE}
)");
    return sandbox.Run({"train", file, "--resume"}, out);  // "resumed" is trained twice
  };
  auto train = [&](const std::string& name, int workers, const std::string& mesh,
                   const std::string& extra = "", int epochs = 2) {
    std::string out;
    const int rc = run(name, workers, mesh, extra, epochs, &out);
    INFO(out);
    REQUIRE(rc == 0);
    return ReadLines(sandbox.results() + "/" + name + "/result.json");
  };
  auto same_curve = [](const std::vector<json>& a, const std::vector<json>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("epoch " << i);
      for (const char* key : {"loss", "train_loss"}) {
        INFO(key << ": " << a[i][key] << " vs " << b[i][key]);
        CHECK(std::abs(a[i][key].get<double>() - b[i][key].get<double>()) <=
              1e-4 * std::abs(b[i][key].get<double>()));
      }
    }
  };
  const std::vector<json> one = train("one", 1, "");
  REQUIRE(one.size() == 2);
  CHECK(one[1]["loss"].get<double>() < one[0]["loss"].get<double>());
  // Same seed, same global batch (one data replica): the same losses, summation order aside.
  same_curve(train("pipe", 2, ", mesh: {pipeline: 2}", ", micro_batches: 4"), one);
  same_curve(train("gpipe", 2, ", mesh: {pipeline: 2}", ", micro_batches: 4, schedule: gpipe"),
             one);
  same_curve(train("tensor", 2, ", mesh: {tensor: 2}"), one);
  same_curve(train("both", 4, ", mesh: {data: 1, pipeline: 2, tensor: 2}", ", micro_batches: 2"),
             one);
  // Two data replicas of half the batch each: the same global batch, the gradients averaged
  // over the data group; and clipping by the whole model's norm across stages and tensor shards.
  same_curve(train("replicas", 4, ", mesh: {data: 2, tensor: 2}", ", batch_size: 16"), one);
  // The effective batch is the batch times the data-parallel ranks, not the workers.
  CHECK(ReadJson(sandbox.results() + "/both/params.json")["effective_batch_size"] == 32);
  CHECK(ReadJson(sandbox.results() + "/replicas/params.json")["effective_batch_size"] == 32);
  const std::string clip = ", max_grad_norm: 0.05";
  const std::vector<json> one_clipped = train("one_clipped", 1, "", clip);
  same_curve(train("clipped", 4, ", mesh: {pipeline: 2, tensor: 2}", clip), one_clipped);
  CHECK(std::abs(one_clipped[1]["loss"].get<double>() - one[1]["loss"].get<double>()) > 1e-6);

  // Each part's model and optimizer state, and the mesh; resumed on the same mesh, the curve
  // is the one of a run that never stopped.
  const std::string dir = sandbox.results() + "/both/checkpoint_000001";
  for (const char* part : {"p0_t0", "p0_t1", "p1_t0", "p1_t1"}) {
    INFO(part);
    CHECK(fs::exists(dir + "/model_" + std::string(part) + ".pt"));
    CHECK(fs::exists(dir + "/optimizer_" + std::string(part) + "/optimizer.complete"));
  }
  train("resumed", 2, ", mesh: {pipeline: 2}", ", micro_batches: 4", 1);
  same_curve(train("resumed", 2, ", mesh: {pipeline: 2}", ", micro_batches: 4", 2), one);
  // On another data size: two replicas' optimizer shards load into one (ZeRO's flat space).
  train("regrid", 4, ", mesh: {data: 2, tensor: 2}", ", batch_size: 16", 1);
  same_curve(train("regrid", 2, ", mesh: {tensor: 2}", "", 2), one);

  std::string out;
  fs::copy(sandbox.results() + "/both", sandbox.results() + "/moved", fs::copy_options::recursive);
  CHECK(run("moved", 2, ", mesh: {pipeline: 2}", "", 3, &out) != 0);
  CHECK(Contains(out, "the checkpoint was taken with pipeline 2 and tensor 2"));
  CHECK(run("bad_mesh", 4, ", mesh: {data: 2, pipeline: 3}", "", 1, &out) == 2);
  CHECK(Contains(out, "scaling.mesh: data x pipeline x tensor must equal num_workers (4)"));
  CHECK(run("bad_split", 2, ", mesh: {tensor: 2}", ", hidden: 33", 1, &out) != 0);
  CHECK(Contains(out, "config.hidden: 33 does not split into 2 tensor-parallel parts"));
  CHECK(run("bad_schedule", 2, ", mesh: {pipeline: 2}", ", schedule: zigzag", 1, &out) != 0);
  CHECK(Contains(out, "config.schedule: expected 1f1b or gpipe, got 'zigzag'"));
}

TEST_CASE("a sweep's trials run on a pipeline mesh, each schedule with the same losses",
          "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("meshes.yaml", R"(
name: meshes
trainable: mlp_classifier
scaling: {num_workers: 2, resources_per_worker: {CPU: 0.5}, mesh: {pipeline: 2}}
param_space:
  schedule: {grid_search: [gpipe, 1f1b]}
  micro_batches: 4
  hidden: 32
  epochs: 2
  train_size: 256
tune: {metric: loss, mode: min}
run: {storage_path: STORAGE}
)");
  json state = sandbox.Sweep(file, "meshes", 2);
  const std::string experiment = sandbox.results() + "/meshes";
  std::vector<double> last_losses;
  for (const json& trial : state["trials"]) {
    CHECK(trial["status"] == "TERMINATED");
    std::vector<json> results = ReadLines(TrialDir(experiment, trial) + "/result.json");
    REQUIRE(results.size() == 2);
    last_losses.push_back(results.back()["loss"].get<double>());
    // Rank 0 holds the first stage only: less than the whole model's 25,818 parameters.
    CHECK(results.back()["param_bytes"].get<double>() < 25818 * 4);
    CHECK(results.back()["param_bytes"].get<double>() > 0);
  }
  CHECK(std::abs(last_losses[0] - last_losses[1]) <= 1e-4 * last_losses[0]);
}

TEST_CASE("a sweep tunes the ZeRO stage and precision of 2-worker trials", "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("zero.yaml", R"(
name: zero
trainable: mlp_classifier
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
param_space:
  zero_stage: {grid_search: [0, 1, 2]}
  precision: {grid_search: [fp32, bf16]}
  hidden: 32
  epochs: 2
  train_size: 512
tune: {metric: loss, mode: min}
run: {storage_path: STORAGE}
)");
  json state = sandbox.Sweep(file, "zero", 6);
  const std::string experiment = sandbox.results() + "/zero";
  std::map<int, double> state_bytes, grad_bytes;  // by stage
  for (const json& trial : state["trials"]) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(experiment, trial);
    const json params = ReadJson(dir + "/params.json");
    const int stage = params["zero_stage"];
    const json last = ReadLines(dir + "/result.json").back();
    CHECK(last["training_iteration"] == 2);
    state_bytes[stage] = last["optimizer_state_bytes"].get<double>();
    grad_bytes[stage] = last["grad_bytes"].get<double>();
    // Each trial's checkpoints hold its ranks' shards (one at stage 0).
    const std::string checkpoint = dir + "/" + last["checkpoint_dir_name"].get<std::string>();
    CHECK(fs::exists(checkpoint + (stage == 0 ? "/optimizer_shard_0_of_1.pt"
                                              : "/optimizer_shard_1_of_2.pt")));
  }
  // Rank 0 holds half of SGD's momentum from stage 1 on, and half the gradients at stage 2.
  CHECK(state_bytes[1] == Approx(state_bytes[0] / 2).margin(8));
  CHECK(state_bytes[2] == Approx(state_bytes[0] / 2).margin(8));
  CHECK(grad_bytes[1] == grad_bytes[0]);
  CHECK(grad_bytes[2] == Approx(grad_bytes[0] / 2).margin(8));
}

TEST_CASE("a sharded checkpoint taken on 4 ranks resumes on 2 and the loss curve continues",
          "[train][e2e]") {
  Sandbox sandbox;
  auto train = [&](int workers, int stage, int epochs, std::string* out) {
    const std::string yaml =
        "name: resume\n"
        "train_loop: mlp_classifier\n"
        "config: {lr: 0.02, hidden: 64, batch_size: 16, train_size: 1024, zero_stage: " +
        std::to_string(stage) + ", epochs: " + std::to_string(epochs) +
        "}\n"
        "scaling: {num_workers: " +
        std::to_string(workers) +
        ", resources_per_worker: {CPU: 0.5}}\n"
        "run: {storage_path: STORAGE}\n";
    std::string file = sandbox.WriteYaml("resume.yaml", yaml);
    return sandbox.Run({"train", file, "--resume"}, out);
  };
  const std::string run = sandbox.results() + "/resume";
  std::string out;
  int rc = train(4, 1, 3, &out);
  INFO(out);
  REQUIRE(rc == 0);
  // Every rank's shard of the optimizer state is in each checkpoint, with the marker.
  const std::string taken = run + "/checkpoint_000002";
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(fs::exists(taken + "/optimizer_shard_" + std::to_string(rank) + "_of_4.pt"));
  }
  CHECK(rayd::testing::ReadFile(taken + "/optimizer.complete") == "4\n");
  CHECK(fs::exists(taken + "/model.pt"));
  // The same run on 2 ranks at stage 2 goes on from epoch 3 with the 4 ranks' momentum.
  rc = train(2, 2, 6, &out);
  REQUIRE(rc == 0);
  std::vector<json> results = ReadLines(run + "/result.json");
  REQUIRE(results.size() == 6);
  for (int i = 0; i < 6; ++i) {
    CHECK(results[i]["epoch"] == i);
    CHECK(results[i]["training_iteration"] == i + 1);
  }
  // The curve continues where it was: the first resumed epoch is as good as the last taken one
  // and far better than the first; it goes on falling.
  auto loss = [&](int epoch) { return results[epoch]["loss"].get<double>(); };
  CHECK(loss(3) < loss(0));
  CHECK(loss(3) < loss(2) * 1.02);
  CHECK(loss(5) < loss(3));
  CHECK(fs::exists(run + "/checkpoint_000005/optimizer_shard_1_of_2.pt"));
  CHECK_FALSE(fs::exists(run + "/checkpoint_000005/optimizer_shard_2_of_4.pt"));
}

TEST_CASE("rayd train runs the example MLP on 2 workers and its loss falls", "[train][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("train.yaml", R"(
name: mlp
train_loop: mlp_classifier
config: {lr: 0.05, hidden: 64, batch_size: 32, epochs: 4, train_size: 2048}
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
run:
  storage_path: STORAGE
  checkpoint: {num_to_keep: 2, score_attribute: loss, score_order: min}
)");
  std::string out;
  int rc = sandbox.Run({"train", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Contains(out, "[iteration 4]"));
  const std::string run = sandbox.results() + "/mlp";
  std::vector<json> results = ReadLines(run + "/result.json");
  REQUIRE(results.size() == 4);
  CHECK(results.back()["loss"].get<double>() < results.front()["loss"].get<double>());
  json params = ReadJson(run + "/params.json");
  CHECK(params["num_workers"] == 2);
  CHECK(params["effective_batch_size"] == 64);
  int checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(run)) {
    checkpoints += entry.path().filename().string().starts_with("checkpoint_");
  }
  CHECK(checkpoints == 2);
}

TEST_CASE("rayd train's flags override a train.yaml's keys, and a flag that cannot apply is "
          "refused naming it",
          "[train][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("toy.yaml", R"(
name: fromfile
train_loop: toy_objective
config: {iterations: 2, checkpoint: false}
scaling: {num_workers: 2, resources_per_worker: {CPU: 0.5}}
run: {storage_path: STORAGE}
)");
  std::string out;
  const std::string elsewhere = sandbox.root() + "/elsewhere";
  int rc = sandbox.Run({"train", file, "--num-workers", "1", "--name", "flagged", "--storage-path",
                        elsewhere, "--config", R"({"iterations": 3})"},
                       &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Contains(out, "rayd train: over " + file + ": scaling.num_workers 1, name flagged, "
                      "run.storage_path " + elsewhere + R"(, config {"iterations":3})"));
  CHECK_FALSE(fs::exists(sandbox.results() + "/fromfile"));
  const std::string run = elsewhere + "/flagged";
  CHECK(ReadLines(run + "/result.json").size() == 3);
  CHECK(ReadJson(run + "/params.json")["num_workers"] == 1);

  rc = sandbox.Run({"train", file, "--launcher", "none"}, &out);
  CHECK(rc == 2);
  CHECK(Contains(out, "rayd train: " + file + ": --launcher: the file's trainable is the loop "
                      "'toy_objective', which no launcher starts"));
}

TEST_CASE("rayd train of a finished run's file starts a new dated run and says so, --resume goes "
          "on with it and --overwrite replaces it",
          "[train][e2e]") {
  Sandbox sandbox;
  auto train = [&](int iterations, const std::vector<std::string>& flags, std::string* out) {
    std::string file = sandbox.WriteYaml("again.yaml", R"(
name: again
train_loop: toy_objective
config: {iterations: )" + std::to_string(iterations) + R"(}
scaling: {num_workers: 1, resources_per_worker: {CPU: 0.5}}
run: {storage_path: STORAGE}
)");
    std::vector<std::string> args = {"train", file};
    args.insert(args.end(), flags.begin(), flags.end());
    const int rc = sandbox.Run(args, out);
    INFO(*out);
    return rc;
  };
  const std::string first = sandbox.results() + "/again";
  std::string out;
  REQUIRE(train(2, {}, &out) == 0);
  REQUIRE(ReadLines(first + "/result.json").size() == 2);
  // The same file again: a run of its own, trained from the start, and a line saying where.
  REQUIRE(train(2, {}, &out) == 0);
  CHECK(Contains(out, "rayd train: " + first + " holds an earlier run (--resume continues it, "
                      "--overwrite replaces it); this one goes to " + first + "_"));
  CHECK(ReadLines(first + "/result.json").size() == 2);
  int runs = 0;
  for (const auto& entry : fs::directory_iterator(sandbox.results())) {
    if (!entry.path().filename().string().starts_with("again_")) continue;
    ++runs;
    CHECK(ReadLines(entry.path().string() + "/result.json").size() == 2);
  }
  CHECK(runs == 1);
  // --resume goes on from the first run's checkpoint, to 4 iterations in all.
  REQUIRE(train(4, {"--resume"}, &out) == 0);
  CHECK(Contains(out, "rayd train: resuming " + first + " from its latest checkpoint"));
  std::vector<json> resumed = ReadLines(first + "/result.json");
  REQUIRE(resumed.size() == 4);
  CHECK(resumed.back()["restored_iteration"] == 2);
  // --overwrite starts it over.
  REQUIRE(train(1, {"--overwrite"}, &out) == 0);
  CHECK(ReadLines(first + "/result.json").size() == 1);
  CHECK(train(1, {"--overwrite", "--resume"}, &out) == 2);
}

TEST_CASE("a TPE sweep proposes better configs than its random start, and resumes its searcher",
          "[tune][e2e]") {
  Sandbox sandbox;
  // toy_objective's loss is lowest near x = 3, y = -1; one trial at a time, so the proposals
  // depend only on the seed and the results.
  const std::string yaml = R"(
name: tpe
trainable: toy_objective
param_space:
  x: {uniform: [-10, 10]}
  y: {uniform: [-10, 10]}
  iterations: 2
tune:
  metric: loss
  mode: min
  num_samples: 24
  max_concurrent_trials: 1
  seed: 11
  search: {type: tpe, n_startup_trials: 8}
run: {storage_path: STORAGE}
)";
  std::string file = sandbox.WriteYaml("tpe.yaml", yaml);
  json state = sandbox.Sweep(file, "tpe", 24);
  const std::string experiment = sandbox.results() + "/tpe";
  CHECK(state["searcher"]["type"] == "tpe");
  CHECK(state["searcher"]["state"]["observed"].size() == 24);
  // The last 8 proposals (model-based) against the 8 random ones, by their distance to the
  // optimum; and the best trial is one the model proposed.
  auto distance = [](const json& trial) {
    const double x = trial["config"]["x"].get<double>(), y = trial["config"]["y"].get<double>();
    return std::hypot(x - 3, y + 1);
  };
  double random = 0, learned = 0;
  for (int i = 0; i < 8; ++i) random += distance(state["trials"][i]);
  for (int i = 16; i < 24; ++i) learned += distance(state["trials"][i]);
  CHECK(learned < random * 0.75);
  int best = 0;
  for (int i = 1; i < 24; ++i) {
    if (distance(state["trials"][i]) < distance(state["trials"][best])) best = i;
  }
  CHECK(best >= 8);

  // Resuming a finished sweep with more samples continues the searcher where it stopped.
  std::string more = yaml;
  more.replace(more.find("num_samples: 24"), 15, "num_samples: 26");
  sandbox.WriteYaml("tpe.yaml", more);
  std::string out;
  const int rc = sandbox.Run({"tune", file, "--resume"}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  json resumed = ReadJson(experiment + "/experiment_state.json");
  CHECK(resumed["trials"].size() == 26);
  CHECK(resumed["searcher"]["state"]["observed"].size() == 26);
}

TEST_CASE("TPE with ASHA fits its model on the rungs' results, BOHB-style", "[tune][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("bohb.yaml", R"(
name: bohb
trainable: toy_objective
param_space:
  x: {uniform: [-10, 10]}
  y: {uniform: [-10, 10]}
  iterations: 4
tune:
  metric: loss
  mode: min
  num_samples: 16
  max_concurrent_trials: 2
  seed: 5
  search: {type: tpe, n_startup_trials: 4}
  scheduler: {type: asha, max_t: 4, grace_period: 1, reduction_factor: 2}
run: {storage_path: STORAGE}
)");
  json state = sandbox.Sweep(file, "bohb", 16);
  int stopped_early = 0;
  for (const json& trial : state["trials"]) {
    CHECK(trial["status"] == "TERMINATED");
    if (trial["last_result"]["training_iteration"].get<int>() < 4) ++stopped_early;
  }
  CHECK(stopped_early >= 1);
  // Every result reached the searcher at its budget (training_iteration 1 to 4).
  const json& budgets = state["searcher"]["state"]["at_budget"];
  REQUIRE(budgets.size() == 4);
  CHECK(budgets[0]["budget"] == 1);
  CHECK(budgets[0]["observed"].size() == 16);
  CHECK(budgets[3]["observed"].size() < 16);
}

TEST_CASE("rayd tune --simulate replays a recorded sweep's curves, the same way every time",
          "[tune][e2e]") {
  Sandbox sandbox;
  // A real grid first: every config trained to the end, the recording.
  std::string record = sandbox.WriteYaml("record.yaml", R"(
name: record
trainable: toy_objective
param_space:
  x: {grid_search: [-2, 0, 2, 4]}
  y: {grid_search: [-1, 1]}
  iterations: 6
tune: {metric: loss, mode: min, max_concurrent_trials: 2}
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"tune", record}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  // Then TPE with ASHA over the same space, replayed from it.
  std::string sweep = sandbox.WriteYaml("sweep.yaml", R"(
name: replayed
trainable: toy_objective
param_space:
  x: {choice: [-2, 0, 2, 4]}
  y: {choice: [-1, 1]}
  iterations: 6
tune:
  metric: loss
  mode: min
  num_samples: 14
  max_concurrent_trials: 3
  seed: 11
  search: {type: tpe, n_startup_trials: 4}
  scheduler: {type: asha, max_t: 6, grace_period: 1, reduction_factor: 2}
run: {storage_path: STORAGE}
)");
  const std::string recording = sandbox.results() + "/record";
  auto curve_of = [&](const json& config) {
    for (const auto& entry : fs::directory_iterator(recording)) {
      if (!fs::exists(entry.path() / "params.json")) continue;
      json params = ReadJson((entry.path() / "params.json").string());
      if (params["x"] == config["x"] && params["y"] == config["y"]) {
        return ReadLines((entry.path() / "result.json").string());
      }
    }
    FAIL("no recorded curve for " << config.dump());
    return std::vector<json>{};
  };
  std::vector<std::string> runs;
  for (int run = 0; run < 2; ++run) {
    rc = sandbox.Run({"tune", sweep, "--simulate", recording, "--overwrite"}, &out, 60s);
    INFO(out);
    REQUIRE(rc == 0);
    CHECK(Contains(out, "Simulated 14 trials, 3 at once, on 8 recorded curves"));
    CHECK(Contains(out, "results replayed (training iterations)"));
    json state = ReadJson(sandbox.results() + "/replayed/experiment_state.json");
    REQUIRE(state["trials"].size() == 14);
    std::string trace;
    for (const json& trial : state["trials"]) {
      CHECK(trial["status"] == "TERMINATED");
      // Each trial's results are the recorded curve of its config, as far as ASHA let it go.
      std::vector<json> replayed =
          ReadLines(sandbox.results() + "/replayed/" + trial["dir_name"].get<std::string>() +
                    "/result.json");
      std::vector<json> recorded = curve_of(trial["config"]);
      REQUIRE(replayed.size() <= recorded.size());
      for (size_t i = 0; i < replayed.size(); ++i) {
        CHECK(replayed[i]["loss"] == recorded[i]["loss"]);
        CHECK(replayed[i]["training_iteration"] == recorded[i]["training_iteration"]);
      }
      trace += trial["config"].dump() + std::to_string(replayed.size()) + ";";
    }
    runs.push_back(trace);
  }
  CHECK(runs[0] == runs[1]);

  // A config the recording lacks is named, with its line, before anything starts.
  std::string wider = sandbox.WriteYaml("wider.yaml", R"(
name: wider
trainable: toy_objective
param_space:
  x: {choice: [-2, 0, 2, 4]}
  y: {choice: [-1, 1, 3]}
  iterations: 6
tune: {metric: loss, mode: min, num_samples: 4}
run: {storage_path: STORAGE}
)");
  rc = sandbox.Run({"tune", wider, "--simulate", recording}, &out, 60s);
  CHECK(rc == 2);
  CHECK(Contains(out, "wider.yaml:6: param_space.y: no recorded curve in"));
  CHECK(Contains(out, "has y = 3 (recorded: -1, 1)"));
  CHECK_FALSE(fs::exists(sandbox.results() + "/wider"));
}

}  // namespace

TEST_CASE("an NSGA-II sweep over two objectives breeds from its random start and reports the front",
          "[tune][e2e]") {
  Sandbox sandbox;
  const std::string file = sandbox.WriteYaml("nsga.yaml", R"(
name: nsga
trainable: toy_objective
param_space:
  x: {uniform: [0.0, 6.0]}
  y: {uniform: [-3.0, 1.0]}
  lr: {loguniform: [0.01, 1.0]}
  iterations: 3
tune:
  metric: [loss, iteration]
  mode: [min, max]
  num_samples: 10
  max_concurrent_trials: 2
  seed: 4
  search: {type: nsga2, population_size: 4}
run: {storage_path: STORAGE}
)");
  const json state = sandbox.Sweep(file, "nsga", 10);
  int bred = 0;
  for (const json& t : state["trials"]) {
    CHECK(t["status"] == "TERMINATED");
    bred += t.value("searcher", "") == "nsga2";
  }
  // Four from the random start, the rest bred from the trials that ended.
  CHECK(bred == 6);
  CHECK(std::filesystem::exists(sandbox.results() + "/nsga/pareto_front.csv"));
}

TEST_CASE("an objective no trial ever reports fails the sweep naming it and the metrics reported",
          "[tune][e2e]") {
  Sandbox sandbox;
  const std::string file = sandbox.WriteYaml("typo.yaml", R"(
name: typo
trainable: toy_objective
param_space: {x: {uniform: [0.0, 6.0]}, iterations: 2}
tune: {metric: [loss, acuracy], mode: [min, max], num_samples: 2}
run: {storage_path: STORAGE}
)");
  std::string out;
  CHECK(sandbox.Run({"tune", file}, &out) == 1);
  CHECK(Contains(out, "no trial ever reported the objective acuracy (the metrics reported: "));
  CHECK(Contains(out, "loss"));
}
