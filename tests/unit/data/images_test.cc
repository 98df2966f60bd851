// The image formats (`images`, `webdataset`) and image_decode.h, against files PIL and Python's
// tarfile wrote (write_images.py) and PIL's own decoding of them. In a build without image
// decoding (data/cmake/images.cmake found no libjpeg-turbo or libpng) the `images` tests say so
// and stop, and webdataset's decode: true must say the build lacks it.

#include <rayd/data/reader.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/image_decode.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using rayd::Status;
using rayd::data::Block;
using rayd::data::Column;
using rayd::data::DType;
using rayd::data::Reader;

// The fixtures, written once per process into a temporary folder removed at exit.
struct Fixtures {
  rayd::testing::TempDir dir;
  json manifest;
  Fixtures() {
    std::string output;
    // Debian's python has PIL and NumPy (python3-pil, python3-numpy); the first on PATH may not.
    const int rc = rayd::testing::RunCommand(
        {"/usr/bin/python3", RAYD_DATA_TEST_DIR "/write_images.py", dir.path()}, &output);
    if (rc != 0)
      throw std::runtime_error("write_images.py failed (" + std::to_string(rc) + "): " + output);
    std::ifstream in(dir.path() + "/expected.json");
    manifest = json::parse(in);
  }
};
const json& Manifest() {
  static Fixtures fixtures;
  return fixtures.manifest;
}

bool ImagesBuilt() {
  for (const std::string& f : rayd::data::RegisteredFormats()) {
    if (f == "images") return true;
  }
  return false;
}

rayd::Result<std::unique_ptr<Reader>> TryOpen(const json& entry) {
  rayd::Result<rayd::data::DatasetSpec> spec = rayd::data::ParseDatasetSpec("ds", entry);
  if (!spec.ok()) return spec.status();
  return rayd::data::OpenReader(*spec);
}

std::unique_ptr<Reader> Open(const json& entry) {
  auto reader = TryOpen(entry);
  INFO(reader.status().ToString());
  REQUIRE(reader.ok());
  return std::move(*reader);
}

// The error opening `entry`; fails the test when it opens.
Status OpenError(const json& entry) {
  auto reader = TryOpen(entry);
  REQUIRE_FALSE(reader.ok());
  return reader.status();
}

std::vector<int64_t> Rows(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

Block ReadRows(Reader& reader, std::vector<int64_t> rows) {
  auto block = reader.Read(rows);
  INFO(block.status().ToString());
  REQUIRE(block.ok());
  return std::move(*block);
}

Status ReadError(Reader& reader, std::vector<int64_t> rows) {
  auto block = reader.Read(rows);
  REQUIRE_FALSE(block.ok());
  return block.status();
}

std::string FileText(const std::string& path) { return rayd::testing::ReadFile(path); }

// The largest difference between row `row` of the uint8 image column and PIL's pixels in the
// raw file `expected`.
int MaxDiff(const Column& image, int64_t row, const std::string& expected) {
  const std::string want = FileText(expected);
  REQUIRE(static_cast<int64_t>(want.size()) == image.RowBytes());
  const uint8_t* got = image.data + row * image.RowBytes();
  int worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(int{got[i]} - int{static_cast<uint8_t>(want[i])}));
  }
  return worst;
}

// JPEG decoders may round differently (a PIL wheel brings its own libjpeg-turbo; Debian's
// shares ours and matches exactly); PNG must match exactly.
constexpr int kJpegTolerance = 3;

}  // namespace

TEST_CASE("images rows, labels and paths follow ImageFolder's order", "[data][images]") {
  if (!ImagesBuilt()) {
    WARN("this build has no image decoding: format images is not registered");
    return;
  }
  const json& folder = Manifest()["folder"];
  auto reader = Open({{"format", "images"}, {"paths", {folder["root"]}}, {"decode", false}});
  REQUIRE(rayd::data::DescribeSchema(reader->schema()) ==
          "image: bytes, label: int64, path: bytes");
  const json& rows = folder["rows"];
  REQUIRE(reader->num_rows() == static_cast<int64_t>(rows.size()));
  const Block block = ReadRows(*reader, Rows(reader->num_rows()));
  const Column* label = block.Find("label");
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(block.Find("path")->BytesAt(i) == rows[i]["path"].get<std::string>());
    CHECK(label->As<int64_t>()[i] == rows[i]["label"].get<int64_t>());
    CHECK(block.Find("image")->BytesAt(i) == FileText(rows[i]["path"]));
  }
  // Uppercase sorts first (byte order, as Python's sorted); nested folders come after the
  // class folder's own files, as sorted(os.walk()) gives them.
  CHECK(folder["classes"] == json({"Zebra", "bird", "cat", "dog"}));
  CHECK(block.Find("path")->BytesAt(8).ends_with("cat/aa/z.png"));

  // An image file given directly belongs to its parent folder's class.
  const std::string cat = folder["root"].get<std::string>() + "/cat/c1.png";
  auto one = Open({{"format", "images"}, {"paths", {cat}}, {"classes", {"dog", "cat"}}});
  const Block b = ReadRows(*one, {0});
  CHECK(b.Find("label")->As<int64_t>()[0] == 1);
}

TEST_CASE("images decodes PNG exactly as PIL does and JPEG within rounding", "[data][images]") {
  if (!ImagesBuilt()) {
    WARN("this build has no image decoding: format images is not registered");
    return;
  }
  const json& m = Manifest();
  const json& rows = m["folder"]["rows"];
  for (const char* mode : {"RGB", "L"}) {
    SECTION(std::string("mode ") + mode) {
      auto reader = Open({{"format", "images"}, {"paths", {m["folder"]["root"]}}, {"mode", mode}});
      const int64_t channels = std::string(mode) == "RGB" ? 3 : 1;
      REQUIRE(reader->schema()[0].shape == std::vector<int64_t>{m["height"], m["width"], channels});
      // Backwards, to read rows out of order.
      std::vector<int64_t> order = Rows(reader->num_rows());
      std::reverse(order.begin(), order.end());
      const Block block = ReadRows(*reader, order);
      REQUIRE(block.num_rows() == reader->num_rows());
      const Column& image = *block.Find("image");
      for (size_t i = 0; i < order.size(); ++i) {
        const json& row = rows[order[i]];
        INFO(row["path"].get<std::string>() << " as " << mode);
        const int diff = MaxDiff(image, static_cast<int64_t>(i), row["pixels"][mode]);
        if (row["jpeg"].get<bool>()) {
          CHECK(diff <= kJpegTolerance);
        } else {
          CHECK(diff == 0);
        }
      }
      // The pixels, a column the reader built itself, survive the block's serialized layout.
      const std::string bytes = block.Serialize();
      std::shared_ptr<uint8_t[]> aligned(
          new (std::align_val_t(64)) uint8_t[bytes.size()],
          [](uint8_t* p) { operator delete[](p, std::align_val_t(64)); });
      std::memcpy(aligned.get(), bytes.data(), bytes.size());
      auto view = Block::View(aligned, aligned.get(), bytes.size());
      INFO(view.status().ToString());
      REQUIRE(view.ok());
      CHECK(std::memcmp(view->Find("image")->data, image.data,
                        image.RowBytes() * block.num_rows()) == 0);
    }
  }
}

TEST_CASE("images of another size are errors naming them, or resized", "[data][images]") {
  if (!ImagesBuilt()) {
    WARN("this build has no image decoding: format images is not registered");
    return;
  }
  const json& mixed = Manifest()["mixed"];
  const std::string big = mixed["big"], small = mixed["small"];
  SECTION("without size, every image must have the first one's") {
    auto reader = Open({{"format", "images"}, {"paths", {mixed["root"]}}});
    REQUIRE(reader->schema()[0].shape == std::vector<int64_t>{8, 12, 3});
    ReadRows(*reader, {0});
    const Status s = ReadError(*reader, {1});
    CHECK(s.code() == rayd::StatusCode::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains(small) && Catch::Contains("4 x 6 (height x width)") &&
                                Catch::Contains("[8, 12]") && Catch::Contains(big));
  }
  SECTION("with size, another size is an error") {
    auto reader = Open({{"format", "images"}, {"paths", {mixed["root"]}}, {"size", {8, 12}}});
    CHECK_THAT(ReadError(*reader, {1}).message(),
               Catch::Contains(small) && Catch::Contains("not size: [8, 12]"));
  }
  SECTION("resize: true resizes bilinearly") {
    auto reader = Open(
        {{"format", "images"}, {"paths", {mixed["root"]}}, {"size", {8, 12}}, {"resize", true}});
    const Block block = ReadRows(*reader, {0, 1});
    CHECK(MaxDiff(*block.Find("image"), 0, mixed["big_rgb"]) == 0);
    CHECK(MaxDiff(*block.Find("image"), 1, mixed["small_resized_rgb"]) <= 1);
  }
}

TEST_CASE("images corrupt files are errors naming them, or skipped and counted", "[data][images]") {
  if (!ImagesBuilt()) {
    WARN("this build has no image decoding: format images is not registered");
    return;
  }
  const json& c = Manifest()["corrupt"];
  json entry = {{"format", "images"}, {"paths", {c["root"]}}, {"size", {8, 12}}};
  auto reader = Open(entry);
  REQUIRE(reader->num_rows() == 5);
  CHECK_THAT(ReadError(*reader, {0}).message(),
             Catch::Contains(c["a/bad.jpg"].get<std::string>()) && Catch::Contains("corrupt JPEG"));
  CHECK_THAT(
      ReadError(*reader, {1}).message(),
      Catch::Contains(c["a/broken.png"].get<std::string>()) && Catch::Contains("corrupt PNG"));
  CHECK_THAT(ReadError(*reader, {2}).message(),
             Catch::Contains(c["a/gif.jpg"].get<std::string>()) && Catch::Contains("a GIF image"));
  CHECK(ReadRows(*reader, {3, 4}).num_rows() == 2);
  CHECK(reader->skipped_rows() == 0);

  entry["on_error"] = "skip";
  auto skipping = Open(entry);
  const Block block = ReadRows(*skipping, Rows(5));
  REQUIRE(block.num_rows() == 2);
  CHECK(skipping->skipped_rows() == 3);
  CHECK(block.Find("path")->BytesAt(0) == c["a/good.png"].get<std::string>());
  CHECK(block.Find("path")->BytesAt(1) == c["b/good.jpg"].get<std::string>());
  CHECK(block.Find("label")->As<int64_t>()[1] == 1);
}

TEST_CASE("images options and folders are checked", "[data][images]") {
  if (!ImagesBuilt()) {
    WARN("this build has no image decoding: format images is not registered");
    return;
  }
  const json& m = Manifest();
  const json root = m["folder"]["root"];
  auto error = [&](json options) {
    options["format"] = "images";
    options["paths"] = {root};
    return OpenError(options).message();
  };
  CHECK_THAT(error({{"size", {8}}}), Catch::Contains("size: expected [height, width]"));
  CHECK_THAT(error({{"mode", "CMYK"}}), Catch::Contains("mode: expected RGB or L"));
  CHECK_THAT(error({{"decode", "yes"}}), Catch::Contains("decode: expected true or false"));
  CHECK_THAT(error({{"decode", false}, {"size", {8, 12}}}),
             Catch::Contains("size: only for decoded images"));
  CHECK_THAT(error({{"resize", true}}), Catch::Contains("resize: true needs size"));
  CHECK_THAT(error({{"classes", {"dog", "cat"}}}),
             Catch::Contains("class folder 'Zebra' is not in classes"));
  // Listed classes number the folders, whichever of them this split holds.
  auto reader = Open({{"format", "images"},
                      {"paths", {root}},
                      {"decode", false},
                      {"classes", {"dog", "cat", "bird", "Zebra", "unseen"}}});
  const Block block = ReadRows(*reader, {0, 3, 5, 9});
  CHECK(std::vector<int64_t>(block.Find("label")->As<int64_t>(),
                             block.Find("label")->As<int64_t>() + 4) ==
        std::vector<int64_t>{3, 2, 1, 0});
  // A class folder without images is an error, as in ImageFolder.
  const std::string empty = m["corrupt"]["root"].get<std::string>() + "/../emptyclass";
  std::filesystem::create_directories(empty + "/none");
  std::filesystem::create_directories(empty + "/some");
  std::filesystem::copy_file(m["corrupt"]["a/good.png"].get<std::string>(), empty + "/some/x.png",
                             std::filesystem::copy_options::overwrite_existing);
  CHECK_THAT(OpenError({{"format", "images"}, {"paths", {empty}}}).message(),
             Catch::Contains("'none' holds no .jpg, .jpeg or .png file"));
  CHECK_THAT(OpenError({{"format", "images"}, {"paths", {empty + "/none"}}}).message(),
             Catch::Contains("no .jpg, .jpeg or .png file"));
}

#ifdef RAYD_DATA_IMAGES
TEST_CASE("DecodeImage and ResizeBilinear", "[data][images]") {
  using rayd::data::internal::DecodeImage;
  const json& rows = Manifest()["folder"]["rows"];
  const auto d1 = std::find_if(rows.begin(), rows.end(), [](const json& r) {
    return r["path"].get<std::string>().ends_with("dog/d1.png");
  });
  REQUIRE(d1 != rows.end());
  const std::string png = (*d1)["path"];
  auto image = DecodeImage(FileText(png), 3, png);
  REQUIRE(image.ok());
  CHECK(image->height == 8);
  CHECK(image->width == 12);
  CHECK(image->channels == 3);
  CHECK(std::string(image->pixels.begin(), image->pixels.end()) ==
        FileText((*d1)["pixels"]["RGB"]));

  CHECK_THAT(DecodeImage("", 3, "x").status().message(),
             Catch::Equals("x: empty (not a JPEG or PNG image)"));
  CHECK_THAT(DecodeImage("GIF89a....", 3, "x").status().message(),
             Catch::Contains("x: a GIF image"));
  CHECK_THAT(DecodeImage("hello, world", 3, "x").status().message(),
             Catch::Contains("x: not a JPEG or PNG image (it starts with 68 65 6c"));
  CHECK_THAT(DecodeImage("\xff\xd8\xff\xe0 garbage", 3, "x").status().message(),
             Catch::StartsWith("x: corrupt JPEG: "));

  // 1 x 2 -> 1 x 4: pixel centres at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
  const uint8_t in[2] = {0, 100};
  uint8_t out[4];
  rayd::data::internal::ResizeBilinear(in, 1, 2, 1, out, 1, 4);
  CHECK(std::vector<int>(out, out + 4) == std::vector<int>{0, 25, 75, 100});
  // Same size: unchanged; 2 x 2 -> 1 x 1: the mean.
  const uint8_t square[4] = {10, 20, 30, 41};
  uint8_t same[4], one;
  rayd::data::internal::ResizeBilinear(square, 2, 2, 1, same, 2, 2);
  CHECK(std::vector<int>(same, same + 4) == std::vector<int>{10, 20, 30, 41});
  rayd::data::internal::ResizeBilinear(square, 2, 2, 1, &one, 1, 1);
  CHECK(int{one} == 25);
}
#endif

TEST_CASE("webdataset groups members into samples across pax and GNU shards", "[data][images]") {
  const json& wds = Manifest()["wds"];
  auto reader = Open({{"format", "webdataset"}, {"paths", {wds["glob"]}}});
  CHECK(rayd::data::DescribeSchema(reader->schema()) == "png: bytes, cls: int64, json: bytes");
  const json& samples = wds["samples"];
  REQUIRE(reader->num_rows() == static_cast<int64_t>(samples.size()));
  const std::vector<int64_t> order{4, 0, 2, 3, 1};
  const Block block = ReadRows(*reader, order);
  for (size_t i = 0; i < order.size(); ++i) {
    const json& sample = samples[order[i]];
    INFO("sample " << sample["key"].get<std::string>());
    CHECK(block.Find("cls")->As<int64_t>()[i] == sample["cls"].get<int64_t>());
    CHECK(block.Find("json")->BytesAt(i) == sample["json"].get<std::string>());
    CHECK(block.Find("png")->BytesAt(i).starts_with("\x89PNG"));
  }
}

TEST_CASE("webdataset decode: true decodes images as PIL does", "[data][images]") {
  const json& wds = Manifest()["wds"];
  json entry = {{"format", "webdataset"}, {"paths", {wds["glob"]}}, {"decode", true}};
  if (!ImagesBuilt()) {
    CHECK_THAT(OpenError(entry).message(), Catch::Contains("this build has no image decoding"));
    return;
  }
  for (const char* mode : {"RGB", "L"}) {
    entry["mode"] = mode;
    auto reader = Open(entry);
    const int64_t channels = std::string(mode) == "RGB" ? 3 : 1;
    REQUIRE(rayd::data::DescribeSchema(reader->schema()) ==
            "png: uint8[8, 12, " + std::to_string(channels) + "], cls: int64, json: bytes");
    const Block block = ReadRows(*reader, Rows(reader->num_rows()));
    for (int64_t i = 0; i < block.num_rows(); ++i) {
      INFO("sample " << i << " as " << mode);
      CHECK(MaxDiff(*block.Find("png"), i, wds["samples"][i]["png"][mode]) == 0);
    }
  }
  auto jpg = Open(
      {{"format", "webdataset"}, {"paths", {wds["jpg"]}}, {"decode", true}, {"size", {8, 12}}});
  CHECK(rayd::data::DescribeSchema(jpg->schema()) == "jpg: uint8[8, 12, 3], cls: int64");
  const Block block = ReadRows(*jpg, {2, 1, 0});
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(MaxDiff(*block.Find("jpg"), i, wds["jpg_samples"][2 - i]["jpg"]["RGB"]) <=
          kJpegTolerance);
    CHECK(block.Find("cls")->As<int64_t>()[i] == 2 - i);
  }
}

TEST_CASE("webdataset damaged shards are errors naming the shard, member and byte",
          "[data][images]") {
  const json& b = Manifest()["wds_broken"];
  SECTION("a truncated tar") {
    const std::string message =
        OpenError({{"format", "webdataset"}, {"paths", {b["truncated"]}}}).message();
    CHECK_THAT(message, Catch::Contains(b["truncated"].get<std::string>() + ": byte " +
                                        std::to_string(b["truncated_header_at"].get<int>())) &&
                            Catch::Contains("truncated: member 000001.png") &&
                            Catch::Contains("the file ends at byte " +
                                            std::to_string(b["truncated_size"].get<int>())));
  }
  SECTION("a sample lacking a column") {
    json entry = {{"format", "webdataset"}, {"paths", {b["missing"]}}};
    CHECK_THAT(OpenError(entry).message(),
               Catch::Contains(
                   b["missing"].get<std::string>() + ": sample 000001 (its first member at byte " +
                   std::to_string(b["missing_first_header"].get<int>()) + ") has no .cls member"));
    entry["on_error"] = "skip";
    auto reader = Open(entry);
    REQUIRE(reader->num_rows() == 4);
    const Block block = ReadRows(*reader, Rows(4));
    CHECK(block.num_rows() == 3);
    CHECK(reader->skipped_rows() == 1);
  }
  SECTION("a cls that is not an integer") {
    json entry = {{"format", "webdataset"}, {"paths", {b["badcls"]}}};
    auto reader = Open(entry);
    CHECK_THAT(ReadError(*reader, {0, 1}).message(),
               Catch::Contains(b["badcls"].get<std::string>() + ": member 000001.cls at byte " +
                               std::to_string(b["badcls_header_at"].get<int>()) +
                               ": 'x1' is not an integer"));
    entry["on_error"] = "skip";
    auto skipping = Open(entry);
    CHECK(ReadRows(*skipping, Rows(3)).num_rows() == 2);
    CHECK(skipping->skipped_rows() == 1);
  }
  SECTION("a corrupt image") {
    if (!ImagesBuilt()) return;
    json entry = {{"format", "webdataset"}, {"paths", {b["badpng"]}}, {"decode", true}};
    auto reader = Open(entry);
    CHECK_THAT(ReadError(*reader, {2}).message(),
               Catch::Contains(b["badpng"].get<std::string>() + ": member 000002.png at byte " +
                               std::to_string(b["badpng_header_at"].get<int>()) + ": corrupt PNG"));
    entry["on_error"] = "skip";
    auto skipping = Open(entry);
    CHECK(ReadRows(*skipping, Rows(3)).num_rows() == 2);
    CHECK(skipping->skipped_rows() == 1);
  }
  SECTION("not a tar") {
    const std::string png = Manifest()["mixed"]["big"];  // 300 bytes or so
    CHECK_THAT(OpenError({{"format", "webdataset"}, {"paths", {png}}}).message(),
               Catch::Contains(png + ": byte 0: not a tar, or truncated"));
    const std::string text = b["badcls"].get<std::string>() + ".txt";
    std::ofstream(text) << std::string(2000, 'x');
    CHECK_THAT(OpenError({{"format", "webdataset"}, {"paths", {text}}}).message(),
               Catch::Contains(text + ": byte 0: not a tar header (no checksum)"));
  }
}
