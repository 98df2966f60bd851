// Trial bookkeeping: experiment_state.json, the trial files, the console table and ResultGrid.

#include "trial.h"

#include <rayd/api/errors.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rayd::StatusCode;
using rayd::tune::Metrics;
using rayd::tune::ParseConstraint;
using rayd::tune::ResultGrid;
using rayd::tune::TrialResult;
using namespace rayd::tune::internal;
using rayd::testing::TempDir;


std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteAll(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

Trial MakeTrial(int index, TrialStatus status, json config, Metrics last_result) {
  Trial trial;
  char id[32];
  std::snprintf(id, sizeof(id), "3fa2c_%05d", index);
  trial.id = id;
  trial.index = index;
  trial.dir_name = std::string("mlp_") + id;
  trial.config = std::move(config);
  trial.status = status;
  trial.last_result = std::move(last_result);
  return trial;
}

ExperimentState SampleState(const std::string& dir) {
  ExperimentState state;
  state.name = "mlp-pbt";
  state.trainable = "mlp";
  state.metric = "loss";
  state.mode = "min";
  Trial done = MakeTrial(0, TrialStatus::kTerminated,
                         {{"lr", 0.0123}, {"optim", {{"momentum", 0.9}, {"name", "sgd"}}}},
                         {{"loss", 0.25}, {"training_iteration", 4}});
  done.checkpoint = dir + "/mlp_3fa2c_00000/checkpoint_000003";
  done.time_total_s = 12.5;
  // PBT changed this one's config; it failed once before.
  Trial failed = MakeTrial(1, TrialStatus::kError, {{"lr", 0.5}, {"optim", {{"momentum", 0.8}}}},
                           {{"loss", 2.5}, {"training_iteration", 2}});
  failed.error = "RemoteError: loss diverged\n  at step 2";
  failed.num_failures = 3;
  failed.time_total_s = 3.25;
  Trial pending = MakeTrial(2, TrialStatus::kPending, {{"lr", 0.001}}, {});
  Trial paused = MakeTrial(3, TrialStatus::kPaused, {{"lr", 0.002}}, {{"loss", 1.0}});
  Trial running = MakeTrial(4, TrialStatus::kRunning, {{"lr", 0.003}}, {{"loss", 1.5}});
  state.trials = {done, failed, pending, paused, running};
  return state;
}

TEST_CASE("Trial status names round trip", "[tune]") {
  for (TrialStatus status : {TrialStatus::kPending, TrialStatus::kRunning, TrialStatus::kPaused,
                             TrialStatus::kTerminated, TrialStatus::kError}) {
    REQUIRE(TrialStatusFromString(ToString(status)) == status);
  }
  CHECK(std::string(ToString(TrialStatus::kTerminated)) == "TERMINATED");
  CHECK(std::string(ToString(TrialStatus::kError)) == "ERROR");
  CHECK_FALSE(TrialStatusFromString("terminated").has_value());
  CHECK_FALSE(TrialStatusFromString("").has_value());
}

TEST_CASE("Trial ToResult copies every field and joins the path", "[tune]") {
  Trial trial = MakeTrial(7, TrialStatus::kError, {{"lr", 0.1}}, {{"loss", 3.0}});
  trial.history = {{{"loss", 4.0}}, {{"loss", 3.0}}};
  trial.checkpoint = "/x/ckpt";
  trial.error = "boom";
  trial.num_failures = 2;
  TrialResult result = trial.ToResult("/results/exp");
  CHECK(result.trial_id == "3fa2c_00007");
  CHECK(result.path == "/results/exp/mlp_3fa2c_00007");
  CHECK(result.config == json{{"lr", 0.1}});
  CHECK(result.status == "ERROR");
  CHECK(result.metrics == Metrics{{"loss", 3.0}});
  CHECK(result.history.size() == 2);
  CHECK(result.checkpoint == std::optional<std::string>("/x/ckpt"));
  CHECK(result.error == "boom");
  CHECK(result.num_failures == 2);
}

TEST_CASE("Experiment state round trips every field", "[tune]") {
  TempDir dir;
  ExperimentState saved = SampleState(dir.path());
  // Trial 0's result.json: two whole lines and one a crash cut short.
  WriteAll(fs::path(dir.path()) / "mlp_3fa2c_00000" / "result.json",
           "{\"loss\": 1.5, \"training_iteration\": 1, \"checkpoint_dir_name\": "
           "\"checkpoint_000000\"}\n"
           "{\"loss\": 0.25, \"training_iteration\": 2, \"done\": false}\n"
           "{\"loss\": 0.1, \"train");
  REQUIRE(SaveExperimentState(dir.path(), saved).ok());

  json doc = json::parse(ReadAll(fs::path(dir.path()) / "experiment_state.json"));
  CHECK(doc["name"] == "mlp-pbt");
  CHECK(doc["timestamp"].is_number());
  CHECK(doc["trials"].size() == 5);
  CHECK_FALSE(doc["trials"][0].contains("history"));

  auto loaded = LoadExperimentState(dir.path());
  REQUIRE(loaded.ok());
  CHECK(loaded->name == "mlp-pbt");
  CHECK(loaded->trainable == "mlp");
  CHECK(loaded->metric == "loss");
  CHECK(loaded->mode == "min");
  REQUIRE(loaded->trials.size() == saved.trials.size());
  for (size_t i = 0; i < saved.trials.size(); ++i) {
    const Trial& a = saved.trials[i];
    const Trial& b = loaded->trials[i];
    INFO("trial " << i);
    CHECK(b.id == a.id);
    CHECK(b.index == a.index);
    CHECK(b.dir_name == a.dir_name);
    CHECK(b.config == a.config);
    CHECK(b.status == a.status);
    CHECK(b.last_result == a.last_result);
    CHECK(b.checkpoint == a.checkpoint);
    CHECK(b.error == a.error);
    CHECK(b.num_failures == a.num_failures);
    CHECK(b.time_total_s == a.time_total_s);
  }
  CHECK(loaded->trials[1].config["lr"] == 0.5);  // the PBT-changed config, not the original
  CHECK(loaded->trials[1].error == "RemoteError: loss diverged\n  at step 2");
  CHECK_FALSE(loaded->trials[2].checkpoint.has_value());

  // History: the numeric fields of the whole lines; the cut line and strings/bools dropped.
  const std::vector<Metrics>& history = loaded->trials[0].history;
  REQUIRE(history.size() == 2);
  CHECK(history[0] == Metrics{{"loss", 1.5}, {"training_iteration", 1}});
  CHECK(history[1] == Metrics{{"loss", 0.25}, {"training_iteration", 2}});
  CHECK(loaded->trials[1].history.empty());  // no result.json
}

TEST_CASE("Experiment state keeps a NaN metric as NaN", "[tune]") {
  TempDir dir;
  ExperimentState state;
  state.trials = {
      MakeTrial(0, TrialStatus::kRunning, json::object(), {{"loss", std::nan("")}, {"acc", 0.5}})};
  REQUIRE(SaveExperimentState(dir.path(), state).ok());
  auto loaded = LoadExperimentState(dir.path());
  REQUIRE(loaded.ok());
  CHECK(std::isnan(loaded->trials[0].last_result.at("loss")));
  CHECK(loaded->trials[0].last_result.at("acc") == 0.5);
}

TEST_CASE("Saving experiment state leaves no temporary file", "[tune]") {
  TempDir dir;
  ExperimentState state = SampleState(dir.path());
  REQUIRE(SaveExperimentState(dir.path(), state).ok());
  state.trials[2].status = TrialStatus::kRunning;
  REQUIRE(SaveExperimentState(dir.path(), state).ok());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  CHECK(names == std::vector<std::string>{"experiment_state.json"});
  auto loaded = LoadExperimentState(dir.path());
  REQUIRE(loaded.ok());
  CHECK(loaded->trials[2].status == TrialStatus::kRunning);  // the second write replaced it
}

TEST_CASE("Saving experiment state creates the directory", "[tune]") {
  TempDir dir;
  std::string nested = (fs::path(dir.path()) / "a" / "b").string();
  REQUIRE(SaveExperimentState(nested, SampleState(nested)).ok());
  CHECK(fs::exists(fs::path(nested) / "experiment_state.json"));
}

TEST_CASE("Loading experiment state without the file is NotFound", "[tune]") {
  TempDir dir;
  auto loaded = LoadExperimentState(dir.path());
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.status().code() == StatusCode::kNotFound);
  auto missing_dir = LoadExperimentState((fs::path(dir.path()) / "nope").string());
  CHECK(missing_dir.status().code() == StatusCode::kNotFound);
}

TEST_CASE("Loading bad experiment state is InvalidArgument naming the problem", "[tune]") {
  TempDir dir;
  fs::path file = fs::path(dir.path()) / "experiment_state.json";
  auto load_error = [&](const std::string& text) {
    WriteAll(file, text);
    auto loaded = LoadExperimentState(dir.path());
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.status().code() == StatusCode::kInvalidArgument);
    return loaded.status().message();
  };
  CHECK_THAT(load_error("{\"trials\": [ {"), Catch::Contains("not valid JSON"));
  CHECK_THAT(load_error("[1, 2]"), Catch::Contains("not a JSON object"));
  CHECK_THAT(load_error("{\"name\": \"x\"}"), Catch::Contains("\"trials\""));
  CHECK_THAT(load_error("{\"name\": 3, \"trials\": []}"), Catch::Contains("\"name\""));

  json good = {{"id", "3fa2c_00000"},   {"index", 0},          {"dir_name", "mlp_3fa2c_00000"},
               {"config", {{"lr", 1}}}, {"status", "RUNNING"}, {"last_result", {{"loss", 1}}}};
  auto with = [&](const std::string& key, json value) {
    json entry = good;
    if (value.is_discarded()) {
      entry.erase(key);
    } else {
      entry[key] = value;
    }
    return json{{"trials", {good, entry}}}.dump();
  };
  const json kErase = json(json::value_t::discarded);
  std::string message = load_error(with("status", "DONE"));
  CHECK_THAT(message, Catch::Contains("trials[1]") && Catch::Contains("DONE"));
  CHECK_THAT(load_error(with("id", kErase)), Catch::Contains("\"id\""));
  CHECK_THAT(load_error(with("index", "zero")), Catch::Contains("\"index\""));
  CHECK_THAT(load_error(with("dir_name", kErase)), Catch::Contains("\"dir_name\""));
  CHECK_THAT(load_error(with("config", kErase)), Catch::Contains("\"config\""));
  CHECK_THAT(load_error(with("last_result", {{"loss", "low"}})), Catch::Contains("loss"));
  CHECK_THAT(load_error(with("checkpoint", 5)), Catch::Contains("\"checkpoint\""));
  CHECK_THAT(load_error(with("num_failures", 1.5)), Catch::Contains("\"num_failures\""));
  CHECK_THAT(load_error(with("time_total_s", "long")), Catch::Contains("\"time_total_s\""));
  CHECK_THAT(load_error(json{{"trials", {good, 7}}}.dump()), Catch::Contains("trials[1]"));

  // The minimal entry is fine.
  WriteAll(file, json{{"trials", {good}}}.dump());
  auto loaded = LoadExperimentState(dir.path());
  REQUIRE(loaded.ok());
  CHECK(loaded->trials[0].num_failures == 0);
  CHECK(loaded->trials[0].last_result == Metrics{{"loss", 1}});
}

TEST_CASE("a run directory names its files and writes params.json whole", "[tune]") {
  TempDir dir;
  rayd::train::RunDirectory run((fs::path(dir.path()) / "mlp_3fa2c_00000").string());
  json config = {{"lr", 0.01}, {"optim", {{"name", "sgd"}}}};
  REQUIRE(run.WriteParams(config).ok());
  fs::path params = fs::path(dir.path()) / "mlp_3fa2c_00000" / "params.json";
  CHECK(run.ParamsFile() == params.string());
  CHECK(json::parse(ReadAll(params)) == config);
  CHECK(ReadAll(params).find('\n') != std::string::npos);  // pretty
  json changed = {{"lr", 0.02}};
  REQUIRE(run.WriteParams(changed).ok());
  CHECK(json::parse(ReadAll(params)) == changed);
  CHECK(fs::exists(params.parent_path() / ".params.json.tmp") == false);
  // Ray's names, and checkpoint directories numbered to six digits.
  CHECK(fs::path(run.ResultFile()).filename() == "result.json");
  CHECK(fs::path(run.ProgressFile()).filename() == "progress.csv");
  CHECK(fs::path(run.ErrorFile()).filename() == "error.txt");
  CHECK(rayd::train::RunDirectory::CheckpointName(12) == "checkpoint_000012");
  CHECK(rayd::train::RunDirectory::CheckpointIndex("checkpoint_000012") == 12);
  CHECK(rayd::train::RunDirectory::CheckpointIndex("checkpoint_000012.tmp") == -1);
  CHECK(rayd::train::RunDirectory::CheckpointIndex("checkpoint_") == -1);
  CHECK(rayd::train::RunDirectory::CheckpointIndex("params.json") == -1);
}

TEST_CASE("TrialFiles writes progress.csv rows and headers", "[tune]") {
  TempDir dir;
  TrialFiles files(dir.path());
  fs::path csv = fs::path(dir.path()) / "progress.csv";
  json config = {{"lr", 0.1},
                 {"optim", {{"momentum", 0.9}, {"name", "sgd, fast"}}},
                 {"hidden", 64},
                 {"flag", true}};
  REQUIRE(files.AppendProgress({{"training_iteration", 1}, {"loss", 0.5}}, config).ok());
  REQUIRE(files.AppendProgress({{"training_iteration", 2}, {"loss", 1.0 / 3}}, config).ok());
  CHECK_FALSE(fs::exists(csv));  // rows are written by Flush, a batch in one write
  REQUIRE(files.Flush().ok());
  std::vector<std::string> lines = Lines(ReadAll(csv));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "loss,training_iteration,config/flag,config/hidden,config/lr,config/optim/momentum,"
        "config/optim/name");
  CHECK(lines[1] == "0.5,1,True,64,0.1,0.9,\"sgd, fast\"");
  CHECK(lines[2] == "0.3333333333333333,2,True,64,0.1,0.9,\"sgd, fast\"");
  // Doubles read back exactly.
  CHECK(std::stod(lines[2].substr(0, lines[2].find(','))) == 1.0 / 3);
}

TEST_CASE("TrialFiles rewrites progress.csv when columns grow", "[tune]") {
  TempDir dir;
  TrialFiles files(dir.path());
  fs::path csv = fs::path(dir.path()) / "progress.csv";
  REQUIRE(files.AppendProgress({{"loss", 2}}, json{{"lr", 0.1}}).ok());
  REQUIRE(files.AppendProgress({{"loss", 1}, {"acc", 0.75}}, json{{"lr", 0.2}}).ok());
  REQUIRE(files.AppendProgress({{"loss", 0.5}}, json{{"lr", 0.2}}).ok());
  REQUIRE(files.Flush().ok());
  std::vector<std::string> lines = Lines(ReadAll(csv));
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "loss,config/lr,acc");
  CHECK(lines[1] == "2,0.1,");
  CHECK(lines[2] == "1,0.2,0.75");
  CHECK(lines[3] == "0.5,0.2,");
  CHECK_FALSE(fs::exists(fs::path(dir.path()) / ".progress.csv.tmp"));
}

TEST_CASE("TrialFiles quotes CSV values and continues a resumed file", "[tune]") {
  TempDir dir;
  fs::path csv = fs::path(dir.path()) / "progress.csv";
  json config = {{"note", "say \"hi\"\nnext line"}};
  {
    TrialFiles files(dir.path());
    REQUIRE(files.AppendProgress({{"loss", 1}}, config).ok());
    REQUIRE(files.Flush().ok());
    CHECK(ReadAll(csv) == "loss,config/note\n1,\"say \"\"hi\"\"\nnext line\"\n");
  }
  // A new TrialFiles (a resumed trial) keeps the earlier rows, also when columns grow.
  TrialFiles resumed(dir.path());
  REQUIRE(resumed.AppendProgress({{"loss", 0.5}, {"acc", 1}}, config).ok());
  REQUIRE(resumed.Flush().ok());
  CHECK(ReadAll(csv) ==
        "loss,config/note,acc\n"
        "1,\"say \"\"hi\"\"\nnext line\",\n"
        "0.5,\"say \"\"hi\"\"\nnext line\",1\n");
}

TEST_CASE("TrialFiles appends error blocks with a timestamp", "[tune]") {
  TempDir dir;
  TrialFiles files((fs::path(dir.path()) / "t").string());
  REQUIRE(files.AppendError("first failure\ntraceback").ok());
  REQUIRE(files.AppendError("second failure").ok());
  std::string text = ReadAll(fs::path(dir.path()) / "t" / "error.txt");
  std::vector<std::string> lines = Lines(text);
  REQUIRE(lines.size() >= 5);
  CHECK_THAT(lines[0], Catch::StartsWith("Failure # 1 (occurred at 20"));
  CHECK_THAT(lines[0], Catch::Contains("T") && Catch::EndsWith("Z)"));
  CHECK(lines[1] == "first failure");
  CHECK(lines[2] == "traceback");
  CHECK(lines[3].empty());
  CHECK_THAT(lines[4], Catch::StartsWith("Failure # 2 (occurred at "));
  CHECK(lines[5] == "second failure");
}

std::vector<Trial> TableTrials() {
  std::vector<Trial> trials;
  json common = {{"momentum", 0.9}};
  trials.push_back(MakeTrial(0, TrialStatus::kTerminated,
                             {{"lr", 0.0123456}, {"hidden", 64}, {"momentum", 0.9}},
                             {{"training_iteration", 20},
                              {"loss", 0.123456789},
                              {"accuracy", 0.91},
                              {"time_total_s", 9}}));
  trials[0].time_total_s = 12.5;
  trials.push_back(MakeTrial(1, TrialStatus::kRunning,
                             {{"lr", 0.001}, {"hidden", 128}, {"momentum", 0.9}},
                             {{"training_iteration", 3}, {"loss", 1.5}, {"accuracy", 0.4}}));
  trials[1].time_total_s = 2;
  trials.push_back(
      MakeTrial(2, TrialStatus::kPending, {{"lr", 0.05}, {"hidden", 64}, {"momentum", 0.9}}, {}));
  return trials;
}

TEST_CASE("RenderTable shows the header and differing config columns only", "[tune]") {
  std::vector<Trial> trials = TableTrials();
  // Out of index order on input: the table sorts by index.
  std::swap(trials[0], trials[2]);
  std::string text =
      RenderTable(trials, "loss", "ASHA: 1 bracket", "Resources requested: 4/8 CPUs", 12.34);
  INFO(text);
  CHECK_THAT(text, Catch::StartsWith("== Status ==\nCurrent time: "));
  CHECK_THAT(text, Catch::Contains("Total running time: 12.3 s"));
  CHECK_THAT(text, Catch::Contains("\nASHA: 1 bracket\nResources requested: 4/8 CPUs\n"));
  CHECK_THAT(text, Catch::Contains("Trials: 1 RUNNING | 1 TERMINATED | 1 PENDING\n"));
  std::vector<std::string> lines = Lines(text);
  auto header = std::find_if(lines.begin(), lines.end(),
                             [](const std::string& l) { return l.rfind("| Trial name", 0) == 0; });
  REQUIRE(header != lines.end());
  CHECK_THAT(*header, Catch::Contains("| status ") && Catch::Contains("| hidden |") &&
                          Catch::Contains("lr") && Catch::Contains("iter") &&
                          Catch::Contains("loss") && Catch::Contains("accuracy") &&
                          Catch::Contains("total time (s) |"));
  CHECK_THAT(*header, !Catch::Contains("momentum"));  // the same in every trial
  CHECK(header->find("hidden") < header->find("lr"));
  CHECK(header->find("iter") < header->find("loss"));
  CHECK(header->find("loss") < header->find("accuracy"));
  // Rows in index order, numbers to about five significant digits.
  size_t row0 = text.find("| mlp_3fa2c_00000 | TERMINATED |");
  size_t row1 = text.find("| mlp_3fa2c_00001 | RUNNING    |");
  size_t row2 = text.find("| mlp_3fa2c_00002 | PENDING    |");
  REQUIRE(row0 != std::string::npos);
  REQUIRE(row1 != std::string::npos);
  REQUIRE(row2 != std::string::npos);
  CHECK(row0 < row1);
  CHECK(row1 < row2);
  CHECK_THAT(text, Catch::Contains("0.12346") && Catch::Contains("0.012346"));
  CHECK_THAT(text, !Catch::Contains("0.123456"));
  CHECK_THAT(text, Catch::Contains(" 20 |") && Catch::Contains(" 12.5 |"));
  CHECK_THAT(text, !Catch::Contains("more trials not shown"));
  // Every table line has the same width.
  size_t width = 0;
  for (const std::string& line : lines) {
    if (line.empty() || (line[0] != '+' && line[0] != '|')) continue;
    if (width == 0) width = line.size();
    CHECK(line.size() == width);
  }
}

TEST_CASE("RenderTable shows a few config paths when none differ", "[tune]") {
  std::vector<Trial> trials;
  json config = {{"a", 1}, {"b", {{"c", 2}, {"d", 3}}}, {"e", 4}};
  trials.push_back(MakeTrial(0, TrialStatus::kRunning, config, {}));
  trials.push_back(MakeTrial(1, TrialStatus::kRunning, config, {}));
  std::string text = RenderTable(trials, "loss", "", "", 1);
  INFO(text);
  CHECK_THAT(text,
             Catch::Contains("| a |") && Catch::Contains("| b/c |") && Catch::Contains("| b/d |"));
  CHECK_THAT(text, !Catch::Contains("| e |"));
}

TEST_CASE("RenderTable limits config columns to six", "[tune]") {
  std::vector<Trial> trials;
  for (int i = 0; i < 2; ++i) {
    json config;
    for (char c = 'a'; c <= 'h'; ++c) config[std::string("p") + c] = i;
    trials.push_back(MakeTrial(i, TrialStatus::kRunning, config, {}));
  }
  std::string text = RenderTable(trials, "loss", "", "", 1);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("| pf |"));
  CHECK_THAT(text, !Catch::Contains("| pg |"));
}

TEST_CASE("RenderTable summarises the trials past max_rows", "[tune]") {
  std::vector<Trial> trials;
  for (int i = 0; i < 15; ++i) {
    TrialStatus status = i < 3   ? TrialStatus::kRunning
                         : i < 8 ? TrialStatus::kTerminated
                                 : TrialStatus::kPending;
    trials.push_back(MakeTrial(i, status, {{"lr", 0.001 * (i + 1)}}, {}));
  }
  std::string text = RenderTable(trials, "loss", "", "", 75, /*max_rows=*/3);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("Total running time: 1 min 15 s"));
  CHECK_THAT(text, Catch::Contains("Trials: 3 RUNNING | 5 TERMINATED | 7 PENDING\n"));
  CHECK_THAT(text, Catch::Contains("mlp_3fa2c_00002"));
  CHECK_THAT(text, !Catch::Contains("mlp_3fa2c_00003"));
  CHECK_THAT(text, Catch::Contains("... 12 more trials not shown (5 TERMINATED, 7 PENDING)\n"));
}

TEST_CASE("RenderTable lists errored trials", "[tune]") {
  std::vector<Trial> trials = TableTrials();
  trials[1].status = TrialStatus::kError;
  trials[1].num_failures = 2;
  trials[1].error = "RemoteError: out of memory\ntraceback line";
  std::string text = RenderTable(trials, "loss", "", "", 1);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("Number of errored trials: 1"));
  CHECK_THAT(text, Catch::Contains("RemoteError: out of memory"));
  CHECK_THAT(text, !Catch::Contains("traceback line"));
}

TEST_CASE("RenderTable with no trials", "[tune]") {
  std::string text = RenderTable({}, "loss", "", "", 0);
  CHECK_THAT(text, Catch::Contains("Trials: none"));
  CHECK_THAT(text, !Catch::Contains("Trial name"));
}

ResultGrid SampleGrid() {
  std::vector<TrialResult> results;
  auto add = [&](std::string id, std::string status, Metrics metrics) {
    TrialResult r;
    r.trial_id = std::move(id);
    r.status = std::move(status);
    r.metrics = std::move(metrics);
    results.push_back(std::move(r));
  };
  add("t0", "TERMINATED", {{"loss", 0.5}, {"acc", 0.7}});
  add("t1", "ERROR", {{"acc", 0.99}});  // no loss
  add("t2", "TERMINATED", {{"loss", 0.2}, {"acc", 0.6}});
  add("t3", "TERMINATED", {{"loss", std::nan("")}, {"acc", 0.1}});
  add("t4", "PAUSED", {{"loss", 0.9}, {"acc", 0.8}});
  return ResultGrid("/exp", std::move(results), "loss", "min");
}

TEST_CASE("ResultGrid counts and picks the best trial", "[tune]") {
  ResultGrid grid = SampleGrid();
  CHECK(grid.size() == 5);
  CHECK(grid.num_errors() == 1);
  CHECK(grid.num_terminated() == 3);
  CHECK(grid.GetBestResult().trial_id == "t2");               // the grid's loss/min
  CHECK(grid.GetBestResult("loss", "max").trial_id == "t4");  // NaN skipped
  CHECK(grid.GetBestResult("acc", "max").trial_id == "t1");
  CHECK(grid.GetBestResult("acc", "min").trial_id == "t3");
  CHECK(grid.GetBestResult("acc").trial_id == "t3");  // the grid's mode
}

TEST_CASE("ResultGrid GetBestResult throws without the metric or with a bad mode", "[tune]") {
  ResultGrid grid = SampleGrid();
  CHECK_THROWS_AS(grid.GetBestResult("f1"), rayd::RaydError);
  CHECK_THROWS_WITH(grid.GetBestResult("f1"), Catch::Contains("\"f1\""));
  CHECK_THROWS_WITH(grid.GetBestResult("loss", "best"), Catch::Contains("min"));
  CHECK_THROWS_AS(ResultGrid().GetBestResult(), rayd::RaydError);
  ResultGrid no_metric("/exp", {}, "", "min");
  CHECK_THROWS_WITH(no_metric.GetBestResult(), Catch::Contains("metric"));
}

TEST_CASE("ResultGrid of several objectives: its Pareto front among the feasible trials, its "
          "hypervolume, and no single best without a rule",
          "[tune]") {
  std::vector<TrialResult> results;
  auto add = [&](std::string id, Metrics metrics) {
    TrialResult r;
    r.trial_id = std::move(id);
    r.status = "TERMINATED";
    r.metrics = std::move(metrics);
    results.push_back(std::move(r));
  };
  // acc max, params min, latency <= 5.
  add("t0", {{"acc", 0.9}, {"params", 100}, {"latency", 1}});   // front
  add("t1", {{"acc", 0.8}, {"params", 200}, {"latency", 1}});   // dominated by t0
  add("t2", {{"acc", 0.95}, {"params", 300}, {"latency", 2}});  // front
  add("t3", {{"acc", 0.99}, {"params", 50}, {"latency", 9}});   // dominates all, infeasible
  add("t4", {{"loss", 1}});                                     // no objective reported
  ResultGrid grid("/exp", std::move(results), "", "min", {{"acc", true}, {"params", false}},
                  {ParseConstraint("latency <= 5")});
  CHECK(grid.ParetoFront() == std::vector<size_t>{0, 2});
  CHECK(grid.Feasible(0));
  CHECK_FALSE(grid.Feasible(3));
  CHECK_THROWS_WITH(grid.GetBestResult(), Catch::Contains("several objectives"));
  CHECK(grid.GetBestResult("acc", "max").trial_id == "t3");  // a rule given: ranked by it
  // Minimised points: t0 (-0.9, 100), t2 (-0.95, 300). Over every trial that reported them,
  // acc spans -0.99..-0.8 and params 50..300, so the reference is (-0.8 + 0.019, 300 + 25) =
  // (-0.781, 325). Volume: t0's box (0.119 x 225 = 26.775) plus t2's part below acc -0.9
  // (0.05 x 25 = 1.25): 28.025.
  std::vector<double> reference;
  CHECK(grid.FrontHypervolume(&reference) == Approx(28.025));
  CHECK(reference[0] == Approx(-0.781));
  CHECK(reference[1] == Approx(325));
  // No trial met the constraints: no front.
  ResultGrid none("/exp", {grid[3]}, "", "min", grid.objectives(), grid.constraints());
  CHECK(none.ParetoFront().empty());
  CHECK(none.FrontHypervolume() == 0);
}

}  // namespace
