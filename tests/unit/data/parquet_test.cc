// format: parquet against files a JavaScript writer made (parquet_js/write_fixtures.mjs,
// hyparquet-writer, installed by `npm ci` in parquet_js/), and fixed-size lists written by
// Arrow's own C++ writer (the only writer here that stores them). Its own binary,
// data_parquet_test, built only when the parquet format is (tests/unit/data/CMakeLists.txt);
// otherwise CTest reports data_parquet_skipped as skipped.

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/writer.h>
#include <rayd/data/reader.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include "test_util.h"

namespace rayd::data::parquet_test {

// The fixtures, written once per test process into a temp dir, removed when it exits (forked
// children leave by _exit).
const std::string& Dir() {
  static std::unique_ptr<rayd::testing::TempDir> dir = [] {
    const std::string js = RAYD_DATA_TEST_DIR "/parquet_js";
    INFO("the JavaScript writer is not installed: run `npm ci` in " << js);
    REQUIRE(std::filesystem::exists(js + "/node_modules/hyparquet-writer/package.json"));
    auto d = std::make_unique<rayd::testing::TempDir>();
    std::string output;
    const int rc = rayd::testing::RunCommand(
        {"/usr/bin/env", "node", js + "/write_fixtures.mjs", d->path()}, &output);
    INFO("node write_fixtures.mjs:\n" << output);
    REQUIRE(rc == 0);
    return d;
  }();
  return dir->path();
}

std::string Path(const std::string& name) { return Dir() + "/" + name; }

Result<std::unique_ptr<Reader>> Open(std::vector<std::string> paths,
                                     nlohmann::json options = nlohmann::json::object()) {
  DatasetSpec spec;
  spec.name = "pq";
  spec.format = "parquet";
  spec.paths = std::move(paths);
  spec.options = std::move(options);
  return OpenReader(spec);
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> rows(static_cast<size_t>(end - begin));
  std::iota(rows.begin(), rows.end(), begin);
  return rows;
}

template <typename T>
T At(const Block& block, const std::string& column, int64_t row, int64_t element = 0) {
  const Column* c = block.Find(column);
  REQUIRE(c != nullptr);
  REQUIRE(ItemSize(c->dtype()) == sizeof(T));
  return c->As<T>()[row * c->RowElements() + element];
}

std::string Bytes(const Block& block, const std::string& column, int64_t row) {
  const Column* c = block.Find(column);
  REQUIRE(c != nullptr);
  REQUIRE(c->is_bytes());
  return std::string(c->BytesAt(row));
}

// Checks row `pos` of `block` against what write_fixtures.mjs wrote for table row `i`; returns
// the first column that differs ("" when none does).
std::string TableRowDiffers(const Block& block, int64_t pos, int64_t i) {
  if (At<int64_t>(block, "id", pos) != i) return "id";
  if (At<int8_t>(block, "i8", pos) != (i % 256) - 128) return "i8";
  if (At<int16_t>(block, "i16", pos) != (i * 37) % 65536 - 32768) return "i16";
  if (At<int32_t>(block, "i32", pos) != i * 7919 - 5000000) return "i32";
  if (At<uint8_t>(block, "u8", pos) != (i * 7) % 256) return "u8";
  if (At<uint16_t>(block, "u16", pos) != (i * 131) % 65536) return "u16";
  if (At<uint32_t>(block, "u32", pos) != 4000000000u - i * 3) return "u32";
  if (At<float>(block, "f32", pos) != static_cast<float>(i) * 0.25f - 100) return "f32";
  if (At<double>(block, "f64", pos) != static_cast<double>(i) / 7) return "f64";
  if (At<uint8_t>(block, "flag", pos) != (i % 3 == 0 ? 1 : 0)) return "flag";
  const std::string name =
      i % 10 == 0 ? "" : "row-" + std::to_string(i) + (i % 7 == 0 ? "-\xc3\xa9" : "");
  if (Bytes(block, "name", pos) != name) return "name";
  std::string blob;
  for (int64_t k = 0; k < i % 5; ++k) blob += static_cast<char>((i + k) % 256);
  if (Bytes(block, "blob", pos) != blob) return "blob";
  const float vec[3] = {static_cast<float>(i), static_cast<float>(i) + 0.5f,
                        -static_cast<float>(i)};
  for (int64_t e = 0; e < 3; ++e) {
    if (At<float>(block, "vec", pos, e) != vec[e]) return "vec";
  }
  return "";
}

const nlohmann::json kVecShape = {{"shapes", {{"vec", {3}}}}};

TEST_CASE("parquet: the format is registered", "[parquet]") {
  const std::vector<std::string> formats = RegisteredFormats();
  CHECK(std::find(formats.begin(), formats.end(), "parquet") != formats.end());
}

TEST_CASE("parquet: a JavaScript writer's files, every type, as row shards", "[parquet]") {
  auto reader = Open({Dir() + "/table-*.parquet"}, kVecShape);
  REQUIRE(reader.ok());
  CHECK(DescribeSchema((*reader)->schema()) ==
        "id: int64, i8: int8, i16: int16, i32: int32, u8: uint8, u16: uint16, u32: uint32, "
        "f32: float32, f64: float64, flag: uint8, name: bytes, blob: bytes, vec: float32[3]");
  REQUIRE((*reader)->num_rows() == 1250);
  const std::vector<int64_t> all = Range(0, 1250);
  auto block = (*reader)->Read(all);
  REQUIRE(block.ok());
  REQUIRE(block->num_rows() == 1250);
  for (int64_t i = 0; i < 1250; ++i) {
    INFO("row " << i);
    REQUIRE(TableRowDiffers(*block, i, i) == "");
  }
}

TEST_CASE("parquet: rows in any order, across row groups and files", "[parquet]") {
  auto reader = Open({Dir() + "/table-*.parquet"}, kVecShape);
  REQUIRE(reader.ok());
  std::vector<int64_t> shuffled = Range(0, 1250);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(5));
  const std::vector<std::vector<int64_t>> cases = {
      std::vector<int64_t>(shuffled.begin(), shuffled.begin() + 300),
      {1249, 0, 127, 128, 999, 1000, 1049, 1050, 5, 5, 1249},  // group and file edges, repeats
      Range(120, 140),
      Range(990, 1010),
      {},
  };
  // Twice over, so the second pass starts with a cached row group.
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::vector<int64_t>& rows : cases) {
      auto block = (*reader)->Read(rows);
      REQUIRE(block.ok());
      REQUIRE(block->num_rows() == static_cast<int64_t>(rows.size()));
      for (size_t pos = 0; pos < rows.size(); ++pos) {
        INFO("row " << rows[pos]);
        REQUIRE(TableRowDiffers(*block, static_cast<int64_t>(pos), rows[pos]) == "");
      }
    }
  }
  const std::vector<int64_t> outside = {3, 1250};
  auto bad = (*reader)->Read(outside);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("1250"));
}

TEST_CASE("parquet: `columns` picks and orders the columns read", "[parquet]") {
  auto reader = Open({Path("table-0.parquet")}, {{"columns", {"name", "id"}}});
  REQUIRE(reader.ok());
  CHECK(DescribeSchema((*reader)->schema()) == "name: bytes, id: int64");
  const std::vector<int64_t> rows = {7, 3};
  auto block = (*reader)->Read(rows);
  REQUIRE(block.ok());
  CHECK(Bytes(*block, "name", 0) == "row-7-\xc3\xa9");
  CHECK(At<int64_t>(*block, "id", 1) == 3);
  auto missing = Open({Path("table-0.parquet")}, {{"columns", {"id", "nope"}}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("'nope'") &&
                                             Catch::Contains("table-0.parquet") &&
                                             Catch::Contains("id, i8"));
}

TEST_CASE("parquet: lists need a shape, and every row must fill it", "[parquet]") {
  auto no_shape = Open({Path("table-0.parquet")});
  REQUIRE_FALSE(no_shape.ok());
  CHECK_THAT(no_shape.status().message(), Catch::Contains("'vec'") &&
                                              Catch::Contains("table-0.parquet") &&
                                              Catch::Contains("shapes"));
  auto wrong_size = Open({Path("table-0.parquet")}, {{"shapes", {{"vec", {2, 2}}}}});
  REQUIRE(wrong_size.ok());  // a list's length is only known row by row
  const std::vector<int64_t> first = {0};
  auto read = (*wrong_size)->Read(first);
  REQUIRE_FALSE(read.ok());
  CHECK_THAT(read.status().message(),
             Catch::Contains("'vec'") && Catch::Contains("3 values") && Catch::Contains("holds 4"));
  auto ragged = Open({Path("ragged.parquet")}, kVecShape);
  REQUIRE(ragged.ok());
  const std::vector<int64_t> rows = Range(0, 8);
  auto block = (*ragged)->Read(rows);
  REQUIRE_FALSE(block.ok());
  CHECK_THAT(block.status().message(), Catch::Contains("ragged.parquet") &&
                                           Catch::Contains("row 4 (row group 1)") &&
                                           Catch::Contains("2 values"));
  auto skipping =
      Open({Path("ragged.parquet")}, {{"shapes", {{"vec", {3}}}}, {"on_error", "skip"}});
  REQUIRE(skipping.ok());
  auto kept = (*skipping)->Read(rows);
  REQUIRE(kept.ok());
  CHECK(kept->num_rows() == 7);
  CHECK((*skipping)->skipped_rows() == 1);
  CHECK(At<float>(*kept, "vec", 4, 2) == 5);  // row 5 moved up
}

TEST_CASE("parquet: nulls are errors naming file, row and column, or skipped", "[parquet]") {
  auto reader = Open({Path("nulls.parquet")});
  REQUIRE(reader.ok());
  const std::vector<int64_t> fine = {0, 1, 2, 3, 4, 6};
  REQUIRE((*reader)->Read(fine).ok());
  const std::vector<int64_t> rows = Range(0, 20);
  auto block = (*reader)->Read(rows);
  REQUIRE_FALSE(block.ok());
  CHECK_THAT(block.status().message(), Catch::Contains("nulls.parquet") &&
                                           Catch::Contains("row 5") && Catch::Contains("'score'") &&
                                           Catch::Contains("null"));
  auto skipping = Open({Path("nulls.parquet")}, {{"on_error", "skip"}});
  REQUIRE(skipping.ok());
  auto kept = (*skipping)->Read(rows);
  REQUIRE(kept.ok());
  CHECK(kept->num_rows() == 17);
  CHECK((*skipping)->skipped_rows() == 3);
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < kept->num_rows(); ++r) ids.push_back(At<int64_t>(*kept, "id", r));
  CHECK(std::find(ids.begin(), ids.end(), 5) == ids.end());
  CHECK(std::find(ids.begin(), ids.end(), 11) == ids.end());
  CHECK(std::find(ids.begin(), ids.end(), 17) == ids.end());
  CHECK(At<double>(*kept, "score", 5) == 6 * 1.5);  // row 6, after 5 was left out
  CHECK(Bytes(*kept, "name", 5) == "n6");
}

TEST_CASE("parquet: types rayd Data does not hold are refused, naming the column", "[parquet]") {
  auto all = Open({Path("types.parquet")});
  REQUIRE_FALSE(all.ok());
  CHECK_THAT(all.status().message(), Catch::Contains("types.parquet") && Catch::Contains("'ts'") &&
                                         Catch::Contains("timestamp"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"big", "uint64"},
      {"tags", "not numbers"},
  };
  for (const auto& [column, why] : cases) {
    auto reader = Open({Path("types.parquet")}, {{"columns", {"id", column}}});
    REQUIRE_FALSE(reader.ok());
    CHECK_THAT(reader.status().message(),
               Catch::Contains("'" + column + "'") && Catch::Contains(why));
  }
  auto ok = Open({Path("types.parquet")}, {{"columns", {"id"}}});
  REQUIRE(ok.ok());
  CHECK((*ok)->num_rows() == 4);
}

TEST_CASE("parquet: shards that disagree are refused, naming both files", "[parquet]") {
  auto columns = Open({Path("table-0.parquet"), Path("other.parquet")}, kVecShape);
  REQUIRE_FALSE(columns.ok());
  CHECK_THAT(columns.status().message(), Catch::Contains("table-0.parquet") &&
                                             Catch::Contains("other.parquet") &&
                                             Catch::Contains("columns"));
  auto types = Open({Path("table-0.parquet"), Path("other.parquet")}, {{"columns", {"id", "i8"}}});
  REQUIRE_FALSE(types.ok());
  CHECK_THAT(types.status().message(), Catch::Contains("table-0.parquet") &&
                                           Catch::Contains("other.parquet") &&
                                           Catch::Contains("int32") && Catch::Contains("int8"));
  std::ofstream(Path("junk.parquet")) << "not parquet\n";
  auto junk = Open({Path("junk.parquet")});
  REQUIRE_FALSE(junk.ok());
  CHECK_THAT(junk.status().message(), Catch::Contains("junk.parquet"));
}

// Arrow's own writer: fixed-size lists (stored with Arrow's schema, as pyarrow does), 35 rows
// in row groups of 10.
void WriteFixedSizeLists(const std::string& path, bool store_schema) {
  arrow::Int64Builder ids;
  arrow::FloatBuilder emb;
  arrow::Int16Builder grid;
  for (int64_t i = 0; i < 35; ++i) {
    REQUIRE(ids.Append(i).ok());
    for (int e = 0; e < 4; ++e) REQUIRE(emb.Append(static_cast<float>(i * 10 + e)).ok());
    for (int e = 0; e < 6; ++e) REQUIRE(grid.Append(static_cast<int16_t>(-i * 100 - e)).ok());
  }
  std::shared_ptr<arrow::Array> id_array = *ids.Finish();
  std::shared_ptr<arrow::Array> emb_values = *emb.Finish();
  std::shared_ptr<arrow::Array> grid_values = *grid.Finish();
  std::shared_ptr<arrow::Array> emb_array = *arrow::FixedSizeListArray::FromArrays(emb_values, 4);
  std::shared_ptr<arrow::Array> grid_rows = *arrow::FixedSizeListArray::FromArrays(grid_values, 2);
  std::shared_ptr<arrow::Array> grid_array = *arrow::FixedSizeListArray::FromArrays(grid_rows, 3);
  auto schema = arrow::schema({arrow::field("id", arrow::int64(), false),
                               arrow::field("emb", emb_array->type()),
                               arrow::field("grid", grid_array->type())});
  auto table = arrow::Table::Make(schema, {id_array, emb_array, grid_array});
  auto file = arrow::io::FileOutputStream::Open(path);
  REQUIRE(file.ok());
  parquet::ArrowWriterProperties::Builder arrow_properties;
  if (store_schema) arrow_properties.store_schema();
  REQUIRE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *file, 10,
                                     parquet::default_writer_properties(), arrow_properties.build())
              .ok());
  REQUIRE((*file)->Close().ok());
}

TEST_CASE("parquet: fixed-size lists are fixed shapes (Arrow's writer)", "[parquet]") {
  const std::string path = Path("fixed.parquet");
  WriteFixedSizeLists(path, /*store_schema=*/true);
  auto reader = Open({path});
  REQUIRE(reader.ok());
  CHECK(DescribeSchema((*reader)->schema()) == "id: int64, emb: float32[4], grid: int16[3, 2]");
  const std::vector<int64_t> rows = {34, 0, 9, 10, 21};
  auto block = (*reader)->Read(rows);
  REQUIRE(block.ok());
  for (size_t pos = 0; pos < rows.size(); ++pos) {
    const int64_t i = rows[pos];
    CHECK(At<int64_t>(*block, "id", static_cast<int64_t>(pos)) == i);
    for (int e = 0; e < 4; ++e) {
      CHECK(At<float>(*block, "emb", static_cast<int64_t>(pos), e) == i * 10 + e);
    }
    for (int e = 0; e < 6; ++e) {
      CHECK(At<int16_t>(*block, "grid", static_cast<int64_t>(pos), e) == -i * 100 - e);
    }
  }
  // `shapes` reshapes a fixed-size list of the same size, and refuses another size.
  auto reshaped = Open({path}, {{"shapes", {{"emb", {2, 2}}}}});
  REQUIRE(reshaped.ok());
  CHECK((*reshaped)->schema()[1].shape == std::vector<int64_t>{2, 2});
  auto resized = Open({path}, {{"shapes", {{"emb", {5}}}}});
  REQUIRE_FALSE(resized.ok());
  CHECK_THAT(resized.status().message(), Catch::Contains("shapes.emb"));

  // Without Arrow's schema in the file they read back as lists: a shape makes them readable.
  const std::string plain = Path("plain.parquet");
  WriteFixedSizeLists(plain, /*store_schema=*/false);
  auto lists = Open({plain}, {{"columns", {"emb"}}});
  REQUIRE_FALSE(lists.ok());
  auto shaped = Open({plain}, {{"columns", {"emb"}}, {"shapes", {{"emb", {4}}}}});
  REQUIRE(shaped.ok());
  auto again = (*shaped)->Read(rows);
  REQUIRE(again.ok());
  CHECK(At<float>(*again, "emb", 0, 3) == 343);
}

}  // namespace rayd::data::parquet_test
