// Command trainables as a user runs them: `rayd tune` and `rayd train -- CMD` over a shell
// script that speaks the report wire in bash, and over examples/python/mlp_ddp.py, a plain
// PyTorch DDP script (Debian's python3-torch, Gloo) that reports through python/rayd. Checks
// ASHA's early stops and PBT's clones on real processes, a SIGKILLed rank's restart from its
// checkpoint, every bad input's one-line reason, and that no process of a trial outlives it.
//
// The Python tests exit 77 (CTest: skipped) where /usr/bin/python3 cannot import torch.

#include <dirent.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "tune_sandbox.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::Contains;
using rayd::testing::ReadFile;
using rayd::testing::ReadJson;
using rayd::testing::ReadJsonLines;
using rayd::testing::TrialDir;
using rayd::testing::WaitFor;
namespace fs = std::filesystem;

const std::string kExamples = RAYD_SOURCE_DIR "/examples";

class Sandbox : public rayd::testing::TuneSandbox {
 public:
  Sandbox() : TuneSandbox(RAYD_BINARY) {}
  ~Sandbox() override {
    // Whatever a failed test left running of its trials' commands.
    for (pid_t pid : CommandProcesses()) ::kill(pid, SIGKILL);
  }

  // Processes started for a trial of this sandbox: their RAYD_TRIAL_DIR is under its root.
  std::vector<pid_t> CommandProcesses(const std::string& extra = "") const {
    std::vector<pid_t> found;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return found;
    const std::string marker = "RAYD_TRIAL_DIR=" + root();
    while (dirent* entry = ::readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (pid <= 0) continue;
      const std::string environ = ReadFile("/proc/" + std::to_string(pid) + "/environ");
      if (!Contains(environ, marker)) continue;
      if (!extra.empty() && !Contains(environ, extra)) continue;
      // A zombie is gone already, but for its parent's wait.
      if (Contains(ReadFile("/proc/" + std::to_string(pid) + "/stat"), ") Z ")) continue;
      found.push_back(pid);
    }
    ::closedir(proc);
    return found;
  }
};

// Debian's python3-torch (the first python3 on PATH here is not Debian's).
void RequireTorch() {
  if (std::system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") != 0) {
    std::printf("skipped: /usr/bin/python3 cannot import torch (apt install python3-torch)\n");
    std::fflush(stdout);
    std::exit(77);
  }
}

std::vector<json> Trials(const std::string& experiment) {
  return ReadJson(experiment + "/experiment_state.json").at("trials");
}

TEST_CASE("a bash script trainable reports over the wire and resumes from its checkpoint",
          "[command][e2e]") {
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("bash.yaml", R"(
name: bash
trainable:
  command: [)" + kExamples + R"(/python/report.sh]
  launcher: none
param_space:
  steps: {grid_search: [3, 5]}
tune: {metric: score, mode: max}
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/bash";
  std::vector<json> trials = Trials(experiment);
  REQUIRE(trials.size() == 2);
  for (const json& trial : trials) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(experiment, trial);
    std::vector<json> results = ReadJsonLines(dir + "/result.json");
    const int steps = trial["config"]["steps"].get<int>();
    REQUIRE(static_cast<int>(results.size()) == steps);
    for (int i = 0; i < steps; ++i) CHECK(results[i]["step"] == i + 1);
    CHECK(
        fs::exists(dir + "/" + results.back()["checkpoint_dir_name"].get<std::string>() + "/step"));
    CHECK(Contains(ReadFile(dir + "/rank_0.log"), "--- rayd: attempt 1, rank 0 of 1"));
  }

  // ASHA's promotion form pauses commands at its rungs (their processes end) and starts them
  // again from their checkpoints: every step reported once, in order.
  std::string paused = sandbox.WriteYaml("paused.yaml", R"(
name: paused
trainable:
  command: [)" + kExamples + R"(/python/report.sh]
  launcher: none
param_space:
  steps: 4
  x: {grid_search: [1, 2, 3, 4]}
tune:
  metric: score
  mode: max
  max_concurrent_trials: 2
  scheduler: {type: asha, time_attr: training_iteration, max_t: 4, grace_period: 1,
              reduction_factor: 2, promotion: true}
run: {storage_path: STORAGE}
)");
  std::string paused_out;
  REQUIRE(sandbox.Run({"tune", paused}, &paused_out) == 0);
  INFO(paused_out);
  int resumed = 0;
  for (const json& trial : Trials(sandbox.results() + "/paused")) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(sandbox.results() + "/paused", trial);
    std::vector<json> results = ReadJsonLines(dir + "/result.json");
    for (size_t i = 0; i < results.size(); ++i) CHECK(results[i]["step"] == i + 1);
    if (Contains(ReadFile(dir + "/rank_0.log"), "resumed from step")) ++resumed;
  }
  CHECK(resumed >= 1);
  CHECK(sandbox.CommandProcesses().empty());

  // `rayd train --resume` of the same script resumes the run from its latest checkpoint: a run
  // named like a finished one goes on after its last step.
  std::string train_out;
  const std::vector<std::string> train = {"train",
                                          "--name",
                                          "job",
                                          "--storage-path",
                                          sandbox.results(),
                                          "--launcher",
                                          "none",
                                          "--config",
                                          R"({"steps": 2})",
                                          "--",
                                          kExamples + "/python/report.sh"};
  REQUIRE(sandbox.Run(train, &train_out) == 0);
  std::string again_out;
  std::vector<std::string> more = train;
  more[8] = R"({"steps": 4})";
  more.insert(more.begin() + 1, "--resume");
  REQUIRE(sandbox.Run(more, &again_out) == 0);
  INFO(train_out << again_out);
  std::vector<json> results = ReadJsonLines(sandbox.results() + "/job/result.json");
  REQUIRE(results.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(results[i]["step"] == i + 1);
  CHECK(Contains(ReadFile(sandbox.results() + "/job/rank_0.log"), "resumed from step 2"));
}

TEST_CASE("2-rank PyTorch DDP trials under ASHA: some stop early, no process outlives its trial",
          "[command][e2e]") {
  RequireTorch();
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("asha.yaml", R"(
name: ddp-asha
trainable:
  command: [/usr/bin/python3, )" + kExamples + R"(/python/mlp_ddp.py]
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
param_space:
  lr: {grid_search: [0.1, 0.08, 0.001, 0.0005]}   # best first: the later fall below the rungs
  epochs: 4
  train_size: 1024
  val_size: 512
tune:
  metric: loss
  mode: min
  max_concurrent_trials: 1
  scheduler: {type: asha, max_t: 4, grace_period: 1, reduction_factor: 2}
run: {storage_path: STORAGE, checkpoint: {num_to_keep: 1}}
)");
  std::string out;
  int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/ddp-asha";
  int stopped_early = 0;
  for (const json& trial : Trials(experiment)) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(experiment, trial);
    std::vector<json> results = ReadJsonLines(dir + "/result.json");
    REQUIRE(!results.empty());
    CHECK(results.front()["effective_batch_size"] == 128);  // 64 per worker x 2 ranks
    if (results.size() < 4) ++stopped_early;
    // Both ranks ran, each with torchrun's environment (the script prints its rank).
    CHECK(Contains(ReadFile(dir + "/rank_0.log"), "rank 0/2 backend gloo"));
    CHECK(Contains(ReadFile(dir + "/rank_1.log"), "rank 1/2 backend gloo"));
  }
  CHECK(stopped_early >= 1);
  CHECK(sandbox.CommandProcesses().empty());
}

TEST_CASE(
    "PBT clones the donor's checkpoint and the command restarts from it with the new "
    "config",
    "[command][e2e]") {
  RequireTorch();
  Sandbox sandbox;
  std::string file = sandbox.WriteYaml("pbt.yaml", R"(
name: ddp-pbt
trainable:
  command: [/usr/bin/python3, )" + kExamples + R"(/python/mlp_ddp.py]
scaling: {num_workers: 1}
param_space:
  lr: {grid_search: [0.0001, 0.1]}
  epochs: 6
  train_size: 1024
  val_size: 256
tune:
  metric: loss
  mode: min
  max_concurrent_trials: 2
  seed: 3
  scheduler:
    type: pbt
    time_attr: training_iteration
    perturbation_interval: 2
    quantile_fraction: 0.5
    resample_probability: 0
    hyperparam_mutations: {lr: {loguniform: [1.0e-4, 1.0e-1]}}
    synch: true  # the trials meet at each perturbation point however their start-ups differ
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/ddp-pbt";
  REQUIRE(fs::exists(experiment + "/pbt_global.txt"));
  // Some trial was exploited: its script resumed from a cloned checkpoint, saying with which
  // lr; the lr it names is the explored config's, which params.json holds now.
  int resumed = 0;
  for (const json& trial : Trials(experiment)) {
    const std::string dir = TrialDir(experiment, trial);
    const std::string log = ReadFile(dir + "/rank_0.log");
    const size_t at = log.rfind("resumed from epoch ");
    if (at == std::string::npos) continue;
    ++resumed;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    const double lr = std::stod(line.substr(line.rfind(' ') + 1));
    CHECK(lr == Approx(ReadJson(dir + "/params.json")["lr"].get<double>()));
    // It ran on from the clone's epoch to the last (training_iteration counts its own
    // reports). A clone of a donor that had finished has no epoch left to run.
    const int cloned_epoch = std::stoi(line.substr(std::string("resumed from epoch ").size()));
    std::vector<json> results = ReadJsonLines(dir + "/result.json");
    if (cloned_epoch < 5) CHECK(results.back()["epoch"] == 5);
  }
  CHECK(resumed >= 1);
  CHECK(sandbox.CommandProcesses().empty());
}

TEST_CASE("a SIGKILLed rank restarts the job from its checkpoint, every epoch reported once",
          "[command][e2e]") {
  RequireTorch();
  Sandbox sandbox;
  const std::string run = sandbox.results() + "/killed";
  ChildProcess job({RAYD_BINARY, "train", "--num-workers", "2", "--name", "killed",
                    "--storage-path", sandbox.results(), "--max-failures", "1", "--num-to-keep",
                    "2", "--config", R"({"epochs": 6, "train_size": 2048, "val_size": 256})", "--",
                    "/usr/bin/python3", kExamples + "/python/mlp_ddp.py"},
                   sandbox.Env());
  REQUIRE(WaitFor([&] { return ReadJsonLines(run + "/result.json").size() >= 2; }, 120s));
  std::vector<pid_t> rank1 = sandbox.CommandProcesses("RAYD_WORLD_RANK=1");
  REQUIRE(!rank1.empty());
  for (pid_t pid : rank1) ::kill(pid, SIGKILL);
  REQUIRE(job.WaitExit(240s));
  INFO(job.output());
  CHECK(job.exit_code() == 0);
  CHECK(Contains(job.output(), "(1 restarts)"));
  std::vector<json> results = ReadJsonLines(run + "/result.json");
  REQUIRE(results.size() == 6);
  for (int i = 0; i < 6; ++i) {
    CHECK(results[i]["epoch"] == i);
    CHECK(results[i]["training_iteration"] == i + 1);
  }
  int checkpoints = 0;  // --num-to-keep 2: the two newest of six
  for (const auto& entry : fs::directory_iterator(run)) {
    checkpoints += entry.path().filename().string().starts_with("checkpoint_");
  }
  CHECK(checkpoints == 2);
  const std::string log = ReadFile(run + "/rank_0.log");
  CHECK(Contains(log, "--- rayd: attempt 2"));
  CHECK(Contains(log, "resumed from epoch"));
  CHECK(sandbox.CommandProcesses().empty());
}

// modes.sh in the sandbox: one behaviour per trial, by its config's `mode` (ok reports score 1).
void WriteModesScript(const Sandbox& sandbox) {
  std::ofstream(sandbox.root() + "/modes.sh") << R"(#!/bin/bash
mode=$(grep -o '"mode":"[a-z_0-9]*"' "$RAYD_CONFIG_FILE" | cut -d'"' -f4)
exec 3<>"/dev/tcp/${RAYD_REPORT_ADDR%:*}/${RAYD_REPORT_ADDR##*:}"
send() { printf '%s\n' "$1" >&3; read -r reply <&3; echo "reply: $reply"; }
case "$mode" in
  ok)        send "{\"token\":\"$RAYD_REPORT_TOKEN\",\"metrics\":{\"score\":1}}" ;;
  exit1)     echo "cannot open /data/train.bin" >&2; exit 1 ;;
  not_json)  send "this is not json" ;;
  not_number) send "{\"token\":\"$RAYD_REPORT_TOKEN\",\"metrics\":{\"score\":\"high\"}}" ;;
  silent)    exec sleep 600 ;;
esac
)";
  fs::permissions(sandbox.root() + "/modes.sh", fs::perms::owner_all);
}

TEST_CASE(
    "bad commands and bad reports fail their trial with a one-line reason, the sweep "
    "goes on",
    "[command][e2e]") {
  Sandbox sandbox;
  WriteModesScript(sandbox);
  std::string file = sandbox.WriteYaml("modes.yaml", R"(
name: modes
trainable:
  command: [./modes.sh]
  launcher: none
  report_timeout_s: 3
  stop_grace_s: 1
param_space:
  mode: {grid_search: [ok, exit1, not_json, not_number, silent]}
tune: {metric: score, mode: max, max_concurrent_trials: 2}
run: {storage_path: STORAGE}
)");
  std::string out;
  int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  CHECK(rc == 1);  // trials failed: the command fails, as Ray Tune raises TuneError
  CHECK(Contains(out, "rayd tune: 4 of 5 trials failed (listed above; --allow-failed-trials"));
  const std::string experiment = sandbox.results() + "/modes";
  std::map<std::string, std::string> errors;
  for (const json& trial : Trials(experiment)) {
    const std::string mode = trial["config"]["mode"];
    if (mode == "ok") {
      CHECK(trial["status"] == "TERMINATED");
      continue;
    }
    CHECK(trial["status"] == "ERROR");
    errors[mode] = ReadFile(TrialDir(experiment, trial) + "/error.txt");
  }
  CHECK(Contains(errors["exit1"], "rank 0: ./modes.sh exited with status 1"));
  CHECK(Contains(errors["exit1"], "cannot open /data/train.bin"));
  CHECK(Contains(errors["not_json"], "rank 0: ./modes.sh sent a malformed report: not a JSON object"));
  CHECK(Contains(errors["not_number"], "metric 'score' is not a number: \"high\""));
  CHECK(Contains(errors["silent"], "rank 0: ./modes.sh neither reported nor exited for 3 s (report_timeout_s)"));
  CHECK(Contains(out, "failed: rank 0"));  // the console names each failure
  CHECK(sandbox.CommandProcesses().empty());

  // A trainable's own PYTHONPATH adds to the client's path: it imports both.
  fs::create_directories(sandbox.root() + "/mine");
  std::ofstream(sandbox.root() + "/mine/mymod.py") << "VALUE = 7\n";
  std::ofstream(sandbox.root() + "/uses_mine.py") << R"(import mymod
import rayd.train as rt
rt.report({"score": mymod.VALUE})
)";
  std::string own_path = sandbox.WriteYaml("own_path.yaml", R"(
name: own_path
trainable:
  command: [/usr/bin/python3, uses_mine.py]
  launcher: none
  env: {PYTHONPATH: )" + sandbox.root() + R"(/mine}
tune: {metric: score, mode: max}
run: {storage_path: STORAGE}
)");
  std::string own_out;
  CHECK(sandbox.Run({"tune", own_path}, &own_out) == 0);
  INFO(own_out);
  const std::vector<json> own = Trials(sandbox.results() + "/own_path");
  REQUIRE(own.size() == 1);
  CHECK(own[0]["status"] == "TERMINATED");
  CHECK(ReadJsonLines(TrialDir(sandbox.results() + "/own_path", own[0]) + "/result.json")
            .at(0)["score"] == 7);

  // A program that is not there (each rank looks it up on the driver's PATH); a launcher that
  // does not exist, with its line, before anything starts.
  std::string missing;
  CHECK(sandbox.Run({"train", "--storage-path", sandbox.results(), "--", "no-such-program-x"},
                    &missing) == 1);
  CHECK(Contains(missing, "rank 0: command not found: no-such-program-x"));
  std::string bad = sandbox.WriteYaml("launcher.yaml", R"(name: launcher
trainable:
  command: [./modes.sh]
  launcher: mpirun
run: {storage_path: STORAGE}
)");
  std::string refused;
  CHECK(sandbox.Run({"tune", bad}, &refused) == 2);
  CHECK(Contains(refused, "launcher.yaml:4: trainable.launcher: expected one of"));
}

TEST_CASE("rayd tune exits 0 only when no trial failed (or failures are accepted) and one "
          "reported the metric",
          "[command][e2e]") {
  Sandbox sandbox;
  WriteModesScript(sandbox);
  auto sweep = [&](const std::string& name, const std::string& modes,
                   const std::vector<std::string>& flags, std::string* out,
                   const std::string& max_failures = "0") {
    std::string file = sandbox.WriteYaml(name + ".yaml", "name: " + name + R"(
trainable:
  command: [./modes.sh]
  launcher: none
param_space:
  mode: {grid_search: )" + modes + R"(}
tune: {metric: score, mode: max}
run: {storage_path: STORAGE, failure: {max_failures: )" + max_failures + R"(}}
)");
    std::vector<std::string> args = {"tune", file};
    args.insert(args.end(), flags.begin(), flags.end());
    const int rc = sandbox.Run(args, out);
    INFO(*out);
    return rc;
  };
  std::string out;
  CHECK(sweep("clean", "[ok, ok]", {}, &out) == 0);
  CHECK(sweep("accepted", "[ok, exit1]", {"--allow-failed-trials"}, &out) == 0);
  CHECK(Contains(out, "Best trial"));
  // Nothing to rank: a failure whatever the flag says.
  CHECK(sweep("none", "[exit1]", {"--allow-failed-trials"}, &out) == 1);
  CHECK(Contains(out, "rayd tune: no trial reported a finite score"));

  // A trial restarted once and failed again: both failures in its error.txt.
  CHECK(sweep("twice", "[exit1]", {}, &out, "1") == 1);
  const json trial = Trials(sandbox.results() + "/twice").at(0);
  CHECK(trial["num_failures"] == 2);
  const std::string errors = ReadFile(TrialDir(sandbox.results() + "/twice", trial) + "/error.txt");
  size_t found = 0;
  for (size_t at = errors.find("exited with status 1"); at != std::string::npos;
       at = errors.find("exited with status 1", at + 1)) {
    ++found;
  }
  CHECK(found == 2);
}

}  // namespace

// Two objectives and a constraint: accuracy peaks at x = 2, size grows with x, latency must
// stay within 3. The front is x = 0, 1, 2 (x = 3 is dominated by x = 1, x = 4 misses the
// constraint), whichever trials MO-ASHA stops early.
TEST_CASE("rayd tune with two objectives and a constraint writes the Pareto front and its "
          "hypervolume, and a rule is needed for one best",
          "[command][e2e]") {
  Sandbox sandbox;
  std::ofstream(sandbox.root() + "/mo.py") << R"(import rayd.train as rt
x = rt.get_config()["x"]
for epoch in range(3):
    rt.report({"acc": 1 - (x - 2) ** 2 / 10, "params": 100 * x, "latency": x})
)";
  std::string file = sandbox.WriteYaml("mo.yaml", R"(name: mo
trainable:
  command: [/usr/bin/python3, mo.py]
  launcher: none
param_space:
  x: {grid_search: [0, 1, 2, 3, 4]}
tune:
  metric: [acc, params]
  mode: [max, min]
  constraints: ["latency <= 3"]
  max_concurrent_trials: 1
  scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 2}
run: {storage_path: STORAGE}
)");
  std::string out;
  CHECK(sandbox.Run({"tune", file}, &out) == 0);
  INFO(out);
  CHECK(Contains(out, "Pareto front: 3 of 5 trials (acc max, params min; constraints: latency <= "
                      "3), hypervolume "));
  const std::string csv = ReadFile(sandbox.results() + "/mo/pareto_front.csv");
  INFO(csv);
  CHECK(Contains(csv, "trial_id,acc,params,latency,checkpoint,config\n"));
  size_t rows = 0;
  for (const char* x : {"{\"\"x\"\":0}", "{\"\"x\"\":1}", "{\"\"x\"\":2}"}) {
    CHECK(Contains(csv, x));
  }
  for (char c : csv) rows += c == '\n' ? 1 : 0;
  CHECK(rows == 4);  // the header and three trials
  for (const json& trial : Trials(sandbox.results() + "/mo")) CHECK(trial["status"] == "TERMINATED");

  // Refused before any trial starts: a mode list of the wrong length, naming key and line.
  std::string bad = sandbox.WriteYaml("bad.yaml", R"(name: bad
trainable:
  command: [/usr/bin/python3, mo.py]
  launcher: none
tune:
  metric: [acc, params]
  mode: [max]
run: {storage_path: STORAGE}
)");
  CHECK(sandbox.Run({"tune", bad}, &out) == 2);
  CHECK(Contains(out, "bad.yaml:7: tune.mode: expected 2 modes, one per metric, got 1"));
}

// A learning-rate sweep where one rate diverges: the Python client reports NaN and infinity as
// results (over the wire as strings), and the sweep ranks them worst instead of failing them.
TEST_CASE(
    "a trial whose loss diverges to NaN is a result ranked worst: ASHA stops it, TPE "
    "observes it, nothing fails or restarts",
    "[command][e2e]") {
  Sandbox sandbox;
  std::ofstream(sandbox.root() + "/lr.py") << R"(import rayd.train as rt
lr = rt.get_config()["lr"]
loss = 1.0
for epoch in range(4):
    loss = loss * (1 - lr) if lr < 1 else (float("inf") if epoch == 0 else float("nan"))
    rt.report({"loss": loss})
)";
  std::string asha = sandbox.WriteYaml("asha.yaml", R"(name: asha
trainable:
  command: [/usr/bin/python3, lr.py]
  launcher: none
param_space:
  lr: {grid_search: [0.1, 0.5, 3.0]}
tune:
  metric: loss
  mode: min
  max_concurrent_trials: 1
  scheduler: {type: asha, time_attr: training_iteration, max_t: 4, grace_period: 1,
              reduction_factor: 2}
run: {storage_path: STORAGE, failure: {max_failures: 2}}
)");
  std::string out;
  CHECK(sandbox.Run({"tune", asha}, &out) == 0);
  INFO(out);
  CHECK(Contains(out, "Best trial"));
  CHECK(Contains(out,
                 "  1 trial ended with loss NaN or infinite (diverged): ranked last, not failed"));
  for (const json& trial : Trials(sandbox.results() + "/asha")) {
    INFO(trial.dump());
    CHECK(trial["status"] == "TERMINATED");
    CHECK(trial["num_failures"] == 0);
    if (trial["config"]["lr"] != 3.0) continue;
    // Stopped at the first rung: its infinite loss was below the two recorded there.
    const std::vector<json> rows =
        ReadJsonLines(TrialDir(sandbox.results() + "/asha", trial) + "/result.json");
    REQUIRE(rows.size() == 1);
    CHECK(rows[0]["loss"].is_null());  // JSON has no infinity: null, as Ray writes NaN
  }

  // TPE: every trial is an observation, the diverged ones at the worst loss.
  std::string tpe = sandbox.WriteYaml("tpe.yaml", R"(name: tpe
trainable:
  command: [/usr/bin/python3, lr.py]
  launcher: none
param_space:
  lr: {choice: [0.5, 3.0]}
tune:
  metric: loss
  mode: min
  num_samples: 6
  seed: 4
  max_concurrent_trials: 2
  search: {type: tpe, n_startup_trials: 2}
run: {storage_path: STORAGE}
)");
  CHECK(sandbox.Run({"tune", tpe}, &out) == 0);
  const json state = ReadJson(sandbox.results() + "/tpe/experiment_state.json");
  int diverged = 0;
  for (const json& trial : state.at("trials")) {
    CHECK(trial["status"] == "TERMINATED");
    if (trial["config"]["lr"] == 3.0) ++diverged;
  }
  CHECK(diverged > 0);
  const json& observed = state.at("searcher").at("state").at("observed");
  CHECK(observed.size() == 6);
  int worst = 0;
  for (const json& o : observed) worst += o.at("loss").get<double>() >= 1e300 ? 1 : 0;
  CHECK(worst == diverged);
  CHECK(sandbox.CommandProcesses().empty());
}

TEST_CASE(
    "rayd train with np -1 runs a rank per CPU slot of the cluster, as HorovodRunner does, and np "
    "MIN:MAX an elastic job",
    "[command][e2e]") {
  Sandbox sandbox;
  std::string out;
  const int rc = sandbox.Run(
      {"train", "--np", "-1", "--launcher", "none", "--name", "every", "--storage-path",
       sandbox.results(), "--", "/bin/sh", "-c", "echo rank $RAYD_WORLD_RANK of $RAYD_WORLD_SIZE"},
      &out);
  INFO(out);
  REQUIRE(rc == 0);
  const size_t at = out.find("--num-workers -1: ");
  REQUIRE(at != std::string::npos);
  const int ranks = std::stoi(out.substr(at + std::string("--num-workers -1: ").size()));
  CHECK(ranks >= 1);
  for (int rank = 0; rank < ranks; ++rank) {
    CHECK(Contains(ReadFile(sandbox.results() + "/every/rank_" + std::to_string(rank) + ".log"),
                   "rank " + std::to_string(rank) + " of " + std::to_string(ranks)));
  }
  // --use-gpu on a cluster without GPUs: refused, saying so.
  std::string no_gpu;
  CHECK(sandbox.Run({"train", "--np", "-1", "--use-gpu", "--storage-path", sandbox.results(), "--",
                     "/bin/true"},
                    &no_gpu) == 1);
  CHECK(Contains(no_gpu, "num_workers = -1: the cluster has no GPU"));
  std::string bad;
  CHECK(sandbox.Run({"train", "--np", "-2", "--", "/bin/true"}, &bad) != 0);

  // MIN:MAX (torchrun's --nnodes=MIN:MAX): an elastic job starts with as many as fit. Asked for
  // up to 4 on this cluster's CPU slots, it runs on all of them (at most 4).
  std::string elastic;
  const int elastic_rc = sandbox.Run(
      {"train", "--np", "1:4", "--launcher", "none", "--name", "elastic", "--storage-path",
       sandbox.results(), "--", "/bin/sh", "-c", "echo rank $RAYD_WORLD_RANK of $RAYD_WORLD_SIZE"},
      &elastic);
  INFO(elastic);
  REQUIRE(elastic_rc == 0);
  const int fit = std::min(ranks, 4);
  CHECK(Contains(ReadFile(sandbox.results() + "/elastic/rank_0.log"),
                 "rank 0 of " + std::to_string(fit)));
  // The wait for more than fit is said before it, and the size it starts at.
  if (fit < 4) {
    CHECK(Contains(elastic, "rayd train: elastic: " + std::to_string(fit) +
                                " of 4 workers fit now; waiting up to 5 s for the rest"));
  }
  CHECK(Contains(elastic, "rayd train: elastic: starting with " + std::to_string(fit) +
                              (fit == 1 ? " worker" : " workers") + " (elastic, 1 to 4)"));
  std::string reversed;
  CHECK(sandbox.Run({"train", "--np", "3:2", "--", "/bin/true"}, &reversed) == 2);
  CHECK(Contains(reversed, "--num-workers: MIN:MAX needs 1 <= MIN <= MAX, got 3:2"));
}

// `rayd drain` under a command job: rank 0 of a Python script, on the drained node, sees the
// notice through the client's get_context().drain and checkpoints at once; the job goes on from
// that checkpoint on the other node, as a preemption (max_failures 0 would fail it).
TEST_CASE(
    "a Python rank on a drained node sees the notice in get_context and the job goes on "
    "without the node, every epoch once",
    "[command][e2e][drain]") {
  Sandbox sandbox;
  const int port = rayd::testing::FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  sandbox.Start({"--head", "--port", std::to_string(port), "--num-cpus", "0",
                 "--heartbeat-period-ms", "250", "--missed-heartbeats", "8", "--dashboard-port",
                 "0"});
  sandbox.Start({"--address", address, "--num-cpus", "1"});
  sandbox.Start({"--address", address, "--num-cpus", "1"});
  const std::vector<std::string> heads = sandbox.Sessions("_head");
  REQUIRE(heads.size() == 1);
  std::map<std::string, std::string> env = sandbox.Env();
  env["RAYD_TOKEN"] = ReadFile(heads[0] + "/token").substr(0, 64);

  const std::string script = sandbox.root() + "/drained.py";
  std::ofstream(script) << R"(import json, os, sys, tempfile, time
import rayd.train as rt

ctx = rt.get_context()
print("NOTICE FILE", os.environ.get("RAYD_DRAIN_FILE"), file=sys.stderr, flush=True)
start = 0
if rt.get_checkpoint():
    with open(os.path.join(rt.get_checkpoint(), "state.json")) as f:
        start = json.load(f)["epoch"] + 1
seen = False
for epoch in range(start, 16):
    time.sleep(0.3)
    drain = rt.get_context().drain
    now = drain is not None and not seen
    if now:
        seen = True
        print(f"DRAIN seen by rank {ctx.world_rank}: {drain.reason}, "
              f"{drain.seconds_left():.0f} s left", file=sys.stderr, flush=True)
    checkpoint = None
    if ctx.world_rank == 0 and (epoch == start or now):
        checkpoint = tempfile.mkdtemp()
        with open(os.path.join(checkpoint, "state.json"), "w") as f:
            json.dump({"epoch": epoch}, f)
    rt.report({"epoch": epoch, "ranks": ctx.world_size}, checkpoint=checkpoint)
)";
  ChildProcess driver({RAYD_BINARY, "train", "--address", address, "--np", "1:2", "--launcher",
                       "none", "--max-failures", "0", "--name", "drained", "--storage-path",
                       sandbox.results(), "--", "/usr/bin/python3", script},
                      env);
  const std::string run_dir = sandbox.results() + "/drained";
  const std::string results = run_dir + "/result.json";
  auto ranks_after = [&](int ranks, size_t after) {
    if (!fs::exists(results)) return false;
    std::vector<json> rows = ReadJsonLines(results);
    for (size_t i = after; i < rows.size(); ++i) {
      if (rows[i].value("ranks", 0) == ranks) return true;
    }
    return false;
  };
  const bool started = WaitFor([&] { return ranks_after(2, 0); }, 90s);
  INFO(driver.output());
  REQUIRE(started);
  // A driver that joined by address says where the head's dashboard is, as `rayd status` does;
  // the status lists the run with its size.
  const std::string dashboard = "http://127.0.0.1:";
  CHECK(Contains(driver.output(), "rayd: dashboard at " + dashboard));
  std::string status;
  CHECK(sandbox.Rayd({"status", "--address", address}, &status) == 0);
  INFO(status);
  CHECK(Contains(status, "Dashboard: " + dashboard));
  CHECK(
      Contains(status, "Training runs:\n drained: 2 workers (elastic 1-2), RUNNING, attempt 1\n"));
  CHECK(Contains(status, "    " + run_dir + "\n"));
  // Rank 0's node, from the notice file it was given (DrainNoticePath: drain-<node id>.json).
  const std::string rank0 = ReadFile(run_dir + "/rank_0.log");
  const size_t at = rank0.find("/drain-");
  REQUIRE(at != std::string::npos);
  const std::string node = rank0.substr(at + 7, 32);
  std::string drained;
  REQUIRE(sandbox.Rayd({"drain", node, "--deadline", "60s", "--reason", "spot preemption",
                        "--address", address},
                       &drained) == 0);
  INFO(drained);
  INFO(driver.output());
  const size_t before = ReadJsonLines(results).size();
  const bool shrunk = WaitFor([&] { return ranks_after(1, before); }, 40s);
  INFO(ReadFile(run_dir + "/rank_0.log"));
  REQUIRE(shrunk);
  REQUIRE(driver.WaitExit(120s));
  INFO(driver.output());
  REQUIRE(driver.exit_code() == 0);
  CHECK(Contains(driver.output(), "(0 restarts, 1 preemption)"));
  // Each size the run takes is said as it happens (FitOptions::on_notice).
  CHECK(
      Contains(driver.output(), "rayd train: drained: starting with 2 workers (elastic, 1 to 2)"));
  CHECK(Contains(driver.output(), "rayd train: drained: node " + node.substr(0, 8) +
                                      " is draining: restarting from this checkpoint without it"));
  CHECK(Contains(driver.output(), "rayd train: drained: starting with 1 worker (elastic, 1 to 2)"));
  INFO(ReadFile(run_dir + "/rank_0.log"));
  CHECK(Contains(ReadFile(run_dir + "/rank_0.log"), "DRAIN seen by rank 0: spot preemption, "));
  const std::vector<json> rows = ReadJsonLines(results);
  REQUIRE(rows.size() == 16);
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i].at("epoch") == static_cast<int>(i));
}
