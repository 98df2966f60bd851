// format: hdf5 against files h5py wrote (write_hdf5.py, run with Debian's /usr/bin/python3),
// compared byte for byte with the arrays NumPy held: every dtype, random rows, shards, the
// errors, and processes and threads that read at once.

#include <rayd/data/reader.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <thread>

#include "test_util.h"

namespace rayd::data::hdf5_test {

// The fixtures, written once per test process into a temp dir, removed when it exits (forked
// children leave by _exit).
const std::string& Dir() {
  static std::unique_ptr<rayd::testing::TempDir> dir = [] {
    auto d = std::make_unique<rayd::testing::TempDir>();
    std::string output;
    const int rc = rayd::testing::RunCommand(
        {"/usr/bin/python3", RAYD_DATA_TEST_DIR "/write_hdf5.py", d->path()}, &output);
    INFO("write_hdf5.py (needs Debian's python3-h5py):\n" << output);
    REQUIRE(rc == 0);
    return d;
  }();
  return dir->path();
}

std::string Path(const std::string& name) { return Dir() + "/" + name; }

// NAME.bin: the array's bytes as NumPy held them (C order, little-endian).
std::string Expected(const std::string& name) {
  std::ifstream in(Path(name + ".bin"), std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Result<std::unique_ptr<Reader>> Open(std::vector<std::string> paths,
                                     nlohmann::json options = nlohmann::json::object()) {
  DatasetSpec spec;
  spec.name = "h5";
  spec.format = "hdf5";
  spec.paths = std::move(paths);
  spec.options = std::move(options);
  return OpenReader(spec);
}

// Checks that column `name` of `block` holds rows `rows` of the array NumPy wrote to NAME.bin;
// returns how many rows differ.
int64_t RowsDiffering(const Block& block, const std::string& column, const std::string& bin,
                      std::span<const int64_t> rows) {
  const Column* c = block.Find(column);
  REQUIRE(c != nullptr);
  const std::string want = Expected(bin);
  const int64_t row_bytes = c->RowBytes();
  REQUIRE(block.num_rows() == static_cast<int64_t>(rows.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    REQUIRE(static_cast<size_t>((rows[i] + 1) * row_bytes) <= want.size());
    if (std::memcmp(c->data + i * row_bytes, want.data() + rows[i] * row_bytes,
                    static_cast<size_t>(row_bytes)) != 0) {
      ++differ;
    }
  }
  return differ;
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> rows(static_cast<size_t>(end - begin));
  std::iota(rows.begin(), rows.end(), begin);
  return rows;
}

const char* kAColumns[] = {"be", "f64", "i16", "i32", "i8", "u16", "u32", "u8", "x", "y"};

TEST_CASE("hdf5: the format is registered", "[hdf5]") {
  const std::vector<std::string> formats = RegisteredFormats();
  CHECK(std::find(formats.begin(), formats.end(), "hdf5") != formats.end());
}

TEST_CASE("hdf5: every root dataset is a column equal to what NumPy wrote", "[hdf5]") {
  auto reader = Open({Path("a.h5")});
  REQUIRE(reader.ok());
  CHECK(DescribeSchema((*reader)->schema()) ==
        "be: int32, f64: float64[5], i16: int16[2], i32: int32, i8: int8, u16: uint16, "
        "u32: uint32, u8: uint8[28], x: float32[3, 4], y: int64");
  REQUIRE((*reader)->num_rows() == 100);
  const std::vector<int64_t> rows = Range(0, 100);
  auto block = (*reader)->Read(rows);
  REQUIRE(block.ok());
  for (const char* column : kAColumns) {
    INFO(column);
    CHECK(RowsDiffering(*block, column, column, rows) == 0);
  }
}

TEST_CASE("hdf5: rows read in any order, repeated, across chunk edges", "[hdf5]") {
  auto reader = Open({Path("a.h5")});
  REQUIRE(reader.ok());
  std::mt19937_64 rng(7);
  std::vector<int64_t> shuffled = Range(0, 100);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  std::vector<int64_t> descending = Range(0, 100);
  std::reverse(descending.begin(), descending.end());
  const std::vector<std::vector<int64_t>> cases = {
      shuffled,
      descending,
      {5, 5, 99, 0, 42, 43, 44, 7, 5},        // repeats, and a run of three
      {6, 7, 8, 13, 14, 20, 21, 22, 23, 90},  // ascending with gaps: runs that cross chunks of 7
      {99},
      {},
  };
  for (const std::vector<int64_t>& rows : cases) {
    INFO("rows: " << rows.size());
    auto block = (*reader)->Read(rows);
    REQUIRE(block.ok());
    CHECK(block->schema() == (*reader)->schema());
    for (const char* column : kAColumns) {
      INFO(column);
      CHECK(RowsDiffering(*block, column, column, rows) == 0);
    }
  }
  for (int64_t bad : {int64_t{-1}, int64_t{100}}) {
    const std::vector<int64_t> rows = {0, bad};
    auto block = (*reader)->Read(rows);
    REQUIRE_FALSE(block.ok());
    CHECK(block.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(block.status().message(), Catch::Contains(std::to_string(bad)));
  }
}

TEST_CASE("hdf5: `datasets` picks columns in its order, from groups too", "[hdf5]") {
  auto reader = Open({Path("a.h5")}, {{"datasets", {"/meta/ids", "x", "/y"}}});
  REQUIRE(reader.ok());
  CHECK(DescribeSchema((*reader)->schema()) == "ids: uint16, x: float32[3, 4], y: int64");
  const std::vector<int64_t> rows = {3, 1, 4, 1, 5, 9, 2, 6};
  auto block = (*reader)->Read(rows);
  REQUIRE(block.ok());
  CHECK(RowsDiffering(*block, "ids", "ids", rows) == 0);
  CHECK(RowsDiffering(*block, "x", "x", rows) == 0);
  CHECK(RowsDiffering(*block, "y", "y", rows) == 0);
}

TEST_CASE("hdf5: files are row shards of one table", "[hdf5]") {
  auto reader = Open({Dir() + "/shard-*.hdf5"});
  REQUIRE(reader.ok());
  CHECK(DescribeSchema((*reader)->schema()) == "label: int32, x: float32[8]");
  REQUIRE((*reader)->num_rows() == 150);
  std::vector<int64_t> shuffled = Range(0, 150);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(11));
  for (const std::vector<int64_t>& rows :
       {Range(0, 150), Range(55, 65), shuffled, std::vector<int64_t>{149, 0, 60, 59, 61}}) {
    auto block = (*reader)->Read(rows);
    REQUIRE(block.ok());
    CHECK(RowsDiffering(*block, "x", "shard_x", rows) == 0);
    CHECK(RowsDiffering(*block, "label", "shard_label", rows) == 0);
  }
}

TEST_CASE("hdf5: shards that disagree are refused, naming both files", "[hdf5]") {
  auto shapes = Open({Dir() + "/shape-*.h5"});
  REQUIRE_FALSE(shapes.ok());
  CHECK(shapes.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(shapes.status().message(),
             Catch::Contains("shape-000.h5") && Catch::Contains("shape-001.h5") &&
                 Catch::Contains("float32[9]") && Catch::Contains("float32[8]"));
  auto columns = Open({Dir() + "/cols-*.h5"});
  REQUIRE_FALSE(columns.ok());
  CHECK_THAT(columns.status().message(), Catch::Contains("cols-000.h5") &&
                                             Catch::Contains("cols-001.h5") &&
                                             Catch::Contains("/label"));
  // Named explicitly, the dataset the second shard lacks is reported as missing there.
  auto named = Open({Dir() + "/cols-*.h5"}, {{"datasets", {"/x", "/label"}}});
  REQUIRE_FALSE(named.ok());
  CHECK(named.status().code() == StatusCode::kNotFound);
  CHECK_THAT(named.status().message(),
             Catch::Contains("cols-001.h5") && Catch::Contains("'/label'"));
}

TEST_CASE("hdf5: a missing dataset is an error naming it and the file", "[hdf5]") {
  for (const char* missing : {"/nope", "/meta/nope", "/nothere/x"}) {
    auto reader = Open({Path("a.h5")}, {{"datasets", {"/x", missing}}});
    REQUIRE_FALSE(reader.ok());
    CHECK(reader.status().code() == StatusCode::kNotFound);
    CHECK_THAT(reader.status().message(), Catch::Contains(std::string("'") + missing + "'") &&
                                              Catch::Contains("a.h5") && Catch::Contains("/x, /y"));
  }
}

TEST_CASE("hdf5: types rayd Data does not hold are refused, naming dataset and file", "[hdf5]") {
  auto all = Open({Path("bad.h5")});
  REQUIRE_FALSE(all.ok());
  CHECK_THAT(all.status().message(),
             Catch::Contains("bad.h5") && Catch::Contains("'/flags'") && Catch::Contains("enum"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/text", "strings"},
      {"/u64", "uint64"},
      {"/half", "16-bit floats"},
      {"/scalar", "no rows"},
  };
  for (const auto& [dataset, why] : cases) {
    auto reader = Open({Path("bad.h5")}, {{"datasets", {"/ok", dataset}}});
    REQUIRE_FALSE(reader.ok());
    CHECK(reader.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(reader.status().message(), Catch::Contains("bad.h5") &&
                                              Catch::Contains("'" + dataset + "'") &&
                                              Catch::Contains(why));
  }
  auto ok = Open({Path("bad.h5")}, {{"datasets", {"/ok"}}});
  REQUIRE(ok.ok());
  CHECK((*ok)->num_rows() == 4);
}

TEST_CASE("hdf5: files it cannot make a table of", "[hdf5]") {
  auto ragged = Open({Path("ragged.h5")});
  REQUIRE_FALSE(ragged.ok());
  CHECK_THAT(ragged.status().message(), Catch::Contains("ragged.h5") &&
                                            Catch::Contains("different lengths") &&
                                            Catch::Contains("10") && Catch::Contains("9"));
  auto groups = Open({Path("groups_only.h5")});
  REQUIRE_FALSE(groups.ok());
  CHECK_THAT(groups.status().message(), Catch::Contains("no datasets at its root"));
  std::ofstream(Path("junk.h5")) << "not an HDF5 file\n";
  auto junk = Open({Path("junk.h5")});
  REQUIRE_FALSE(junk.ok());
  CHECK_THAT(junk.status().message(), Catch::Contains("junk.h5") && Catch::Contains("cannot open"));
  auto bad_option = Open({Path("a.h5")}, {{"datasets", 3}});
  REQUIRE_FALSE(bad_option.ok());
  CHECK_THAT(bad_option.status().message(), Catch::Contains("datasets"));
}

// Reads every row of big.h5 in a random order (seeded by `seed`), 500 rows a time, through
// `reader`; returns how many rows differ from what NumPy wrote, or -1 on an error.
int64_t ReadAllOfBig(Reader& reader, uint64_t seed, const std::string& img,
                     const std::string& cls) {
  std::vector<int64_t> order = Range(0, reader.num_rows());
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  int64_t differ = 0;
  for (size_t at = 0; at < order.size(); at += 500) {
    const size_t end = std::min(order.size(), at + 500);
    std::span<const int64_t> rows(order.data() + at, end - at);
    Result<Block> block = reader.Read(rows);
    if (!block.ok()) return -1;
    const Column* a = block->Find("img");
    const Column* b = block->Find("cls");
    for (size_t i = 0; i < rows.size(); ++i) {
      differ += std::memcmp(a->data + i * 64, img.data() + rows[i] * 64, 64) != 0;
      differ += std::memcmp(b->data + i * 8, cls.data() + rows[i] * 8, 8) != 0;
    }
  }
  return differ;
}

TEST_CASE("hdf5: two forked processes read at once, each through its own Reader", "[hdf5]") {
  const std::string img = Expected("img"), cls = Expected("cls");
  // The parent opens a Reader and reads before forking, as a driver would that looked at the
  // data first: its open file and warm caches are what the children inherit.
  auto parent = Open({Path("big.h5")});
  REQUIRE(parent.ok());
  REQUIRE((*parent)->num_rows() == 20000);
  REQUIRE(ReadAllOfBig(**parent, 1, img, cls) == 0);

  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> children;
  for (uint64_t child = 0; child < 2; ++child) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // no Catch2 in here: report through the exit code only
      ::close(go[1]);
      char byte;
      if (::read(go[0], &byte, 1) != 1) ::_exit(3);
      auto own = Open({Path("big.h5")});
      if (!own.ok()) ::_exit(2);
      int64_t differ = 0;
      for (int pass = 0; pass < 3 && differ == 0; ++pass) {
        differ = ReadAllOfBig(**own, 100 + child * 10 + pass, img, cls);
      }
      ::_exit(differ == 0 ? 0 : differ < 0 ? 2 : 1);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  REQUIRE(::write(go[1], "gg", 2) == 2);  // both start together
  ::close(go[1]);
  // The parent keeps reading through its own Reader meanwhile.
  for (int pass = 0; pass < 3; ++pass) CHECK(ReadAllOfBig(**parent, 7 + pass, img, cls) == 0);
  for (const pid_t pid : children) {
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    pid_t done = 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (done == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("a child reading big.h5 did not finish in 120 s");
    }
    INFO("child exit: 0 equal, 1 rows differ, 2 a read failed");
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("hdf5: two threads read at once, each through its own Reader", "[hdf5]") {
  const std::string img = Expected("img"), cls = Expected("cls");
  std::vector<int64_t> differ(2, -2);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto own = Open({Path("big.h5")});
      if (!own.ok()) return;
      differ[t] = ReadAllOfBig(**own, 200 + t, img, cls);
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(differ == std::vector<int64_t>{0, 0});
}

}  // namespace rayd::data::hdf5_test
