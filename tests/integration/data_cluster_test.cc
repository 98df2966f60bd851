// rayd Data on a real (embedded) cluster: a stateful map on a pool of actors and a plain map with
// resources of its own run as their own stages, and a dataset 4x the object store streams
// through two ranks under the ingest budget with nothing spilled.
//
// The binary is also its workers (node daemons re-run it with RAYD_WORKER_MODE set), so the maps
// registered here run in the actors and tasks. Two ranks are two shards of world 2 read by two
// threads of this driver: the same producers, budget and object store a node's two rank
// processes use.

#include <rayd/api.h>
#include <rayd/data/shard.h>
#include <rayd/data/writer.h>
#include <rayd/runtime/cluster.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "runtime_harness.h"
#include "test_util.h"

namespace {

using namespace rayd::data;
using nlohmann::json;
using rayd_runtime_test::EmbeddedRayd;
namespace fs = std::filesystem;
constexpr int64_t kMiB = 1 << 20;

// A "model" loaded once per actor: multiplies `x` by the weight in `weight_file`, and tags each
// row with this actor's pid and how many batches the instance has mapped before this one.
class Scale : public BatchMapper {
 public:
  explicit Scale(const json& args) {
    const std::string path = args.at("weight_file").get<std::string>();
    std::ifstream in(path);
    if (!(in >> weight_)) throw std::runtime_error("cannot read a weight from '" + path + "'");
  }
  rayd::Result<Block> operator()(const Block& batch) override {
    const Column* x = batch.Find("x");
    if (x == nullptr) return rayd::Status::NotFound("Scale: no column x");
    if (weight_ == 13) return rayd::Status::InvalidArgument("Scale: unlucky weight 13");
    const int64_t n = batch.num_rows();
    BlockBuilder out(n);
    auto* scaled = reinterpret_cast<int64_t*>(out.AddFixed({"x", DType::kInt64, {}}));
    auto* pid = reinterpret_cast<int64_t*>(out.AddFixed({"pid", DType::kInt64, {}}));
    auto* call = reinterpret_cast<int64_t*>(out.AddFixed({"call", DType::kInt64, {}}));
    if (const Column* read_epoch = batch.Find("read_epoch")) out.AddColumn(*read_epoch, nullptr);
    auto* epoch = reinterpret_cast<int64_t*>(out.AddFixed({"actor_epoch", DType::kInt64, {}}));
    for (int64_t r = 0; r < n; ++r) {
      scaled[r] = x->As<int64_t>()[r] * weight_;
      pid[r] = ::getpid();
      call[r] = calls_;
      epoch[r] = TransformEpoch();
    }
    ++calls_;
    return std::move(out).Finish();
  }

 private:
  int64_t weight_ = 0;
  int64_t calls_ = 0;
};
RAYD_DATA_MAP_CLASS(Scale);

// A plain map: the pid of the process that ran it and the epoch it made the rows for, as
// columns `task_pid` and `task_epoch`.
rayd::Result<Block> TagPid(const Block& batch, const json&) {
  BlockBuilder out(batch.num_rows());
  for (const Column& c : batch.columns()) out.AddColumn(c, nullptr);
  auto* pid = reinterpret_cast<int64_t*>(out.AddFixed({"task_pid", DType::kInt64, {}}));
  auto* epoch = reinterpret_cast<int64_t*>(out.AddFixed({"task_epoch", DType::kInt64, {}}));
  for (int64_t r = 0; r < batch.num_rows(); ++r) pid[r] = ::getpid(), epoch[r] = TransformEpoch();
  Block result = std::move(out).Finish();
  return Block(result.num_rows(), result.columns(),
               {std::make_shared<Block>(batch), std::make_shared<Block>(result)});
}
RAYD_DATA_MAP(TagPid);

// A plain map with the read: the epoch it made the rows for, as column `read_epoch`.
rayd::Result<Block> TagEpoch(const Block& batch, const json&) {
  BlockBuilder out(batch.num_rows());
  for (const Column& c : batch.columns()) out.AddColumn(c, nullptr);
  auto* epoch = reinterpret_cast<int64_t*>(out.AddFixed({"read_epoch", DType::kInt64, {}}));
  for (int64_t r = 0; r < batch.num_rows(); ++r) epoch[r] = TransformEpoch();
  Block result = std::move(out).Finish();
  return Block(result.num_rows(), result.columns(),
               {std::make_shared<Block>(batch), std::make_shared<Block>(result)});
}
RAYD_DATA_MAP(TagEpoch);

// The store of the embedded cluster's one node.
rayd::NodeStoreSummary Store() {
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  auto view = rayd::FetchObjects(endpoint.gcs_address, endpoint.token, rayd::Millis(5000));
  REQUIRE(view.ok());
  REQUIRE(view->stores.size() == 1);
  return view->stores[0];
}

std::string WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// Every batch of one pass, or the error that ended it.
rayd::Result<std::vector<Block>> Pass(DatasetShard& shard, int64_t batch_size, int64_t epoch) {
  std::vector<Block> out;
  auto pass = shard.IterBatches({.batch_size = batch_size, .epoch = epoch});
  while (true) {
    RAYD_ASSIGN_OR_RETURN(std::optional<Block> batch, pass->Next());
    if (!batch) return out;
    out.push_back(std::move(*batch));
  }
}

}  // namespace

TEST_CASE("a stateful map runs on its pool of actors, each built once, and a map with resources "
          "of its own as tasks",
          "[data][integration]") {
  EmbeddedRayd cluster;
  std::string csv = "x\n";
  for (int i = 0; i < 200; ++i) csv += std::to_string(i) + "\n";
  DatasetSpec spec{.name = "numbers", .format = "csv",
                   .paths = {WriteText(cluster.Path("x.csv"), csv)}};
  const std::string weight = WriteText(cluster.Path("weight"), "3\n");
  spec.options["shuffle"] = false;
  spec.options["block_bytes"] = 1;  // a block per batch: 20 blocks a pass
  spec.options["transforms"] = json::parse(R"([
      {"map_batches": "TagEpoch"},
      {"map_batches": "Scale", "weight_file": ")" + weight + R"(", "concurrency": 2},
      {"map_batches": "TagPid", "resources": {"CPU": 0}}])");
  auto shard = DatasetShard::Open(spec, {});
  REQUIRE(shard.ok());
  // The batches' columns, through every stage.
  CHECK(DescribeSchema((*shard)->schema()) ==
        "x: int64, pid: int64, call: int64, read_epoch: int64, actor_epoch: int64, "
        "task_pid: int64, task_epoch: int64");

  std::set<int64_t> actor_pids, task_pids;
  std::map<int64_t, int64_t> calls_by_actor;  // the most calls an instance had made
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    auto batches = Pass(**shard, 10, epoch);
    REQUIRE(batches.ok());
    REQUIRE(batches->size() == 20);
    int64_t expect = 0;
    for (const Block& b : *batches) {
      for (int64_t r = 0; r < b.num_rows(); ++r, ++expect) {
        CHECK(b.Find("x")->As<int64_t>()[r] == 3 * expect);  // in order, each row once
        const int64_t pid = b.Find("pid")->As<int64_t>()[r];
        actor_pids.insert(pid);
        calls_by_actor[pid] = std::max(calls_by_actor[pid], b.Find("call")->As<int64_t>()[r]);
        task_pids.insert(b.Find("task_pid")->As<int64_t>()[r]);
        // Every stage made the rows for this pass's epoch (a random transform draws by it).
        CHECK(b.Find("read_epoch")->As<int64_t>()[r] == epoch);
        CHECK(b.Find("actor_epoch")->As<int64_t>()[r] == epoch);
        CHECK(b.Find("task_epoch")->As<int64_t>()[r] == epoch);
      }
    }
    CHECK(expect == 200);
  }
  // Two actors, neither this process, each keeping its instance across both passes: the 40
  // blocks and the schema's probe are 41 calls between them.
  REQUIRE(actor_pids.size() == 2);
  CHECK(actor_pids.count(::getpid()) == 0);
  int64_t calls = 0;
  for (const auto& [pid, last] : calls_by_actor) calls += last + 1;
  CHECK(calls == 41);
  CHECK(task_pids.count(::getpid()) == 0);
  CHECK_FALSE(task_pids.empty());
}

TEST_CASE("data tasks make each block for its pass's epoch", "[data][integration]") {
  EmbeddedRayd cluster;
  std::string csv = "x\n";
  for (int i = 0; i < 60; ++i) csv += std::to_string(i) + "\n";
  DatasetSpec spec{.name = "numbers", .format = "csv",
                   .paths = {WriteText(cluster.Path("x.csv"), csv)}};
  spec.options["execution"] = "tasks";
  spec.options["block_bytes"] = 1;
  spec.options["transforms"] = json::parse(R"([{"map_batches": "TagEpoch"}])");
  auto shard = DatasetShard::Open(spec, {});
  REQUIRE(shard.ok());
  for (const int64_t epoch : {0, 1, 4}) {
    auto batches = Pass(**shard, 10, epoch);
    REQUIRE(batches.ok());
    int64_t rows = 0;
    for (const Block& b : *batches) {
      for (int64_t r = 0; r < b.num_rows(); ++r, ++rows) {
        CHECK(b.Find("read_epoch")->As<int64_t>()[r] == epoch);
      }
    }
    CHECK(rows == 60);
  }
}

TEST_CASE("a stateful map's failures name the dataset and the step", "[data][integration]") {
  EmbeddedRayd cluster;
  DatasetSpec spec{.name = "numbers", .format = "csv",
                   .paths = {WriteText(cluster.Path("x.csv"), "x\n1\n2\n3\n")}};
  // Its constructor throws: Open fails with the message, and no pass starts.
  spec.options["transforms"] = json::parse(
      R"([{"map_batches": "Scale", "weight_file": "/nonexistent/weight"}])");
  auto refused = DatasetShard::Open(spec, {});
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(),
             Catch::Contains("datasets.numbers.transforms[0] (map_batches Scale): actor 0 of its "
                             "pool did not start") &&
                 Catch::Contains("cannot read a weight from '/nonexistent/weight'"));
  // It fails on a batch: the pass ends with the map's message.
  spec.options["transforms"] = json::parse(
      R"([{"limit": 3}, {"map_batches": "Scale", "weight_file": ")" +
      WriteText(cluster.Path("weight"), "13") + R"("}])");
  auto failing = DatasetShard::Open(spec, {});
  REQUIRE_FALSE(failing.ok());  // the schema's probe meets it first
  CHECK_THAT(failing.status().message(),
             Catch::Contains("datasets.numbers.transforms[1] (map_batches Scale)") &&
                 Catch::Contains("Scale: unlucky weight 13"));
}

TEST_CASE("a dataset 4x the object store streams through 2 ranks under the ingest budget, "
          "nothing spilled",
          "[data][integration]") {
  // A 32 MiB store; 128 MiB of rows (32,768 rows of a 4 KiB image and an id); each rank's
  // budget 6 MiB (the node's 12 MiB, as the Trainer splits a node's budget over its ranks),
  // blocks of 1 MiB made by rayd tasks into the store and viewed there by the ranks.
  EmbeddedRayd cluster(32 * kMiB);
  constexpr int64_t kRows = 32768, kRowBytes = 4096, kChunk = 1024;
  const std::string dir = cluster.Path("big");
  {
    DatasetWriter writer("npy", dir);
    for (int64_t at = 0; at < kRows; at += kChunk) {
      BlockBuilder b(kChunk);
      uint8_t* image = b.AddFixed({"image", DType::kUInt8, {kRowBytes}});
      auto* id = reinterpret_cast<int64_t*>(b.AddFixed({"id", DType::kInt64, {}}));
      for (int64_t r = 0; r < kChunk; ++r) {
        id[r] = at + r;
        std::memset(image + r * kRowBytes, static_cast<int>((at + r) % 251), kRowBytes);
      }
      REQUIRE(writer.Write(std::move(b).Finish()).ok());
    }
    REQUIRE(writer.Close().ok());
  }
  DatasetSpec spec{.name = "big", .format = "npy", .paths = {dir + "/*.npy"}};
  spec.options["execution"] = "tasks";
  spec.options["block_bytes"] = kMiB;
  spec.options["prefetch_blocks"] = 64;  // the byte budget, not the block count, binds
  const int64_t budget = 6 * kMiB;

  std::vector<std::vector<int64_t>> ids(2);
  std::vector<ShardStats> stats(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      auto shard = DatasetShard::Open(
          spec, {.world_size = 2, .rank = rank, .seed = 7, .budget_bytes = budget});
      if (!shard.ok()) {
        errors[rank] = shard.status().message();
        return;
      }
      auto pass = (*shard)->IterBatches({.batch_size = 64, .epoch = 0});
      while (true) {
        auto batch = pass->Next();
        if (!batch.ok()) {
          errors[rank] = batch.status().message();
          return;
        }
        if (!*batch) break;
        const Column* id = (*batch)->Find("id");
        const Column* image = (*batch)->Find("image");
        for (int64_t r = 0; r < (*batch)->num_rows(); ++r) {
          const int64_t i = id->As<int64_t>()[r];
          const uint8_t* row = image->As<uint8_t>() + r * kRowBytes;
          if (row[0] != i % 251 || row[kRowBytes - 1] != i % 251) {
            errors[rank] = "row " + std::to_string(i) + " corrupt";
            return;
          }
          ids[rank].push_back(i);
        }
      }
      stats[rank] = (*shard)->stats();
    });
  }
  for (std::thread& t : ranks) t.join();
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  INFO(errors[0] << errors[1]);

  // Equal, disjoint shares covering every row once.
  CHECK(ids[0].size() == kRows / 2);
  CHECK(ids[1].size() == kRows / 2);
  std::set<int64_t> all(ids[0].begin(), ids[0].end());
  all.insert(ids[1].begin(), ids[1].end());
  CHECK(static_cast<int64_t>(all.size()) == kRows);

  const rayd::NodeStoreSummary store = Store();
  std::printf("4x-store ingest: dataset %lld MiB, store %llu MiB, node ingest budget %lld MiB; "
              "store peak %.1f MiB, spilled %llu; ranks held at most %.1f / %.1f MiB\n",
              static_cast<long long>(kRows * kRowBytes / kMiB),
              static_cast<unsigned long long>(store.capacity / kMiB),
              static_cast<long long>(2 * budget / kMiB), store.peak_used / double(kMiB),
              static_cast<unsigned long long>(store.total_spilled),
              stats[0].peak_held_bytes / double(kMiB), stats[1].peak_held_bytes / double(kMiB));
  std::fflush(stdout);
  CHECK(store.total_spilled == 0);
  CHECK(store.total_evicted == 0);
  for (const ShardStats& s : stats) CHECK(s.peak_held_bytes <= budget);
  // The store held no more than the two ranks' budgets, plus the block each rank's loop is on
  // (its view pins it after the producer stops counting it) and the tasks' small arguments.
  CHECK(store.peak_used <= static_cast<uint64_t>(2 * budget + 2 * (kMiB + 64 * 1024) + kMiB));
}

// This node's data caches (named rayd-data-cache-..., namespace rayd_data) that are alive.
std::vector<rayd::ActorSummary> LiveCaches() {
  const auto endpoint = rayd::internal::DriverClusterEndpoint();
  auto actors = rayd::FetchActors(endpoint.gcs_address, endpoint.token, rayd::Millis(5000));
  REQUIRE(actors.ok());
  std::vector<rayd::ActorSummary> live;
  for (const rayd::ActorSummary& a : *actors) {
    if (a.ray_namespace == "rayd_data" && a.name.rfind("rayd-data-cache-", 0) == 0 &&
        a.state != "DEAD") {
      live.push_back(a);
    }
  }
  return live;
}

TEST_CASE("a node cache exits once no reader has asked for cache_idle_s, and a later pass "
          "starts another and reads the same rows",
          "[data][integration][cache]") {
  EmbeddedRayd cluster;
  const std::string csv = WriteText(cluster.Path("rows.csv"), [] {
    std::string text = "id,x\n";
    for (int i = 0; i < 500; ++i) text += std::to_string(i) + "," + std::to_string(i * 3) + "\n";
    return text;
  }());
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {csv}};
  spec.options["transforms"] = json::parse(R"([{"cache": "node"}])");
  spec.options["cache_idle_s"] = 1;
  spec.options["block_bytes"] = 1024;  // several chunks
  auto shard = DatasetShard::Open(spec, {.seed = 5});
  REQUIRE(shard.ok());
  auto check_pass = [&](int64_t epoch) {
    auto batches = Pass(**shard, 64, epoch);
    REQUIRE(batches.ok());
    std::set<int64_t> ids;
    for (const Block& b : *batches) {
      for (int64_t r = 0; r < b.num_rows(); ++r) {
        const int64_t id = b.Find("id")->As<int64_t>()[r];
        CHECK(b.Find("x")->As<int64_t>()[r] == 3 * id);
        ids.insert(id);
      }
    }
    CHECK(ids.size() == 500);
  };
  check_pass(0);
  const std::vector<rayd::ActorSummary> first = LiveCaches();
  REQUIRE(first.size() == 1);
  CHECK((*shard)->stats().cache_chunks_made > 0);

  // Idle for a second: it exits (polled, with a deadline well past cache_idle_s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!LiveCaches().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(LiveCaches().empty());

  // The chunks this process holds stay intact, and its reads go on; once it tells the cache
  // again that it uses them (every 5 s), a new cache starts under the same name.
  int64_t epoch = 1;
  const auto restart_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (LiveCaches().empty() && std::chrono::steady_clock::now() < restart_deadline) {
    check_pass(epoch++);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::vector<rayd::ActorSummary> second = LiveCaches();
  REQUIRE(second.size() == 1);
  CHECK(second[0].actor_id != first[0].actor_id);
  CHECK(second[0].name == first[0].name);  // the same node and fingerprint: the same name again
}
