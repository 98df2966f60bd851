// The Trainer on an embedded 2-CPU cluster: two Gloo ranks training the MLP of mlp_fixture,
// checkpoints and num_to_keep, a rank killed mid-run and the restart from the latest
// checkpoint, a second Fit resuming a run, and a gang that cannot fit.

#include <rayd/train/pipeline.h>
#include <rayd/train/session.h>
#include <rayd/train/training_run.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mlp_fixture.h"
#include "runtime_harness.h"

namespace {

namespace fs = std::filesystem;
namespace rt = rayd::train;
using nlohmann::json;
using rayd_runtime_test::EmbeddedRayd;
using rayd_runtime_test::TempDir;

int ReadInt(const std::string& path) {
  std::ifstream in(path);
  int value = -1;
  in >> value;
  return value;
}

// Every rank: trains mlp_fixture's MLP for config["epochs"] epochs from the latest checkpoint
// (model, optimizer, epoch), reports each epoch's mean loss with a checkpoint from rank 0 (with
// config["every_rank"], from every rank: rank r's file rank<r> beside rank 0's), and
// at the end writes its parameters to out_dir/params_rank<r>.bin. Rank 1 SIGKILLs its own
// process at the start of epoch config["crash_epoch"] unless config["crash_marker"] exists
// (it creates the marker first, so only the first attempt crashes); with
// config["crash_before_report"], after training that epoch, just before its Report.
void MlpLoop(const json& config) {
  const rt::TrainContext& context = rt::GetContext();
  rt::testing::MlpRun run;
  run.epochs = config.at("epochs").get<int>();
  const std::string out_dir = config.at("out_dir");
  rt::testing::Dataset data = rt::testing::MakeDataset(run);
  torch::nn::Sequential model = rt::testing::MakeMlp(run.widths, run.model_seed);
  torch::optim::SGD optimizer = rt::testing::MakeOptimizer(model, run);
  int start_epoch = 0;
  if (std::optional<std::string> checkpoint = rt::GetCheckpoint()) {
    torch::load(model, *checkpoint + "/model.pt");
    torch::load(optimizer, *checkpoint + "/optimizer.pt");
    start_epoch = ReadInt(*checkpoint + "/epoch") + 1;
  }
  rt::PreparedModel& ddp = rt::PrepareModel(*model);
  const int64_t steps = rt::testing::StepsPerEpoch(run, context.world_size);
  for (int epoch = start_epoch; epoch < run.epochs; ++epoch) {
    // A slower epoch, for tests that change the cluster while the run trains.
    std::this_thread::sleep_for(std::chrono::milliseconds(config.value("epoch_sleep_ms", 0)));
    // What a rank saw of a drain of its node (`rayd drain`): its reason, by rank; with
    // checkpoint_on_drain, rank 0 checkpoints at once (this epoch) on seeing it.
    bool drained_now = false;
    if (config.contains("drain_dir")) {
      const std::string dir = config.at("drain_dir");
      if (epoch == start_epoch) {
        std::ofstream(dir + "/node." + std::to_string(context.world_rank)) << rayd::GetNodeId();
      }
      const std::string seen = dir + "/drain_seen." + std::to_string(context.world_rank);
      if (const std::optional<rt::NodeDrain> drain = rt::GetContext().drain;
          drain && !fs::exists(seen)) {
        std::ofstream(seen) << drain->reason << " " << drain->SecondsLeft();
        drained_now = config.value("checkpoint_on_drain", false);
      }
    }
    const bool crashes = context.world_rank == 1 && epoch == config.value("crash_epoch", -1) &&
                         !fs::exists(config.at("crash_marker").get<std::string>());
    const bool crash_before_report = config.value("crash_before_report", false);
    if (crashes && !crash_before_report) {
      std::ofstream(config.at("crash_marker").get<std::string>()) << "crashed";
      ::raise(SIGKILL);
    }
    double total = 0;
    for (int64_t step = 0; step < steps; ++step) {
      optimizer.zero_grad();
      torch::Tensor loss = rt::testing::Loss(
          model, data,
          rt::testing::RankBatch(run, context.world_size, context.world_rank, epoch, step));
      loss.backward();
      ddp.FinishBackward();
      optimizer.step();
      total += loss.item<double>();
    }
    std::map<std::string, double> metrics = {{"epoch", epoch},
                                             {"loss", total / steps},
                                             {"start_epoch", start_epoch},
                                             {"ranks", context.world_size}};
    if (crashes && crash_before_report) {
      std::ofstream(config.at("crash_marker").get<std::string>()) << "crashed";
      ::raise(SIGKILL);  // rank 0 reports this epoch; rank 1's part of it never comes
    }
    if (config.value("every_rank", false)) {
      // Every rank's checkpoint: rank 1 adds a file of its own, which must arrive with rank 0's.
      const std::string dir = rt::NewCheckpointDir();
      if (context.world_rank == 0) {
        torch::save(model, dir + "/model.pt");
        torch::save(optimizer, dir + "/optimizer.pt");
        std::ofstream(dir + "/epoch") << epoch;
      } else {
        std::ofstream(dir + "/rank" + std::to_string(context.world_rank)) << epoch;
      }
      rt::Report(metrics, dir);
      continue;
    }
    if (context.world_rank != 0) {
      rt::Report(metrics);
      continue;
    }
    if (epoch % config.value("checkpoint_every", 1) != 0 && !drained_now) {
      rt::Report(metrics);
      continue;
    }
    const std::string staging = out_dir + "/staging";
    fs::create_directories(staging);
    torch::save(model, staging + "/model.pt");
    torch::save(optimizer, staging + "/optimizer.pt");
    std::ofstream(staging + "/epoch") << epoch;
    rt::Report(metrics, staging);
    fs::remove_all(staging);
  }
  rt::testing::WriteFloats(out_dir + "/params_rank" + std::to_string(context.world_rank) + ".bin",
                           rt::testing::FlatParameters(*model));
}
RAYD_TRAIN_LOOP(MlpLoop);

// A 3-layer MLP in `mesh.pipeline` stages, 3 epochs of 4 steps, a checkpoint (the epoch) each
// epoch. With kill_dir: the middle stage of the first attempt SIGKILLs itself in epoch 1 (once
// epoch 0's checkpoint is in run_dir, so the restart resumes from it).
void PipelineLoop(const json& config) {
  const rt::TrainContext& context = rt::GetContext();
  int start = 0;
  if (std::optional<std::string> checkpoint = rt::GetCheckpoint()) {
    std::ifstream(*checkpoint + "/epoch") >> start;
    ++start;
  }
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 4));
  rt::PipelineStage stage(rt::SplitEvenly(model, context.mesh.pipeline)[context.mesh.pipeline_rank],
                          rt::GetGroup(rt::MeshAxis::kPipeline), {.micro_batches = 2});
  torch::optim::SGD sgd(stage.module()->parameters(), torch::optim::SGDOptions(0.01));
  const std::string kill_dir = config.value("kill_dir", "");
  for (int epoch = start; epoch < 3; ++epoch) {
    double loss = 0;
    for (int step = 0; step < 4; ++step) {
      if (!kill_dir.empty() && epoch == 1 && step == 2 && context.mesh.pipeline_rank == 1 &&
          !fs::exists(kill_dir + "/killed")) {
        rayd::testing::WaitFor(
            [&] {
              return fs::exists(config.at("run_dir").get<std::string>() + "/checkpoint_000000");
            },
            std::chrono::seconds(30));
        std::ofstream(kill_dir + "/killed") << getpid();
        ::raise(SIGKILL);
      }
      torch::manual_seed(100 * epoch + step);
      sgd.zero_grad();
      loss = stage.Step(torch::randn({8, 8}), torch::randint(0, 4, {8}, torch::kLong),
                        [](const torch::Tensor& out, const torch::Tensor& y) {
                          return torch::nn::functional::cross_entropy(out, y);
                        });
      sgd.step();
    }
    const std::string dir = rt::NewCheckpointDir();
    if (context.world_rank == 0) std::ofstream(dir + "/epoch") << epoch;
    rt::Report({{"loss", loss}, {"epoch", epoch}}, dir);
  }
}
RAYD_TRAIN_LOOP(PipelineLoop);

// Records where each rank ran (out_dir/node_rank<N>) and reports the world size.
void WhereLoop(const json& config) {
  const rt::TrainContext& context = rt::GetContext();
  std::ofstream(config.at("out_dir").get<std::string>() + "/node_rank" +
                std::to_string(context.world_rank))
      << rayd::GetNodeId();
  std::ofstream(config.at("out_dir").get<std::string>() + "/device." +
                std::to_string(context.world_rank))
      << context.device;
  std::ofstream(config.at("out_dir").get<std::string>() + "/mesh." +
                std::to_string(context.world_rank))
      << context.mesh.data_rank << " " << context.mesh.pipeline_rank << " "
      << context.mesh.tensor_rank;
  rt::Report({{"world_size", context.world_size}});
}
RAYD_TRAIN_LOOP(WhereLoop);

// Reports 1, 2, 3; before each report it leaves out_dir/<me>_<k> and waits (up to 30 s) for
// out_dir/<peer>_<k>, so two runs of it finish only if both run at once.
void LockstepLoop(const json& config) {
  const fs::path out = config.at("out_dir").get<std::string>();
  const std::string me = config.at("me");
  const std::string peer = config.at("peer");
  for (int k = 1; k <= 3; ++k) {
    std::ofstream(out / (me + "_" + std::to_string(k))) << k;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!fs::exists(out / (peer + "_" + std::to_string(k)))) {
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error(peer + " never ran");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    rt::Report({{"k", k}});
  }
}
RAYD_TRAIN_LOOP(LockstepLoop);

// Reports the threads LibTorch's intra-op pool and OpenBLAS's pool use in this rank (-1: this
// LibTorch's BLAS is not OpenBLAS), and the page faults of this thread over 20 steps that each
// make and drop a 16 MiB tensor, as a loop's activations are made and dropped every step.
void ComputeSetupLoop(const json&) {
  using GetThreads = int (*)();
  auto openblas = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  // A product large enough that a BLAS would split it between threads, had it more than one.
  const torch::Tensor a = torch::rand({256, 256});
  const auto faults = [] {
    rusage usage{};
    ::getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_minflt;
  };
  double sum = torch::ones({4 << 20}).sum().item<double>();  // the first one may fault
  const long before = faults();
  for (int step = 0; step < 20; ++step) sum += torch::ones({4 << 20}).sum().item<double>();
  rt::Report({{"torch_threads", at::get_num_threads()},
              {"openblas_threads", openblas != nullptr ? openblas() : -1},
              {"faults_20_steps", faults() - before},
              {"checksum", a.mm(a).sum().item<double>() + sum}});
}
RAYD_TRAIN_LOOP(ComputeSetupLoop);

// Makes a checkpoint directory, leaves its path in out_dir/dir_<rank> and never reports it:
// reports without it, or with `fail`, throws.
void AbandonDirLoop(const json& config) {
  const std::string dir = rt::NewCheckpointDir();
  std::ofstream(dir + "/state") << "never reported";
  std::ofstream(config.at("out_dir").get<std::string>() + "/dir_" +
                std::to_string(rt::GetContext().world_rank))
      << dir;
  if (config.value("fail", false)) throw std::runtime_error("failed after NewCheckpointDir");
  rt::Report({{"k", 1}});
}
RAYD_TRAIN_LOOP(AbandonDirLoop);

// Reports its config's `k` once, at once: a sweep's one-result trial.
void OnceLoop(const json& config) { rt::Report({{"k", config.at("k").get<double>()}}); }
RAYD_TRAIN_LOOP(OnceLoop);

std::vector<json> ResultLines(const std::string& run_dir) {
  std::vector<json> lines;
  std::ifstream in(run_dir + "/result.json");
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  return lines;
}

std::vector<std::string> CheckpointNames(const std::string& run_dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("checkpoint_", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Trains the same MLP for `epochs` in this process, each step on rank 0's batch followed by
// rank 1's: what two ranks' averaged gradients must reproduce.
std::vector<float> SingleProcessReference(int epochs) {
  at::set_num_threads(1);
  rt::testing::MlpRun run;
  run.epochs = epochs;
  const rt::testing::Dataset data = rt::testing::MakeDataset(run);
  torch::nn::Sequential model = rt::testing::MakeMlp(run.widths, run.model_seed);
  torch::optim::SGD optimizer = rt::testing::MakeOptimizer(model, run);
  for (int epoch = 0; epoch < run.epochs; ++epoch) {
    for (int64_t step = 0; step < rt::testing::StepsPerEpoch(run, 2); ++step) {
      std::vector<int64_t> rows = rt::testing::RankBatch(run, 2, 0, epoch, step);
      const std::vector<int64_t> rows1 = rt::testing::RankBatch(run, 2, 1, epoch, step);
      rows.insert(rows.end(), rows1.begin(), rows1.end());
      optimizer.zero_grad();
      rt::testing::Loss(model, data, rows).backward();
      optimizer.step();
    }
  }
  return rt::testing::FlatParameters(*model);
}

json LoopConfig(const TempDir& out, int epochs) {
  return {{"epochs", epochs}, {"out_dir", out.path()}};
}

}  // namespace

TEST_CASE("two Gloo ranks train an MLP like one process: loss falls, checkpoints kept",
          "[trainer]") {
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  rt::RunConfig run{.name = "mlp", .storage_path = storage.path()};
  run.checkpoint.num_to_keep = 2;
  rt::TrainResult result =
      rt::Trainer("MlpLoop", LoopConfig(out, 4), {.num_workers = 2}, run).Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.restarts == 0);
  CHECK(result.metrics.at("epoch") == 3);

  const std::string run_dir = storage.path() + "/mlp";
  std::vector<json> lines = ResultLines(run_dir);
  REQUIRE(lines.size() == 4);  // rank 0's reports only
  CHECK(lines.front().at("loss").get<double>() > lines.back().at("loss").get<double>() * 1.2);
  CHECK(CheckpointNames(run_dir) ==
        std::vector<std::string>{"checkpoint_000002", "checkpoint_000003"});
  REQUIRE(result.checkpoint.has_value());
  CHECK(*result.checkpoint == run_dir + "/checkpoint_000003");
  CHECK(ReadInt(*result.checkpoint + "/epoch") == 3);
  CHECK(fs::exists(*result.checkpoint + "/model.pt"));

  std::vector<float> rank0 = rt::testing::ReadFloats(out.path() + "/params_rank0.bin");
  std::vector<float> rank1 = rt::testing::ReadFloats(out.path() + "/params_rank1.bin");
  REQUIRE(!rank0.empty());
  CHECK(rank0 == rank1);
  std::vector<float> reference = SingleProcessReference(4);
  REQUIRE(reference.size() == rank0.size());
  float max_diff = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(reference[i] - rank0[i]));
  }
  CHECK(max_diff < 1e-5f);
}

TEST_CASE("a rank killed mid-run restarts the group from the latest checkpoint", "[trainer]") {
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  json config = LoopConfig(out, 6);
  config["crash_epoch"] = 3;
  config["crash_marker"] = out.path() + "/crashed";
  // Rank 0's checkpoints, or every rank's (whose report rank 1 may die before completing: then
  // that report is dropped and made again, never twice).
  const std::string mode = GENERATE(as<std::string>{}, "rank 0", "every rank",
                                    "every rank, rank 1 dying before its report");
  INFO("checkpoints: " << mode);
  const bool every_rank = mode != "rank 0";
  config["every_rank"] = every_rank;
  config["crash_before_report"] = mode == "every rank, rank 1 dying before its report";
  rt::RunConfig run{.name = "crash", .storage_path = storage.path()};
  run.failure.max_failures = 1;
  rt::TrainResult result = rt::Trainer("MlpLoop", config, {.num_workers = 2}, run).Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(fs::exists(out.path() + "/crashed"));
  CHECK(result.restarts == 1);
  CHECK(result.metrics.at("epoch") == 5);
  // Rank 1 died at the start of epoch 3. With rank 0's checkpoints, rank 0 had reported epoch 1
  // (and maybe 2) and hands its queued reports over before it is killed, so the restart resumed
  // after epoch 1 or 2 rather than from scratch. With every rank's, a checkpoint is whole only
  // with rank 1's part, which rank 1 deposits in the background: on a busy machine its parts of
  // epochs 1 and 2 may not have reached the driver before it died (a CI run on 2 cores resumed
  // from epoch 0's), so the restart resumed from some checkpoint, not from scratch.
  CHECK(result.metrics.at("start_epoch") >= (every_rank ? 1 : 2));
  std::vector<json> lines = ResultLines(storage.path() + "/crash");
  REQUIRE(lines.size() == 6);
  for (size_t i = 0; i < lines.size(); ++i) CHECK(lines[i].at("epoch") == static_cast<int>(i));
  CHECK(rt::testing::ReadFloats(out.path() + "/params_rank0.bin") ==
        rt::testing::ReadFloats(out.path() + "/params_rank1.bin"));
  if (mode == "every rank, rank 1 dying before its report") {
    // Rank 0's report of epoch 3 never got rank 1's part: dropped, so the restart resumed from
    // an earlier checkpoint and made epoch 3 again (once in result.json, as checked above), not
    // from epoch 3's. Epoch 2's is complete only if rank 1's part of it (read and deposited in
    // the background while it trained epoch 3, then collected by the driver) reached the driver
    // before rank 1 died; on a busy machine it may not have, and the restart resumes from
    // epoch 1's.
    CHECK(result.metrics.at("start_epoch") <= 3);
  }
  REQUIRE(result.checkpoint);
  if (every_rank) {
    CHECK(ReadInt(*result.checkpoint + "/rank1") == 5);  // rank 1's part of the last one
  } else {
    CHECK_FALSE(fs::exists(*result.checkpoint + "/rank1"));
  }
}

TEST_CASE("without max_failures a killed rank fails the run", "[trainer]") {
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  json config = LoopConfig(out, 3);
  config["crash_epoch"] = 1;
  config["crash_marker"] = out.path() + "/crashed";
  rt::TrainResult result = rt::Trainer("MlpLoop", config, {.num_workers = 2},
                                       {.name = "fail", .storage_path = storage.path()})
                               .Fit();
  CHECK_FALSE(result.ok());
  CHECK(result.restarts == 0);
  CHECK_THAT(result.error, Catch::Contains("rank"));
}

TEST_CASE("a checkpoint directory a rank made and never reported is removed when its run ends",
          "[trainer]") {
  EmbeddedRayd cluster;
  TempDir storage;
  for (const bool fail : {false, true}) {
    TempDir out;
    rt::TrainResult result =
        rt::Trainer("AbandonDirLoop", {{"out_dir", out.path()}, {"fail", fail}},
                    {.num_workers = 2},
                    {.name = fail ? "abandon_fail" : "abandon", .storage_path = storage.path()})
            .Fit();
    CHECK(result.ok() == !fail);
    for (int rank = 0; rank < 2; ++rank) {
      std::ifstream in(out.path() + "/dir_" + std::to_string(rank));
      std::string dir;
      REQUIRE(std::getline(in, dir));
      CHECK_FALSE(dir.empty());
      CHECK_FALSE(fs::exists(dir));
    }
  }
}

TEST_CASE("a second Fit on the same run name resumes from its latest checkpoint", "[trainer]") {
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  rt::RunConfig run{.name = "resume", .storage_path = storage.path()};
  rt::TrainResult first = rt::Trainer("MlpLoop", LoopConfig(out, 2), {.num_workers = 2}, run).Fit();
  INFO(first.error);
  REQUIRE(first.ok());
  CHECK(first.metrics.at("epoch") == 1);

  rt::TrainResult second =
      rt::Trainer("MlpLoop", LoopConfig(out, 4), {.num_workers = 2}, run).Fit();
  INFO(second.error);
  REQUIRE(second.ok());
  CHECK(second.metrics.at("start_epoch") == 2);
  CHECK(second.metrics.at("epoch") == 3);
  CHECK(ResultLines(storage.path() + "/resume").size() == 4);
  CHECK(CheckpointNames(storage.path() + "/resume").size() == 4);
}

TEST_CASE("num_to_keep keeps the best checkpoints by score_attribute, and the latest",
          "[trainer]") {
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  rt::RunConfig run{.name = "best", .storage_path = storage.path()};
  run.checkpoint = {.num_to_keep = 2, .score_attribute = "epoch", .score_order = "min"};
  rt::TrainResult result =
      rt::Trainer("MlpLoop", LoopConfig(out, 4), {.num_workers = 2}, run).Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  // Epoch 0 scores best under "min"; the latest stays whatever its score.
  CHECK(CheckpointNames(storage.path() + "/best") ==
        std::vector<std::string>{"checkpoint_000000", "checkpoint_000003"});
  CHECK(*result.checkpoint == storage.path() + "/best/checkpoint_000003");
}

// On a CLI-started head (an embedded cluster does not answer `rayd list`), so the test can
// list the cluster's actors afterwards.
TEST_CASE("a gang that cannot fit fails whole and starts no rank", "[trainer]") {
  rayd_runtime_test::CliCluster cluster;
  cluster.StartHead(2);
  cluster.InitDriver();
  TempDir out;
  TempDir storage;
  rt::ScalingConfig scaling{.num_workers = 3, .placement_timeout_s = 2};
  rt::TrainResult result = rt::Trainer("MlpLoop", LoopConfig(out, 1), scaling,
                                       {.name = "gang", .storage_path = storage.path()})
                               .Fit();
  CHECK_FALSE(result.ok());
  CHECK_THAT(result.error, Catch::Contains("placement group of 3 bundles {CPU: 1}"));
  CHECK(result.restarts == 0);
  // No rank actor was ever created (a killed one would still be listed, DEAD).
  CHECK(cluster.Json({"list", "actors"}).empty());
  // And the group was removed again.
  for (const rayd::PlacementGroup& group : rayd::GetAllPlacementGroups()) {
    CHECK(group.GetState() == rayd::PlacementGroupState::REMOVED);
  }
}

TEST_CASE("two TrainingRuns on one thread run at once, each result held until answered",
          "[trainer]") {
  EmbeddedRayd cluster;
  TempDir out;
  TempDir storage;
  rayd::EventLoop loop;
  std::map<std::string, std::unique_ptr<rt::TrainingRun>> runs;
  std::map<std::string, std::vector<double>> seen;
  std::map<std::string, rt::TrainResult> ended;
  for (const std::string me : {"a", "b"}) {
    const json config = {{"out_dir", out.path()}, {"me", me}, {"peer", me == "a" ? "b" : "a"}};
    runs[me] = std::make_unique<rt::TrainingRun>(
        loop, "LockstepLoop", config, rt::ScalingConfig{},
        rt::RunConfig{.name = me, .storage_path = storage.path()}, rt::FitOptions{},
        rt::TrainingRun::Callbacks{
            .on_result =
                [&, me](const rt::ReportedResult& result) {
                  seen[me].push_back(result.metrics.at("k"));
                  // b is stopped after its second result; a runs to its end.
                  runs[me]->Answer(!(me == "b" && seen[me].size() == 2));
                },
            .on_done = [&, me](rt::TrainResult result) { ended[me] = std::move(result); }});
  }
  // Both were started without blocking: neither has a result yet.
  CHECK(seen.empty());
  REQUIRE(loop.RunUntil([&] { return ended.size() == 2; }, std::chrono::seconds(90)));
  INFO(ended["a"].error);
  INFO(ended["b"].error);
  CHECK(ended["a"].ok());
  CHECK_FALSE(ended["a"].stopped);
  CHECK(seen["a"] == std::vector<double>{1, 2, 3});
  CHECK(ended["b"].stopped);
  CHECK(seen["b"] == std::vector<double>{1, 2});
  // What was answered is what was persisted: b's third report never reached result.json.
  CHECK(ResultLines(storage.path() + "/a").size() == 3);
  CHECK(ResultLines(storage.path() + "/b").size() == 2);
}

// A reused rank may get the next run's Poll before its Run: the Poll must not answer that the
// loop is over (the previous run's), or the run ends without its report.
TEST_CASE("each rank of a group runs LibTorch and OpenBLAS on one thread and reuses its large "
          "blocks",
          "[trainer]") {
  // OpenBLAS keeps a pool of its own (a thread per core) that at::set_num_threads leaves alone;
  // its idle threads spin in sched_yield, beside the other ranks on the same cores. And glibc
  // unmaps a thread's wholly free heap at once, so a step's 16 MiB tensor faulted its 4,096
  // pages in again every step.
  EmbeddedRayd cluster;
  TempDir storage;
  rt::TrainResult result =
      rt::Trainer("ComputeSetupLoop", json::object(),
                  rt::ScalingConfig{.num_workers = 2, .resources_per_worker = {{"CPU", 1}}},
                  rt::RunConfig{.name = "threads", .storage_path = storage.path()})
          .Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  for (const json& row : ResultLines(storage.path() + "/threads")) {
    CHECK(row.at("torch_threads") == 1);
    if (row.at("openblas_threads") == -1) WARN("LibTorch's BLAS here is not OpenBLAS");
    CHECK((row.at("openblas_threads") == 1 || row.at("openblas_threads") == -1));
    CHECK(row.at("faults_20_steps").get<double>() < 4096);  // a step's worth: 20 x 4,096 before
  }
}

TEST_CASE("Fits back to back on a reused gang each keep their one report", "[trainer]") {
  EmbeddedRayd cluster;
  TempDir storage;
  auto pool = std::make_shared<rt::GangPool>();
  for (int k = 1; k <= 300; ++k) {
    const std::string name = "once_" + std::to_string(k);
    rt::TrainResult result =
        rt::Trainer("OnceLoop", {{"k", k}}, rt::ScalingConfig{},
                    rt::RunConfig{.name = name, .storage_path = storage.path()})
            .Fit({.reuse = pool});
    INFO("Fit " << k << ": " << result.error);
    REQUIRE(result.ok());
    REQUIRE(result.metrics.count("k") == 1);
    CHECK(result.metrics.at("k") == k);
    REQUIRE(ResultLines(storage.path() + "/" + name).size() == 1);
  }
}

// The nodes the ranks of a WhereLoop run ran on, by rank.
std::vector<std::string> RankNodes(const TempDir& out, int world_size) {
  std::vector<std::string> nodes;
  for (int rank = 0; rank < world_size; ++rank) {
    nodes.push_back(rayd::testing::ReadFile(out.path() + "/node_rank" + std::to_string(rank)));
  }
  return nodes;
}

TEST_CASE("a mesh keeps each tensor-parallel group on one node, even under SPREAD", "[trainer]") {
  rayd_runtime_test::CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "2"});
  cluster.Start({"--address", cluster.address(), "--num-cpus", "2"});
  cluster.InitDriver();
  TempDir storage, out;
  // Per-worker bundles under SPREAD would alternate the nodes: 0 and 1 apart.
  rt::ScalingConfig scaling{.num_workers = 4,
                            .placement_strategy = rayd::PlacementStrategy::SPREAD,
                            .mesh = {.pipeline = 2, .tensor = 2}};
  rt::TrainResult result = rt::Trainer("WhereLoop", {{"out_dir", out.path()}}, scaling,
                                       {.name = "mesh", .storage_path = storage.path()})
                               .Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  const std::vector<std::string> nodes = RankNodes(out, 4);
  CHECK(nodes[0] == nodes[1]);
  CHECK(nodes[2] == nodes[3]);
  CHECK(nodes[0] != nodes[2]);
  // Tensor fastest, then data, then pipeline.
  for (const auto& [rank, coordinates] : std::vector<std::pair<int, std::string>>{
           {0, "0 0 0"}, {1, "0 0 1"}, {2, "0 1 0"}, {3, "0 1 1"}}) {
    CHECK(rayd::testing::ReadFile(out.path() + "/mesh." + std::to_string(rank)) == coordinates);
  }
  // A mesh that is not the gang is refused before anything is reserved.
  scaling.mesh = {.data = 3, .tensor = 2};
  CHECK_THROWS_WITH(rt::Trainer("WhereLoop", {{"out_dir", out.path()}}, scaling,
                                {.name = "bad", .storage_path = storage.path()})
                        .Fit(),
                    Catch::Contains("ScalingConfig.mesh: data x pipeline x tensor must equal "
                                    "num_workers (4), but 3 x 1 x 2 = 6"));
}

TEST_CASE(
    "a dead middle stage fails the attempt naming it, and the run resumes from its checkpoint",
    "[trainer]") {
  EmbeddedRayd cluster;
  TempDir storage, marks;
  const rt::ScalingConfig scaling{.num_workers = 3,
                                  .resources_per_worker = {{"CPU", 0.5}},
                                  .collective_timeout_s = 30,
                                  .mesh = {.pipeline = 3}};
  auto fit = [&](const std::string& name, int max_failures) {
    return rt::Trainer(
               "PipelineLoop",
               {{"kill_dir", marks.path() + "/" + name}, {"run_dir", storage.path() + "/" + name}},
               scaling,
               {.name = name,
                .storage_path = storage.path(),
                .failure = {.max_failures = max_failures}})
        .Fit();
  };
  fs::create_directories(marks.path() + "/fails");
  fs::create_directories(marks.path() + "/resumes");
  const auto began = std::chrono::steady_clock::now();
  rt::TrainResult failed = fit("fails", 0);
  const auto took = std::chrono::steady_clock::now() - began;
  CHECK(fs::exists(marks.path() + "/fails/killed"));
  REQUIRE_FALSE(failed.ok());
  INFO(failed.error);
  CHECK_THAT(failed.error, Catch::Contains("rank 1 (pipeline stage 1, tensor 0, data 0): "));
  // Well before the 30 s collective timeout: the peers' connections to it broke.
  CHECK(took < std::chrono::seconds(25));

  rt::TrainResult resumed = fit("resumes", 1);
  INFO(resumed.error);
  REQUIRE(resumed.ok());
  CHECK(resumed.restarts == 1);
  CHECK(fs::exists(marks.path() + "/resumes/killed"));
  std::vector<json> lines = ResultLines(storage.path() + "/resumes");
  REQUIRE(lines.size() == 3);  // every epoch once: 0 before the kill, 1 and 2 after
  for (int i = 0; i < 3; ++i) CHECK(lines[i]["epoch"] == i);
}

TEST_CASE("local_mode keeps every rank on the driver's node and num_workers -1 uses every GPU",
          "[trainer]") {
  rayd_runtime_test::CliCluster cluster;
  cluster.Start(
      {"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "3", "--num-gpus", "1"});
  cluster.Start({"--address", cluster.address(), "--num-cpus", "3", "--num-gpus", "2"});
  cluster.InitDriver();
  const std::string driver_node = rayd::GetNodeId();
  REQUIRE(driver_node.size() == 32);
  TempDir storage;

  SECTION("local_mode") {
    TempDir out;
    // SPREAD alone would use both nodes (next section).
    rt::ScalingConfig scaling{.num_workers = 3,
                              .placement_strategy = rayd::PlacementStrategy::SPREAD,
                              .local_mode = true};
    rt::TrainResult result = rt::Trainer("WhereLoop", {{"out_dir", out.path()}}, scaling,
                                         {.name = "local", .storage_path = storage.path()})
                                 .Fit();
    INFO(result.error);
    REQUIRE(result.ok());
    CHECK(RankNodes(out, 3) == std::vector<std::string>(3, driver_node));
  }
  SECTION("without local_mode SPREAD uses both nodes") {
    TempDir out;
    rt::ScalingConfig scaling{.num_workers = 3,
                              .placement_strategy = rayd::PlacementStrategy::SPREAD};
    rt::TrainResult result = rt::Trainer("WhereLoop", {{"out_dir", out.path()}}, scaling,
                                         {.name = "spread", .storage_path = storage.path()})
                                 .Fit();
    INFO(result.error);
    REQUIRE(result.ok());
    std::vector<std::string> nodes = RankNodes(out, 3);
    CHECK(std::set<std::string>(nodes.begin(), nodes.end()).size() == 2);
  }
  SECTION("num_workers -1") {
    TempDir out;
    CHECK(rayd::ClusterResources().at("GPU") == 3);
    rt::TrainResult result = rt::Trainer("WhereLoop", {{"out_dir", out.path()}, {"batch_size", 16}},
                                         {.num_workers = -1, .use_gpu = true},
                                         {.name = "gpus", .storage_path = storage.path()})
                                 .Fit();
    INFO(result.error);
    REQUIRE(result.ok());
    CHECK(result.metrics.at("world_size") == 3);
    json params = json::parse(rayd::testing::ReadFile(storage.path() + "/gpus/params.json"));
    CHECK(params["num_workers"] == 3);
    CHECK(params["effective_batch_size"] == 48);
    // Without use_gpu there is nothing to count.
    CHECK_THROWS_WITH(rt::Trainer("WhereLoop", {}, {.num_workers = -1},
                                  {.name = "x", .storage_path = storage.path()})
                          .Fit(),
                      Catch::Contains("use_gpu"));
  }
  SECTION("ranks of one gang sharing a GPU are refused before anything starts") {
    CHECK_THROWS_WITH(
        rt::Trainer("WhereLoop", {},
                    {.num_workers = 2, .use_gpu = true, .resources_per_worker = {{"GPU", 0.5}}},
                    {.name = "x", .storage_path = storage.path()})
            .Fit(),
        Catch::Contains("ScalingConfig.resources_per_worker.GPU: 0.5") &&
            Catch::Contains("NCCL refuses"));
  }
  SECTION("use_gpu in a CPU build trains on the CPU, and the context says so") {
    if (rt::NcclBuilt()) return;  // this cluster's GPUs are declared, not real: tests/gpu
    TempDir out;
    rt::TrainResult result = rt::Trainer("WhereLoop", {{"out_dir", out.path()}, {"batch_size", 16}},
                                         {.num_workers = 2, .use_gpu = true},
                                         {.name = "cpu-gpus", .storage_path = storage.path()})
                                 .Fit();
    INFO(result.error);
    REQUIRE(result.ok());
    CHECK(rayd::testing::ReadFile(out.path() + "/device.0") == "cpu");
    CHECK(rayd::testing::ReadFile(out.path() + "/device.1") == "cpu");
  }
  SECTION("an unknown train loop is refused before anything starts") {
    CHECK_THROWS_WITH(
        rt::Trainer("NoSuchLoop", {}, {.num_workers = 1},
                    {.name = "x", .storage_path = storage.path()})
            .Fit(),
        Catch::Contains("unknown train loop 'NoSuchLoop'") && Catch::Contains("WhereLoop"));
  }
}

namespace {

// Joins a Fit's thread however the test leaves its scope.
struct JoinAtExit {
  std::thread& t;
  ~JoinAtExit() {
    if (t.joinable()) t.join();
  }
};

// The lines of a run's result.json written so far (one may be half-written: skipped).
std::vector<json> ResultRows(const std::string& run_dir) {
  std::vector<json> lines;
  std::ifstream in(run_dir + "/result.json");
  for (std::string line; std::getline(in, line);) {
    json row = json::parse(line, nullptr, false);
    if (!row.is_discarded()) lines.push_back(row);
  }
  return lines;
}

}  // namespace

TEST_CASE(
    "an elastic run starts with what fits, grows at a checkpoint when a node joins and "
    "goes on without it when it dies, every epoch once",
    "[trainer][elastic]") {
  rayd_runtime_test::CliCluster cluster;
  // Heartbeats of 250 ms, 8 missed = dead: a killed node is noticed in about 2 s.
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "1",
                 "--heartbeat-period-ms", "250", "--missed-heartbeats", "8"});
  cluster.InitDriver();
  TempDir storage, out;
  json config = LoopConfig(out, 16);
  config["epoch_sleep_ms"] = 400;
  rt::ScalingConfig scaling{
      .num_workers = 2, .min_workers = 1, .resize_interval_s = 1, .collective_timeout_s = 10};
  rt::RunConfig run{.name = "elastic", .storage_path = storage.path()};
  run.failure.max_failures = 2;
  rt::TrainResult result;
  std::thread fit([&] { result = rt::Trainer("MlpLoop", config, scaling, run).Fit(); });
  JoinAtExit join{fit};
  const std::string run_dir = storage.path() + "/elastic";
  auto rows = [&] { return ResultRows(run_dir); };
  auto some_row = [&](int world_size, size_t after) {
    std::vector<json> lines = rows();
    for (size_t i = after; i < lines.size(); ++i) {
      if (lines[i].value("world_size", 0) == world_size) return true;
    }
    return false;
  };
  // One CPU: it starts with 1 worker, not waiting for 2.
  REQUIRE(rayd::testing::WaitFor([&] { return rows().size() >= 2; }, std::chrono::seconds(90)));
  CHECK(rows()[0].at("world_size") == 1);
  // A second node: at a checkpoint at least 1 s after the start, the run restarts at 2.
  cluster.Start({"--address", cluster.address(), "--num-cpus", "1"});
  REQUIRE(rayd::testing::WaitFor([&] { return some_row(2, 0); }, std::chrono::seconds(90)));
  // That node dies (its daemon and its workers): the run goes on at 1, not waiting for it.
  const size_t before = rows().size();
  std::vector<std::string> nodes = cluster.Sessions("_node");
  REQUIRE(nodes.size() == 1);
  const pid_t node = std::atoi(rayd::testing::ReadFile(nodes[0] + "/node.pid").c_str());
  REQUIRE(node > 0);
  ::kill(node, SIGKILL);
  REQUIRE(rayd::testing::WaitFor([&] { return some_row(1, before); }, std::chrono::seconds(120)));
  fit.join();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.resizes >= 1);
  CHECK(result.restarts == 1);  // the lost node: a failure (a drain would not be)
  const std::vector<json> lines = rows();
  REQUIRE(lines.size() == 16);
  for (size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i].at("epoch") == static_cast<int>(i));        // every epoch once, in order
    CHECK(lines[i].at("world_size") == lines[i].at("ranks"));  // what the loop saw
  }
}

// `rayd drain` of the node holding rank 0 of an elastic run's two ranks (one per node; the
// head holds no CPU).
TEST_CASE(
    "a drained node's rank sees the notice and the run goes on without it from its next "
    "checkpoint as a preemption, not a failure, and the node leaves once idle",
    "[trainer][elastic][drain]") {
  rayd_runtime_test::CliCluster cluster;
  cluster.Start({"--head", "--port", std::to_string(cluster.port()), "--num-cpus", "0",
                 "--heartbeat-period-ms", "250", "--missed-heartbeats", "8"});
  cluster.Start({"--address", cluster.address(), "--num-cpus", "1"});
  cluster.Start({"--address", cluster.address(), "--num-cpus", "1"});
  cluster.InitDriver();
  const bool at_deadline = GENERATE(false, true);
  INFO((at_deadline ? "a loop that does not checkpoint again: stopped at the deadline"
                    : "a loop that checkpoints when it sees the notice"));
  TempDir storage, out;
  json config = LoopConfig(out, 12);
  config["epoch_sleep_ms"] = 300;
  config["drain_dir"] = out.path();
  config["checkpoint_every"] = 1000;  // epoch 0's only, and
  config["checkpoint_on_drain"] = !at_deadline;
  rt::ScalingConfig scaling{
      .num_workers = 2, .min_workers = 1, .resize_interval_s = 1, .collective_timeout_s = 10};
  rt::RunConfig run{.name = "drained", .storage_path = storage.path()};
  run.failure.max_failures = 0;  // a drain must not need one
  rt::TrainResult result;
  std::thread fit([&] { result = rt::Trainer("MlpLoop", config, scaling, run).Fit(); });
  JoinAtExit join{fit};
  const std::string run_dir = storage.path() + "/drained";
  auto rows = [&] { return ResultRows(run_dir); };
  REQUIRE(rayd::testing::WaitFor([&] { return rows().size() >= 2; }, std::chrono::seconds(90)));
  CHECK(rows()[0].at("world_size") == 2);
  // Rank 0's node, and its daemon.
  const std::string node = rayd::testing::ReadFile(out.path() + "/node.0");
  REQUIRE(node.size() == 32);
  pid_t daemon = 0;
  for (const std::string& session : cluster.Sessions("_node")) {
    if (rayd::testing::ReadFile(session + "/logs/node.log").find("registered as node " + node) !=
        std::string::npos) {
      daemon = std::atoi(rayd::testing::ReadFile(session + "/node.pid").c_str());
    }
  }
  REQUIRE(daemon > 0);

  std::string output;
  REQUIRE(cluster.Rayd({"drain", node.substr(0, 12), "--deadline", at_deadline ? "3s" : "60s",
                        "--reason", "spot preemption", "--address", cluster.address()},
                       &output) == 0);
  INFO(output);
  CHECK(output.find("is draining") != std::string::npos);
  // Rank 0 sees it; the run restarts on the other node alone and the drained node, idle,
  // leaves: well before a 60 s deadline when the loop checkpoints, at 3 s when it does not.
  const auto drained = std::chrono::steady_clock::now();
  REQUIRE(rayd::testing::WaitFor([&] { return ::kill(daemon, 0) != 0; },
                                 std::chrono::seconds(at_deadline ? 30 : 40)));
  const double left_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - drained).count();
  fit.join();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.preemptions == 1);
  CHECK(result.restarts == 0);
  const std::vector<json> lines = rows();
  CHECK(lines.back().at("world_size") == 1);
  CHECK(lines.back().at("epoch") == 11);
  if (!at_deadline) {
    CHECK(left_s < 30);
    CHECK(rayd::testing::ReadFile(out.path() + "/drain_seen.0").starts_with("spot preemption "));
    // Restarted from the checkpoint rank 0 took on seeing the notice: every epoch once.
    REQUIRE(lines.size() == 12);
    for (size_t i = 0; i < lines.size(); ++i) CHECK(lines[i].at("epoch") == static_cast<int>(i));
  }
  // The node table says why it went.
  json nodes = cluster.Json({"list", "nodes", "--address", cluster.address()});
  bool found = false;
  for (const json& n : nodes) {
    if (n.at("node_id") != node) continue;
    found = true;
    CHECK(n.at("state") == "DEAD");
    CHECK(n.at("death_reason") == "drained (spot preemption)");
  }
  CHECK(found);
}
