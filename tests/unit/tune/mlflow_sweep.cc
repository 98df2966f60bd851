// A real sweep writing MLflow runs: a Tuner on an embedded 2-CPU cluster runs a toy train loop
// (no LibTorch) on 2 ranks in worker processes, one trial finishing, one stopped by `stop`, one failing;
// then mlruns/ holds one run per trial in the experiment named after the sweep, with the
// results the driver received from rank 0. Also: two Tuners in one process, one of them
// stopped, the other running on to the end.

#include <rayd/api.h>
#include <rayd/train/trainer.h>
#include <rayd/tune/tuner.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// case 1: two results and done; case 2: five, but the sweep's stop ends it after three;
// case 3: one result, then it throws.
void MlflowToyLoop(const json& config) {
  const int which = config.at("case").get<int>();
  const int results = which == 1 ? 2 : which == 2 ? 5 : 1;
  for (int i = 1; i <= results; ++i) {
    rayd::train::Report({{"score", which * 10.0 + i}, {"rank", rayd::train::GetContext().world_rank}});
  }
  if (which == 3) throw std::runtime_error("case 3 fails on purpose");
}
RAYD_TRAIN_LOOP(MlflowToyLoop);

// `steps` results, one every 50 ms: a trial that runs long enough to be stopped mid-way.
void PacedToyLoop(const json& config) {
  for (int i = 1; i <= config.at("steps").get<int>(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rayd::train::Report({{"score", i}});
  }
}
RAYD_TRAIN_LOOP(PacedToyLoop);

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t LineCount(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// An embedded 2-CPU cluster whose session lives in `dir`.
void InitEmbedded(const rayd::testing::TempDir& dir) {
  ::unsetenv("RAYD_ADDRESS");
  ::unsetenv("RAYD_TOKEN");
  rayd::RaydConfig config;
  config.temp_dir = dir.path() + "/session";
  config.num_cpus = 2;
  rayd::Init(config);
}

TEST_CASE("a Tuner sweep writes one MLflow run per trial", "[tune][mlflow]") {
  rayd::testing::TempDir dir;
  InitEmbedded(dir);
  rayd::tune::Tuner tuner(
      {.train_loop = "MlflowToyLoop", .scaling = {.num_workers = 2}},
      {{{"case"}, rayd::tune::Domain::GridSearch({1, 2, 3})}, {{"opt", "lr"}, 0.5}},
      {.metric = "score", .mode = "max", .num_samples = 1, .stop = {{"training_iteration", 3}}},
      {.name = "mlflow-sweep",
       .storage_path = dir.path() + "/results",
       .mlflow_tracking_uri = "file://" + dir.path() + "/mlruns"});
  rayd::tune::ResultGrid grid = tuner.Fit();
  rayd::Shutdown();
  REQUIRE(grid.size() == 3);

  const fs::path experiment = fs::path(dir.path()) / "mlruns" / "1";
  CHECK_THAT(Read(experiment / "meta.yaml"), Catch::Contains("\nname: mlflow-sweep\n"));
  std::map<int, fs::path> runs;  // by case
  for (const auto& entry : fs::directory_iterator(experiment)) {
    if (!entry.is_directory()) continue;
    runs[std::stoi(Read(entry.path() / "params/case"))] = entry.path();
  }
  REQUIRE(runs.size() == 3);
  for (const auto& [which, run] : runs) {
    INFO("case " << which);
    CHECK(Read(run / "params/opt/lr") == "0.5");
    CHECK(Read(run / "tags/scheduler") == "FIFO");
    const std::string trial_id = Read(run / "tags/trial_id");
    CHECK(Read(run / "tags/mlflow.runName") == "MlflowToyLoop_" + trial_id);
    // Every metric line is a result rank 0 reported; step = training_iteration.
    const std::string ranks = Read(run / "metrics/rank");
    CHECK(ranks.find(" 0.0 ") != std::string::npos);
    CHECK(ranks.find(" 1.0 ") == std::string::npos);
  }
  const std::string finished = Read(runs[1] / "meta.yaml");
  CHECK_THAT(finished, Catch::Contains("\nstatus: 3\n"));
  CHECK(LineCount(Read(runs[1] / "metrics/score")) == 2);
  CHECK(Read(runs[1] / "tags/trial_status") == "TERMINATED");

  CHECK_THAT(Read(runs[2] / "meta.yaml"), Catch::Contains("\nstatus: 3\n"));  // stopped
  const std::string stopped = Read(runs[2] / "metrics/score");
  CHECK(LineCount(stopped) == 3);
  CHECK_THAT(stopped, Catch::EndsWith(" 23.0 3\n"));

  CHECK_THAT(Read(runs[3] / "meta.yaml"), Catch::Contains("\nstatus: 4\n"));
  CHECK(Read(runs[3] / "tags/trial_status") == "ERROR");

  // The trials' own Trainers wrote nothing of their own: only the sweep's experiment is there.
  std::vector<std::string> experiments;
  for (const auto& entry : fs::directory_iterator(fs::path(dir.path()) / "mlruns")) {
    experiments.push_back(entry.path().filename().string());
  }
  std::sort(experiments.begin(), experiments.end());
  CHECK(experiments == std::vector<std::string>{".trash", "0", "1"});
}

TEST_CASE("a stop asked of one Tuner leaves another Tuner in the process running", "[tune]") {
  rayd::testing::TempDir dir;
  InitEmbedded(dir);
  auto sweep = [&](const std::string& name, int steps) {
    return rayd::tune::Tuner({.train_loop = "PacedToyLoop"}, {{{"steps"}, steps}},
                             {.metric = "score", .mode = "max"},
                             {.name = name, .storage_path = dir.path() + "/results"});
  };
  rayd::tune::Tuner stopped = sweep("stopped", 400);  // 20 s unless stopped
  rayd::tune::Tuner other = sweep("other", 40);
  rayd::tune::ResultGrid stopped_grid;
  std::thread stopped_fit([&] { stopped_grid = stopped.Fit(); });
  rayd::tune::ResultGrid other_grid;
  std::thread other_fit([&] { other_grid = other.Fit(); });
  // Once the first sweep's trial has reported, stop that sweep alone.
  const fs::path first_results = fs::path(dir.path()) / "results" / "stopped";
  CHECK(rayd::testing::WaitFor(
      [&] {
        std::error_code ec;
        for (const auto& trial : fs::directory_iterator(first_results, ec)) {
          if (fs::file_size(trial.path() / "result.json", ec) > 0 && !ec) return true;
        }
        return false;
      },
      std::chrono::seconds(60)));
  stopped.RequestStop();
  stopped_fit.join();
  other_fit.join();
  rayd::Shutdown();
  REQUIRE(stopped_grid.size() == 1);
  CHECK(stopped_grid[0].status == "PENDING");  // resumable, not finished
  CHECK(stopped_grid[0].history.size() < 400);
  REQUIRE(other_grid.size() == 1);
  CHECK(other_grid[0].status == "TERMINATED");
  CHECK(other_grid[0].history.size() == 40);
}

}  // namespace
