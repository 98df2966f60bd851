// FixedColumnsReader.

#include "fixed_columns.h"

#include "../copy_rows.h"

#include <algorithm>
#include <cstring>
#include <regex>

namespace rayd::data::internal {

void AddRun(FixedColumn& column, ColumnRun run) {
  column.index.Add(run.rows);
  column.runs.push_back(std::move(run));
}

Result<std::unique_ptr<Reader>> FixedColumnsReader::Make(std::vector<FixedColumn> columns) {
  if (columns.empty()) return Status::InvalidArgument("the dataset has no columns");
  auto reader = std::make_unique<FixedColumnsReader>();
  reader->rows_ = columns[0].num_rows();
  for (const FixedColumn& c : columns) {
    if (c.num_rows() != reader->rows_) {
      auto files = [](const FixedColumn& col) {
        std::string out;
        for (const ColumnRun& r : col.runs) out += (out.empty() ? "" : ", ") + r.path;
        return out;
      };
      return Status::InvalidArgument(
          "columns of different lengths: '" + columns[0].schema.name + "' has " +
          std::to_string(reader->rows_) + " rows (" + files(columns[0]) + "), '" + c.schema.name +
          "' " + std::to_string(c.num_rows()) + " (" + files(c) + ")");
    }
    reader->schema_.push_back(c.schema);
  }
  reader->columns_ = std::move(columns);
  return std::unique_ptr<Reader>(std::move(reader));
}

Result<Block> FixedColumnsReader::Read(std::span<const int64_t> rows) {
  for (const int64_t row : rows) {
    if (row < 0 || row >= rows_) {
      return Status::InvalidArgument("row " + std::to_string(row) + " is outside the dataset's " +
                                     std::to_string(rows_));
    }
  }
  BlockBuilder out(static_cast<int64_t>(rows.size()));
  std::vector<const uint8_t*> from(rows.size());  // each row's bytes, in the column's files
  for (const FixedColumn& c : columns_) {
    const size_t item = ItemSize(c.schema.dtype);
    Column probe{.schema = c.schema};
    const size_t row_bytes = static_cast<size_t>(probe.RowBytes());
    uint8_t* to = out.AddFixedForOverwrite(c.schema);  // every row is copied in below
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto [run, local] = c.index.Locate(rows[i]);
      const ColumnRun& r = c.runs[run];
      from[i] = r.first_row + local * r.stride;
    }
    if (!c.big_endian || item == 1) {
      CopyRows(to, rows.size(), row_bytes, [&](size_t i) { return from[i]; });
      continue;
    }
    for (size_t i = 0; i < rows.size(); ++i, to += row_bytes) {
      for (size_t at = 0; at < row_bytes; at += item) {
        std::reverse_copy(from[i] + at, from[i] + at + item, to + at);
      }
    }
  }
  return std::move(out).Finish();
}

std::string ColumnNameOf(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (const char* ext : {".gz", ".npy", ".bin", ".idx"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      name.resize(name.size() - e.size());
    }
  }
  static const std::regex idx_suffix("[-_.]idx[0-9]+[-_.]ubyte$");
  return std::regex_replace(name, idx_suffix, "");
}

}  // namespace rayd::data::internal
