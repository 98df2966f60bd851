// `{cache: node}` without a cluster: where it may stand in a `transforms:` list, what its
// fingerprint covers, and the error without rayd::Init. Sharing it across trials is
// tests/integration/trainer_torchless_test.cc.

#include <rayd/data/shard.h>
#include <rayd/data/transforms.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "node_cache.h"
#include "test_util.h"

namespace {

using namespace rayd::data;
using nlohmann::json;
bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("cache: node stands after plain maps only, once", "[data][cache]") {
  auto parse = [](const json& transforms) { return ParseTransforms(transforms); };
  auto steps = parse(json::parse(R"([{"map_batches": "to_float32", "columns": ["x"]},
                                     {"cache": "node"},
                                     {"filter": "label_in", "column": "y", "values": [1]}])"));
  REQUIRE(steps.ok());
  REQUIRE(steps->size() == 3);
  CHECK(CacheStep(*steps) == 1u);
  CHECK(PlanStages(*steps).size() == 1);  // no placement: one stage, the cache inside it
  CHECK_FALSE(CacheStep(*parse(json::parse(R"([{"map_batches": "to_float32", "columns": ["x"]}])"))));

  auto error = [&](const char* transforms) {
    auto parsed = parse(json::parse(transforms));
    REQUIRE_FALSE(parsed.ok());
    return parsed.status().message();
  };
  CHECK(Contains(error(R"([{"cache": "disk"}])"), "transforms[0].cache: expected {cache: node}"));
  CHECK(Contains(error(R"([{"filter": "label_in", "column": "y", "values": [1]}, {"cache": "node"}])"),
                 "transforms[1].cache: transforms[0] (label_in) comes before it"));
  CHECK(Contains(error(R"([{"map_batches": "to_float32", "columns": ["x"], "resources": {"CPU": 1}},
                           {"cache": "node"}])"),
                 "only plain map_batches steps"));
  CHECK(Contains(error(R"([{"cache": "node"}, {"cache": "node"}])"),
                 "transforms[1].cache: a second cache step (the first is transforms[0])"));
  CHECK(Contains(error(R"([{"cache": "node", "bytes": 1}])"), "expected {cache: node}"));
}

TEST_CASE("a cache's fingerprint is the files, the format, the reader's options and the steps "
          "before it",
          "[data][cache]") {
  rayd::testing::TempDir dir;
  const std::string csv = dir.path() + "/a.csv";
  std::ofstream(csv) << "x\n1\n2\n";
  DatasetSpec spec{.name = "a",
                   .format = "csv",
                   .paths = {csv},
                   .options = {{"seed", 1},
                               {"transforms", json::parse(R"([{"map_batches": "to_float32",
                                  "columns": ["x"]}, {"cache": "node"}, {"limit": 1}])")}}};
  const std::string base = *internal::CacheFingerprint(spec);
  auto with = [&](auto change) {
    DatasetSpec other = spec;
    change(other);
    return *internal::CacheFingerprint(other);
  };
  // Not what rows are, only how they are taken: the same cache.
  CHECK(with([](DatasetSpec& s) { s.options["seed"] = 2; }) == base);
  CHECK(with([](DatasetSpec& s) { s.options["shuffle"] = false; }) == base);
  CHECK(with([](DatasetSpec& s) { s.options["execution"] = "tasks"; }) == base);
  CHECK(with([](DatasetSpec& s) { s.name = "b"; }) == base);
  CHECK(with([](DatasetSpec& s) {
          s.options["transforms"].push_back({{"filter", "label_in"}, {"column", "x"}, {"values", {1}}});
        }) == base);  // after the cache
  // What rows are: another cache.
  CHECK(with([](DatasetSpec& s) { s.options["transforms"][0]["scale"] = 2; }) != base);
  CHECK(with([](DatasetSpec& s) { s.options["delimiter"] = ";"; }) != base);
  CHECK(with([](DatasetSpec& s) { s.format = "jsonl"; }) != base);
  std::ofstream(csv, std::ios::app) << "3\n";  // the file changed
  CHECK(*internal::CacheFingerprint(spec) != base);
  spec.paths = {dir.path() + "/missing-*.csv"};
  CHECK_FALSE(internal::CacheFingerprint(spec).ok());
}

TEST_CASE("cache: node outside a cluster, with bad cache options or on_error: skip is refused, "
          "naming why",
          "[data][cache]") {
  rayd::testing::TempDir dir;
  const std::string csv = dir.path() + "/a.csv";
  std::ofstream(csv) << "x\n1\n2\n";
  DatasetSpec spec{.name = "a", .format = "csv", .paths = {csv},
                   .options = {{"transforms", json::parse(R"([{"cache": "node"}])")}}};
  auto refusal = [&] {
    auto opened = DatasetShard::Open(spec, {});
    REQUIRE_FALSE(opened.ok());
    return opened.status().message();
  };
  CHECK(Contains(refusal(), "datasets.a: cache: node: the node's cache is a rayd actor: it needs "
                            "rayd::Init"));
  spec.options["cache_bytes"] = "lots";
  CHECK(Contains(refusal(), "datasets.a.cache_bytes: expected a byte count"));
  spec.options.erase("cache_bytes");
  spec.options["cache_idle_s"] = 0;
  CHECK(Contains(refusal(), "datasets.a.cache_idle_s: expected seconds"));
  spec.options.erase("cache_idle_s");
  spec.options["on_error"] = "skip";
  CHECK(Contains(refusal(), "datasets.a.on_error: expected no skip with {cache: node}"));
}

}  // namespace
