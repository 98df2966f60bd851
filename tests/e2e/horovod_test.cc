// Horovod jobs as a user runs them, with a real Horovod (0.28.1, PyTorch + Gloo; the build in
// ../shared/horovod/, unpacked into the build tree): `rayd tune` of ASHA over
// examples/python/mlp_horovod.py, `rayd train --launcher horovod -- ...` with a SIGKILLed rank,
// a script that calls hvd.init() twice, a rank that never joins the rendezvous, and a Gloo
// interface that does not exist. Every rank meets the others through the HTTP rendezvous rank
// 0's actor serves for the attempt.
//
// Exits 77 (CTest: skipped) without the Horovod build or Debian's python3-torch.

#include <dirent.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
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
const std::string kJob = RAYD_SOURCE_DIR "/tests/e2e/horovod/job.py";
const std::string kHorovod = RAYD_HOROVOD_DIR;

void RequireHorovod() {
  const std::string check = "cd / && PYTHONPATH=" + kHorovod +
                            " /usr/bin/python3 -c 'import horovod.torch' >/dev/null 2>&1";
  if (!fs::exists(kHorovod + "/horovod") || std::system(check.c_str()) != 0) {
    std::printf(
        "skipped: no Horovod at %s that /usr/bin/python3 imports (../shared/horovod/*.tar.gz "
        "unpacked by CMake; apt install python3-torch python3-cloudpickle python3-packaging "
        "python3-psutil)\n",
        kHorovod.c_str());
    std::fflush(stdout);
    std::exit(77);
  }
}

class Sandbox : public rayd::testing::TuneSandbox {
 public:
  Sandbox() : TuneSandbox(RAYD_BINARY) {}
  ~Sandbox() override {
    for (pid_t pid : CommandProcesses()) ::kill(pid, SIGKILL);
  }

  // `rayd train --launcher horovod --np RANKS ... -- COMMAND`; each rank's bundle half a CPU
  // (3 ranks fit this 2-core machine), `max_failures` restarts.
  std::vector<std::string> Train(const std::string& name, int ranks, const std::string& config_json,
                                 const std::vector<std::string>& command,
                                 int max_failures = 0) const {
    std::vector<std::string> argv = {RAYD_BINARY,
                                     "train",
                                     "--launcher",
                                     "horovod",
                                     "--np",
                                     std::to_string(ranks),
                                     "--cpus-per-worker",
                                     "0.5",
                                     "--name",
                                     name,
                                     "--storage-path",
                                     results(),
                                     "--config",
                                     config_json,
                                     "--max-failures",
                                     std::to_string(max_failures),
                                     "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }
  std::map<std::string, std::string> HorovodEnv() const {
    auto env = Env();
    env["PYTHONPATH"] = kHorovod;
    return env;
  }

  // Processes started for a run of this sandbox (their RAYD_TRIAL_DIR is under its root).
  std::vector<pid_t> CommandProcesses(const std::string& extra = "") const {
    std::vector<pid_t> found;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return found;
    const std::string marker = "RAYD_TRIAL_DIR=" + root();
    while (dirent* entry = ::readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (pid <= 0) continue;
      const std::string environ = ReadFile("/proc/" + std::to_string(pid) + "/environ");
      if (!Contains(environ, marker) || (!extra.empty() && !Contains(environ, extra))) continue;
      if (Contains(ReadFile("/proc/" + std::to_string(pid) + "/stat"), ") Z ")) continue;
      found.push_back(pid);
    }
    ::closedir(proc);
    return found;
  }
};

}  // namespace

TEST_CASE("ASHA over 2-rank Horovod trials: every rank placed, replicas agree, early stops",
          "[horovod][e2e]") {
  RequireHorovod();
  Sandbox sandbox;
  // The trainable's own PYTHONPATH (Horovod's folder) joins rayd's client path, not replaces it.
  const std::string file = sandbox.WriteYaml("hvd.yaml", R"(
name: hvd-asha
trainable:
  command: [/usr/bin/python3, )" + kExamples + R"(/python/mlp_horovod.py]
  launcher: horovod
  env: {PYTHONPATH: )" + kHorovod + R"(}
scaling: {num_workers: 2, resources_per_worker: {CPU: 1}}
param_space:
  lr: {grid_search: [0.05, 0.04, 0.0005, 0.0002]}   # best first: the later fall below the rungs
  epochs: 3
  train_size: 1024
  val_size: 256
tune:
  metric: loss
  mode: min
  max_concurrent_trials: 1
  scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 2}
run: {storage_path: STORAGE, checkpoint: {num_to_keep: 1}}
)");
  std::string out;
  const int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/hvd-asha";
  int stopped_early = 0;
  const json state = ReadJson(experiment + "/experiment_state.json");
  REQUIRE(state.at("trials").size() == 4);
  for (const json& trial : state.at("trials")) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(experiment, trial);
    std::vector<json> results = ReadJsonLines(dir + "/result.json");
    REQUIRE(!results.empty());
    if (results.size() < 3) ++stopped_early;
    for (const json& result : results) {
      CHECK(result["world_size"] == 2);
      CHECK(result["param_divergence"].get<double>() == 0.0);  // DistributedOptimizer's work
    }
    CHECK(Contains(ReadFile(dir + "/rank_0.log"), "horovod rank 0/2 local 0/2 cross 0/1"));
    CHECK(Contains(ReadFile(dir + "/rank_1.log"), "horovod rank 1/2 local 1/2 cross 0/1"));
  }
  CHECK(stopped_early >= 1);
  CHECK(sandbox.CommandProcesses().empty());
}

TEST_CASE("a SIGKILLed Horovod rank restarts the job from its checkpoint in a fresh rendezvous",
          "[horovod][e2e]") {
  RequireHorovod();
  Sandbox sandbox;
  const std::string run = sandbox.results() + "/killed";
  ChildProcess job(
      sandbox.Train("killed", 2, R"({"epochs": 5, "train_size": 2048, "val_size": 256})",
                    {"/usr/bin/python3", kExamples + "/python/mlp_horovod.py"},
                    /*max_failures=*/1),
      sandbox.HorovodEnv());
  REQUIRE(WaitFor([&] { return ReadJsonLines(run + "/result.json").size() >= 2; }, 120s));
  std::vector<pid_t> rank1 = sandbox.CommandProcesses("RAYD_WORLD_RANK=1");
  REQUIRE(!rank1.empty());
  for (pid_t pid : rank1) ::kill(pid, SIGKILL);
  REQUIRE(job.WaitExit(240s));
  INFO(job.output());
  CHECK(job.exit_code() == 0);
  CHECK(Contains(job.output(), "(1 restarts)"));
  std::vector<json> results = ReadJsonLines(run + "/result.json");
  REQUIRE(results.size() == 5);
  for (int i = 0; i < 5; ++i) {
    CHECK(results[i]["epoch"] == i);
    CHECK(results[i]["param_divergence"].get<double>() == 0.0);
  }
  const std::string log = ReadFile(run + "/rank_0.log");
  CHECK(Contains(log, "--- rayd: attempt 2"));
  CHECK(Contains(log, "resumed from epoch"));
  CHECK(sandbox.CommandProcesses().empty());
}

TEST_CASE("a script that calls hvd.init() twice meets its ranks again in emptied scopes",
          "[horovod][e2e]") {
  RequireHorovod();
  Sandbox sandbox;
  std::string out;
  const int rc = rayd::testing::RunCommand(
      sandbox.Train("twice", 3, R"({"inits": 2})", {"/usr/bin/python3", kJob}), &out,
      sandbox.HorovodEnv(), 180s);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Contains(out, "sum=6"));  // 1 + 2 + 3 over the second group
  for (int rank = 0; rank < 3; ++rank) {
    const std::string log =
        ReadFile(sandbox.results() + "/twice/rank_" + std::to_string(rank) + ".log");
    CHECK(Contains(log, "PLACE rank=" + std::to_string(rank) + "/3 local=" + std::to_string(rank) +
                            "/3 cross=0/1"));
    CHECK(Contains(log, "init=2"));
  }
}

TEST_CASE(
    "a rank that never joins the rendezvous fails the run naming it, a bad interface "
    "fails naming the interface",
    "[horovod][e2e]") {
  RequireHorovod();
  Sandbox sandbox;
  auto env = sandbox.HorovodEnv();
  env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = "4";
  std::string out;
  int rc = rayd::testing::RunCommand(
      sandbox.Train("never", 2, R"({"never_init_rank": 1})", {"/usr/bin/python3", kJob}), &out, env,
      180s);
  INFO(out);
  CHECK(rc == 1);
  CHECK(Contains(out, "Horovod's rendezvous at 127.0.0.1:"));
  CHECK(Contains(out, "scope global has 1 of 2 ranks (rank 1 never came)"));
  CHECK(sandbox.CommandProcesses().empty());  // the waiting rank was stopped with the attempt

  // The trainable's env wins over the interface rayd picks (a user's choice of network).
  const std::string yaml = sandbox.WriteYaml("iface.yaml", R"(name: iface
trainable:
  command: [/usr/bin/python3, )" + kJob + R"(]
  launcher: horovod
  env: {HOROVOD_GLOO_IFACE: nosuch0, HOROVOD_GLOO_TIMEOUT_SECONDS: "4"}
scaling: {num_workers: 2, resources_per_worker: {CPU: 0.5}}
run: {storage_path: STORAGE}
)");
  std::string bad_iface;
  rc = rayd::testing::RunCommand({RAYD_BINARY, "train", yaml}, &bad_iface, env, 180s);
  INFO(bad_iface);
  CHECK(rc == 1);
  CHECK(Contains(bad_iface, "nosuch0"));
  CHECK(sandbox.CommandProcesses().empty());
}

TEST_CASE(
    "PBT clones a Horovod trial's checkpoint and its ranks resume from it in a fresh "
    "rendezvous",
    "[horovod][e2e]") {
  RequireHorovod();
  Sandbox sandbox;
  const std::string file = sandbox.WriteYaml("pbt.yaml", R"(
name: hvd-pbt
trainable:
  command: [/usr/bin/python3, )" + kExamples + R"(/python/mlp_horovod.py]
  launcher: horovod
  env: {PYTHONPATH: )" + kHorovod + R"(}
scaling: {num_workers: 2, resources_per_worker: {CPU: 0.5}}
param_space:
  lr: {grid_search: [0.0001, 0.05]}
  epochs: 4
  train_size: 512
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
    # Synchronous: the trials meet at each perturbation point however far apart their Horovod
    # start-ups are (asynchronous, one could finish before the other reported: no exploit).
    synch: true
run: {storage_path: STORAGE}
)");
  std::string out;
  const int rc = sandbox.Run({"tune", file}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  const std::string experiment = sandbox.results() + "/hvd-pbt";
  CHECK_FALSE(ReadFile(experiment + "/pbt_global.txt").empty());
  const json state = ReadJson(experiment + "/experiment_state.json");
  int resumed = 0;
  for (const json& trial : state.at("trials")) {
    CHECK(trial["status"] == "TERMINATED");
    const std::string dir = TrialDir(experiment, trial);
    const std::string log = ReadFile(dir + "/rank_0.log");
    if (Contains(log, "resumed from epoch")) {
      ++resumed;
      CHECK(Contains(log, "--- rayd: attempt"));
      // Both ranks of the resumed attempt met again (rank 1's log shows a second start).
      CHECK(Contains(ReadFile(dir + "/rank_1.log"), "horovod rank 1/2"));
    }
    for (const json& result : ReadJsonLines(dir + "/result.json")) {
      CHECK(result["param_divergence"].get<double>() == 0.0);
    }
  }
  CHECK(resumed >= 1);
  CHECK(sandbox.CommandProcesses().empty());
}
