// The image transforms of data/src/image_transforms.cc (random_crop), through the transform
// registry as a dataset's `transforms:` list reaches them: every crop is a window of the padded
// image, a row's window depends on its bytes and the seed only, and bad arguments are errors
// naming the column and the sizes.

#include <rayd/data/block.h>
#include <rayd/data/transforms.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace rayd::data {
namespace {

using nlohmann::json;

// `rows` random images of shape `shape` (column image) and their row numbers (column label).
Block Images(int64_t rows, std::vector<int64_t> shape, uint32_t seed = 1) {
  BlockBuilder b(rows);
  ColumnSchema schema{"image", DType::kUInt8, shape};
  Column probe{.schema = schema};
  uint8_t* pixels = b.AddFixed(schema);
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < rows * probe.RowBytes(); ++i) pixels[i] = static_cast<uint8_t>(1 + gen() % 255);
  auto* labels = reinterpret_cast<int64_t*>(b.AddFixed({"label", DType::kInt64, {}}));
  for (int64_t i = 0; i < rows; ++i) labels[i] = i;
  return std::move(b).Finish();
}

Result<Block> Crop(const Block& block, json args, int64_t epoch = -1) {
  args["map_batches"] = "random_crop";
  Result<std::vector<TransformStep>> steps = ParseTransforms(json::array({args}));
  if (!steps.ok()) return steps.status();
  return ApplyTransforms(*steps, block, nullptr, epoch);
}

// The rows of `a` and `b`'s image columns that differ.
int64_t RowsMoved(const Block& a, const Block& b) {
  const Column* x = a.Find("image");
  const Column* y = b.Find("image");
  const int64_t bytes = x->RowBytes();
  int64_t moved = 0;
  for (int64_t row = 0; row < a.num_rows(); ++row) {
    if (std::memcmp(x->data + row * bytes, y->data + row * bytes, static_cast<size_t>(bytes)) != 0) {
      ++moved;
    }
  }
  return moved;
}

// Pixel (y, x) of row `row` of `c`, padded by `pad` zeros: `channels` bytes.
std::vector<uint8_t> PaddedPixel(const Column& c, int64_t row, int64_t y, int64_t x, int64_t pad) {
  const int64_t H = c.schema.shape[0], W = c.schema.shape[1];
  const int64_t channels = c.schema.shape.size() == 3 ? c.schema.shape[2] : 1;
  std::vector<uint8_t> out(static_cast<size_t>(channels), 0);
  y -= pad;
  x -= pad;
  if (y < 0 || y >= H || x < 0 || x >= W) return out;
  const uint8_t* p = c.data + row * c.RowBytes() + (y * W + x) * channels;
  return {p, p + channels};
}

// The offsets (top, left) in the padded image at which `crop`'s row `row` is a window of
// `image`'s row `row`.
std::vector<std::pair<int64_t, int64_t>> WindowsOf(const Column& image, const Column& crop,
                                                   int64_t row, int64_t pad) {
  const int64_t h = crop.schema.shape[0], w = crop.schema.shape[1];
  const int64_t channels = crop.schema.shape.size() == 3 ? crop.schema.shape[2] : 1;
  std::vector<std::pair<int64_t, int64_t>> found;
  for (int64_t top = 0; top + h <= image.schema.shape[0] + 2 * pad; ++top) {
    for (int64_t left = 0; left + w <= image.schema.shape[1] + 2 * pad; ++left) {
      bool same = true;
      for (int64_t y = 0; same && y < h; ++y) {
        for (int64_t x = 0; same && x < w; ++x) {
          const uint8_t* p = crop.data + row * crop.RowBytes() + (y * w + x) * channels;
          same = PaddedPixel(image, row, top + y, left + x, pad) ==
                 std::vector<uint8_t>(p, p + channels);
        }
      }
      if (same) found.emplace_back(top, left);
    }
  }
  return found;
}

TEST_CASE("random_crop cuts every row to a window of its image, [H, W] and [H, W, C]",
          "[data][transforms]") {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{12, 10}, std::vector<int64_t>{12, 10, 3}}) {
    const Block in = Images(40, shape);
    Result<Block> out = Crop(in, {{"size", {8, 7}}, {"seed", 3}});
    REQUIRE(out.ok());
    const Column* crop = out->Find("image");
    REQUIRE(crop != nullptr);
    std::vector<int64_t> want = shape;
    want[0] = 8;
    want[1] = 7;
    CHECK(crop->schema.shape == want);
    CHECK(crop->dtype() == DType::kUInt8);
    std::set<std::pair<int64_t, int64_t>> offsets;
    for (int64_t row = 0; row < in.num_rows(); ++row) {
      auto windows = WindowsOf(*in.Find("image"), *crop, row, 0);
      REQUIRE(windows.size() == 1);
      offsets.insert(windows[0]);
    }
    // 5 x 4 possible offsets; 40 rows land on many of them.
    CHECK(offsets.size() >= 8);
    // The other columns pass through, in their order.
    REQUIRE(out->columns().size() == 2);
    CHECK(out->columns()[1].name() == "label");
    for (int64_t row = 0; row < in.num_rows(); ++row) CHECK(out->columns()[1].As<int64_t>()[row] == row);
  }
}

TEST_CASE("random_crop pads with zeros, and a crop of the padded size keeps the image whole",
          "[data][transforms]") {
  const Block in = Images(60, {6, 6});
  Result<Block> out = Crop(in, {{"column", "image"}, {"size", {6, 6}}, {"padding", 2}});
  REQUIRE(out.ok());
  const Column* crop = out->Find("image");
  int64_t shifted = 0;
  for (int64_t row = 0; row < in.num_rows(); ++row) {
    auto windows = WindowsOf(*in.Find("image"), *crop, row, 2);
    REQUIRE(windows.size() == 1);
    if (windows[0] != std::make_pair<int64_t, int64_t>(2, 2)) ++shifted;
  }
  CHECK(shifted > 30);  // 24 of the 25 offsets shift the image

  Result<Block> whole = Crop(in, {{"size", {10, 10}}, {"padding", 2}});
  REQUIRE(whole.ok());
  for (int64_t row = 0; row < in.num_rows(); ++row) {
    CHECK(WindowsOf(*in.Find("image"), *whole->Find("image"), row, 2) ==
          std::vector<std::pair<int64_t, int64_t>>{{0, 0}});
  }
}

TEST_CASE("random_crop's window depends on the row's bytes and the seed, not on its batch",
          "[data][transforms]") {
  const Block in = Images(32, {16, 16, 1});
  Result<Block> all = Crop(in, {{"size", {9, 9}}, {"padding", 1}, {"seed", 7}});
  REQUIRE(all.ok());
  // Each row alone, and the rows in reverse order: the same crops.
  std::vector<int64_t> reversed;
  for (int64_t row = in.num_rows() - 1; row >= 0; --row) reversed.push_back(row);
  Result<Block> backwards = Crop(in.Take(reversed), {{"size", {9, 9}}, {"padding", 1}, {"seed", 7}});
  REQUIRE(backwards.ok());
  const int64_t bytes = all->Find("image")->RowBytes();
  for (int64_t row = 0; row < in.num_rows(); ++row) {
    Result<Block> alone = Crop(in.Slice(row, row + 1), {{"size", {9, 9}}, {"padding", 1}, {"seed", 7}});
    REQUIRE(alone.ok());
    const uint8_t* want = all->Find("image")->data + row * bytes;
    CHECK(std::vector<uint8_t>(want, want + bytes) ==
          std::vector<uint8_t>(alone->Find("image")->data, alone->Find("image")->data + bytes));
    const uint8_t* back = backwards->Find("image")->data + (in.num_rows() - 1 - row) * bytes;
    CHECK(std::vector<uint8_t>(want, want + bytes) == std::vector<uint8_t>(back, back + bytes));
  }
  // Another seed moves most crops.
  Result<Block> other = Crop(in, {{"size", {9, 9}}, {"padding", 1}, {"seed", 8}});
  REQUIRE(other.ok());
  int64_t moved = 0;
  for (int64_t row = 0; row < in.num_rows(); ++row) {
    const uint8_t* a = all->Find("image")->data + row * bytes;
    const uint8_t* b = other->Find("image")->data + row * bytes;
    if (std::vector<uint8_t>(a, a + bytes) != std::vector<uint8_t>(b, b + bytes)) ++moved;
  }
  CHECK(moved > 20);
}

// A large image's crop is drawn from words spread over all of it (not its first bytes only):
// rows alike in their first half and random in their second get crops all over.
TEST_CASE("random_crop draws a large image's window from all of its bytes", "[data][transforms]") {
  const int64_t rows = 16, side = 128, half = side * side / 2;
  BlockBuilder b(rows);
  const ColumnSchema schema{"image", DType::kUInt8, {side, side, 1}};
  uint8_t* pixels = b.AddFixed(schema);
  std::mt19937 gen(3);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < 2 * half; ++i) {
      pixels[r * 2 * half + i] = static_cast<uint8_t>(i < half ? i * 7 % 251 + 1 : 1 + gen() % 255);
    }
  }
  const Block in = std::move(b).Finish();
  Result<Block> out = Crop(in, {{"size", {side - 8, side - 8}}, {"seed", 7}});
  REQUIRE(out.ok());
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t r = 0; r < rows; ++r) {
    const auto found = WindowsOf(*in.Find("image"), *out->Find("image"), r, 0);
    REQUIRE(found.size() == 1);
    offsets.insert(found[0]);
  }
  CHECK(offsets.size() >= 6);  // of 81; a hash of the first half alone gives every row one
}

// What a map sees as TransformEpoch(), recorded by the map below.
int64_t seen_epoch = -2;
Result<Block> RecordEpoch(const Block& batch, const nlohmann::json&) {
  seen_epoch = TransformEpoch();
  return batch;
}
const bool registered_record_epoch = RegisterBatchMap("test_record_epoch", RecordEpoch);

TEST_CASE("random_crop draws anew each epoch, the same for the same epoch, and maps see it",
          "[data][transforms]") {
  const Block in = Images(64, {16, 16, 1});
  const json args = {{"size", {9, 9}}, {"padding", 1}, {"seed", 7}};
  Result<Block> none = Crop(in, args);
  Result<Block> epoch0 = Crop(in, args, 0);
  Result<Block> epoch1 = Crop(in, args, 1);
  Result<Block> epoch1_again = Crop(in.Slice(0, in.num_rows()), args, 1);
  Result<Block> epoch2 = Crop(in, args, 2);
  REQUIRE((none.ok() && epoch0.ok() && epoch1.ok() && epoch1_again.ok() && epoch2.ok()));
  // Epoch 0 crops as rows made for no epoch (before a cache step, and as before epochs were
  // known); a block made again for the same epoch is the same; each later epoch moves most.
  CHECK(RowsMoved(*none, *epoch0) == 0);
  CHECK(RowsMoved(*epoch1, *epoch1_again) == 0);
  CHECK(RowsMoved(*epoch0, *epoch1) > 40);
  CHECK(RowsMoved(*epoch1, *epoch2) > 40);
  // Still a window of its own image.
  CHECK(WindowsOf(*in.Find("image"), *epoch2->Find("image"), 5, 1).size() >= 1);

  Result<std::vector<TransformStep>> steps =
      ParseTransforms(json::array({{{"map_batches", "test_record_epoch"}}}));
  REQUIRE(steps.ok());
  REQUIRE(ApplyTransforms(*steps, in, nullptr, 3).ok());
  CHECK(seen_epoch == 3);
  REQUIRE(ApplyTransforms(*steps, in).ok());
  CHECK(seen_epoch == -1);
  CHECK(TransformEpoch() == -1);  // outside a call
}

TEST_CASE("random_crop refuses what it cannot crop, naming the column and the sizes",
          "[data][transforms]") {
  const Block in = Images(4, {8, 8});
  auto message = [](const Result<Block>& r) {
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return r.status().message();
  };
  std::string m = message(Crop(in, {{"column", "pixels"}, {"size", {4, 4}}}));
  CHECK_THAT(m, Catch::Contains("no column 'pixels'") && Catch::Contains("image: uint8[8, 8]"));
  m = message(Crop(in, {{"size", {9, 8}}}));
  CHECK_THAT(m, Catch::Contains("size [9, 8]") && Catch::Contains("'image'") &&
                    Catch::Contains("[8, 8] padded by 0"));
  m = message(Crop(in, {{"size", {11, 11}}, {"padding", 1}}));
  CHECK_THAT(m, Catch::Contains("size [11, 11]") && Catch::Contains("padded by 1 ([10, 10])"));
  m = message(Crop(in, {{"column", "label"}, {"size", {1, 1}}}));
  CHECK_THAT(m, Catch::Contains("'label'") && Catch::Contains("shape []"));
  m = message(Crop(in, json::object()));
  CHECK_THAT(m, Catch::Contains("size: expected [HEIGHT, WIDTH]"));
  m = message(Crop(in, {{"size", {4, 4}}, {"padding", -1}}));
  CHECK_THAT(m, Catch::Contains("padding"));

  BlockBuilder b(2);
  b.AddBytes("image", {"\xff\xd8 jpeg", "\xff\xd8 jpeg"});
  m = message(Crop(std::move(b).Finish(), {{"size", {4, 4}}}));
  CHECK_THAT(m, Catch::Contains("column 'image' holds bytes"));
}

TEST_CASE("random_crop of zero rows is zero rows of the crop's shape", "[data][transforms]") {
  Result<Block> out = Crop(Images(0, {5, 5, 3}), {{"size", {3, 2}}});
  REQUIRE(out.ok());
  CHECK(out->num_rows() == 0);
  CHECK(out->Find("image")->schema.shape == std::vector<int64_t>{3, 2, 3});
}

}  // namespace
}  // namespace rayd::data
