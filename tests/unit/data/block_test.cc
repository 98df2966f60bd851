// Block: building, views (Slice, Select), copies (Take, Concat), the serialized layout of
// data/FORMAT.md and View's checks of it. The layout is also read back by a NumPy-only reader
// (write_fixtures.py --read-block, run with /usr/bin/python3), which follows FORMAT.md alone.

#include <rayd/data/block.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "column_values.h"
#include "test_util.h"

namespace rayd::data {
namespace {

using rayd::testing::Strings;
using rayd::testing::Values;

using nlohmann::json;

// `bytes` copied into 64-byte aligned memory, as the object store holds a block.
std::shared_ptr<uint8_t> Aligned(std::string_view bytes) {
  const size_t n = std::max<size_t>(64, (bytes.size() + 63) / 64 * 64);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, n));
  std::memset(p, 0, n);
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  return std::shared_ptr<uint8_t>(p, std::free);
}

Result<Block> ViewOf(std::string_view bytes) {
  std::shared_ptr<uint8_t> buffer = Aligned(bytes);
  return Block::View(buffer, buffer.get(), bytes.size());
}

template <typename T>
void Fill(BlockBuilder& b, ColumnSchema schema, const std::vector<T>& values) {
  REQUIRE(ItemSize(schema.dtype) == sizeof(T));
  uint8_t* to = b.AddFixed(std::move(schema));
  if (!values.empty()) std::memcpy(to, values.data(), values.size() * sizeof(T));
}

const std::vector<std::string> kNames = {"", "a", std::string("\0\xff\x01", 3), "hello, world",
                                         std::string(300, 'z')};

// Five rows of every kind of column.
Block Sample() {
  BlockBuilder b(5);
  Fill<uint8_t>(b, {"image", DType::kUInt8, {2, 3}},
                {0,  1,  2,  3,  4,  5,  10, 11, 12, 13, 14, 15, 20, 21, 22,
                 23, 24, 25, 30, 31, 32, 33, 34, 35, 40, 41, 42, 43, 44, 255});
  Fill<int8_t>(b, {"i8", DType::kInt8, {}}, {-128, -1, 0, 1, 127});
  Fill<uint16_t>(b, {"u16", DType::kUInt16, {}}, {0, 1, 256, 4660, 65535});
  Fill<int16_t>(b, {"i16", DType::kInt16, {}}, {-32768, -1, 0, 4660, 32767});
  Fill<uint32_t>(b, {"u32", DType::kUInt32, {}}, {0, 1, 65536, 305419896, 4294967295u});
  Fill<int32_t>(b, {"i32", DType::kInt32, {}}, {-2147483647 - 1, -1, 0, 1, 2147483647});
  Fill<int64_t>(b, {"label", DType::kInt64, {}}, {INT64_MIN, -1, 0, 1234567890123LL, INT64_MAX});
  Fill<float>(b, {"f32", DType::kFloat32, {2}},
              {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 1e30f, 7.0f, 8.0f, 9.5f, -10.0f});
  Fill<double>(b, {"f64", DType::kFloat64, {}}, {0.1, -1e300, 5e-324, 2.0, -3.5});
  b.AddBytes("name", kNames);
  return std::move(b).Finish();
}

void CheckSample(const Block& block, int64_t begin = 0, int64_t end = 5) {
  const Block want = Sample().Slice(begin, end);
  REQUIRE(block.num_rows() == end - begin);
  REQUIRE(block.schema() == want.schema());
  CHECK(Values<uint8_t>(block, "image") == Values<uint8_t>(want, "image"));
  CHECK(Values<int8_t>(block, "i8") == Values<int8_t>(want, "i8"));
  CHECK(Values<uint16_t>(block, "u16") == Values<uint16_t>(want, "u16"));
  CHECK(Values<int16_t>(block, "i16") == Values<int16_t>(want, "i16"));
  CHECK(Values<uint32_t>(block, "u32") == Values<uint32_t>(want, "u32"));
  CHECK(Values<int32_t>(block, "i32") == Values<int32_t>(want, "i32"));
  CHECK(Values<int64_t>(block, "label") == Values<int64_t>(want, "label"));
  CHECK(Values<float>(block, "f32") == Values<float>(want, "f32"));
  CHECK(Values<double>(block, "f64") == Values<double>(want, "f64"));
  CHECK(Strings(block, "name") ==
        std::vector<std::string>(kNames.begin() + begin, kNames.begin() + end));
}

TEST_CASE("dtype names and NumPy type strings", "[data][block]") {
  for (DType d : {DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16, DType::kUInt32,
                  DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64, DType::kBytes}) {
    INFO(DTypeName(d));
    REQUIRE(ParseDType(NumpyDescr(d)).ok());
    CHECK(*ParseDType(NumpyDescr(d)) == d);
    CHECK(*ParseDType(DTypeName(d)) == d);
  }
  CHECK(ItemSize(DType::kInt16) == 2);
  CHECK(ItemSize(DType::kFloat64) == 8);
  CHECK(*ParseDType("<u1") == DType::kUInt8);
  CHECK(*ParseDType("=f4") == DType::kFloat32);
  for (const char* bad : {">f4", ">i2", "<c8", "|O", "<u8", "<f2", "|b1", "<U5", "bogus"}) {
    INFO(bad);
    Result<DType> d = ParseDType(bad);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(d.status().message(), Catch::Contains(bad));
  }
  CHECK(DescribeSchema(Sample().Select({"image", "label", "name"})->schema()) ==
        "image: uint8[2, 3], label: int64, name: bytes");
}

TEST_CASE("a built block serializes and views back", "[data][block]") {
  const Block block = Sample();
  CheckSample(block);
  CHECK(block.nbytes() ==
        30 + 5 + 10 + 10 + 20 + 20 + 40 + 40 + 40 + static_cast<int64_t>(3 + 1 + 12 + 300) + 6 * 8);

  const std::string bytes = block.Serialize();
  REQUIRE(bytes.size() == block.SerializedSize());
  CHECK(bytes.size() % 64 == 0);
  CHECK(bytes.compare(0, 8, "RAYDBLK1") == 0);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 8, 8);
  CHECK((16 + header_len) % 64 == 0);
  const json header = json::parse(bytes.substr(16, header_len));
  CHECK(header["num_rows"] == 5);
  REQUIRE(header["columns"].size() == 10);
  CHECK(header["columns"][0]["dtype"] == "|u1");
  CHECK(header["columns"][0]["shape"] == json::array({2, 3}));
  CHECK(header["columns"][9]["dtype"] == "|S");

  Result<Block> view = ViewOf(bytes);
  REQUIRE(view.ok());
  CheckSample(*view);
  // Views point into the serialized buffer, each buffer on a 64-byte boundary.
  for (const Column& c : view->columns()) {
    INFO(c.name());
    CHECK(reinterpret_cast<uintptr_t>(c.data) % 64 == 0);
    if (c.is_bytes()) CHECK(reinterpret_cast<uintptr_t>(c.offsets) % 64 == 0);
  }
  // And it serializes to the same bytes again.
  CHECK(view->Serialize() == bytes);
}

TEST_CASE("blocks of zero rows round-trip", "[data][block]") {
  BlockBuilder b(0);
  b.AddFixed({"x", DType::kFloat32, {3, 4}});
  b.AddBytes("s", std::vector<std::string>{});
  b.AddFixed({"y", DType::kInt64, {}});
  const Block empty = std::move(b).Finish();
  CHECK(empty.nbytes() == 8);
  Result<Block> view = ViewOf(empty.Serialize());
  REQUIRE(view.ok());
  CHECK(view->num_rows() == 0);
  CHECK(view->schema() == empty.schema());
  CHECK(view->Find("s")->offsets[0] == 0);

  Result<Block> no_columns = ViewOf(Block().Serialize());
  REQUIRE(no_columns.ok());
  CHECK(no_columns->num_rows() == 0);
  CHECK(no_columns->columns().empty());

  // A slice of nothing.
  const Block none = Sample().Slice(3, 3);
  CHECK(none.num_rows() == 0);
  Result<Block> none_view = ViewOf(none.Serialize());
  REQUIRE(none_view.ok());
  CHECK(none_view->num_rows() == 0);
  CHECK(none_view->schema() == Sample().schema());
}

TEST_CASE("Slice is a view, and serializes rebased", "[data][block]") {
  const Block block = Sample();
  const Block middle = block.Slice(1, 4);
  CheckSample(middle, 1, 4);
  // The same memory: no copy.
  CHECK(middle.Find("label")->data == block.Find("label")->data + 8);
  CHECK(middle.Find("name")->data == block.Find("name")->data);
  // Out-of-range bounds are clamped.
  CHECK(block.Slice(3, 99).num_rows() == 2);
  CHECK(block.Slice(-4, 2).num_rows() == 2);
  CHECK(block.Slice(4, 2).num_rows() == 0);
  // Serialized, the bytes column's offsets start at 0 again.
  const Block tail = block.Slice(2, 5);
  CHECK(tail.nbytes() < block.nbytes());
  Result<Block> view = ViewOf(tail.Serialize());
  REQUIRE(view.ok());
  CheckSample(*view, 2, 5);
  CHECK(view->Find("name")->offsets[0] == 0);
  CHECK(view->Find("name")->offsets[3] == 3 + 12 + 300);
  // A slice of a slice.
  CheckSample(middle.Slice(1, 3), 2, 4);
}

TEST_CASE("Select picks and orders columns, NotFound names the missing one", "[data][block]") {
  const Block block = Sample();
  Result<Block> picked = block.Select({"name", "i8"});
  REQUIRE(picked.ok());
  REQUIRE(picked->columns().size() == 2);
  CHECK(picked->columns()[0].name() == "name");
  CHECK(picked->columns()[1].name() == "i8");
  CHECK(picked->num_rows() == 5);
  CHECK(Strings(*picked, "name") == kNames);
  CHECK(Values<int8_t>(*picked, "i8") == std::vector<int8_t>{-128, -1, 0, 1, 127});

  Result<Block> missing = block.Select({"i8", "nope"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("'nope'"));
  CHECK_THAT(missing.status().message(), Catch::Contains("image: uint8[2, 3]"));
}

TEST_CASE("Take copies rows in the order asked, repeats included", "[data][block]") {
  const Block block = Sample();
  const std::vector<int64_t> rows = {4, 0, 2, 2};
  const Block taken = block.Take(rows);
  REQUIRE(taken.num_rows() == 4);
  CHECK(Values<int64_t>(taken, "label") == std::vector<int64_t>{INT64_MAX, INT64_MIN, 0, 0});
  CHECK(Values<uint8_t>(taken, "image") == std::vector<uint8_t>{40, 41, 42, 43, 44, 255, 0,  1,
                                                                2,  3,  4,  5,  20, 21,  22, 23,
                                                                24, 25, 20, 21, 22, 23,  24, 25});
  CHECK(Values<float>(taken, "f32") ==
        std::vector<float>{9.5f, -10.0f, 0.5f, -1.25f, -0.0f, 1e30f, -0.0f, 1e30f});
  CHECK(Strings(taken, "name") ==
        std::vector<std::string>{kNames[4], kNames[0], kNames[2], kNames[2]});
  // A copy: its own memory.
  CHECK(taken.Find("label")->data != block.Find("label")->data);
  // From a slice, indices are the slice's.
  const std::vector<int64_t> one = {1};
  CHECK(Strings(block.Slice(2, 5).Take(one), "name") == std::vector<std::string>{kNames[3]});
  CHECK(block.Take({}).num_rows() == 0);
}

TEST_CASE("Concat joins rows and refuses different schemas", "[data][block]") {
  const Block block = Sample();
  // Slices whose bytes offsets do not start at 0, and an empty one between.
  Result<Block> joined = Block::Concat({block.Slice(3, 5), block.Slice(0, 0), block.Slice(0, 3)});
  REQUIRE(joined.ok());
  REQUIRE(joined->num_rows() == 5);
  CHECK(Strings(*joined, "name") ==
        std::vector<std::string>{kNames[3], kNames[4], kNames[0], kNames[1], kNames[2]});
  CHECK(Values<int16_t>(*joined, "i16") == std::vector<int16_t>{4660, 32767, -32768, -1, 0});
  CHECK(Values<double>(*joined, "f64") == std::vector<double>{2.0, -3.5, 0.1, -1e300, 5e-324});
  CHECK(Values<uint8_t>(*joined, "image")[0] == 30);
  CHECK(Values<uint8_t>(*joined, "image")[29] == 25);
  Result<Block> view = ViewOf(joined->Serialize());
  REQUIRE(view.ok());
  CHECK(Strings(*view, "name") == Strings(*joined, "name"));

  CHECK(Block::Concat({})->num_rows() == 0);
  Result<Block> two = Block::Concat({block, block});
  REQUIRE(two.ok());
  CHECK(two->num_rows() == 10);
  CHECK(Strings(two->Slice(5, 10), "name") == kNames);

  Result<Block> other = Block::Concat({block, *block.Select({"name", "i8"})});
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(other.status().message(), Catch::Contains("name: bytes, i8: int8"));

  BlockBuilder b(5);
  b.AddFixed({"image", DType::kUInt8, {3, 2}});  // same name and dtype, another shape
  CHECK_FALSE(Block::Concat({*block.Select({"image"}), std::move(b).Finish()}).ok());
}

// A block laid out by hand: the header padded to 1008 bytes, buffers from byte 1024 on.
std::string Handmade(const json& header, const std::string& buffers) {
  std::string text = header.dump();
  REQUIRE(text.size() <= 1008);
  text.resize(1008, ' ');
  std::string out = "RAYDBLK1";
  const uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  return out + text + buffers;
}

std::string Int64s(const std::vector<int64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

TEST_CASE("View reads a block laid out by hand per FORMAT.md", "[data][block]") {
  // Two rows: x int32[2] at 1024 (16 bytes), s bytes data at 1088 ("hi", "there"), offsets at
  // 1152. Unknown keys are ignored.
  std::string buffers(192, '\0');
  const int32_t x[4] = {1, -2, 300000, 4};
  std::memcpy(buffers.data(), x, 16);
  std::memcpy(buffers.data() + 64, "hithere", 7);
  const std::string offsets = Int64s({0, 2, 7});
  std::memcpy(buffers.data() + 128, offsets.data(), offsets.size());
  const json header = {
      {"num_rows", 2},
      {"version", "future"},
      {"columns",
       {{{"name", "x"}, {"dtype", "<i4"}, {"shape", json::array({2})}, {"data", {1024, 16}}},
        {{"name", "s"},
         {"dtype", "|S"},
         {"shape", json::array()},
         {"data", {1088, 7}},
         {"offsets", {1152, 24}},
         {"note", 1}}}}};
  Result<Block> view = ViewOf(Handmade(header, buffers));
  REQUIRE(view.ok());
  CHECK(view->num_rows() == 2);
  CHECK(Values<int32_t>(*view, "x") == std::vector<int32_t>{1, -2, 300000, 4});
  CHECK(Strings(*view, "s") == std::vector<std::string>{"hi", "there"});
}

TEST_CASE("View refuses corrupt blocks with InvalidArgument", "[data][block]") {
  std::string buffers(192, '\0');
  const std::string offsets = Int64s({0, 2, 7});
  std::memcpy(buffers.data() + 128, offsets.data(), offsets.size());
  json good = {
      {"num_rows", 2},
      {"columns",
       {{{"name", "x"}, {"dtype", "<i4"}, {"shape", json::array({2})}, {"data", {1024, 16}}},
        {{"name", "s"},
         {"dtype", "|S"},
         {"shape", json::array()},
         {"data", {1088, 7}},
         {"offsets", {1152, 24}}}}}};
  REQUIRE(ViewOf(Handmade(good, buffers)).ok());

  auto refused = [](const std::string& bytes, const std::string& why) {
    Result<Block> view = ViewOf(bytes);
    INFO(why);
    REQUIRE_FALSE(view.ok());
    CHECK(view.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(view.status().message(), Catch::Contains(why));
  };
  auto with = [&](const std::function<void(json&)>& change) {
    json h = good;
    change(h);
    return Handmade(h, buffers);
  };

  std::string bad_magic = Handmade(good, buffers);
  bad_magic[7] = '2';
  refused(bad_magic, "magic");
  refused("RAYDBLK1", "magic");
  refused("", "magic");
  std::string long_header = Handmade(good, buffers);
  const uint64_t too_long = long_header.size();
  std::memcpy(long_header.data() + 8, &too_long, 8);
  refused(long_header, "header runs past");
  std::string huge_header = Handmade(good, buffers);
  const uint64_t huge = ~uint64_t{0} - 8;
  std::memcpy(huge_header.data() + 8, &huge, 8);
  refused(huge_header, "header runs past");
  std::string not_json = Handmade(good, buffers);
  not_json[16] = '[';
  refused(not_json, "not {num_rows, columns}");
  refused(with([](json& h) { h.erase("columns"); }), "not {num_rows, columns}");
  refused(with([](json& h) { h["num_rows"] = -1; }), "negative");
  refused(with([](json& h) { h["columns"][0].erase("dtype"); }), "without a name or dtype");
  refused(with([](json& h) { h["columns"][0]["dtype"] = ">i4"; }), "'>i4'");
  refused(with([](json& h) { h["columns"][0]["shape"] = json::array({-2}); }), "bad shape");
  // Buffers outside the block.
  refused(with([](json& h) { h["columns"][0]["data"] = {1208, 16}; }), "'x' has its data outside");
  refused(with([](json& h) {
            h["columns"][0]["data"] = {1024, 1000};
          }),
          "'x' has its data outside");
  refused(with([](json& h) { h["columns"][0]["data"] = {-64, 16}; }), "'x' has its data outside");
  refused(with([](json& h) { h["columns"][0]["data"] = json::array({1024}); }),
          "'x' has its data outside");
  refused(with([](json& h) {
            h["columns"][1]["data"] = {1088, 1000};
          }),
          "'s' has its data outside");
  // Byte counts that do not match rows x shape x item size.
  refused(with([](json& h) { h["columns"][0]["data"] = {1024, 12}; }), "'x' has 12 bytes, not 16");
  refused(with([](json& h) { h["columns"][0]["shape"] = json::array({3}); }),
          "'x' has 16 bytes, not 24");
  refused(with([](json& h) { h["num_rows"] = 3; }), "'x' has 16 bytes, not 24");
  refused(with([](json& h) { h["columns"][0]["data"] = {1026, 16}; }), "'x'");  // misaligned
  // Offsets: a wrong count, outside, misaligned, not from 0, going down, past the data.
  refused(with([](json& h) { h["columns"][1]["offsets"] = {1152, 16}; }), "'s' has bad offsets");
  refused(with([](json& h) { h["columns"][1].erase("offsets"); }), "'s' has bad offsets");
  refused(with([](json& h) { h["columns"][1]["offsets"] = {1200, 24}; }), "'s' has bad offsets");
  refused(with([](json& h) { h["columns"][1]["offsets"] = {1156, 24}; }), "'s' has bad offsets");
  auto with_offsets = [&](const std::vector<int64_t>& o) {
    std::string b = buffers;
    const std::string bytes = Int64s(o);
    std::memcpy(b.data() + 128, bytes.data(), bytes.size());
    return Handmade(good, b);
  };
  refused(with_offsets({1, 2, 7}), "offsets start above 0");
  refused(with_offsets({0, 5, 2}), "offsets go down");
  refused(with_offsets({0, 2, 8}), "offsets past its data");
  refused(with_offsets({0, -1, 7}), "offsets go down");
  // Sizes that overflow 64 bits are refused, not wrapped round to a size that fits.
  json fixed_only = {
      {"num_rows", 2},
      {"columns",
       {{{"name", "x"}, {"dtype", "<i4"}, {"shape", json::array({2})}, {"data", {1024, 16}}}}}};
  auto fixed = [&](const std::function<void(json&)>& change) {
    json h = fixed_only;
    change(h);
    return Handmade(h, buffers);
  };
  REQUIRE(ViewOf(fixed([](json&) {})).ok());
  refused(fixed([](json& h) {  // 2^62 rows x 4 bytes = 2^64 = 0
            h["num_rows"] = int64_t{1} << 62;
            h["columns"][0]["shape"] = json::array();
            h["columns"][0]["data"] = {1024, 0};
          }),
          "'x'");
  refused(fixed([](json& h) {  // 2 rows of 2^62 x 4 bytes
            h["columns"][0]["shape"] = json::array({int64_t{1} << 62});
            h["columns"][0]["data"] = {1024, 0};
          }),
          "'x'");
  refused(fixed([](json& h) {  // 0 rows, but a row of 2^62 x 2^2 x 4 bytes
            h["num_rows"] = 0;
            h["columns"][0]["shape"] = json::array({int64_t{1} << 62, 4});
            h["columns"][0]["data"] = {1024, 0};
          }),
          "'x'");
  refused(with([](json& h) {  // (2^61 + 1) x 8 offset bytes = 2^64 + 8 = 8
            h["num_rows"] = int64_t{1} << 61;
            h["columns"].erase(0);
            h["columns"][0]["offsets"] = {1152, 8};
          }),
          "'s' has bad offsets");
}

TEST_CASE("a NumPy-only reader following FORMAT.md reads a serialized block",
          "[data][block][python]") {
  rayd::testing::TempDir dir;
  // Every kind of column, from a slice (bytes offsets rebased), a Take and a Concat, so
  // that the three ways a block's memory comes about are all written out.
  const Block block =
      *Block::Concat({Sample().Slice(1, 5), Sample().Take(std::vector<int64_t>{0})});
  const std::string path = dir.path() + "/block.bin";
  {
    const std::string bytes = block.Serialize();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<long>(bytes.size()));
  }
  std::string output;
  const int rc =
      rayd::testing::RunCommand({"/usr/bin/python3", RAYD_DATA_TEST_DIR "/write_fixtures.py",
                                 "--read-block", path, dir.path() + "/block.json"},
                                &output);
  INFO(output);
  REQUIRE(rc == 0);
  const json got = json::parse(rayd::testing::ReadFile(dir.path() + "/block.json"));
  REQUIRE(got["num_rows"] == 5);
  REQUIRE(got["columns"].size() == block.columns().size());
  for (size_t i = 0; i < block.columns().size(); ++i) {
    const Column& c = block.columns()[i];
    const json& col = got["columns"][i];
    INFO(c.name());
    CHECK(col["name"] == c.name());
    CHECK(col["dtype"] == NumpyDescr(c.dtype()));
    CHECK(col["shape"].get<std::vector<int64_t>>() == c.schema.shape);
    const json& v = col["values"];
    switch (c.dtype()) {
      case DType::kUInt8:
        CHECK(v.get<std::vector<uint8_t>>() == Values<uint8_t>(block, c.name()));
        break;
      case DType::kInt8:
        CHECK(v.get<std::vector<int8_t>>() == Values<int8_t>(block, c.name()));
        break;
      case DType::kUInt16:
        CHECK(v.get<std::vector<uint16_t>>() == Values<uint16_t>(block, c.name()));
        break;
      case DType::kInt16:
        CHECK(v.get<std::vector<int16_t>>() == Values<int16_t>(block, c.name()));
        break;
      case DType::kUInt32:
        CHECK(v.get<std::vector<uint32_t>>() == Values<uint32_t>(block, c.name()));
        break;
      case DType::kInt32:
        CHECK(v.get<std::vector<int32_t>>() == Values<int32_t>(block, c.name()));
        break;
      case DType::kInt64:
        CHECK(v.get<std::vector<int64_t>>() == Values<int64_t>(block, c.name()));
        break;
      case DType::kFloat32:
        CHECK(v.get<std::vector<float>>() == Values<float>(block, c.name()));
        break;
      case DType::kFloat64:
        CHECK(v.get<std::vector<double>>() == Values<double>(block, c.name()));
        break;
      case DType::kBytes: {
        std::vector<std::string> hex;
        for (const std::string& s : Strings(block, c.name())) {
          std::string h;
          for (unsigned char ch : s) {
            static const char* kHex = "0123456789abcdef";
            h += kHex[ch >> 4];
            h += kHex[ch & 15];
          }
          hex.push_back(h);
        }
        CHECK(v.get<std::vector<std::string>>() == hex);
        break;
      }
    }
  }
  // Spot values from Sample(): rows 1..4 then row 0.
  CHECK(got["columns"][6]["values"] == json::array({-1, 0, 1234567890123LL, INT64_MAX, INT64_MIN}));
  CHECK(got["columns"][9]["values"][4] == "");
  CHECK(got["columns"][9]["values"][1] == "00ff01");
  CHECK(got["columns"][9]["values"][2] == "68656c6c6f2c20776f726c64");  // "hello, world"
}

}  // namespace
}  // namespace rayd::data
