// The Tuner's controller on scripted runs (no cluster, no threads): a runner that plays each
// trial's learning curve one result at a time, each only after the controller has answered
// the last, as a Trainer's run does. Checks the order of results, max_concurrent, failures,
// TuneConfig::stop, ASHA stopping and pausing (promotion) trials, PBT's exploit (a clone of the
// donor's checkpoint that the trial's next run resumes from, with the explored config),
// restarts within a run, and a stop request followed by a resume from experiment_state.json.

#include "controller.h"

#include <rayd/train/run_directory.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "searcher.h"
#include "trial_files_sink.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using rayd::testing::TempDir;
using namespace rayd::tune;
using namespace rayd::tune::internal;

// Plays, for each trial, the curve its config names: results {score, training_iteration}, then
// the end of the run; or an error after `fail_after` results. A trial's place in its curve
// survives its runs (a paused or interrupted trial goes on where it stopped, as a Trainer
// resuming from its checkpoint does). Each result is appended to the trial's result.json, as
// the Trainer persists it before the controller hears of it.
class ScriptedRunner : public TrialRunner {
 public:
  std::map<std::string, std::vector<double>> curves;  // by config["curve"]
  std::map<std::string, int> fail_after;              // by config["curve"]
  // Failures a run survives by restarting (from its latest checkpoint when it has one), as a
  // Trainer within max_failures does; reported in TrainResult::restarts.
  int restarts_allowed = 0;
  // Each result carries a checkpoint (the curve and the place in it), and a run starts from the
  // latest checkpoint in its trial's directory: a trial that PBT cloned plays its donor's curve.
  bool checkpoints = false;
  // When set, a trial's curve is this function of its config (a searcher's proposals have no
  // "curve" key).
  std::function<std::vector<double>(const nlohmann::json&)> curve_of;
  // Called before each result is posted, with the trial's id and the result's iteration.
  std::function<void(const std::string&, int)> before_result;

  // Elastic trials: each result carries world_size (a trial's first run starts at 1); GrowTo
  // is recorded and takes effect from the trial's next result, taking the workers from
  // free_workers, which FreeWorkers reports.
  bool elastic = false;
  int free_workers = 0;
  std::vector<std::pair<std::string, int>> grows;  // (trial id, workers), in order

  std::vector<std::string> starts;  // trial ids, in the order their runs started
  std::map<std::string, std::vector<nlohmann::json>> configs;  // each run's, by trial id
  size_t most_running = 0;

  void SetPost(PostFn post) override { post_ = std::move(post); }

  void Start(const RunRequest& request) override {
    starts.push_back(request.trial_id);
    Play& play = plays_[request.trial_id];
    play.trial = request.trial;
    if (curve_of) {
      play.curve = request.config.dump();
      curves[play.curve] = curve_of(request.config);
    } else {
      play.curve = request.config.at("curve").get<std::string>();
    }
    play.dir = fs::path(request.experiment_dir) / request.run_dir_name;
    play.restarts = 0;
    play.answered = false;
    configs[request.trial_id].push_back(request.config);
    fs::create_directories(play.dir);
    if (checkpoints) Restore(play);
    running_[request.trial] = request.trial_id;
    most_running = std::max(most_running, running_.size());
    Next(play);
  }

  void Answer(size_t trial, bool go_on) override {
    Play& play = plays_.at(running_.at(trial));
    play.answered = true;
    if (go_on) return Next(play);
    rayd::train::TrainResult ended;
    ended.stopped = true;
    ended.restarts = play.restarts;
    post_({RunEvent::Kind::kDone, trial, {}, ended});
  }

  void Finished(size_t trial) override { running_.erase(trial); }
  void ReleaseIdle() override {}
  int FreeWorkers() override { return free_workers; }
  // Elastic: a run waits for its gang until its first result has been answered.
  bool AnyWaitingForWorkers() override {
    return elastic && std::any_of(running_.begin(), running_.end(), [this](const auto& entry) {
             return !plays_.at(entry.second).answered;
           });
  }
  std::vector<int> wants;  // WantWorkers' hints, as they changed
  void WantWorkers(int workers) override {
    if (wants.empty() || wants.back() != workers) wants.push_back(workers);
  }
  void GrowTo(size_t trial, int workers) override {
    Play& play = plays_.at(running_.at(trial));
    grows.emplace_back(running_.at(trial), workers);
    free_workers -= workers - play.workers;
    play.workers = workers;
  }

 private:
  struct Play {
    size_t trial = 0;
    std::string curve;
    fs::path dir;
    int reported = 0;
    int restarts = 0;  // this run's
    bool failed = false;
    int workers = 1;        // elastic: the run's size
    bool answered = false;  // a result of this run was answered
  };

  // The newest checkpoint in the trial's directory, if any, decides where the run starts.
  void Restore(Play& play) {
    int newest = -1;
    for (const auto& entry : fs::directory_iterator(play.dir)) {
      newest = std::max(newest,
                        rayd::train::RunDirectory::CheckpointIndex(entry.path().filename().string()));
    }
    if (newest < 0) return;
    std::ifstream state(fs::path(rayd::train::RunDirectory(play.dir.string()).CheckpointDir(newest)) /
                        "state");
    state >> play.curve >> play.reported;
  }

  void Next(Play& play) {
    const std::vector<double>& curve = curves.at(play.curve);
    auto fails = fail_after.find(play.curve);
    rayd::train::TrainResult ended;
    ended.restarts = play.restarts;
    if (fails != fail_after.end() && play.reported == fails->second && !play.failed) {
      play.failed = true;  // once per trial
      if (play.restarts < restarts_allowed) {
        ++play.restarts;
        if (checkpoints) Restore(play);
        return Next(play);
      }
      ended.error = "scripted failure of curve " + play.curve;
      return post_({RunEvent::Kind::kDone, play.trial, {}, ended});
    }
    if (play.reported == static_cast<int>(curve.size())) {
      return post_({RunEvent::Kind::kDone, play.trial, {}, ended});
    }
    const int iteration = ++play.reported;
    if (before_result) before_result(running_.at(play.trial), iteration);
    rayd::train::ReportedResult result;
    result.metrics = {{"score", curve[iteration - 1]},
                      {"training_iteration", iteration},
                      {"time_total_s", iteration}};
    if (elastic) result.metrics["world_size"] = play.workers;
    std::ofstream(play.dir / "result.json", std::ios::app) << json(result.metrics).dump() << "\n";
    if (checkpoints) {
      const std::string dir = rayd::train::RunDirectory(play.dir.string()).CheckpointDir(++saved_);
      fs::create_directories(dir);
      std::ofstream(fs::path(dir) / "state") << play.curve << " " << play.reported;
      result.checkpoint = dir;
    }
    post_({RunEvent::Kind::kResult, play.trial, result, {}});
  }

  PostFn post_;
  int saved_ = 0;  // checkpoints written, to number the next
  std::map<std::string, Play> plays_;      // by trial id
  std::map<size_t, std::string> running_;  // trial index -> id
};

std::vector<Trial> MakeTrials(const std::vector<std::string>& curves) {
  std::vector<Trial> trials;
  for (size_t i = 0; i < curves.size(); ++i) {
    Trial t;
    t.index = static_cast<int>(i);
    t.id = "ctl00_0000" + std::to_string(i);
    t.dir_name = "scripted_" + t.id;
    t.config = {{"curve", curves[i]}};
    trials.push_back(std::move(t));
  }
  return trials;
}

// One sweep over `trials` on `runner`, maximising score.
struct Sweep {
  TempDir dir;
  Trainable trainable{"scripted", {}};
  TuneConfig tune{.metric = "score", .mode = "max"};
  rayd::train::RunConfig run{.name = "ctl", .storage_path = ""};
  std::unique_ptr<StopSignal> stop = std::make_unique<StopSignal>();

  // With `resumed`, its scheduler state is restored, as the Tuner does on --resume.
  ResultGrid Run(ScriptedRunner& runner, std::vector<Trial> trials, int max_concurrent,
                 std::unique_ptr<Searcher> searcher = nullptr,
                 const ExperimentState* resumed = nullptr) {
    run.storage_path = dir.path();
    std::vector<std::unique_ptr<ResultSink>> sinks;
    sinks.push_back(std::make_unique<TrialFilesSink>(dir.path()));
    rayd::EventLoop loop;
    auto scheduler = MakeScheduler(tune.scheduler, tune.metric, tune.mode, 1);
    if (resumed) scheduler->Restore(resumed->scheduler_state);
    Controller controller(loop, trainable, tune, run, std::move(scheduler), dir.path(),
                          std::move(sinks), *stop, runner);
    if (searcher) controller.SetSearcher(std::move(searcher), "tpe00", "scripted");
    if (resumed) controller.SchedulerRestored(resumed->scheduler_seen);
    return controller.Run(std::move(trials), max_concurrent);
  }
};

std::vector<double> Scores(const TrialResult& trial) {
  std::vector<double> scores;
  for (const Metrics& m : trial.history) scores.push_back(m.at("score"));
  return scores;
}

TEST_CASE("the controller runs every trial to its end, in order, max_concurrent at a time",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.curves = {{"a", {1, 2, 3}}, {"b", {4, 5}}, {"c", {6}}};
  Sweep sweep;
  ResultGrid grid = sweep.Run(runner, MakeTrials({"a", "b", "c", "a", "b"}), 2);
  REQUIRE(grid.size() == 5);
  CHECK(grid.num_terminated() == 5);
  CHECK(runner.most_running == 2);
  CHECK(runner.starts == std::vector<std::string>{"ctl00_00000", "ctl00_00001", "ctl00_00002",
                                                  "ctl00_00003", "ctl00_00004"});
  CHECK(Scores(grid[0]) == std::vector<double>{1, 2, 3});
  CHECK(Scores(grid[4]) == std::vector<double>{4, 5});
  // The controller's own files: progress.csv (a header and a row per result) and the state.
  std::ifstream progress(fs::path(grid[0].path) / "progress.csv");
  int lines = 0;
  for (std::string line; std::getline(progress, line);) ++lines;
  CHECK(lines == 4);
  auto state = LoadExperimentState(grid.experiment_path());
  REQUIRE(state.ok());
  for (const Trial& t : state->trials) CHECK(t.status == TrialStatus::kTerminated);
}

TEST_CASE("a run that fails ends its trial in ERROR with the reason, the others go on",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.curves = {{"ok", {1, 2}}, {"bad", {1, 2, 3}}};
  runner.fail_after = {{"bad", 1}};
  Sweep sweep;
  ResultGrid grid = sweep.Run(runner, MakeTrials({"ok", "bad", "ok"}), 3);
  CHECK(grid.num_terminated() == 2);
  CHECK(grid.num_errors() == 1);
  CHECK(grid[1].status == "ERROR");
  CHECK_THAT(grid[1].error, Catch::Contains("scripted failure of curve bad"));
  CHECK(Scores(grid[1]) == std::vector<double>{1});
  CHECK(fs::exists(fs::path(grid[1].path) / "error.txt"));
}

TEST_CASE("a run's restarts count as the trial's failures, and the trial still finishes",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.curves = {{"flaky", {1, 2, 3, 4}}};
  runner.fail_after = {{"flaky", 2}};
  runner.restarts_allowed = 1;
  runner.checkpoints = true;
  Sweep sweep;
  ResultGrid grid = sweep.Run(runner, MakeTrials({"flaky"}), 1);
  REQUIRE(grid.size() == 1);
  CHECK(grid[0].status == "TERMINATED");
  CHECK(grid[0].num_failures == 1);
  // Resumed from the checkpoint of its second result: every result once, in order.
  CHECK(Scores(grid[0]) == std::vector<double>{1, 2, 3, 4});
  auto state = LoadExperimentState(grid.experiment_path());
  REQUIRE(state.ok());
  CHECK(state->trials[0].num_failures == 1);
}

namespace {

// PBT over lr, every 2 iterations, the worse half exploiting the better.
PbtConfig LrPbt() {
  PbtConfig pbt;
  pbt.time_attr = "training_iteration";
  pbt.perturbation_interval = 2;
  pbt.quantile_fraction = 0.5;
  pbt.resample_probability = 0;
  pbt.hyperparam_mutations = {{{"lr"}, Domain::Uniform(0.001, 0.1)}};
  pbt.log_dir = "";
  return pbt;
}

}  // namespace

TEST_CASE("PBT's exploit clones the donor's checkpoint into the trial, whose next run resumes "
          "from it with the explored config",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.checkpoints = true;
  runner.curves = {{"good", {5, 6, 7, 8, 9, 10}}, {"bad", {1, 1, 1, 1, 1, 1}}};
  Sweep sweep;
  PbtConfig pbt = LrPbt();
  sweep.tune.scheduler = pbt;
  std::vector<Trial> trials = MakeTrials({"good", "bad"});
  for (Trial& t : trials) t.config["lr"] = 0.01;
  // Both run at once, in lockstep: the bad trial's second result finds the good one ahead.
  ResultGrid grid = sweep.Run(runner, std::move(trials), 2);
  CHECK(grid.num_terminated() == 2);
  const std::string bad = grid[1].trial_id;
  REQUIRE(runner.configs[bad].size() >= 2);  // it ran again after the exploit
  // The explored config: the donor's, with lr perturbed (x1.2 or x0.8).
  const double lr = runner.configs[bad][1].at("lr").get<double>();
  CHECK((lr == Approx(0.012) || lr == Approx(0.008)));
  CHECK(runner.configs[bad][1].at("curve") == "good");
  CHECK(grid[1].config.at("lr").get<double>() == Approx(lr));
  // Its results after the clone are the donor's curve from where the donor's checkpoint was.
  const std::vector<double> scores = Scores(grid[1]);
  REQUIRE(scores.size() >= 3);
  CHECK(scores[0] == 1);
  CHECK(scores[1] == 1);
  CHECK(scores[2] >= 7);
  CHECK(scores.back() == 10);
}

TEST_CASE("synchronous PBT exploits even when trials run one at a time: a paused trial resumes "
          "from its donor's checkpoint",
          "[tune][controller]") {
  PbtConfig pbt = LrPbt();
  auto run = [&](ScriptedRunner& runner, Sweep& sweep, bool synch) {
    runner.checkpoints = true;
    runner.curves = {{"good", {5, 6, 7, 8, 9, 10}}, {"bad", {1, 1, 1, 1, 1, 1}}};
    pbt.synch = synch;
    sweep.tune.scheduler = pbt;
    std::vector<Trial> trials = MakeTrials({"bad", "good"});
    for (Trial& t : trials) t.config["lr"] = 0.01;
    return sweep.Run(runner, std::move(trials), 1);
  };
  // Asynchronous: the bad trial runs to its end before the good one starts; nothing to exploit.
  ScriptedRunner async_runner;
  Sweep async_sweep;
  ResultGrid async = run(async_runner, async_sweep, false);
  CHECK(async_runner.configs[async[0].trial_id].size() == 1);
  // Synchronous: the bad trial waits at iteration 2 for the good one, which pauses there too;
  // the bad one resumes first, from the good one's checkpoint at iteration 2.
  ScriptedRunner runner;
  Sweep sweep;
  ResultGrid grid = run(runner, sweep, true);
  CHECK(grid.num_terminated() == 2);
  CHECK(runner.most_running == 1);
  const std::string bad = grid[0].trial_id;
  REQUIRE(runner.configs[bad].size() >= 2);
  CHECK(runner.configs[bad][1].at("curve") == "good");
  const std::vector<double> scores = Scores(grid[0]);
  REQUIRE(scores.size() >= 3);
  CHECK(scores[0] == 1);
  CHECK(scores[1] == 1);
  CHECK(scores[2] == 7);  // the donor's curve from its checkpoint at iteration 2
  CHECK(scores.back() == 10);
  CHECK(Scores(grid[1]).back() == 10);
}

TEST_CASE("TuneConfig::stop and ASHA end runs early", "[tune][controller]") {
  ScriptedRunner runner;
  runner.curves = {{"low", {1, 1, 1, 1}}, {"mid", {2, 2, 2, 2}}, {"high", {3, 3, 3, 3}}};
  SECTION("stop at training_iteration 2") {
    Sweep sweep;
    sweep.tune.stop = {{"training_iteration", 2}};
    ResultGrid grid = sweep.Run(runner, MakeTrials({"low", "high"}), 2);
    CHECK(grid.num_terminated() == 2);
    CHECK(Scores(grid[0]) == std::vector<double>{1, 1});
    CHECK(Scores(grid[1]) == std::vector<double>{3, 3});
  }
  SECTION("ASHA stops what falls below its rungs; the best trial runs to max_t") {
    Sweep sweep;
    sweep.tune.scheduler = AshaConfig{.max_t = 4, .grace_period = 1, .reduction_factor = 2};
    // One at a time, best first: each later trial is cut at the first rung it falls below.
    ResultGrid grid = sweep.Run(runner, MakeTrials({"high", "mid", "low"}), 1);
    CHECK(grid.num_terminated() == 3);
    CHECK(grid[0].history.size() == 4);
    CHECK(grid[2].history.size() < 4);
  }
}

TEST_CASE("ASHA's promotion form pauses trials and brings promoted ones back",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.curves = {
      {"low", {1, 1, 1, 1}}, {"high", {3, 3, 3, 3}}, {"mid", {2, 2, 2, 2}}, {"top", {4, 4, 4, 4}}};
  Sweep sweep;
  sweep.tune.scheduler =
      AshaConfig{.max_t = 4, .grace_period = 1, .reduction_factor = 2, .promotion = true};
  ResultGrid grid = sweep.Run(runner, MakeTrials({"low", "high", "mid", "top"}), 2);
  CHECK(grid.num_terminated() == 4);
  // Some trial paused at a rung and was started again when promoted.
  std::map<std::string, int> runs;
  for (const std::string& id : runner.starts) ++runs[id];
  CHECK(std::any_of(runs.begin(), runs.end(), [](const auto& r) { return r.second > 1; }));
  // A promoted trial's curve went on where it paused: no result twice, none lost.
  for (const TrialResult& trial : grid.trials()) {
    for (size_t i = 0; i < trial.history.size(); ++i) {
      CHECK(trial.history[i].at("training_iteration") == static_cast<double>(i + 1));
    }
  }
}

TEST_CASE("a stop request ends running trials at their next result, and a resume finishes them",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.curves = {{"long", {1, 2, 3, 4, 5, 6}}};
  Sweep sweep;
  // Ctrl-C while the second trial reports its third result.
  runner.before_result = [&](const std::string& id, int iteration) {
    if (id == "ctl00_00001" && iteration == 3) sweep.stop->Raise();
  };
  ResultGrid first = sweep.Run(runner, MakeTrials({"long", "long", "long", "long"}), 2);
  CHECK(first.num_terminated() == 0);
  for (const TrialResult& trial : first.trials()) CHECK(trial.status == "PENDING");
  CHECK(runner.starts.size() == 2);  // nothing new started after the stop

  // As `rayd tune --resume` after the process ended: the state file and result.json files
  // are all there is.
  sweep.stop = std::make_unique<StopSignal>();
  runner.before_result = nullptr;
  auto state = LoadExperimentState(first.experiment_path());
  REQUIRE(state.ok());
  ResultGrid resumed = sweep.Run(runner, std::move(state->trials), 2);
  CHECK(resumed.num_terminated() == 4);
  for (const TrialResult& trial : resumed.trials()) {
    CHECK(Scores(trial) == std::vector<double>{1, 2, 3, 4, 5, 6});
  }
}

// x in [-10, 10]; one result, the score -(x - 3)^2: best at x = 3.
const ParamSpace kBowl = {{{"x"}, Domain::Uniform(-10, 10)}, {{"kind"}, "bowl"}};
std::vector<double> BowlCurve(const nlohmann::json& config) {
  const double x = config.at("x").get<double>();
  return {-(x - 3) * (x - 3)};
}

std::unique_ptr<Searcher> Tpe(int num_samples, uint64_t seed = 5) {
  return std::make_unique<TpeSearch>(kBowl, "score", "max", TpeConfig{.n_startup_trials = 5},
                                     num_samples, seed);
}

TEST_CASE("a searcher's trials are made as slots free, from the results of those that ended",
          "[tune][controller]") {
  ScriptedRunner runner;
  runner.curve_of = BowlCurve;
  Sweep sweep;
  ResultGrid grid = sweep.Run(runner, {}, 2, Tpe(30));
  REQUIRE(grid.size() == 30);
  CHECK(grid.num_terminated() == 30);
  CHECK(runner.most_running == 2);
  CHECK(grid[0].trial_id == "tpe00_00000");
  CHECK(grid[29].config.at("kind") == "bowl");
  const double best_x = grid.GetBestResult().config.at("x").get<double>();
  CHECK(std::abs(best_x - 3) < 0.5);
  // The searcher's state is saved with the experiment's: every trial observed, none pending.
  json state = json::parse(rayd::testing::ReadFile(grid.experiment_path() +
                                                   "/experiment_state.json"));
  CHECK(state["searcher"]["type"] == "tpe");
  CHECK(state["searcher"]["state"]["observed"].size() == 30);
  CHECK(state["searcher"]["state"]["pending"].empty());
  // Each trial says what proposed it, in the state file and the console table.
  CHECK(state["trials"][0]["searcher"] == "tpe (random start)");
  CHECK(state["trials"][4]["searcher"] == "tpe (random start)");
  CHECK(state["trials"][29]["searcher"] == "tpe");
  auto loaded = LoadExperimentState(grid.experiment_path());
  REQUIRE(loaded.ok());
  CHECK(loaded->trials[29].searcher == "tpe");
  const std::string table = RenderTable(loaded->trials, "score", "", "", 1.0, 30);
  CHECK(table.find("| searcher") != std::string::npos);
  CHECK(table.find("tpe (random start)") != std::string::npos);
}

TEST_CASE("a TPE sweep interrupted and resumed proposes what an uninterrupted one does",
          "[tune][controller]") {
  // One trial at a time, so the proposals depend only on the seed and the results.
  std::vector<json> whole;
  {
    ScriptedRunner runner;
    runner.curve_of = BowlCurve;
    Sweep sweep;
    ResultGrid grid = sweep.Run(runner, {}, 1, Tpe(16));
    for (const TrialResult& t : grid.trials()) whole.push_back(t.config);
  }
  REQUIRE(whole.size() == 16);

  ScriptedRunner runner;
  runner.curve_of = BowlCurve;
  Sweep sweep;
  // Ctrl-C while the ninth trial reports: it stays PENDING, the rest are not made yet.
  runner.before_result = [&](const std::string& id, int) {
    if (id == "tpe00_00008") sweep.stop->Raise();
  };
  ResultGrid first = sweep.Run(runner, {}, 1, Tpe(16));
  CHECK(first.size() == 9);
  CHECK(first.num_terminated() == 8);

  sweep.stop = std::make_unique<StopSignal>();
  runner.before_result = nullptr;
  auto state = LoadExperimentState(first.experiment_path());
  REQUIRE(state.ok());
  REQUIRE(state->searcher == "tpe");
  std::unique_ptr<Searcher> restored = Tpe(16, /*seed=*/999);  // the state brings its own
  restored->Restore(state->searcher_state);
  ResultGrid resumed = sweep.Run(runner, std::move(state->trials), 1, std::move(restored));
  REQUIRE(resumed.size() == 16);
  CHECK(resumed.num_terminated() == 16);
  for (size_t i = 0; i < 16; ++i) {
    INFO("trial " << i);
    CHECK(resumed[i].config == whole[i]);
  }
}

// A curve of 9 results rising to the bowl's value at x.
std::vector<double> RisingBowl(const nlohmann::json& config) {
  const double x = config.at("x").get<double>();
  std::vector<double> curve;
  for (int i = 1; i <= 9; ++i) curve.push_back(-(x - 3) * (x - 3) - 3.0 / i);
  return curve;
}

std::unique_ptr<Searcher> Bohb(int num_samples) {
  return std::make_unique<TpeSearch>(kBowl, "score", "max", TpeConfig{.n_startup_trials = 4},
                                     num_samples, 5, "training_iteration");
}

TEST_CASE("a TPE+ASHA sweep interrupted and resumed decides as an uninterrupted one does",
          "[tune][controller]") {
  // Two ASHA brackets in the promotion form: which bracket a trial joins comes from the
  // scheduler's generator, and which trial is promoted from its rungs, so both must come back.
  const AshaConfig asha{.max_t = 9, .grace_period = 1, .reduction_factor = 3, .brackets = 2,
                        .promotion = true};
  auto run_through = [&](Sweep& sweep, ScriptedRunner& runner) {
    runner.curve_of = RisingBowl;
    runner.checkpoints = true;
    sweep.tune.scheduler = asha;
  };
  std::vector<std::vector<double>> whole;
  std::vector<json> whole_configs;
  json whole_scheduler;
  {
    ScriptedRunner runner;
    Sweep sweep;
    run_through(sweep, runner);
    ResultGrid grid = sweep.Run(runner, {}, 1, Bohb(14));
    for (const TrialResult& t : grid.trials()) {
      whole.push_back(Scores(t));
      whole_configs.push_back(t.config);
    }
    whole_scheduler = LoadExperimentState(grid.experiment_path())->scheduler_state;
  }
  REQUIRE(whole.size() == 14);

  ScriptedRunner runner;
  Sweep sweep;
  run_through(sweep, runner);
  // Ctrl-C at the second result of the eighth trial.
  runner.before_result = [&](const std::string& id, int iteration) {
    if (id == "tpe00_00007" && iteration == 2) sweep.stop->Raise();
  };
  ResultGrid first = sweep.Run(runner, {}, 1, Bohb(14));
  CHECK(first.size() == 10);

  sweep.stop = std::make_unique<StopSignal>();
  runner.before_result = nullptr;
  auto state = LoadExperimentState(first.experiment_path());
  REQUIRE(state.ok());
  CHECK(state->scheduler == "ASHA");
  CHECK(state->scheduler_seen.at("tpe00_00007") == 2);
  std::unique_ptr<Searcher> searcher = Bohb(14);
  searcher->Restore(state->searcher_state);
  ResultGrid resumed = sweep.Run(runner, std::move(state->trials), 1, std::move(searcher), &*state);
  REQUIRE(resumed.size() == 14);
  for (size_t i = 0; i < 14; ++i) {
    INFO("trial " << i);
    CHECK(resumed[i].config == whole_configs[i]);
    CHECK(Scores(resumed[i]) == whole[i]);
  }
  // And the scheduler ends where it would have: every trial in the same bracket (drawn from its
  // generator), the same rungs and promotions.
  CHECK(LoadExperimentState(resumed.experiment_path())->scheduler_state == whole_scheduler);
}

}  // namespace

TEST_CASE(
    "freed workers go to the elastic trials ranked best first, each up to its max, once "
    "per resize interval",
    "[tune][controller][elastic]") {
  ScriptedRunner runner;
  runner.elastic = true;
  runner.free_workers = 4;
  runner.curves = {
      {"low", {1, 2, 3, 4, 5, 6}}, {"high", {5, 6, 7, 8, 9, 10}}, {"mid", {3, 4, 5, 6, 7, 8}}};
  Sweep sweep;
  sweep.trainable.scaling = {.num_workers = 4, .min_workers = 1, .resize_interval_s = 1e-6};
  std::vector<Trial> trials = MakeTrials({"low", "high", "mid"});
  sweep.Run(runner, trials, 3);
  // Once all three had their gangs: the best (high) takes what it can use (3 more, to its max of
  // 4), the next (mid) the last one; the worst none. Nobody shrinks, nobody grows twice.
  REQUIRE(runner.grows.size() == 2);
  CHECK(runner.grows[0] == std::pair<std::string, int>{trials[1].id, 4});
  CHECK(runner.grows[1] == std::pair<std::string, int>{trials[2].id, 2});
  CHECK(runner.free_workers == 0);
  // What they could still take beyond the free workers went to the autoscaler as a hint: after
  // the grows, the worst's 3 and mid's 2 (high is at its max); withdrawn when the sweep ended.
  REQUIRE(runner.wants.size() >= 2);
  CHECK(std::find(runner.wants.begin(), runner.wants.end(), 5) != runner.wants.end());
  CHECK(runner.wants.back() == 0);

  // A resize interval longer than the sweep: no trial grows.
  ScriptedRunner patient;
  patient.elastic = true;
  patient.free_workers = 4;
  patient.curves = runner.curves;
  Sweep slow;
  slow.trainable.scaling = {.num_workers = 4, .min_workers = 1, .resize_interval_s = 3600};
  slow.Run(patient, MakeTrials({"low", "high", "mid"}), 3);
  CHECK(patient.grows.empty());

  // A trial waiting for a slot cannot take free workers (max_concurrent 1 holds it back), so
  // they go to the running one: the first grows to 3 while the second waits.
  ScriptedRunner queued;
  queued.elastic = true;
  queued.free_workers = 2;
  queued.curves = runner.curves;
  Sweep one;
  one.trainable.scaling = {.num_workers = 4, .min_workers = 1, .resize_interval_s = 1e-6};
  std::vector<Trial> two = MakeTrials({"low", "high"});
  one.Run(queued, two, 1);
  REQUIRE(queued.grows.size() == 1);
  CHECK(queued.grows[0] == std::pair<std::string, int>{two[0].id, 3});
}
