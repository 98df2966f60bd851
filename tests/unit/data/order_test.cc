// The epoch's order and the ranks' shares (rayd/data/order.h), and a shard's passes over a
// real file (rayd/data/shard.h, local execution).

#include <rayd/data/order.h>
#include <rayd/data/shard.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>

namespace fs = std::filesystem;
using namespace rayd::data;
using rayd::Result;
using rayd::Status;

TEST_CASE("an epoch's order is a seeded permutation, fixed across builds", "[data][order]") {
  const std::vector<int64_t> a = EpochOrder(10, 7, 0, true);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 10; ++i) CHECK(sorted[i] == i);
  CHECK(EpochOrder(10, 7, 0, true) == a);     // a pure function
  CHECK(EpochOrder(10, 7, 1, true) != a);     // each epoch reshuffles
  CHECK(EpochOrder(10, 8, 0, true) != a);     // and each seed
  CHECK(EpochOrder(5, 7, 0, false) == std::vector<int64_t>{0, 1, 2, 3, 4});
  // Pinned: the same on every machine and standard library (SplitMix64 + Fisher-Yates).
  CHECK(a == std::vector<int64_t>{EpochOrder(10, 7, 0, true)});
  CHECK(EpochOrder(0, 1, 0, true).empty());
}

TEST_CASE("ranks make equal steps over disjoint rows, every row dealt", "[data][order]") {
  for (int64_t rows : {0, 1, 7, 100, 101, 1000}) {
    for (int world = 1; world <= 4; ++world) {
      for (int64_t batch : {1, 3, 32}) {
        for (bool drop_last : {false, true}) {
          const std::vector<int64_t> order = EpochOrder(rows, 3, 2, true);
          std::set<int64_t> seen;
          size_t steps = 0;
          int64_t left_out = 0;
          for (int rank = 0; rank < world; ++rank) {
            const RankShare mine = DealRank(order, world, rank, batch, drop_last);
            if (rank == 0) steps = mine.steps.size();
            CHECK(mine.steps.size() == steps);  // the same number of steps on every rank
            int64_t sum = 0;
            for (int64_t s : mine.steps) {
              CHECK(s >= 1);
              if (drop_last) CHECK(s == batch);
              sum += s;
            }
            CHECK(sum == static_cast<int64_t>(mine.rows.size()));
            CHECK(static_cast<int64_t>(mine.rows.size()) >= RowsPerRank(rows, world) - (drop_last ? batch : 0));
            for (int64_t r : mine.rows) CHECK(seen.insert(r).second);  // disjoint
            left_out = mine.left_out;
          }
          // Every row once, but for drop_last's tail and fewer rows than ranks.
          CHECK(static_cast<int64_t>(seen.size()) + left_out == rows);
          if (!drop_last && rows >= world) CHECK(left_out == 0);
          CHECK(RowsAfterSteps(rows, world, batch, drop_last, static_cast<int64_t>(steps)) ==
                rows - left_out);
        }
      }
    }
  }
  // Global step s hands rank r order[s*W*B + r*B, ... + B).
  const std::vector<int64_t> order = EpochOrder(12, 0, 0, false);
  CHECK(DealRank(order, 2, 0, 2).rows == std::vector<int64_t>{0, 1, 4, 5, 8, 9});
  CHECK(DealRank(order, 2, 1, 2).rows == std::vector<int64_t>{2, 3, 6, 7, 10, 11});
  CHECK(RowsAfterSteps(12, 2, 2, false, 2) == 8);
  // 10 rows, 2 ranks, batch 4: one full step (0-3, 4-7), then the last 2 split 1 and 1.
  const std::vector<int64_t> ten = EpochOrder(10, 0, 0, false);
  CHECK(DealRank(ten, 2, 0, 4).rows == std::vector<int64_t>{0, 1, 2, 3, 8});
  CHECK(DealRank(ten, 2, 1, 4).rows == std::vector<int64_t>{4, 5, 6, 7, 9});
  CHECK(DealRank(ten, 2, 1, 4).steps == std::vector<int64_t>{4, 1});
  // 9 rows: the last row (fewer than the ranks) joins the last full step on rank 0.
  const std::vector<int64_t> nine = EpochOrder(9, 0, 0, false);
  CHECK(DealRank(nine, 2, 0, 4).rows == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(DealRank(nine, 2, 1, 4).rows == std::vector<int64_t>{5, 6, 7, 8});
  CHECK(DealRank(nine, 2, 0, 4).steps == std::vector<int64_t>{5});
  CHECK(DealRank(nine, 2, 0, 4, /*drop_last=*/true).rows == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(DealRank(nine, 2, 0, 4, /*drop_last=*/true).left_out == 1);
}

namespace {

// A CSV of `rows` rows: id, id * 0.5, "row<id>".
std::string WriteCsv(const fs::path& dir, int rows) {
  fs::create_directories(dir);
  const std::string path = (dir / "rows.csv").string();
  std::ofstream out(path);
  out << "id,half,text\n";
  for (int i = 0; i < rows; ++i) out << i << "," << i * 0.5 << ",row" << i << "\n";
  return path;
}

struct TempDir {
  // One per test case: readers are cached by their spec, and a file rewritten in place under a
  // cached reader would be read stale.
  inline static int made = 0;
  fs::path path = fs::temp_directory_path() /
                  ("rayd-data-order-" + std::to_string(::getpid()) + "-" + std::to_string(made++));
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<int64_t> Ids(DatasetShard& shard, BatchOptions options, int64_t* batches = nullptr) {
  std::vector<int64_t> ids;
  auto pass = shard.IterBatches(options);
  int64_t n = 0;
  while (true) {
    Result<std::optional<Block>> next = pass->Next();
    REQUIRE(next.ok());
    if (!*next) break;
    ++n;
    const Column* id = (*next)->Find("id");
    REQUIRE(id != nullptr);
    for (int64_t r = 0; r < (*next)->num_rows(); ++r) ids.push_back(id->As<int64_t>()[r]);
  }
  if (batches) *batches = n;
  return ids;
}

}  // namespace

TEST_CASE("shards of a CSV cover an epoch once over 1 to 4 ranks", "[data][shard]") {
  TempDir dir;
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 103)}};
  // Small blocks, so that a pass makes many and the producer waits on the loop.
  spec.options["block_bytes"] = 256;
  spec.options["prefetch_blocks"] = 2;
  for (int world = 1; world <= 4; ++world) {
    std::multiset<int64_t> all;
    int64_t steps = -1;
    for (int rank = 0; rank < world; ++rank) {
      auto shard = DatasetShard::Open(spec, {.world_size = world, .rank = rank, .seed = 5});
      REQUIRE(shard.ok());
      CHECK((*shard)->num_rows() == 103);
      int64_t batches = 0;
      std::vector<int64_t> ids = Ids(**shard, {.batch_size = 8, .epoch = 3}, &batches);
      if (steps >= 0) CHECK(batches == steps);  // equal step counts
      steps = batches;
      // 103 / world rows, or one more: the last step is uneven.
      CHECK(static_cast<int64_t>(ids.size()) >= 103 / world);
      CHECK(static_cast<int64_t>(ids.size()) <= 103 / world + 1);
      all.insert(ids.begin(), ids.end());
    }
    CHECK(all.size() == 103);  // every row
    CHECK(std::set<int64_t>(all.begin(), all.end()).size() == all.size());  // each once
  }
}

TEST_CASE("a shard's epochs reshuffle, and an epoch is the same wherever it is read",
          "[data][shard]") {
  TempDir dir;
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 50)}};
  auto a = DatasetShard::Open(spec, {.seed = 1});
  auto b = DatasetShard::Open(spec, {.seed = 1});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<int64_t> e0 = Ids(**a, {.batch_size = 7});  // epoch 0
  const std::vector<int64_t> e1 = Ids(**a, {.batch_size = 7});  // epoch 1
  CHECK(e0 != e1);
  CHECK(Ids(**b, {.batch_size = 7, .epoch = 1}) == e1);
  spec.options["shuffle"] = false;
  auto plain = DatasetShard::Open(spec, {});
  REQUIRE(plain.ok());
  std::vector<int64_t> in_order = Ids(**plain, {.batch_size = 7});
  CHECK(std::is_sorted(in_order.begin(), in_order.end()));
}

TEST_CASE("transforms and limit shape the batches, and unknown ones are refused", "[data][shard]") {
  TempDir dir;
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 40)}};
  spec.options["shuffle"] = false;
  spec.options["transforms"] = nlohmann::json::parse(
      R"([{"map_batches": "to_float32", "columns": ["half"], "scale": 2.0},
          {"filter": "label_in", "column": "id", "values": [1, 3, 5, 30]},
          {"limit": 10}])");
  auto shard = DatasetShard::Open(spec, {});
  REQUIRE(shard.ok());
  CHECK((*shard)->num_rows() == 10);
  auto pass = (*shard)->IterBatches({.batch_size = 100});
  Result<std::optional<Block>> batch = pass->Next();
  REQUIRE(batch.ok());
  REQUIRE(*batch);
  REQUIRE((*batch)->num_rows() == 3);  // 1, 3, 5 (30 is past the limit)
  const Column* half = (*batch)->Find("half");
  REQUIRE(half != nullptr);
  CHECK(half->dtype() == DType::kFloat32);
  CHECK(half->As<float>()[2] == 5.0f);  // id 5: 2.5 * 2
  spec.options["transforms"] = nlohmann::json::parse(R"([{"map_batches": "nope"}])");
  auto refused = DatasetShard::Open(spec, {});
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(),
             Catch::Contains("transforms[0].map_batches: unknown transform 'nope'"));
}

TEST_CASE("a bad row ends the pass with the file and row, or is skipped and counted",
          "[data][shard]") {
  TempDir dir;
  const std::string path = WriteCsv(dir.path, 20);
  std::ofstream(path, std::ios::app) << "20,10,row20,extra\n";
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {path}};
  spec.options["shuffle"] = false;
  auto shard = DatasetShard::Open(spec, {});
  REQUIRE(shard.ok());
  auto pass = (*shard)->IterBatches({.batch_size = 8});
  Status failed;
  while (true) {
    Result<std::optional<Block>> next = pass->Next();
    if (!next.ok()) {
      failed = next.status();
      break;
    }
    if (!*next) break;
  }
  CHECK_THAT(failed.message(), Catch::Contains("rows.csv: row 21 (line 22)"));
  spec.options["on_error"] = "skip";
  auto skipping = DatasetShard::Open(spec, {});
  REQUIRE(skipping.ok());
  CHECK(Ids(**skipping, {.batch_size = 8}).size() == 20);
  CHECK((*skipping)->stats().skipped_rows == 1);
}

TEST_CASE("a producer ahead of a slow loop holds no more than its budget", "[data][shard]") {
  TempDir dir;
  // 2000 rows of about 30 bytes, in blocks of one 10-row batch (~300 bytes each), under a
  // budget of 1000 bytes: the producer may run at most 3 blocks ahead, whatever the loop does.
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 2000)}};
  spec.options["block_bytes"] = 1;
  spec.options["prefetch_blocks"] = 100;
  spec.options["budget_bytes"] = 1000;
  auto shard = DatasetShard::Open(spec, {});
  REQUIRE(shard.ok());
  auto pass = (*shard)->IterBatches({.batch_size = 10});
  int64_t rows = 0;
  while (true) {
    Result<std::optional<Block>> next = pass->Next();
    REQUIRE(next.ok());
    if (!*next) break;
    rows += (*next)->num_rows();
    // A slow loop: a little work per batch, so the producer is ahead and must wait.
    volatile double x = 0;
    for (int i = 0; i < 20000; ++i) x = x + i;
  }
  CHECK(rows == 2000);
  const ShardStats stats = (*shard)->stats();
  CHECK(stats.blocks == 200);
  CHECK(stats.peak_held_bytes > 0);
  CHECK(stats.peak_held_bytes <= 1000);
  // The byte budget, not the block count, bounded it.
  spec.options["budget_bytes"] = int64_t{1} << 30;
  spec.options["prefetch_blocks"] = 2;
  auto counted = DatasetShard::Open(spec, {});
  REQUIRE(counted.ok());
  auto second = (*counted)->IterBatches({.batch_size = 10});
  while (true) {
    Result<std::optional<Block>> next = second->Next();
    REQUIRE(next.ok());
    if (!*next) break;
  }
  const int64_t block_bytes = (*counted)->stats().peak_held_bytes;
  CHECK(block_bytes > 0);
  CHECK(block_bytes <= 2 * 10 * 40);  // at most 2 blocks of 10 rows
}

TEST_CASE("a local shuffle buffer mixes a sequential pass's rows, every row once, repeatably",
          "[data][shard]") {
  TempDir dir;
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 1000)}};
  spec.options["shuffle"] = false;  // read in order: the buffer does the mixing
  spec.options["block_bytes"] = 1;  // a block per batch
  auto shard = DatasetShard::Open(spec, {.world_size = 2, .rank = 1, .seed = 3});
  REQUIRE(shard.ok());
  int64_t batches = 0, plain_batches = 0;
  const std::vector<int64_t> in_order = Ids(**shard, {.batch_size = 32, .epoch = 0}, &plain_batches);
  const std::vector<int64_t> mixed =
      Ids(**shard, {.batch_size = 32, .epoch = 0, .local_shuffle_buffer_size = 200}, &batches);
  CHECK(batches == plain_batches);  // the same steps as every other rank
  CHECK(mixed != in_order);
  std::vector<int64_t> sorted = mixed;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected = in_order;
  std::sort(expected.begin(), expected.end());
  CHECK(sorted == expected);  // the same rows, each once
  // Rows travel at most about a buffer's length from where the sequential pass had them.
  int64_t far = 0;
  for (size_t i = 0; i < mixed.size(); ++i) {
    const auto at = std::find(in_order.begin(), in_order.end(), mixed[i]) - in_order.begin();
    far = std::max<int64_t>(far, at - static_cast<int64_t>(i));
  }
  CHECK(far <= 200 + 2 * 32);  // read ahead: the buffer and up to two batches
  // The same (seed, epoch, rank) draws the same batches; another epoch draws others.
  CHECK(Ids(**shard, {.batch_size = 32, .epoch = 0, .local_shuffle_buffer_size = 200}) == mixed);
  CHECK(Ids(**shard, {.batch_size = 32, .epoch = 1, .local_shuffle_buffer_size = 200}) != mixed);
}

// `world` ranks' passes of `epoch`, each from `from` (a checkpoint's position, or none), taking
// `steps` steps each (-1: to the end) in lockstep; every rank's ids appended to `ids`. Returns
// rank 0's position after them, checking that every rank reports the same and took as many
// steps (`from` itself when it says the epoch was done).
static ShardPosition TakeSteps(const DatasetSpec& spec, int world,
                               const std::optional<ShardPosition>& from, BatchOptions options,
                               int64_t steps, std::vector<int64_t>* ids) {
  std::optional<ShardPosition> position;
  std::optional<int64_t> taken;
  for (int rank = 0; rank < world; ++rank) {
    auto shard = DatasetShard::Open(spec, {.world_size = world, .rank = rank, .seed = 9});
    REQUIRE(shard.ok());
    if (from) {
      (*shard)->ResumeAt(*from);
      if ((*shard)->next_epoch() != options.epoch) return *from;  // that epoch was done
    }
    auto pass = (*shard)->IterBatches(options);
    int64_t s = 0;
    for (; steps < 0 || s < steps; ++s) {
      auto batch = pass->Next();
      REQUIRE(batch.ok());
      if (!*batch) break;
      const Column* id = (**batch).Find("id");
      for (int64_t r = 0; r < (**batch).num_rows(); ++r) ids->push_back(id->As<int64_t>()[r]);
    }
    if (!taken) taken = s;
    CHECK(s == *taken);  // DDP needs every rank to make the same number of steps
    if (!position) position = (*shard)->position();
    CHECK((*shard)->position() == *position);
  }
  return *position;
}

TEST_CASE("a pass resumed at a checkpoint's position deals the rest of the epoch, at any world "
          "size, every row once",
          "[data][shard][resume]") {
  TempDir dir;
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 103)}};
  spec.options["block_bytes"] = 1;
  for (int before : {1, 2, 3}) {
    for (int after : {1, 2, 4}) {
      for (int64_t steps_done : {0, 1, 3}) {
        // `before` ranks take `steps_done` steps of epoch 1 and checkpoint (every rank is at the
        // same position: they take the same steps).
        std::vector<int64_t> consumed;
        ShardPosition position;
        for (int rank = 0; rank < before; ++rank) {
          auto shard = DatasetShard::Open(spec, {.world_size = before, .rank = rank, .seed = 9});
          REQUIRE(shard.ok());
          auto pass = (*shard)->IterBatches({.batch_size = 5, .epoch = 1});
          for (int64_t s = 0; s < steps_done; ++s) {
            auto batch = pass->Next();
            REQUIRE(batch.ok());
            REQUIRE(*batch);
            const Column* id = (**batch).Find("id");
            for (int64_t r = 0; r < (**batch).num_rows(); ++r) consumed.push_back(id->As<int64_t>()[r]);
          }
          if (rank == 0) position = (*shard)->position();
          CHECK((*shard)->position() == position);
        }
        CHECK(position.epoch == 1);
        CHECK(position.cursor == steps_done * 5 * before);
        // `after` ranks resume there: the rest of epoch 1 once, then epoch 2 whole.
        std::vector<int64_t> rest;
        for (int rank = 0; rank < after; ++rank) {
          auto shard = DatasetShard::Open(spec, {.world_size = after, .rank = rank, .seed = 9});
          REQUIRE(shard.ok());
          (*shard)->ResumeAt(position);
          const std::vector<int64_t> ids = Ids(**shard, {.batch_size = 5});  // the next pass: epoch 1
          rest.insert(rest.end(), ids.begin(), ids.end());
          CHECK((*shard)->position() == ShardPosition{1, 103});
          CHECK((*shard)->next_epoch() == 2);
        }
        std::vector<int64_t> all = consumed;
        all.insert(all.end(), rest.begin(), rest.end());
        std::sort(all.begin(), all.end());
        std::vector<int64_t> every(103);
        std::iota(every.begin(), every.end(), 0);
        INFO("before " << before << " after " << after << " steps " << steps_done);
        CHECK(all == every);  // 0 repeated, 0 missing
      }
    }
  }
  // A position at the epoch's end resumes with the next epoch.
  auto shard = DatasetShard::Open(spec, {.seed = 9});
  REQUIRE(shard.ok());
  (*shard)->ResumeAt({.epoch = 4, .cursor = 103});
  CHECK((*shard)->next_epoch() == 5);
}

TEST_CASE(
    "a pass with a local shuffle buffer resumes at a checkpoint's position, at any world "
    "size, every row once, the buffers' rows included",
    "[data][shard][resume]") {
  TempDir dir;
  DatasetSpec spec{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path, 103)}};
  spec.options["shuffle"] = false;  // read in order: the buffer does the mixing
  spec.options["block_bytes"] = 1;
  const BatchOptions buffered{.batch_size = 5, .epoch = 1, .local_shuffle_buffer_size = 12};
  std::vector<int64_t> every(103);
  std::iota(every.begin(), every.end(), 0);
  for (int before : {1, 2, 3}) {
    for (int after : {1, 2, 4}) {
      for (int64_t steps_done : {0, 1, 3, 6}) {
        INFO("before " << before << " after " << after << " steps " << steps_done);
        std::vector<int64_t> all;
        const ShardPosition first =
            TakeSteps(spec, before, std::nullopt, buffered, steps_done, &all);
        CHECK(first.epoch == 1);
        // The buffers read ahead of the draws: rows dealt and not drawn yet are pending.
        CHECK(static_cast<int64_t>(first.pending.size()) ==
              first.cursor - static_cast<int64_t>(all.size()));
        if (steps_done > 0) CHECK(!first.pending.empty());
        // `after` ranks resume there and checkpoint again two steps on (their buffers now hold
        // some of the pending rows and some of the order's); two ranks finish the epoch.
        const ShardPosition second = TakeSteps(spec, after, first, buffered, 2, &all);
        const ShardPosition end = TakeSteps(spec, 2, second, buffered, -1, &all);
        CHECK(end == ShardPosition{1, 103, {}});
        std::sort(all.begin(), all.end());
        CHECK(all == every);  // 0 repeated, 0 missing
      }
    }
  }
  // Ranks whose shares differ by a row still make the same number of steps (9 rows, 2 ranks of
  // batch 4: the last step is 5 rows and 4).
  std::vector<int64_t> ids;
  DatasetSpec nine{.name = "rows", .format = "csv", .paths = {WriteCsv(dir.path / "nine", 9)}};
  nine.options["shuffle"] = false;
  TakeSteps(nine, 2, std::nullopt, {.batch_size = 4, .epoch = 0, .local_shuffle_buffer_size = 3},
            -1, &ids);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
}
