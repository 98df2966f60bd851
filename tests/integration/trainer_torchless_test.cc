// rayd_train without LibTorch (train/src/rank_session.h): this binary links rayd_train only, as
// a sweep of a loop that just reports does, and so do its ranks (node daemons re-run it as its
// own worker). A single rank runs its loop without LibTorch ever entering its process; a run of
// several ranks loads rayd_train_torch from beside librayd_train.so to form its process group.

#include <rayd/api.h>
#include <rayd/train/data.h>
#include <fcntl.h>
#include <rayd/data/transforms.h>
#include <rayd/train/trainer.h>
#include <rayd/train/training_run.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <chrono>

#include "rayd/base/files.h"
#include "record_ids.h"
#include "runtime_harness.h"

namespace {

namespace rt = rayd::train;
using rayd_runtime_test::EmbeddedRayd;
using rayd_runtime_test::TempDir;
using rayd::testing::IdsByEpoch;

// Whether this process has mapped a library whose file name starts with `name`.
bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.rfind('/');
    if (slash != std::string::npos && line.compare(slash + 1, name.size(), name) == 0) return true;
  }
  return false;
}

// Reports, from every rank, whether LibTorch and rayd's torch half are in its process.
void WhatIsLoaded(const nlohmann::json&) {
  rt::Report({{"pid", ::getpid()},
              {"libtorch", Mapped("libtorch_cpu.so") ? 1 : 0},
              {"torch_half", Mapped("librayd_train_torch.so") ? 1 : 0},
              {"world_size", rt::GetContext().world_size}});
}
RAYD_TRAIN_LOOP(WhatIsLoaded);


// Every id in [0, rows) once in each of `epochs` epochs: 0 repeated, 0 missing.
void CheckEveryIdOnce(std::map<int, std::vector<int64_t>> by_epoch, int rows, int epochs) {
  std::vector<int64_t> every(static_cast<size_t>(rows));
  std::iota(every.begin(), every.end(), 0);
  REQUIRE(by_epoch.size() == static_cast<size_t>(epochs));
  for (auto& [epoch, ids] : by_epoch) {
    std::sort(ids.begin(), ids.end());
    INFO("epoch " << epoch);
    CHECK(ids == every);
  }
}

// A "decode" step that records each row it is given: appends its ids to the file args.log (one
// write per batch, O_APPEND, so processes appending at once do not interleave within a line).
rayd::Result<rayd::data::Block> CountDecodes(const rayd::data::Block& batch,
                                             const nlohmann::json& args) {
  const rayd::data::Column* id = batch.Find("id");
  std::string lines;
  for (int64_t r = 0; r < batch.num_rows(); ++r) lines += std::to_string(id->As<int64_t>()[r]) + "\n";
  const std::string log = args.at("log").get<std::string>();
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return rayd::Status::Internal("cannot open " + log);
  const bool written = ::write(fd, lines.data(), lines.size()) == static_cast<ssize_t>(lines.size());
  ::close(fd);
  if (!written) return rayd::Status::Internal("cannot append to " + log);
  return batch;
}
RAYD_DATA_MAP(CountDecodes);

// The rows rank `rank`'s dataset feed (data_feed.h) on the head says it took of dataset `ids`
// (its rayd_data_rows_total sample for /metrics); -1 while it has published none.
double FeedRows(const std::string& run, int rank) {
  std::optional<std::string> feed =
      rayd::KvGet("dashboard", "feed/shard/" + run + ".rank" + std::to_string(rank));
  if (!feed) return -1;
  const nlohmann::json summary = nlohmann::json::parse(*feed);
  for (const nlohmann::json& sample : summary["metrics"]) {
    if (sample["name"] == "rayd_data_rows_total" && sample["labels"]["dataset"] == "ids" &&
        sample["labels"]["rank"] == std::to_string(rank)) {
      return sample["value"].get<double>();
    }
  }
  return -1;
}

// Every rank takes an epoch of dataset `ids` per report. Rank 0 first waits (polling, 30 s at
// most) until rank 1's feed shows that epoch's rows, published at rank 1's report, and reports
// what it saw: so its row has rank 1's wait up to that epoch at least.
void FeedRanks(const nlohmann::json& config) {
  const rt::TrainContext& context = rt::GetContext();
  rayd::data::DatasetShard& shard = rt::GetDatasetShard("ids");
  for (int epoch = 0; epoch < config.value("epochs", 2); ++epoch) {
    auto pass = shard.IterBatches({.batch_size = 4});
    while (rt::NextBatch(*pass)) {
    }
    double rank1_rows = -1;
    if (context.world_rank == 0) {
      const double want = static_cast<double>((epoch + 1) * shard.rows_per_epoch());
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while ((rank1_rows = FeedRows(context.run_name, 1)) < want &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    rt::Report({{"epoch", epoch}, {"rank1_rows", rank1_rows}});
  }
}
RAYD_TRAIN_LOOP(FeedRanks);

// Reports once (each start leaves a line in out_dir/starts). In its first attempt it then waits
// (30 s at most) until the owner has been handed that report (out_dir/delivered) and dies, with
// the owner's answer still owed.
void ReportThenFailOnce(const nlohmann::json& config) {
  namespace fs = std::filesystem;
  const fs::path out = config.at("out_dir").get<std::string>();
  std::ofstream(out / "starts", std::ios::app) << "started\n";
  rt::Report({{"k", 1}});
  if (fs::exists(out / "failed")) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(out / "delivered") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ofstream(out / "failed") << 1;
  ::raise(SIGKILL);  // its rank 0: the Poll in flight fails, which ends the attempt at once
}
RAYD_TRAIN_LOOP(ReportThenFailOnce);

// Makes a checkpoint directory, writes a file in it, leaves its path in out_dir/dir and dies
// before reporting it.
void CheckpointDirThenDie(const nlohmann::json& config) {
  const std::string dir = rt::NewCheckpointDir();
  std::ofstream(dir + "/state") << "never reported";
  std::ofstream(config.at("out_dir").get<std::string>() + "/dir") << dir;
  ::raise(SIGKILL);
}
RAYD_TRAIN_LOOP(CheckpointDirThenDie);

}  // namespace

TEST_CASE("a dataset resumes exactly after a failure and at another world size, every id of "
          "every epoch once",
          "[trainer][data]") {
  namespace fs = std::filesystem;
  EmbeddedRayd cluster;
  TempDir storage;
  constexpr int kRows = 37, kEpochs = 3;
  rayd::testing::WriteIdsCsv(storage.path(), kRows);
  rt::RunConfig run{.name = "exact", .storage_path = storage.path()};
  run.datasets = {{.name = "ids", .format = "csv", .paths = {storage.path() + "/ids.csv"}}};
  const std::string marker = storage.path() + "/failed";
  // 2 ranks, no failures allowed: the injected one at epoch 1, step 5 ends the run; its last
  // checkpoint is mid-epoch (step 4).
  const nlohmann::json first = {{"epochs", kEpochs},
                                {"fail_at", {{1, 5, marker + "1"}}}};
  rt::TrainResult failed =
      rt::Trainer("RecordIds", first, {.num_workers = 2, .collective_timeout_s = 30}, run).Fit();
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.error, Catch::Contains("injected failure at epoch 1 step 5"));
  // The same run on 1 rank resumes from that checkpoint, fails once more (epoch 2, step 3),
  // restarts from its last checkpoint, and ends.
  run.failure.max_failures = 1;
  const nlohmann::json second = {{"epochs", kEpochs},
                                 {"fail_at", {{2, 3, marker + "2"}}}};
  rt::TrainResult done = rt::Trainer("RecordIds", second, {.num_workers = 1}, run).Fit();
  INFO(done.error);
  REQUIRE(done.ok());
  REQUIRE(done.checkpoint);
  CHECK(done.metrics.at("generation") == 2);  // 2 attempts of 2 ranks' files carried forward
  // Every id of every epoch once, over the files the last checkpoint holds.
  int files = 0;
  CheckEveryIdOnce(IdsByEpoch(*done.checkpoint, &files), kRows, kEpochs);
  CHECK(files == 4);  // generation 0: ranks 0 and 1; then 1 rank twice
}

TEST_CASE("trials reading one dataset share its preprocessing on the node: each row decoded "
          "once, each trial its own order, resumed exactly",
          "[trainer][data]") {
  EmbeddedRayd cluster;
  TempDir storage;
  constexpr int kRows = 60, kEpochs = 2;
  rayd::testing::WriteIdsCsv(storage.path(), kRows);
  const std::string log = storage.path() + "/decoded.log";
  // 10 rows a chunk (a row is one int64): 6 chunks in the node's cache.
  auto dataset = [&](int seed) {
    return rayd::data::DatasetSpec{
        .name = "ids",
        .format = "csv",
        .paths = {storage.path() + "/ids.csv"},
        .options = {{"seed", seed},
                    {"block_bytes", 80},
                    {"transforms", {{{"map_batches", "CountDecodes"}, {"log", log}},
                                    {{"cache", "node"}}}}}};
  };
  // Four trials, one after another, each with its own seed; the first of 2 ranks fails once
  // mid-epoch and resumes from its checkpoint.
  std::map<int, std::vector<int64_t>> first_epochs;
  for (int trial = 0; trial < 4; ++trial) {
    rt::RunConfig run{.name = "trial" + std::to_string(trial), .storage_path = storage.path()};
    run.datasets = {dataset(trial)};
    run.failure.max_failures = trial == 0 ? 1 : 0;
    nlohmann::json config = {{"epochs", kEpochs}};
    if (trial == 0) config["fail_at"] = {{1, 3, storage.path() + "/failed"}};
    rt::TrainResult done =
        rt::Trainer("RecordIds", config,
                    {.num_workers = trial == 0 ? 2 : 1, .collective_timeout_s = 30}, run)
            .Fit();
    INFO("trial " << trial << ": " << done.error);
    REQUIRE(done.ok());
    std::map<int, std::vector<int64_t>> by_epoch = IdsByEpoch(*done.checkpoint);
    if (trial > 0) first_epochs[trial] = by_epoch[0];
    CheckEveryIdOnce(std::move(by_epoch), kRows, kEpochs);
  }
  // Each seed its own order.
  CHECK(first_epochs[1] != first_epochs[2]);
  CHECK(first_epochs[2] != first_epochs[3]);
  // The decode step ran once for each row, over the four trials and the restart.
  std::ifstream decoded(log);
  std::vector<int64_t> ids;
  for (int64_t id; decoded >> id;) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<int64_t> every(kRows);
  std::iota(every.begin(), every.end(), 0);
  CHECK(ids == every);
}

TEST_CASE("two runs with the same seed see each epoch in the same order, whatever failures "
          "come between",
          "[trainer][data]") {
  EmbeddedRayd cluster;
  TempDir storage;
  constexpr int kRows = 30, kEpochs = 3;
  rayd::testing::WriteIdsCsv(storage.path(), kRows);
  auto ids_of = [&](const std::string& name, const nlohmann::json& config) {
    rt::RunConfig run{.name = name, .storage_path = storage.path()};
    run.datasets = {{.name = "ids", .format = "csv", .paths = {storage.path() + "/ids.csv"},
                     .options = {{"seed", 11}}}};
    run.failure.max_failures = 2;
    rt::TrainResult done = rt::Trainer("RecordIds", config, {.num_workers = 1}, run).Fit();
    INFO(done.error);
    REQUIRE(done.ok());
    return IdsByEpoch(*done.checkpoint);  // each attempt's ids in the order taken, in turn
  };
  const auto calm = ids_of("calm", {{"epochs", kEpochs}});
  const auto failing = ids_of(
      "failing", {{"epochs", kEpochs},
                  {"fail_at", {{0, 3, storage.path() + "/f1"}, {2, 5, storage.path() + "/f2"}}}});
  REQUIRE(calm.size() == static_cast<size_t>(kEpochs));
  CHECK(failing == calm);
  CHECK(calm.at(0) != calm.at(1));  // and each epoch its own order
}

TEST_CASE("every rank's data wait is in rank 0's rows and its dataset feed on the head, "
          "gone when the run ends",
          "[trainer][data]") {
  EmbeddedRayd cluster;
  TempDir storage;
  constexpr int kRows = 40, kEpochs = 2;
  rayd::testing::WriteIdsCsv(storage.path(), kRows);
  rt::RunConfig run{.name = "feeds", .storage_path = storage.path()};
  run.datasets = {{.name = "ids", .format = "csv", .paths = {storage.path() + "/ids.csv"}}};
  rt::TrainResult done =
      rt::Trainer("FeedRanks", {{"epochs", kEpochs}}, {.num_workers = 2}, run).Fit();
  INFO(done.error);
  REQUIRE(done.ok());
  std::ifstream lines(storage.path() + "/feeds/result.json");
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) {
    const nlohmann::json r = nlohmann::json::parse(line);
    INFO(line);
    CHECK(r["rank1_rows"].get<double>() >= (rows + 1) * kRows / 2);  // rank 1 may be ahead
    for (const char* column : {"data_wait_s", "data_wait_s_rank_0", "data_wait_s_rank_1",
                               "data_wait_s_max", "data_wait_max_rank"}) {
      REQUIRE(r.contains(column));
      CHECK(r[column].get<double>() >= 0);
    }
    CHECK(r["data_wait_s_rank_0"].get<double>() == r["data_wait_s"].get<double>());
    CHECK(r["data_wait_s_max"].get<double>() ==
          std::max(r["data_wait_s_rank_0"].get<double>(), r["data_wait_s_rank_1"].get<double>()));
  }
  CHECK(rows == kEpochs);
  // The run is over: its ranks' feeds are gone from the head (and /metrics).
  CHECK_FALSE(rayd::KvGet("dashboard", "feed/shard/feeds.rank0"));
  CHECK_FALSE(rayd::KvGet("dashboard", "feed/shard/feeds.rank1"));
}

TEST_CASE("a loop that only reports runs on a rank without LibTorch", "[trainer]") {
  REQUIRE_FALSE(Mapped("libtorch_cpu.so"));  // the driver links rayd_train only
  EmbeddedRayd cluster;
  TempDir storage;
  rt::TrainResult result = rt::Trainer("WhatIsLoaded", {}, {.num_workers = 1},
                                       {.name = "alone", .storage_path = storage.path()})
                               .Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.metrics.at("pid") != ::getpid());  // a rank process of its own
  CHECK(result.metrics.at("libtorch") == 0);
  CHECK(result.metrics.at("torch_half") == 0);
}

TEST_CASE("a run of two ranks loads rayd's torch half to form its process group", "[trainer]") {
  EmbeddedRayd cluster;
  TempDir storage;
  rt::TrainResult result =
      rt::Trainer("WhatIsLoaded", {}, {.num_workers = 2, .collective_timeout_s = 30},
                  {.name = "pair", .storage_path = storage.path()})
          .Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.metrics.at("world_size") == 2);
  CHECK(result.metrics.at("libtorch") == 1);
  CHECK(result.metrics.at("torch_half") == 1);
  CHECK_FALSE(Mapped("libtorch_cpu.so"));  // the driver's process never needed it
}

// The owner (a Tuner's controller) answers a result on its own time: the answer may come after
// the attempt that made the result failed, while the restart's gang is being reserved. It then
// has no rank to poll (the driver crashed here, polling the new gang's missing rank 0); a stop
// ends the run there.
TEST_CASE("an answer owed by a failed attempt that comes while the restart starts is harmless",
          "[trainer]") {
  const bool go_on = GENERATE(true, false);
  INFO("the late answer: " << (go_on ? "go on" : "stop"));
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  rayd::EventLoop loop;
  rt::RunConfig config{.name = "late", .storage_path = storage.path()};
  config.failure.max_failures = 1;
  int results = 0;
  std::optional<rt::TrainResult> ended;
  std::unique_ptr<rt::TrainingRun> run;
  run = std::make_unique<rt::TrainingRun>(
      loop, "ReportThenFailOnce", nlohmann::json{{"out_dir", out.path()}}, rt::ScalingConfig{},
      config, rt::FitOptions{},
      rt::TrainingRun::Callbacks{
          .on_result =
              [&](const rt::ReportedResult&) {
                // The first is answered later, by the test; the restart's at once.
                if (++results == 1) {
                  std::ofstream(out.path() + "/delivered") << 1;
                } else {
                  run->Answer(true);
                }
              },
          .on_done = [&](rt::TrainResult result) { ended = std::move(result); }});
  rayd::Timer tick(loop);  // wakes the loop to look again
  tick.Start(std::chrono::milliseconds(20), std::chrono::milliseconds(20), [] {});
  // The restart has asked for its gang (a second group) and can have done nothing more in the
  // same turn of the loop: its ranks start only after several more answers come back.
  REQUIRE(loop.RunUntil([&] { return rayd::GetAllPlacementGroups().size() >= 2 || ended; },
                        std::chrono::seconds(60)));
  REQUIRE_FALSE(ended);
  CHECK(results == 1);
  run->Answer(go_on);
  REQUIRE(loop.RunUntil([&] { return ended.has_value(); }, std::chrono::seconds(90)));
  INFO(ended->error);
  CHECK(ended->error.empty());
  CHECK(ended->stopped == !go_on);
  CHECK(ended->restarts == 1);
  CHECK(results == (go_on ? 2 : 1));
  // A stop ends the run before the restart starts a rank.
  std::ifstream starts(out.path() + "/starts");
  int started = 0;
  for (std::string line; std::getline(starts, line);) ++started;
  CHECK(started == (go_on ? 2 : 1));
}

// A rank keeps its scratch files (its unpacked checkpoint, its NewCheckpointDir's) in its
// worker's own directory, which the node removes once the worker is dead: a rank SIGKILLed in
// the middle of a checkpoint (a scheduler's stop, a failure) leaves nothing in /tmp.
TEST_CASE("a rank SIGKILLed while it writes a checkpoint leaves no files behind", "[trainer]") {
  namespace fs = std::filesystem;
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  rt::TrainResult result =
      rt::Trainer("CheckpointDirThenDie", {{"out_dir", out.path()}}, {.num_workers = 1},
                  {.name = "killed", .storage_path = storage.path()})
          .Fit();
  CHECK_FALSE(result.ok());
  std::string dir;
  std::ifstream(out.path() + "/dir") >> dir;
  REQUIRE_FALSE(dir.empty());
  const fs::path worker_dir = fs::path(dir).parent_path();
  CHECK(worker_dir.filename().string().rfind("rayd-worker-", 0) == 0);
  CHECK(rayd::testing::WaitFor([&] { return !fs::exists(worker_dir); }, std::chrono::seconds(10)));
}

// Workers that died with their node (SIGKILLed) were seen die by no node, so their directories
// stayed. A node that starts removes those, and never one whose worker lives: each worker holds
// a lock on its own while it runs (MakeOwnedDirectory).
TEST_CASE("a node that starts removes the directories of workers that died with their node",
          "[trainer]") {
  namespace fs = std::filesystem;
  TempDir tmp;
  REQUIRE(::setenv("TMPDIR", tmp.path().c_str(), 1) == 0);  // this test's, for this process
  const fs::path dead = fs::path(tmp.path()) / "rayd-worker-0123456789ab";
  const fs::path live = fs::path(tmp.path()) / "rayd-worker-ba9876543210";
  const pid_t owner = ::fork();  // a worker that made its directory and was SIGKILLed
  if (owner == 0) {
    if (rayd::MakeOwnedDirectory(dead).ok()) std::ofstream(dead / "state") << "half written";
    ::raise(SIGKILL);
  }
  int status = 0;
  REQUIRE(::waitpid(owner, &status, 0) == owner);
  REQUIRE(fs::exists(dead / "state"));
  REQUIRE(rayd::MakeOwnedDirectory(live).ok());  // this process stands for a live worker
  {
    EmbeddedRayd cluster;
    CHECK_FALSE(fs::exists(dead));
    CHECK(fs::exists(live));
    // A rank's scratch still goes where it went, and its node still removes it when it dies.
    TempDir out;
    TempDir storage;
    rt::Trainer("CheckpointDirThenDie", {{"out_dir", out.path()}}, {.num_workers = 1},
                {.name = "killed", .storage_path = storage.path()})
        .Fit();
    std::string dir;
    std::ifstream(out.path() + "/dir") >> dir;
    REQUIRE_FALSE(dir.empty());
    CHECK(fs::path(dir).parent_path().parent_path() == fs::path(tmp.path()));
    CHECK(rayd::testing::WaitFor([&] { return !fs::exists(fs::path(dir).parent_path()); },
                                 std::chrono::seconds(10)));
  }
  CHECK(fs::exists(live));
  ::unsetenv("TMPDIR");
}
