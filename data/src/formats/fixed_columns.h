#pragma once
// The shared core of the formats whose columns are fixed-size rows at known places in mapped
// files (IDX, NumPy, token files): each column is a list of runs (a file, where its first row
// starts, how many rows), and reading rows gathers each row's bytes into a new block.

#include <rayd/data/reader.h>

#include <memory>
#include <string>
#include <vector>

#include "../files.h"

namespace rayd::data::internal {

struct ColumnRun {
  std::shared_ptr<const void> owner;  // keeps `first_row` alive (a FileBytes, inflated bytes)
  const uint8_t* first_row = nullptr;
  int64_t rows = 0;
  int64_t stride = 0;  // bytes from one row to the next (token windows overlap by one)
  std::string path;    // where the rows come from, for messages
};

struct FixedColumn {
  ColumnSchema schema;
  std::vector<ColumnRun> runs;
  bool big_endian = false;  // IDX stores multi-byte numbers big-endian: swapped while gathered
  RowIndex index;
  int64_t num_rows() const { return index.num_rows(); }
};

// A reader over fixed columns of equal row counts. `Make` checks the counts (naming the
// columns and their files when they differ).
class FixedColumnsReader : public Reader {
 public:
  static Result<std::unique_ptr<Reader>> Make(std::vector<FixedColumn> columns);
  const Schema& schema() const override { return schema_; }
  int64_t num_rows() const override { return rows_; }
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  std::vector<FixedColumn> columns_;
  Schema schema_;
  int64_t rows_ = 0;
};

// Adds a run to `column`, updating its index.
void AddRun(FixedColumn& column, ColumnRun run);

// The column name a file gives when one file per column: its name without directories,
// extensions (.npy, .gz, .bin) and MNIST's "-idx3-ubyte" part. "train-images-idx3-ubyte.gz" ->
// "train-images".
std::string ColumnNameOf(const std::string& path);

}  // namespace rayd::data::internal
