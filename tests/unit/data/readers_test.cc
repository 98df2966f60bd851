// Every reader against files written by the reference tools: write_fixtures.py (NumPy, gzip,
// Python's csv and json, run with Debian's /usr/bin/python3) writes them into a fresh temporary
// directory once per run, with expect.json holding what Python reads back from them. Also the
// real Fashion-MNIST when /usr/share/datasets/fashion-mnist is there, the format registry,
// globs and the datasets: section's parsing.

#include <rayd/data/reader.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "column_values.h"
#include "test_util.h"

namespace rayd::data {
namespace {

using rayd::testing::RequireColumn;
using rayd::testing::Strings;
using rayd::testing::Values;

using nlohmann::json;

constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";

// The fixtures of this run: written once, removed at exit.
struct Fixtures {
  rayd::testing::TempDir dir;
  json expect;
};

const Fixtures& Data() {
  static std::unique_ptr<Fixtures> fixtures;
  if (!fixtures) {
    auto f = std::make_unique<Fixtures>();
    std::string output;
    const int rc = rayd::testing::RunCommand(
        {"/usr/bin/python3", RAYD_DATA_TEST_DIR "/write_fixtures.py", f->dir.path()}, &output);
    INFO(output);
    REQUIRE(rc == 0);
    f->expect = json::parse(rayd::testing::ReadFile(f->dir.path() + "/expect.json"));
    fixtures = std::move(f);
  }
  return *fixtures;
}

std::string P(const std::string& relative) { return Data().dir.path() + "/" + relative; }
const json& Expect(const std::string& key) { return Data().expect.at(key); }

Result<std::unique_ptr<Reader>> Open(const json& entry) {
  Result<DatasetSpec> spec = ParseDatasetSpec("d", entry);
  if (!spec.ok()) return spec.status();
  return OpenReader(*spec);
}

std::unique_ptr<Reader> MustOpen(const json& entry) {
  Result<std::unique_ptr<Reader>> reader = Open(entry);
  INFO(entry.dump() << ": " << reader.status().ToString());
  REQUIRE(reader.ok());
  return std::move(*reader);
}

// The error opening `entry` gives: its code, and a message holding every one of `parts`.
void OpenFails(const json& entry, StatusCode code, const std::vector<std::string>& parts) {
  Result<std::unique_ptr<Reader>> reader = Open(entry);
  INFO(entry.dump());
  REQUIRE_FALSE(reader.ok());
  INFO(reader.status().ToString());
  CHECK(reader.status().code() == code);
  for (const std::string& part : parts)
    CHECK_THAT(reader.status().message(), Catch::Contains(part));
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}

Block ReadRows(Reader& reader, const std::vector<int64_t>& rows) {
  Result<Block> block = reader.Read(rows);
  INFO(block.status().ToString());
  REQUIRE(block.ok());
  return std::move(*block);
}

Block ReadAll(Reader& reader) { return ReadRows(reader, Range(reader.num_rows())); }


// The index of the first element of `c` (num_rows x RowElements) that differs from `want`, or -1.
template <typename T>
int64_t FirstDifference(const Column& c, int64_t rows, const json& want) {
  const int64_t n = rows * c.RowElements();
  REQUIRE(static_cast<int64_t>(want.size()) == n);
  for (int64_t i = 0; i < n; ++i) {
    T got;
    std::memcpy(&got, c.data + i * sizeof(T), sizeof(T));
    const json& w = want[static_cast<size_t>(i)];
    if constexpr (std::is_floating_point_v<T>) {
      if (w.is_null() ? !std::isnan(got) : got != static_cast<T>(w.get<double>())) return i;
      if (!w.is_null() && std::signbit(got) != std::signbit(w.get<double>())) return i;
    } else {
      if (got != w.get<T>()) return i;
    }
  }
  return -1;
}

int64_t FirstDifference(const Column& c, int64_t rows, const json& want) {
  switch (c.dtype()) {
    case DType::kUInt8:
      return FirstDifference<uint8_t>(c, rows, want);
    case DType::kInt8:
      return FirstDifference<int8_t>(c, rows, want);
    case DType::kUInt16:
      return FirstDifference<uint16_t>(c, rows, want);
    case DType::kInt16:
      return FirstDifference<int16_t>(c, rows, want);
    case DType::kUInt32:
      return FirstDifference<uint32_t>(c, rows, want);
    case DType::kInt32:
      return FirstDifference<int32_t>(c, rows, want);
    case DType::kInt64:
      return FirstDifference<int64_t>(c, rows, want);
    case DType::kFloat32:
      return FirstDifference<float>(c, rows, want);
    case DType::kFloat64:
      return FirstDifference<double>(c, rows, want);
    case DType::kBytes:
      FAIL("a bytes column where numbers were expected");
  }
  return 0;
}

// Column `name` of `block` holds `want` (write_fixtures.py's values(): dtype, shape, rows,
// values) in rows `rows` (all of them, in order, when empty).
void CheckColumn(const Block& block, const std::string& name, const json& want,
                 const std::vector<int64_t>& rows = {}) {
  const Column& c = RequireColumn(block, name);
  INFO("column " << name);
  CHECK(DTypeName(c.dtype()) == want["dtype"].get<std::string>());
  CHECK(c.schema.shape == want["shape"].get<std::vector<int64_t>>());
  json values = want["values"];
  if (!rows.empty()) {
    const size_t per_row = static_cast<size_t>(c.RowElements());
    json picked = json::array();
    for (int64_t r : rows) {
      for (size_t i = 0; i < per_row; ++i) picked.push_back(values[r * per_row + i]);
    }
    values = std::move(picked);
  } else {
    CHECK(block.num_rows() == want["rows"].get<int64_t>());
  }
  CHECK(FirstDifference(c, block.num_rows(), values) == -1);
}

// ------------------------------------------------------------------------------------- idx

TEST_CASE("idx: an image and label pair, one raw and one gzipped", "[data][idx]") {
  auto reader = MustOpen({{"format", "idx"}, {"paths", P("idx/pair/*")}});
  const json& want = Expect("idx_pair");
  CHECK(DescribeSchema(reader->schema()) == "image: uint8[3, 4], label: uint8");
  REQUIRE(reader->num_rows() == 7);
  const Block block = ReadAll(*reader);
  CHECK(block.schema() == reader->schema());
  CheckColumn(block, "image", want["image"]);
  CheckColumn(block, "label", want["label"]);
  // Any rows, in any order.
  const std::vector<int64_t> rows = {6, 0, 3, 3};
  const Block some = ReadRows(*reader, rows);
  REQUIRE(some.num_rows() == 4);
  CheckColumn(some, "image", want["image"], rows);
  CheckColumn(some, "label", want["label"], rows);
  // Outside the dataset.
  for (int64_t bad : {int64_t{7}, int64_t{-1}}) {
    Result<Block> out = reader->Read(std::vector<int64_t>{0, bad});
    REQUIRE_FALSE(out.ok());
    CHECK(out.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(out.status().message(), Catch::Contains("row " + std::to_string(bad)));
  }
}

TEST_CASE("idx: multi-byte types are swapped from big-endian", "[data][idx]") {
  auto reader = MustOpen({{"format", "idx"}, {"paths", P("idx/typed/*")}});
  CHECK(DescribeSchema(reader->schema()) ==
        "f32: float32[2, 2], f64: float64, i16: int16[3], i32: int32, i8: int8");
  REQUIRE(reader->num_rows() == 5);
  const Block block = ReadAll(*reader);
  for (const auto& [name, want] : Expect("idx_typed").items()) CheckColumn(block, name, want);
  const std::vector<int64_t> rows = {4, 1};
  const Block two = ReadRows(*reader, rows);
  CHECK(Values<int16_t>(two, "i16") == std::vector<int16_t>{1000, -1000, 12345, 1, 255, 256});
  for (const auto& [name, want] : Expect("idx_typed").items()) CheckColumn(two, name, want, rows);
}

TEST_CASE("idx: columns named by globs, shards in sorted order", "[data][idx]") {
  auto reader = MustOpen(
      {{"format", "idx"},
       {"columns",
        {{"image", P("idx/shards/part*-img.idx")}, {"label", P("idx/shards/part*-lbl.idx")}}}});
  CHECK(DescribeSchema(reader->schema()) == "image: uint8[2, 2], label: uint8");
  REQUIRE(reader->num_rows() == 7);
  const Block block = ReadAll(*reader);
  CheckColumn(block, "image", Expect("idx_shards")["image"]);
  CheckColumn(block, "label", Expect("idx_shards")["label"]);
  // Rows across the shard boundary (3 | 4), backwards.
  const std::vector<int64_t> rows = {6, 3, 2, 0};
  CheckColumn(ReadRows(*reader, rows), "image", Expect("idx_shards")["image"], rows);

  OpenFails({{"format", "idx"}, {"columns", {{"image", P("idx/shards/nothing-*")}}}},
            StatusCode::kNotFound, {"datasets.d", P("idx/shards/nothing-*")});
  OpenFails({{"format", "idx"}, {"columns", {{"image", 3}}}}, StatusCode::kInvalidArgument,
            {"datasets.d", "columns.image"});
  OpenFails({{"format", "idx"}, {"columns", P("idx/shards/part*-img.idx")}},
            StatusCode::kInvalidArgument, {"datasets.d", "columns"});
  // Columns of different lengths name both and their files.
  OpenFails(
      {{"format", "idx"},
       {"columns",
        {{"image", P("idx/shards/part0-img.idx")}, {"label", P("idx/shards/part*-lbl.idx")}}}},
      StatusCode::kInvalidArgument, {"different lengths", "'image' has 3 rows", "'label' 7"});
}

TEST_CASE("idx: a truncated file is refused naming the file and the row", "[data][idx]") {
  OpenFails({{"format", "idx"}, {"paths", P("idx/trunc/cut-idx3-ubyte")}},
            StatusCode::kInvalidArgument,
            {"datasets.d: ", P("idx/trunc/cut-idx3-ubyte"), "truncated", "10 rows",
             "in row " + std::to_string(Expect("idx_trunc_row").get<int>())});
  OpenFails({{"format", "idx"}, {"paths", P("idx/trunc/cutgz-idx1-ubyte.gz")}},
            StatusCode::kInvalidArgument, {P("idx/trunc/cutgz-idx1-ubyte.gz"), "truncated"});
  // A corrupt header whose sizes overflow is refused, not trusted.
  OpenFails({{"format", "idx"}, {"paths", P("idx/trunc/huge-idx3-ubyte")}},
            StatusCode::kInvalidArgument, {P("idx/trunc/huge-idx3-ubyte"), "overflow"});
  // Not IDX at all.
  OpenFails({{"format", "idx"}, {"paths", P("csv/good/table.csv")}}, StatusCode::kInvalidArgument,
            {P("csv/good/table.csv"), "not an IDX file"});
}

TEST_CASE("idx: the real Fashion-MNIST agrees with what NumPy reads", "[data][idx][fashion]") {
  const json& want = Expect("fashion");
  if (want.is_null()) {
    WARN(kFashion << " is not there: Fashion-MNIST not checked");
    return;
  }
  for (const std::string split : {"train", "t10k"}) {
    INFO(split);
    const json& w = want[split];
    auto reader =
        MustOpen({{"format", "idx"}, {"paths", std::string(kFashion) + "/" + split + "-*"}});
    CHECK(DescribeSchema(reader->schema()) == "image: uint8[28, 28], label: uint8");
    REQUIRE(reader->num_rows() == w["rows"].get<int64_t>());
    const Block all = ReadAll(*reader);
    const std::vector<uint8_t> pixels = Values<uint8_t>(all, "image");
    const std::vector<uint8_t> labels = Values<uint8_t>(all, "label");
    CHECK(std::accumulate(pixels.begin(), pixels.end(), int64_t{0}) ==
          w["pixel_sum"].get<int64_t>());
    CHECK(std::accumulate(labels.begin(), labels.end(), int64_t{0}) ==
          w["label_sum"].get<int64_t>());
    const std::vector<int64_t> picks = w["picks"].get<std::vector<int64_t>>();
    std::vector<int64_t> backwards(picks.rbegin(), picks.rend());
    const Block some = ReadRows(*reader, backwards);
    for (size_t i = 0; i < picks.size(); ++i) {
      INFO("row " << picks[i]);
      const size_t at = picks.size() - 1 - i;
      CHECK(Values<uint8_t>(some.Slice(at, at + 1), "image") ==
            w["images"][i].get<std::vector<uint8_t>>());
      CHECK(Values<uint8_t>(some.Slice(at, at + 1), "label")[0] == w["labels"][i].get<int>());
    }
  }
  CHECK(want["train"]["rows"] == 60000);
  CHECK(want["t10k"]["rows"] == 10000);
  // Two globs: their matches in the order given, so t10k's rows follow train's.
  auto both = MustOpen(
      {{"format", "idx"},
       {"paths", {std::string(kFashion) + "/train-*", std::string(kFashion) + "/t10k-*"}}});
  REQUIRE(both->num_rows() == 70000);
  const Block edge = ReadRows(*both, {59999, 60000});
  CHECK(Values<uint8_t>(edge, "label") ==
        std::vector<uint8_t>{want["train"]["labels"][3].get<uint8_t>(),
                             want["t10k"]["labels"][0].get<uint8_t>()});
  CHECK(Values<uint8_t>(edge.Slice(1, 2), "image") ==
        want["t10k"]["images"][0].get<std::vector<uint8_t>>());
}

// --------------------------------------------------------------------------------- npy/npz

TEST_CASE("npy: one file per column, every dtype and shape", "[data][npy]") {
  auto reader = MustOpen({{"format", "npy"}, {"paths", P("npy/cols/*.npy")}});
  CHECK(DescribeSchema(reader->schema()) ==
        "a_u8: uint8[2, 3], b_i8: int8, c_u16: uint16, d_i16: int16, e_u32: uint32[2], "
        "f_i32: int32, g_i64: int64[4], h_f32: float32[2, 2], i_f64: float64");
  REQUIRE(reader->num_rows() == 6);
  const Block block = ReadAll(*reader);
  for (const auto& [name, want] : Expect("npy_cols").items()) CheckColumn(block, name, want);
  const std::vector<int64_t> rows = {5, 2, 2, 0};
  const Block some = ReadRows(*reader, rows);
  for (const auto& [name, want] : Expect("npy_cols").items()) CheckColumn(some, name, want, rows);

  auto v2 = MustOpen({{"format", "npy"}, {"paths", P("npy/v2/wide.npy")}});
  CheckColumn(ReadAll(*v2), "wide", Expect("npy_v2")["wide"]);
}

TEST_CASE("npz: savez and savez_compressed archives are row shards", "[data][npy]") {
  for (const char* format : {"npz", "npy"}) {
    auto reader = MustOpen({{"format", format}, {"paths", P("npy/npz/*.npz")}});
    CHECK(DescribeSchema(reader->schema()) == "x: float32[3], y: int64");
    REQUIRE(reader->num_rows() == 9);
    const Block block = ReadAll(*reader);
    CheckColumn(block, "x", Expect("npz")["x"]);
    CheckColumn(block, "y", Expect("npz")["y"]);
    const std::vector<int64_t> rows = {8, 4, 5};
    CheckColumn(ReadRows(*reader, rows), "y", Expect("npz")["y"], rows);
  }
  auto compressed = MustOpen({{"format", "npz"}, {"paths", P("npy/npz/part-1.npz")}});
  CHECK(compressed->num_rows() == 4);
  CHECK(Values<int64_t>(ReadAll(*compressed), "y") == std::vector<int64_t>{100, 101, 102, 103});
}

TEST_CASE("npy: shards of a column through columns globs", "[data][npy]") {
  auto reader =
      MustOpen({{"format", "npy"},
                {"columns", {{"x", P("npy/shards/x_*.npy")}, {"y", P("npy/shards/y_*.npy")}}}});
  CHECK(DescribeSchema(reader->schema()) == "x: int32[2], y: float64");
  REQUIRE(reader->num_rows() == 8);
  // x is cut 3 | 0 | 5 and y 4 | 4: every row, in an order that crosses every boundary.
  const std::vector<int64_t> rows = {7, 3, 2, 4, 0, 5, 1, 6};
  const Block block = ReadRows(*reader, rows);
  CheckColumn(block, "x", Expect("npy_shards")["x"], rows);
  CheckColumn(block, "y", Expect("npy_shards")["y"], rows);
  CheckColumn(ReadAll(*reader), "x", Expect("npy_shards")["x"]);
  // Without columns:, each file is a column of its own name.
  OpenFails({{"format", "npy"}, {"paths", P("npy/shards/x_*.npy")}}, StatusCode::kInvalidArgument,
            {"different lengths", "'x_000'", "'x_001'"});
}

TEST_CASE("npy: Fortran order, truncation and mismatched shards are refused", "[data][npy]") {
  OpenFails({{"format", "npy"}, {"paths", P("npy/bad/fortran.npy")}}, StatusCode::kInvalidArgument,
            {P("npy/bad/fortran.npy"), "Fortran order"});
  OpenFails({{"format", "npy"}, {"paths", P("npy/bad/cut.npy")}}, StatusCode::kInvalidArgument,
            {P("npy/bad/cut.npy"), "truncated", "10 rows",
             "in row " + std::to_string(Expect("npy_cut")["row"].get<int>())});
  OpenFails({{"format", "npy"}, {"columns", {{"m", P("npy/bad/m_*.npy")}}}},
            StatusCode::kInvalidArgument,
            {P("npy/bad/m_001.npy"), "float32[3]", "float32[2]", P("npy/bad/m_000.npy")});
  OpenFails({{"format", "npy"}, {"paths", P("npy/bad/complex.npy")}}, StatusCode::kInvalidArgument,
            {P("npy/bad/complex.npy"), "'<c8'"});
  OpenFails({{"format", "npy"}, {"paths", P("csv/good/table.csv")}}, StatusCode::kInvalidArgument,
            {P("csv/good/table.csv"), "not a .npy"});
  // Corrupt headers: sizes past 64 bits are refused, not trusted (nor thrown).
  OpenFails({{"format", "npy"}, {"paths", P("npy/bad/huge.npy")}}, StatusCode::kInvalidArgument,
            {P("npy/bad/huge.npy"), "overflow"});
  OpenFails({{"format", "npy"}, {"paths", P("npy/bad/long.npy")}}, StatusCode::kInvalidArgument,
            {P("npy/bad/long.npy"), "overflow"});
  // columns: must map names to globs.
  OpenFails({{"format", "npy"}, {"columns", {P("npy/shards/x_*.npy")}}},
            StatusCode::kInvalidArgument, {"datasets.d", "columns"});
}

// ---------------------------------------------------------------------------------- tokens

TEST_CASE("tokens: nanoGPT files cut into windows of seq_len + 1", "[data][tokens]") {
  const std::vector<uint16_t> train = Expect("nano")["train"].get<std::vector<uint16_t>>();
  const std::vector<uint16_t> val = Expect("nano")["val"].get<std::vector<uint16_t>>();
  REQUIRE(train.size() == 1001);
  REQUIRE(val.size() == 1000);
  auto reader =
      MustOpen({{"format", "tokens"}, {"paths", P("tokens/nano/*.bin")}, {"seq_len", 10}});
  CHECK(DescribeSchema(reader->schema()) == "tokens: uint16[11]");
  // Each file on its own: (1001 - 1) / 10 and (1000 - 1) / 10.
  REQUIRE(reader->num_rows() == 100 + 99);
  const Block block = ReadAll(*reader);
  const std::vector<uint16_t> got = Values<uint16_t>(block, "tokens");
  for (int64_t row = 0; row < block.num_rows(); ++row) {
    const bool first = row < 100;
    const std::vector<uint16_t>& from = first ? train : val;
    const size_t start = static_cast<size_t>((first ? row : row - 100) * 10);
    INFO("row " << row);
    REQUIRE(std::equal(got.begin() + row * 11, got.begin() + row * 11 + 11, from.begin() + start));
  }
  // Windows overlap by one token: every token after the first is a target exactly once.
  CHECK(got[10] == got[11]);
  CHECK(got[99 * 11 + 10] == train[1000]);

  for (const auto& [seq_len, rows] :
       std::vector<std::pair<int, int64_t>>{{1, 1000}, {7, 142}, {999, 1}, {1000, 1}, {1001, 0}}) {
    INFO("seq_len " << seq_len);
    auto one = MustOpen(
        {{"format", "tokens"}, {"paths", P("tokens/nano/train.bin")}, {"seq_len", seq_len}});
    CHECK(one->num_rows() == rows);
    CHECK(rows == (1001 - 1) / seq_len);
  }
  auto last =
      MustOpen({{"format", "tokens"}, {"paths", P("tokens/nano/train.bin")}, {"seq_len", 1000}});
  const std::vector<uint16_t> whole = Values<uint16_t>(ReadAll(*last), "tokens");
  CHECK(whole == train);
}

TEST_CASE("tokens: another dtype, and bad options and files", "[data][tokens]") {
  const std::vector<int32_t> wide = Expect("tokens_i32").get<std::vector<int32_t>>();
  auto reader = MustOpen({{"format", "tokens"},
                          {"paths", P("tokens/wide/w.bin")},
                          {"seq_len", 4},
                          {"dtype", "int32"}});
  CHECK(DescribeSchema(reader->schema()) == "tokens: int32[5]");
  REQUIRE(reader->num_rows() == (53 - 1) / 4);
  const std::vector<int32_t> got = Values<int32_t>(ReadRows(*reader, {12, 0}), "tokens");
  CHECK(got == std::vector<int32_t>{wide[48], wide[49], wide[50], wide[51], wide[52], wide[0],
                                    wide[1], wide[2], wide[3], wide[4]});

  OpenFails({{"format", "tokens"}, {"paths", P("tokens/nano/train.bin")}},
            StatusCode::kInvalidArgument, {"datasets.d", "seq_len"});
  OpenFails({{"format", "tokens"}, {"paths", P("tokens/nano/train.bin")}, {"seq_len", 0}},
            StatusCode::kInvalidArgument, {"seq_len"});
  OpenFails({{"format", "tokens"}, {"paths", P("tokens/nano/train.bin")}, {"seq_len", "8"}},
            StatusCode::kInvalidArgument, {"seq_len"});
  OpenFails({{"format", "tokens"}, {"paths", P("tokens/odd/odd.bin")}, {"seq_len", 1}},
            StatusCode::kInvalidArgument, {P("tokens/odd/odd.bin"), "3 bytes", "uint16"});
  OpenFails({{"format", "tokens"},
             {"paths", P("tokens/nano/train.bin")},
             {"seq_len", 4},
             {"dtype", ">u2"}},
            StatusCode::kInvalidArgument, {"'>u2'"});
  // A bad option is an error, not an exception.
  OpenFails(
      {{"format", "tokens"}, {"paths", P("tokens/nano/train.bin")}, {"seq_len", 4}, {"dtype", 2}},
      StatusCode::kInvalidArgument, {"datasets.d", "dtype"});
}

TEST_CASE("tokens: Megatron bin and idx pairs", "[data][tokens]") {
  const std::vector<uint16_t> u16 = Expect("megatron")["u16"].get<std::vector<uint16_t>>();
  const std::vector<int32_t> i32 = Expect("megatron")["i32"].get<std::vector<int32_t>>();
  REQUIRE(u16.size() == 32);
  REQUIRE(i32.size() == 19);
  // The glob takes the .idx too; it is read as the .bin's index, not as tokens.
  auto reader = MustOpen(
      {{"format", "tokens"}, {"paths", P("tokens/megatron/corpus_u16.*")}, {"seq_len", 4}});
  CHECK(DescribeSchema(reader->schema()) == "tokens: uint16[5]");
  REQUIRE(reader->num_rows() == (32 - 1) / 4);
  const std::vector<uint16_t> got = Values<uint16_t>(ReadAll(*reader), "tokens");
  for (size_t row = 0; row < 7; ++row) {
    INFO("row " << row);
    CHECK(std::equal(got.begin() + row * 5, got.begin() + row * 5 + 5, u16.begin() + row * 4));
  }
  // The .idx's dtype code wins over the dtype option.
  auto wide = MustOpen({{"format", "tokens"},
                        {"paths", P("tokens/megatron/corpus_i32.bin")},
                        {"seq_len", 6},
                        {"dtype", "uint16"}});
  CHECK(DescribeSchema(wide->schema()) == "tokens: int32[7]");
  REQUIRE(wide->num_rows() == 3);
  const std::vector<int32_t> got32 = Values<int32_t>(ReadAll(*wide), "tokens");
  CHECK(std::vector<int32_t>(got32.end() - 7, got32.end()) ==
        std::vector<int32_t>(i32.begin() + 12, i32.begin() + 19));

  OpenFails({{"format", "tokens"}, {"paths", P("tokens/megatron/corpus_*.bin")}, {"seq_len", 4}},
            StatusCode::kInvalidArgument,
            {P("tokens/megatron/corpus_u16.bin"), "uint16 here but int32",
             P("tokens/megatron/corpus_i32.bin")});
  OpenFails({{"format", "tokens"}, {"paths", P("tokens/megatron/short_u16.bin")}, {"seq_len", 4}},
            StatusCode::kInvalidArgument,
            {P("tokens/megatron/short_u16.bin"), "truncated", "32 tokens", "20 bytes"});
  // An index promising more sequences than it holds (2^62: sizes that overflow).
  OpenFails({{"format", "tokens"}, {"paths", P("tokens/megatron/lying.bin")}, {"seq_len", 4}},
            StatusCode::kInvalidArgument, {P("tokens/megatron/lying.idx"), "truncated"});
}

// ------------------------------------------------------------------------------------- csv

TEST_CASE("csv: quoting as Python's csv module writes it, and type inference", "[data][csv]") {
  const json& want = Expect("csv_table");
  auto reader = MustOpen({{"format", "csv"}, {"paths", P("csv/good/table.csv")}});
  CHECK(DescribeSchema(reader->schema()) ==
        "id: int64, score: float64, note: bytes, mixed: float64");
  REQUIRE(reader->num_rows() == 6);
  const Block block = ReadAll(*reader);
  CHECK(Values<int64_t>(block, "id") == want["id"].get<std::vector<int64_t>>());
  CHECK(FirstDifference(RequireColumn(block, "score"), 6, want["score"]) == -1);
  CHECK(std::isnan(Values<double>(block, "score")[3]));
  CHECK(Strings(block, "note") == want["note"].get<std::vector<std::string>>());
  CHECK(Strings(block, "note")[0] == "say \"hi\"");
  CHECK(Strings(block, "note")[2] == "line one\nline two");
  CHECK(Values<double>(block, "mixed") == want["mixed"].get<std::vector<double>>());
  // The row with a line break inside quotes, then the first.
  const Block two = ReadRows(*reader, {2, 0});
  CHECK(Strings(two, "note") == std::vector<std::string>{"line one\nline two", "say \"hi\""});
  CHECK(Values<int64_t>(two, "id") == std::vector<int64_t>{-3, 1});
}

TEST_CASE("csv: shards, another delimiter, no header", "[data][csv]") {
  auto shards = MustOpen({{"format", "csv"}, {"paths", P("csv/shards/*.csv")}});
  CHECK(DescribeSchema(shards->schema()) == "name: bytes, n: int64");
  REQUIRE(shards->num_rows() == 3);
  const Block block = ReadRows(*shards, {2, 0, 1});
  CHECK(Strings(block, "name") == std::vector<std::string>{"c", "a", "b"});
  CHECK(Values<int64_t>(block, "n") == std::vector<int64_t>{3, 1, 2});

  auto tsv = MustOpen(
      {{"format", "csv"}, {"paths", P("csv/tsv/x.tsv")}, {"delimiter", "\t"}, {"header", false}});
  CHECK(DescribeSchema(tsv->schema()) == "c0: int64, c1: bytes");
  const Block t = ReadAll(*tsv);
  CHECK(Values<int64_t>(t, "c0") == std::vector<int64_t>{1, 2});
  CHECK(Strings(t, "c1") == std::vector<std::string>{"x\ty", "z"});

  OpenFails({{"format", "csv"}, {"paths", P("csv/tsv/x.tsv")}, {"delimiter", "::"}},
            StatusCode::kInvalidArgument, {"delimiter"});
  // Options of the wrong type are errors, not exceptions.
  OpenFails({{"format", "csv"}, {"paths", P("csv/tsv/x.tsv")}, {"delimiter", 9}},
            StatusCode::kInvalidArgument, {"datasets.d", "delimiter"});
  OpenFails({{"format", "csv"}, {"paths", P("csv/tsv/x.tsv")}, {"header", "no"}},
            StatusCode::kInvalidArgument, {"datasets.d", "header"});
  OpenFails({{"format", "csv"}, {"paths", P("csv/headers/*.csv")}}, StatusCode::kInvalidArgument,
            {P("csv/headers/h2.csv"), "(a, c)", P("csv/headers/h1.csv"), "(a, b)"});
}

TEST_CASE("csv: a row of only spaces or tabs is a row, as Python reads it", "[data][csv]") {
  auto reader = MustOpen({{"format", "csv"}, {"paths", P("csv/spaces/one.csv")}});
  CHECK(DescribeSchema(reader->schema()) == "v: bytes");
  REQUIRE(reader->num_rows() == 5);
  CHECK(Strings(ReadAll(*reader), "v") == Expect("csv_spaces").get<std::vector<std::string>>());
}

TEST_CASE("csv: a row with the wrong field count, raised or skipped", "[data][csv]") {
  const json& want = Expect("csv_bad");
  auto reader = MustOpen({{"format", "csv"}, {"paths", P("csv/bad/bad.csv")}});
  CHECK(DescribeSchema(reader->schema()) == "k: int64, v: int64, t: bytes");
  REQUIRE(reader->num_rows() == 4);
  CHECK(ReadRows(*reader, {0, 1}).num_rows() == 2);
  Result<Block> bad = reader->Read(Range(4));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  const std::string where = P("csv/bad/bad.csv") + ": row " +
                            std::to_string(want["row"].get<int>()) + " (line " +
                            std::to_string(want["line"].get<int>()) + ")";
  CHECK_THAT(bad.status().message(), Catch::Contains(where));
  CHECK_THAT(bad.status().message(), Catch::Contains("2 fields where the header has 3"));
  CHECK(reader->skipped_rows() == 0);

  auto skipping =
      MustOpen({{"format", "csv"}, {"paths", P("csv/bad/bad.csv")}, {"on_error", "skip"}});
  const Block kept = ReadAll(*skipping);
  CHECK(Values<int64_t>(kept, "k") == want["k"].get<std::vector<int64_t>>());
  CHECK(Strings(kept, "t") == std::vector<std::string>{"ok", "two\nlines", "fine"});
  CHECK(skipping->skipped_rows() == 1);
  CHECK(ReadRows(*skipping, {2}).num_rows() == 0);
  CHECK(skipping->skipped_rows() == 2);
}

// ----------------------------------------------------------------------------------- jsonl

TEST_CASE("jsonl: json.dumps lines of every type", "[data][jsonl]") {
  const json& want = Expect("jsonl_rows");
  for (const char* format : {"jsonl", "json"}) {
    auto reader = MustOpen({{"format", format}, {"paths", P("jsonl/good/*.jsonl")}});
    CHECK(DescribeSchema(reader->schema()) ==
          "id: int64, score: float64, name: bytes, ok: uint8, vec: float32[2, 2], n: float64");
    REQUIRE(reader->num_rows() == 3);
    const Block block = ReadAll(*reader);
    CHECK(Values<int64_t>(block, "id") == want["id"].get<std::vector<int64_t>>());
    CHECK(Values<double>(block, "score") == want["score"].get<std::vector<double>>());
    CHECK(Strings(block, "name") == want["name"].get<std::vector<std::string>>());
    CHECK(Strings(block, "name")[1] == "quote \" and \\ and \n");
    CHECK(Values<uint8_t>(block, "ok") == std::vector<uint8_t>{1, 0, 1});
    CHECK(Values<float>(block, "vec") == want["vec"].get<std::vector<float>>());
    CHECK(Values<double>(block, "n") == want["n"].get<std::vector<double>>());
    const Block last = ReadRows(*reader, {2});
    CHECK(Values<int64_t>(last, "id") == std::vector<int64_t>{int64_t{1} << 40});
    CHECK(Strings(last, "name") == std::vector<std::string>{"\xc3\xbcn\xc3\xaf"
                                                            "c\xc3\xb8"
                                                            "d\xc3\xa9 \xe2\x98\x83"});
  }
}

TEST_CASE("jsonl: a missing key or a wrong type, raised or skipped", "[data][jsonl]") {
  const json& want = Expect("jsonl_bad");
  auto reader = MustOpen({{"format", "jsonl"}, {"paths", P("jsonl/bad/bad.jsonl")}});
  CHECK(DescribeSchema(reader->schema()) == "id: int64, name: bytes");
  REQUIRE(reader->num_rows() == 5);
  Result<Block> bad = reader->Read(Range(5));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(
      bad.status().message(),
      Catch::Contains(P("jsonl/bad/bad.jsonl") + ": row " + std::to_string(want["row"].get<int>()) +
                      " (line " + std::to_string(want["line"].get<int>()) + "): no key 'name'"));
  Result<Block> wrong = reader->Read(std::vector<int64_t>{3});
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.status().message(), Catch::Contains("row 4 (line 5): 'id' is not an integer"));

  auto skipping =
      MustOpen({{"format", "jsonl"}, {"paths", P("jsonl/bad/bad.jsonl")}, {"on_error", "skip"}});
  const Block kept = ReadAll(*skipping);
  CHECK(Values<int64_t>(kept, "id") == want["id"].get<std::vector<int64_t>>());
  CHECK(Strings(kept, "name") == want["name"].get<std::vector<std::string>>());
  CHECK(skipping->skipped_rows() == 2);
}

// ------------------------------------------------------- the registry, globs, dataset specs

TEST_CASE("OpenReader: unknown formats and globs that match nothing", "[data][reader]") {
  const std::vector<std::string> formats = RegisteredFormats();
  for (const char* f : {"csv", "idx", "json", "jsonl", "npy", "npz", "tokens"}) {
    CHECK(std::find(formats.begin(), formats.end(), f) != formats.end());
  }
  CHECK(std::is_sorted(formats.begin(), formats.end()));
  OpenFails(
      {{"format", "parquetz"}, {"paths", P("csv/good/table.csv")}}, StatusCode::kInvalidArgument,
      {"datasets.d: format: unknown format 'parquetz'", "csv, ", "idx", "jsonl", "npy", "tokens"});
  OpenFails({{"format", "csv"}, {"paths", {P("csv/good/table.csv"), P("csv/nowhere/*.csv")}}},
            StatusCode::kNotFound, {"datasets.d: paths", "'" + P("csv/nowhere/*.csv") + "'"});
  // A glob's matches are sorted; a path without wildcards matches itself; duplicates once.
  Result<std::vector<std::string>> matched = ExpandGlob(P("npy/shards/*_00{2,0}.npy"));
  REQUIRE(matched.ok());
  CHECK(*matched == std::vector<std::string>{P("npy/shards/x_000.npy"), P("npy/shards/x_002.npy"),
                                             P("npy/shards/y_000.npy")});
  CHECK(*ExpandGlob(P("csv/bad/bad.csv")) == std::vector<std::string>{P("csv/bad/bad.csv")});
  CHECK(ExpandGlob(P("csv/bad/missing.csv")).status().code() == StatusCode::kNotFound);
  auto twice =
      MustOpen({{"format", "csv"}, {"paths", {P("csv/shards/part-1.csv"), P("csv/shards/*.csv")}}});
  CHECK(twice->num_rows() == 3);
  CHECK(Strings(ReadAll(*twice), "name") == std::vector<std::string>{"c", "a", "b"});
}

TEST_CASE("ParseDatasetSpec: errors name the key", "[data][reader]") {
  auto fails = [](const json& entry, const std::string& key) {
    Result<DatasetSpec> spec = ParseDatasetSpec("mnist", entry);
    INFO(entry.dump());
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(spec.status().message(), Catch::StartsWith(key));
  };
  fails(json::array({1}), "datasets.mnist: ");
  fails({{"paths", "x"}}, "datasets.mnist.format: ");
  fails({{"format", 3}, {"paths", "x"}}, "datasets.mnist.format: ");
  fails({{"format", "idx"}}, "datasets.mnist.paths: ");
  fails({{"format", "idx"}, {"paths", 3}}, "datasets.mnist.paths: ");
  fails({{"format", "idx"}, {"paths", json::array()}}, "datasets.mnist.paths: ");
  fails({{"format", "idx"}, {"paths", {"a", 1}}}, "datasets.mnist.paths: ");
  fails({{"format", "idx"}, {"paths", "x"}, {"on_error", "ignore"}}, "datasets.mnist.on_error: ");

  Result<DatasetSpec> spec = ParseDatasetSpec(
      "mnist", {{"format", "idx"}, {"paths", {"a/*", "b"}}, {"on_error", "skip"}, {"seq_len", 8}});
  REQUIRE(spec.ok());
  CHECK(spec->name == "mnist");
  CHECK(spec->format == "idx");
  CHECK(spec->paths == std::vector<std::string>{"a/*", "b"});
  CHECK(spec->skip_errors());
  CHECK(spec->options["seq_len"] == 8);
  CHECK_FALSE(spec->options.contains("paths"));
  CHECK_FALSE(spec->options.contains("format"));
  CHECK(ParseDatasetSpec("one", {{"format", "csv"}, {"paths", "x.csv"}})->paths ==
        std::vector<std::string>{"x.csv"});
  CHECK_FALSE(ParseDatasetSpec("one", {{"format", "csv"}, {"paths", "x.csv"}})->skip_errors());

  Result<std::vector<DatasetSpec>> all =
      ParseDatasets({{"train", {{"format", "idx"}, {"paths", "t*"}}},
                     {"test", {{"format", "npy"}, {"paths", "v*"}}}});
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK(ParseDatasets(nullptr)->empty());
  CHECK_THAT(ParseDatasets(json::array()).status().message(), Catch::StartsWith("datasets: "));
  CHECK_THAT(ParseDatasets({{"train", {{"format", "idx"}}}}).status().message(),
             Catch::StartsWith("datasets.train.paths: "));
}

}  // namespace
}  // namespace rayd::data
