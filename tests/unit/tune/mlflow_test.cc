// The MLflow file-store writer (rayd/train/mlflow.h) byte for byte on a temp dir, the sweep's
// per-trial tracking (trial_tracking.h) on scripted trials, and the tune.yaml `run.mlflow` key.
// What MLflow itself would read is pinned from mlflow/store/tracking/file_store.py; MLflow is not
// installable here, so these files are checked against that source, not against `mlflow ui`.

#include <rayd/train/mlflow.h>
#include <rayd/tune/config_file.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "trial_tracking.h"

namespace {

namespace fs = std::filesystem;
namespace rt = rayd::train;
using rayd::testing::TempDir;

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The run directories of an experiment (32-hex names).
std::vector<fs::path> RunDirs(const fs::path& experiment) {
  std::vector<fs::path> runs;
  for (const auto& entry : fs::directory_iterator(experiment)) {
    if (entry.is_directory()) runs.push_back(entry.path());
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

std::string User() {
  const char* user = std::getenv("USER");
  return user != nullptr && *user != '\0' ? user : "";
}

TEST_CASE("MlflowStore: the Default experiment, a named one, and a run, byte for byte",
          "[tune][mlflow]") {
  TempDir dir;
  const std::string root = dir.path() + "/mlruns";
  rayd::Result<rt::MlflowStore> store = rt::MlflowStore::Open("file://" + root);
  REQUIRE(store.ok());
  CHECK(store->root() == fs::weakly_canonical(root).string());
  CHECK(fs::is_directory(root + "/.trash"));

  // The Default experiment, as FileStore._create_default_experiment writes it.
  const std::string meta0 = Read(root + "/0/meta.yaml");
  std::smatch m;
  REQUIRE(std::regex_match(meta0, m,
                           std::regex("artifact_location: file://(.*)/0\n"
                                      "creation_time: ([0-9]{13})\n"
                                      "experiment_id: '0'\n"
                                      "last_update_time: ([0-9]{13})\n"
                                      "lifecycle_stage: active\n"
                                      "name: Default\n")));
  CHECK(m[1] == store->root());
  CHECK(m[2] == m[3]);

  rayd::Result<std::string> experiment = store->GetOrCreateExperiment("my sweep");
  REQUIRE(experiment.ok());
  CHECK(*experiment == "1");
  CHECK(std::regex_match(Read(root + "/1/meta.yaml"),
                         std::regex("artifact_location: file://" + store->root() + "/1\n"
                                    "creation_time: [0-9]{13}\n"
                                    "experiment_id: '1'\n"
                                    "last_update_time: [0-9]{13}\n"
                                    "lifecycle_stage: active\n"
                                    "name: my sweep\n")));

  rayd::Result<rt::MlflowRun> run =
      store->CreateRun(*experiment, "trial_00001", {{"trial_id", "abc_00001"}}, 1700000000123);
  REQUIRE(run.ok());
  CHECK(std::regex_match(run->id(), std::regex("[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}")));
  const fs::path run_dir = fs::path(root) / "1" / run->id();
  CHECK(run->dir() == fs::path(store->root()) / "1" / run->id());
  for (const char* sub : {"metrics", "params", "artifacts", "tags"}) {
    CHECK(fs::is_directory(run_dir / sub));
  }
  // A run as created: status RUNNING (1), no end time, deleted_time: null (create_run's dict).
  const std::string id = run->id();
  // The id is quoted only when it is all digits (YAML would read it as an int).
  const std::string yaml_id =
      id.find_first_not_of("0123456789") == std::string::npos ? "'" + id + "'" : id;
  std::string user = User();
  std::string expected_meta = "artifact_uri: file://" + store->root() + "/1/" + id +
                              "/artifacts\n"
                              "deleted_time: null\n"
                              "end_time: null\n"
                              "entry_point_name: ''\n"
                              "experiment_id: '1'\n"
                              "lifecycle_stage: active\n"
                              "run_id: " + yaml_id + "\n"
                              "run_name: trial_00001\n"
                              "run_uuid: " + yaml_id + "\n"
                              "source_name: ''\n"
                              "source_type: 4\n"
                              "source_version: ''\n"
                              "start_time: 1700000000123\n"
                              "status: 1\n"
                              "tags: []\n";
  CHECK(Read(run_dir / "meta.yaml").rfind(expected_meta, 0) == 0);
  CHECK(Read(run_dir / "tags/mlflow.runName") == "trial_00001");
  CHECK(Read(run_dir / "tags/mlflow.source.type") == "LOCAL");
  CHECK(Read(run_dir / "tags/trial_id") == "abc_00001");
  if (!user.empty()) CHECK(Read(run_dir / "tags/mlflow.user") == user);

  // Params: the value alone, no newline; nested configs flattened with '/'.
  REQUIRE(run->LogParams(rt::MlflowParams(
                             {{"lr", 0.01}, {"opt", {{"name", "sgd"}, {"momentum", 0.9}}},
                              {"layers", {64, 64}}, {"bn", true}}))
              .ok());
  CHECK(Read(run_dir / "params/lr") == "0.01");
  CHECK(Read(run_dir / "params/opt/name") == "sgd");
  CHECK(Read(run_dir / "params/opt/momentum") == "0.9");
  CHECK(Read(run_dir / "params/layers") == "[64,64]");
  CHECK(Read(run_dir / "params/bn") == "true");
  CHECK(run->LogParam("lr", "0.01").ok());  // the same value again: nothing to do
  rayd::Status changed = run->LogParam("lr", "0.5");
  CHECK(changed.code() == rayd::StatusCode::kInvalidArgument);
  CHECK_THAT(changed.message(), Catch::Contains("param 'lr'"));

  // Metrics: "<timestamp ms> <value> <step>" per line, values as Python's repr writes them.
  REQUIRE(run->LogMetrics({{"loss", 0.5}, {"training_iteration", 1}}, 1700000001000, 1).ok());
  REQUIRE(run->LogMetric("loss", 0.25, 1700000002000, 2).ok());
  REQUIRE(run->LogMetric("big", 1e16, 1, 0).ok());
  REQUIRE(run->LogMetric("big", 123456.0, 2, 1).ok());
  REQUIRE(run->LogMetric("big", 1.5e-5, 3, 2).ok());
  REQUIRE(run->LogMetric("big", -0.001, 4, 3).ok());
  REQUIRE(run->LogMetric("big", std::nan(""), 5, 4).ok());
  REQUIRE(run->LogMetric("big", -INFINITY, 6, 5).ok());
  CHECK(Read(run_dir / "metrics/loss") == "1700000001000 0.5 1\n1700000002000 0.25 2\n");
  CHECK(Read(run_dir / "metrics/training_iteration") == "1700000001000 1.0 1\n");
  CHECK(Read(run_dir / "metrics/big") ==
        "1 1e+16 0\n2 123456.0 1\n3 1.5e-05 2\n4 -0.001 3\n5 nan 4\n6 -inf 5\n");

  // End: FINISHED (3) with its end time; deleted_time is gone, as _overwrite_run_info writes.
  REQUIRE(run->End(rt::MlflowRunStatus::kFinished, 1700000009999).ok());
  const std::string ended = Read(run_dir / "meta.yaml");
  CHECK_THAT(ended, Catch::Contains("\nend_time: 1700000009999\n"));
  CHECK_THAT(ended, Catch::Contains("\nstatus: 3\n"));
  CHECK_THAT(ended, !Catch::Contains("deleted_time"));
  CHECK_THAT(ended, Catch::Contains("\ntags: []\nuser_id: "));
  if (!user.empty()) CHECK_THAT(ended, Catch::EndsWith("\nuser_id: " + user + "\n"));

  // A second run in the same experiment; the experiment found again by name, not duplicated.
  rayd::Result<rt::MlflowRun> second = store->CreateRun(*experiment, "trial_00002");
  REQUIRE(second.ok());
  CHECK(second->id() != run->id());
  CHECK(RunDirs(fs::path(root) / "1").size() == 2);
  rayd::Result<rt::MlflowStore> again = rt::MlflowStore::Open(root);
  REQUIRE(again.ok());
  CHECK(*again->GetOrCreateExperiment("my sweep") == "1");
  CHECK(*again->GetOrCreateExperiment("Default") == "0");
  CHECK(*again->GetOrCreateExperiment("other") == "2");
  CHECK(*again->GetOrCreateExperiment("other") == "2");
}

TEST_CASE("MlflowStore: names that YAML would misread are quoted", "[tune][mlflow]") {
  TempDir dir;
  rayd::Result<rt::MlflowStore> store = rt::MlflowStore::Open(dir.path());
  REQUIRE(store.ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"123", "'123'"},      {"true", "'true'"},     {"no", "'no'"},
      {"a: b", "'a: b'"},    {"it's", "'it''s'"},    {"#x", "'#x'"},
      {"tab\tname", "\"tab\\tname\""}, {"mlp-asha", "mlp-asha"}};
  for (const auto& [name, yaml] : cases) {
    rayd::Result<std::string> id = store->GetOrCreateExperiment(name);
    REQUIRE(id.ok());
    const std::string meta = Read(fs::path(dir.path()) / *id / "meta.yaml");
    CHECK_THAT(meta, Catch::EndsWith("\nname: " + yaml + "\n"));
    // And it reads back as the same name: found again, not created twice.
    CHECK(*store->GetOrCreateExperiment(name) == *id);
  }
}

TEST_CASE("MlflowKey keeps what MLflow allows and replaces the rest", "[tune][mlflow]") {
  CHECK(rt::MlflowKey("val/loss_1 a.b-c") == "val/loss_1 a.b-c");
  CHECK(rt::MlflowKey("acc@1") == "acc_1");
  CHECK(rt::MlflowKey("f(x)=y:z") == "f_x__y_z");
  CHECK(rt::MlflowKey("/abs") == "_abs");
  CHECK(rt::MlflowKey("a/../b") == "a/__/b");
  CHECK(rt::MlflowKey("") == "_");
  CHECK(rt::MlflowKey(std::string(300, 'k')).size() == 250);
  CHECK(rt::MlflowParams({{"lr@max", 1}}).count("lr_max") == 1);
}

TEST_CASE("MlflowStore rejects a remote tracking URI", "[tune][mlflow]") {
  rayd::Result<rt::MlflowStore> store = rt::MlflowStore::Open("http://localhost:5000");
  REQUIRE(!store.ok());
  CHECK(store.status().code() == rayd::StatusCode::kInvalidArgument);
  CHECK_THAT(store.status().message(), Catch::Contains("http://localhost:5000"));
}

TEST_CASE("StartMlflowRun reopens the run of the same rayd run directory", "[tune][mlflow]") {
  TempDir dir;
  const std::string root = dir.path() + "/mlruns";
  rayd::Result<rt::MlflowRun> first =
      rt::StartMlflowRun(root, "exp", "mlp", "/data/runs/mlp", {{"lr", "0.1"}}, {{"k", "v"}});
  REQUIRE(first.ok());
  REQUIRE(rt::LogMlflowResult(*first, {{"loss", 2}, {"training_iteration", 1},
                                       {"timestamp", 1700000000.5}})
              .ok());
  REQUIRE(first->End(rt::MlflowRunStatus::kKilled, 5).ok());
  CHECK_THAT(Read(first->dir() + "/meta.yaml"), Catch::Contains("\nstatus: 5\n"));

  rayd::Result<rt::MlflowRun> resumed =
      rt::StartMlflowRun(root, "exp", "mlp", "/data/runs/mlp", {{"lr", "0.2"}}, {{"k", "w"}});
  REQUIRE(resumed.ok());
  CHECK(resumed->id() == first->id());
  const std::string meta = Read(resumed->dir() + "/meta.yaml");
  CHECK_THAT(meta, Catch::Contains("\nstatus: 1\n"));
  CHECK_THAT(meta, Catch::Contains("\nend_time: null\n"));
  CHECK(Read(resumed->dir() + "/params/lr") == "0.1");  // params are the run's first
  CHECK(Read(resumed->dir() + "/tags/k") == "w");
  CHECK(Read(resumed->dir() + "/tags/rayd.run_dir") == "/data/runs/mlp");
  CHECK(Read(resumed->dir() + "/metrics/loss") == "1700000000500 2.0 1\n");

  rayd::Result<rt::MlflowRun> other =
      rt::StartMlflowRun(root, "exp", "mlp2", "/data/runs/mlp2", {}, {});
  REQUIRE(other.ok());
  CHECK(other->id() != first->id());
  CHECK(other->experiment_id() == first->experiment_id());
}

using rayd::tune::internal::Trial;
using rayd::tune::internal::TrialStatus;
using rayd::tune::internal::TrialTracking;

Trial MakeTrial(int index, nlohmann::json config) {
  Trial t;
  t.index = index;
  t.id = "3fa2c_0000" + std::to_string(index);
  t.dir_name = "loop_" + t.id;
  t.config = std::move(config);
  t.status = TrialStatus::kRunning;
  return t;
}

std::string MetaOf(const fs::path& experiment, const std::string& trial_id) {
  for (const fs::path& run : RunDirs(experiment)) {
    if (fs::exists(run / "tags/trial_id") && Read(run / "tags/trial_id") == trial_id) {
      return Read(run / "meta.yaml");
    }
  }
  FAIL("no MLflow run for " << trial_id);
  return "";
}

TEST_CASE("TrialTracking: one MLflow run per trial, ended by what became of the trial",
          "[tune][mlflow]") {
  TempDir dir;
  rayd::train::RunConfig run;
  run.name = "sweep";
  run.mlflow_tracking_uri = dir.path() + "/mlruns";
  rayd::Result<TrialTracking> opened = TrialTracking::Open(run, "AsyncHyperBand", dir.path() + "/sweep");
  REQUIRE(opened.ok());
  TrialTracking tracking = std::move(opened).value();

  Trial finished = MakeTrial(0, {{"lr", 0.1}, {"model", {{"hidden", 64}}}});
  Trial failed = MakeTrial(1, {{"lr", 0.2}});
  Trial interrupted = MakeTrial(2, {{"lr", 0.3}});
  Trial paused_then_done = MakeTrial(3, {{"lr", 0.4}});
  for (Trial* t : {&finished, &failed, &interrupted, &paused_then_done}) tracking.OnTrialStart(*t);
  for (int i = 1; i <= 3; ++i) {
    tracking.OnResult(finished, {{"loss", 1.0 / i}, {"training_iteration", i}, {"timestamp", 100}});
  }
  failed.status = TrialStatus::kError;
  tracking.OnStatus(failed);
  finished.status = TrialStatus::kTerminated;
  tracking.OnStatus(finished);
  finished.status = TrialStatus::kError;  // after its end: the run is closed, nothing changes
  tracking.OnStatus(finished);
  paused_then_done.status = TrialStatus::kPaused;
  tracking.OnStatus(paused_then_done);
  paused_then_done.status = TrialStatus::kRunning;
  tracking.OnTrialStart(paused_then_done);  // resumed: the same run
  paused_then_done.status = TrialStatus::kTerminated;
  tracking.OnStatus(paused_then_done);
  interrupted.status = TrialStatus::kPending;
  tracking.OnStatus(interrupted);
  tracking.Close();

  const fs::path experiment = fs::path(dir.path()) / "mlruns" / "1";
  CHECK_THAT(Read(experiment / "meta.yaml"), Catch::Contains("\nname: sweep\n"));
  REQUIRE(RunDirs(experiment).size() == 4);
  CHECK_THAT(MetaOf(experiment, finished.id), Catch::Contains("\nstatus: 3\n"));
  CHECK_THAT(MetaOf(experiment, failed.id), Catch::Contains("\nstatus: 4\n"));
  CHECK_THAT(MetaOf(experiment, interrupted.id), Catch::Contains("\nstatus: 5\n"));
  CHECK_THAT(MetaOf(experiment, paused_then_done.id), Catch::Contains("\nstatus: 3\n"));
  for (const fs::path& run_dir : RunDirs(experiment)) {
    const std::string id = Read(run_dir / "tags/trial_id");
    CHECK(Read(run_dir / "tags/mlflow.runName") == "loop_" + id);
    CHECK(Read(run_dir / "tags/trial_name") == "loop_" + id);
    CHECK(Read(run_dir / "tags/scheduler") == "AsyncHyperBand");
    if (id == finished.id) {
      CHECK(Read(run_dir / "tags/trial_status") == "TERMINATED");
      CHECK(Read(run_dir / "params/lr") == "0.1");
      CHECK(Read(run_dir / "params/model/hidden") == "64");
      CHECK(Lines(Read(run_dir / "metrics/loss")) ==
            std::vector<std::string>{"100000 1.0 1", "100000 0.5 2",
                                     "100000 0.3333333333333333 3"});
    }
    if (id == interrupted.id) CHECK(Read(run_dir / "tags/trial_status") == "PENDING");
    if (id == failed.id) CHECK(Read(run_dir / "tags/trial_status") == "ERROR");
  }
}

TEST_CASE("TrialTracking is off without a tracking URI and fails early on a bad one",
          "[tune][mlflow]") {
  TempDir dir;
  rayd::train::RunConfig run;
  run.name = "sweep";
  rayd::Result<TrialTracking> off = TrialTracking::Open(run, "FIFO", dir.path());
  REQUIRE(off.ok());
  Trial t = MakeTrial(0, {{"lr", 1}});
  off->OnTrialStart(t);
  off->Close();
  CHECK(fs::is_empty(dir.path()));

  run.mlflow_tracking_uri = "s3://bucket/mlruns";
  rayd::Result<TrialTracking> bad = TrialTracking::Open(run, "FIFO", dir.path());
  REQUIRE(!bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("s3://bucket/mlruns"));
}

std::string ParseError(const std::string& text) {
  try {
    rayd::tune::ParseTuneFile(text, "tune.yaml");
  } catch (const rayd::tune::ConfigFileError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("tune.yaml and train.yaml: run.mlflow", "[tune][mlflow]") {
  rayd::tune::TuneFile file = rayd::tune::ParseTuneFile(
      "name: sweep\ntrainable: loop\nrun:\n  mlflow: {tracking_uri: ./mlruns}\n", "tune.yaml");
  CHECK(file.run.mlflow_tracking_uri == "./mlruns");
  CHECK(file.run.mlflow_experiment_name.empty());
  rayd::tune::TrainFile train = rayd::tune::ParseTrainFile(
      "name: mlp\ntrain_loop: loop\nrun:\n  mlflow:\n    tracking_uri: file:///tmp/mlruns\n"
      "    experiment_name: mlp-runs\n",
      "train.yaml");
  CHECK(train.run.mlflow_tracking_uri == "file:///tmp/mlruns");
  CHECK(train.run.mlflow_experiment_name == "mlp-runs");
  CHECK(rayd::tune::ParseTuneFile("name: s\ntrainable: l\n", "tune.yaml")
            .run.mlflow_tracking_uri.empty());

  CHECK(ParseError("name: s\ntrainable: l\nrun:\n  mlflow:\n    tracking_uri: http://h:5000\n") ==
        "tune.yaml:5: run.mlflow.tracking_uri: expected a directory or a file:// URI (a local "
        "MLflow file store), got 'http://h:5000'");
  CHECK(ParseError("name: s\ntrainable: l\nrun:\n  mlflow: {experiment_name: x}\n") ==
        "tune.yaml:4: run.mlflow.tracking_uri: required");
  CHECK_THAT(ParseError("name: s\ntrainable: l\nrun:\n  mlflow: {tracking_url: x}\n"),
             Catch::StartsWith("tune.yaml:4: run.mlflow.tracking_url: unknown key 'tracking_url'; "
                               "did you mean 'tracking_uri'?"));
  CHECK(ParseError("name: s\ntrainable: l\nrun:\n  mlflow:\n    tracking_uri: ''\n") ==
        "tune.yaml:5: run.mlflow.tracking_uri: must not be empty");
}

}  // namespace
