// DatasetWriter: npy, JSON Lines and CSV that NumPy and Python's json and csv modules read back
// as written, and that rayd's own readers read back.

#include <rayd/data/reader.h>
#include <rayd/data/writer.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using namespace rayd::data;
using rayd::Result;
using rayd::Status;

struct WriterDir {
  fs::path path = fs::temp_directory_path() / ("rayd-data-writer-" + std::to_string(::getpid()));
  WriterDir() { fs::create_directories(path); }
  ~WriterDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Rows i = 0..n-1: id i, x = [i, i + 0.5, -i] float32, y = i / 3, text "r<i>" with a comma and
// a quote every third row.
Block Rows(int64_t first, int64_t n) {
  BlockBuilder b(n);
  auto* id = reinterpret_cast<int64_t*>(b.AddFixed({"id", DType::kInt64, {}}));
  auto* x = reinterpret_cast<float*>(b.AddFixed({"x", DType::kFloat32, {3}}));
  auto* y = reinterpret_cast<double*>(b.AddFixed({"y", DType::kFloat64, {}}));
  std::vector<std::string> text;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = first + i;
    id[i] = v;
    x[3 * i] = static_cast<float>(v);
    x[3 * i + 1] = static_cast<float>(v) + 0.5f;
    x[3 * i + 2] = -static_cast<float>(v);
    y[i] = static_cast<double>(v) / 3;
    text.push_back(v % 3 == 0 ? "r" + std::to_string(v) + ", \"q\"" : "r" + std::to_string(v));
  }
  b.AddBytes("text", text);
  return std::move(b).Finish();
}

std::string Python(const std::string& code) {
  std::string out;
  const int rc = rayd::testing::RunCommand({"/usr/bin/python3", "-c", code}, &out, {},
                                           std::chrono::seconds(60));
  INFO(out);
  REQUIRE(rc == 0);
  return out;
}

}  // namespace

TEST_CASE("npy, jsonl and csv written by rayd read back in NumPy, json and csv",
          "[data][writer]") {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    WARN("skipped: /usr/bin/python3 has no numpy");
    return;
  }
  WriterDir dir;
  const std::string npy = (dir.path / "npy").string();
  {
    DatasetWriter writer("npy", npy);
    for (int64_t first : {0, 7}) {
      Result<Block> numbers = Rows(first, 7).Select({"id", "x", "y"});
      REQUIRE(numbers.ok());
      REQUIRE(writer.Write(*numbers).ok());
    }
    REQUIRE(writer.Close().ok());
    CHECK(writer.rows() == 14);
  }
  CHECK(Python("import numpy as np\n"
               "d = '" + npy + "'\n"
               "i = np.load(d + '/id.npy'); x = np.load(d + '/x.npy'); y = np.load(d + '/y.npy')\n"
               "assert i.dtype == np.int64 and i.tolist() == list(range(14)), i\n"
               "assert x.dtype == np.float32 and x.shape == (14, 3), x.shape\n"
               "assert (x[:, 1] == i + 0.5).all() and (x[:, 2] == -i).all()\n"
               "assert (y == i / 3).all()\n"
               "print('ok')\n") == "ok\n");
  const std::string jsonl = (dir.path / "rows.jsonl").string();
  const std::string csv = (dir.path / "rows.csv").string();
  {
    DatasetWriter j("jsonl", jsonl);
    DatasetWriter c("csv", csv);
    for (int64_t first : {0, 5}) {
      REQUIRE(j.Write(Rows(first, 5)).ok());
      Result<Block> scalars = Rows(first, 5).Select({"id", "y", "text"});
      REQUIRE(scalars.ok());
      REQUIRE(c.Write(*scalars).ok());
    }
    REQUIRE(j.Close().ok());
    REQUIRE(c.Close().ok());
  }
  CHECK(Python("import json, csv\n"
               "rows = [json.loads(l) for l in open('" + jsonl + "')]\n"
               "assert [r['id'] for r in rows] == list(range(10))\n"
               "assert rows[3]['x'] == [3.0, 3.5, -3.0] and rows[3]['text'] == 'r3, \"q\"'\n"
               "assert all(r['y'] == r['id'] / 3 for r in rows)\n"
               "c = list(csv.reader(open('" + csv + "', newline='')))\n"
               "assert c[0] == ['id', 'y', 'text'], c[0]\n"
               "assert [int(r[0]) for r in c[1:]] == list(range(10))\n"
               "assert all(float(r[1]) == int(r[0]) / 3 for r in c[1:])\n"
               "assert c[7][2] == 'r6, \"q\"', c[7]\n"
               "print('ok')\n") == "ok\n");
  // rayd's own readers agree.
  Result<std::unique_ptr<Reader>> back =
      OpenReader({.name = "back", .format = "csv", .paths = {csv}});
  REQUIRE(back.ok());
  CHECK((*back)->num_rows() == 10);
  const std::vector<int64_t> rows = {9, 6};
  Result<Block> got = (*back)->Read(rows);
  REQUIRE(got.ok());
  CHECK(got->Find("id")->As<int64_t>()[1] == 6);
  CHECK(got->Find("text")->BytesAt(1) == "r6, \"q\"");
  CHECK(got->Find("y")->As<double>()[0] == 3.0);
}

TEST_CASE("writers refuse what their format cannot hold, and leave no part file",
          "[data][writer]") {
  WriterDir dir;
  DatasetWriter npy("npy", (dir.path / "bytes").string());
  Status s = npy.Write(Rows(0, 2));
  CHECK_THAT(s.message(), Catch::Contains("column 'text' holds bytes"));
  DatasetWriter csv("csv", (dir.path / "shaped.csv").string());
  CHECK_THAT(csv.Write(Rows(0, 2)).message(), Catch::Contains("column 'x' is x: float32[3]"));
  DatasetWriter other("jsonl", (dir.path / "mixed.jsonl").string());
  REQUIRE(other.Write(Rows(0, 2)).ok());
  Result<Block> fewer = Rows(0, 2).Select({"id"});
  REQUIRE(fewer.ok());
  CHECK_THAT(other.Write(*fewer).message(), Catch::Contains("a block with columns id: int64"));
  DatasetWriter unknown("parquet", (dir.path / "x").string());
  CHECK_THAT(unknown.Write(Rows(0, 1)).message(), Catch::Contains("unknown output format"));
  // Nothing closed: no final file appears (temporaries are removed with the writer).
  CHECK_FALSE(fs::exists(dir.path / "mixed.jsonl"));
}
