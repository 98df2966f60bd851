// Transform steps with a placement of their own: how a `transforms:` list is cut into stages,
// what a step's `resources`, `label_selector` and `concurrency` may be, and stateful maps
// (RAYD_DATA_MAP_CLASS) applied through their instance. Running the stages on a cluster is
// tests/integration/data_cluster_test.cc.

#include <rayd/data/shard.h>
#include <rayd/data/transforms.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace {

using namespace rayd::data;
using nlohmann::json;

// Adds `offset` to an int64 column `x`; counts the batches this instance saw.
class AddOffset : public BatchMapper {
 public:
  explicit AddOffset(const json& args) : offset_(args.at("offset").get<int64_t>()) {
    if (offset_ < 0) throw std::invalid_argument("offset must be 0 or more");
  }
  rayd::Result<Block> operator()(const Block& batch) override {
    ++calls_;
    const Column* x = batch.Find("x");
    if (x == nullptr) return rayd::Status::NotFound("no column x");
    BlockBuilder out(batch.num_rows());
    auto* to = reinterpret_cast<int64_t*>(out.AddFixed({"x", DType::kInt64, {}}));
    for (int64_t r = 0; r < batch.num_rows(); ++r) to[r] = x->As<int64_t>()[r] + offset_;
    return std::move(out).Finish();
  }
  int calls() const { return calls_; }

 private:
  int64_t offset_;
  int calls_ = 0;
};
RAYD_DATA_MAP_CLASS(AddOffset);

Block Numbers(int64_t n) {
  BlockBuilder b(n);
  auto* x = reinterpret_cast<int64_t*>(b.AddFixed({"x", DType::kInt64, {}}));
  for (int64_t i = 0; i < n; ++i) x[i] = i;
  return std::move(b).Finish();
}

}  // namespace

TEST_CASE("steps with a placement start stages, the read's stage first", "[data][stages]") {
  auto steps = ParseTransforms(json::parse(R"([
      {"map_batches": "to_float32", "columns": ["x"]},
      {"limit": 100},
      {"map_batches": "AddOffset", "offset": 3, "concurrency": 2, "resources": {"CPU": 1},
       "label_selector": {"kind": "cpu"}},
      {"map_batches": "select_columns", "columns": ["x"]},
      {"filter": "label_in", "column": "x", "values": [1], "resources": {"CPU": 0.5}}])"));
  REQUIRE(steps.ok());
  REQUIRE(steps->size() == 4);
  CHECK((*steps)[1].kind == TransformStep::Kind::kStatefulMap);
  CHECK((*steps)[1].index == 2);
  CHECK((*steps)[1].args == json{{"offset", 3}});  // placement keys are not arguments
  const std::vector<TransformStage> stages = PlanStages(*steps);
  REQUIRE(stages.size() == 3);
  CHECK(stages[0].begin == 0);
  CHECK(stages[0].end == 1);
  CHECK(stages[1].begin == 1);
  CHECK(stages[1].end == 3);  // the plain select_columns runs on the pool's actors too
  CHECK(stages[1].actors);
  CHECK(stages[1].placement.concurrency == 2);
  CHECK(stages[1].placement.resources == std::map<std::string, double>{{"CPU", 1}});
  CHECK(stages[1].placement.label_selector == std::map<std::string, std::string>{{"kind", "cpu"}});
  CHECK(stages[1].where == "transforms[2] (map_batches AddOffset)");
  CHECK_FALSE(stages[2].actors);  // a filter with resources of its own: a task
  CHECK(stages[2].placement.resources.at("CPU") == 0.5);
  // Without placements everything runs with the read.
  auto plain = ParseTransforms(json::parse(R"([{"map_batches": "select_columns", "columns": ["x"]}])"));
  REQUIRE(plain.ok());
  REQUIRE(PlanStages(*plain).size() == 1);
  CHECK(PlanStages(*plain)[0].end == 1);
}

TEST_CASE("a step's placement keys are checked, naming the step", "[data][stages]") {
  auto refused = [](const char* transforms) {
    auto steps = ParseTransforms(json::parse(transforms));
    REQUIRE_FALSE(steps.ok());
    return steps.status().message();
  };
  CHECK_THAT(refused(R"([{"map_batches": "select_columns", "columns": ["x"], "concurrency": 2}])"),
             Catch::Contains("transforms[0].concurrency: only a stateful map"));
  CHECK_THAT(refused(R"([{"map_batches": "AddOffset", "offset": 1, "concurrency": 0}])"),
             Catch::Contains("transforms[0].concurrency: expected a number of actors"));
  CHECK_THAT(refused(R"([{"limit": 3}, {"map_batches": "AddOffset", "resources": {"CPU": "x"}}])"),
             Catch::Contains("transforms[1].resources.CPU: expected an amount"));
  CHECK_THAT(refused(R"([{"map_batches": "AddOffset", "label_selector": {"kind": 1}}])"),
             Catch::Contains("transforms[0].label_selector.kind: expected a string"));
  CHECK_THAT(refused(R"([{"map_batches": "Nope"}])"),
             Catch::Contains("AddOffset") && Catch::Contains("RAYD_DATA_MAP_CLASS"));
}

TEST_CASE("a stateful map applies through its instance, which keeps its state", "[data][stages]") {
  auto steps = ParseTransforms(json::parse(
      R"([{"map_batches": "AddOffset", "offset": 10}, {"filter": "label_in", "column": "x",
           "values": [10, 12]}])"));
  REQUIRE(steps.ok());
  auto mapper = MakeBatchMapper(steps->front());
  REQUIRE(mapper.ok());
  for (int i = 0; i < 3; ++i) {
    auto out = ApplyTransforms(*steps, Numbers(4), mapper->get());
    REQUIRE(out.ok());
    REQUIRE(out->num_rows() == 2);
    CHECK(out->Find("x")->As<int64_t>()[1] == 12);
  }
  CHECK(dynamic_cast<AddOffset&>(**mapper).calls() == 3);
  // Without its instance (anywhere but its pool) it is refused, not run statelessly.
  auto alone = ApplyTransforms(*steps, Numbers(4));
  REQUIRE_FALSE(alone.ok());
  CHECK_THAT(alone.status().message(), Catch::Contains("runs only on its actor pool"));
  // A constructor that throws: its message, naming the map.
  TransformStep bad = steps->front();
  bad.args["offset"] = -1;
  auto failed = MakeBatchMapper(bad);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().message() == "map_batches AddOffset: offset must be 0 or more");
}

TEST_CASE("a shard whose transforms need actors says so without a cluster", "[data][stages]") {
  const std::string dir = std::filesystem::temp_directory_path() / "rayd-stages-test";
  std::filesystem::create_directories(dir);
  {
    std::FILE* f = std::fopen((dir + "/x.csv").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("x\n1\n2\n", f);
    std::fclose(f);
  }
  DatasetSpec spec{.name = "numbers", .format = "csv", .paths = {dir + "/x.csv"}};
  spec.options["transforms"] = json::parse(R"([{"map_batches": "AddOffset", "offset": 1}])");
  auto shard = DatasetShard::Open(spec, {});
  REQUIRE_FALSE(shard.ok());
  CHECK_THAT(shard.status().message(),
             Catch::Contains("datasets.numbers.transforms[0] (map_batches AddOffset) runs as rayd "
                             "tasks or actors: it needs rayd::Init"));
  std::filesystem::remove_all(dir);
}
