#pragma once
// Writing blocks out as files other tools read: NumPy (.npy, one file per column, as np.load
// reads it), JSON Lines and CSV (with a header row, as Python's json and csv modules read them).
//
//   rayd::data::DatasetWriter writer("npy", "/data/scored");   // or "jsonl", "csv": a file path
//   for (...) RAYD_RETURN_IF_ERROR(writer.Write(block));
//   RAYD_RETURN_IF_ERROR(writer.Close());
//
// Every block must have the first one's columns. npy takes fixed columns only (bytes columns are
// refused naming the column); JSON Lines writes bytes as strings (they must be UTF-8) and a
// row's shaped values as nested arrays; CSV writes scalar columns only, quoting text as RFC 4180
// says. Files appear whole or not at all: each is written under a temporary name and renamed by
// Close. Not thread-safe.

#include <rayd/base/status.h>
#include <rayd/data/block.h>

#include <memory>
#include <string>

namespace rayd::data {

class DatasetWriter {
 public:
  // `path`: a directory for npy (created), else a file.
  DatasetWriter(std::string format, std::string path);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  Status Write(const Block& block);
  // Finishes every file (for npy, writes each column's header with the final row count).
  Status Close();
  int64_t rows() const { return rows_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int64_t rows_ = 0;
};

}  // namespace rayd::data
