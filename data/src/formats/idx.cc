// MNIST's IDX format (http://yann.lecun.com/exdb/mnist/), gzipped or not: a big-endian header
// (two zero bytes, a type code, the number of dimensions, each dimension as a uint32) and the
// numbers, big-endian. The first dimension is the rows.
//
// Columns: with `paths`, one per file name, MNIST's own names giving "image" and "label"
// (train-images-idx3-ubyte -> image, t10k-labels-idx1-ubyte.gz -> label; any other file its
// name without extensions); files that give one name are that column's shards, in sorted
// order. With `columns: {NAME: GLOB, ...}` the names are the user's.

#include <map>

#include "../files.h"
#include "fixed_columns.h"

namespace rayd::data::internal::idx_format {
// A named namespace, not an anonymous one: unity builds put several formats in one unit.

struct IdxHeader {
  DType dtype;
  std::vector<int64_t> dims;
  size_t data_at;
};

Result<IdxHeader> ParseHeader(const FileBytes& file) {
  const uint8_t* d = file.data();
  const size_t size = file.size();
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(file.path() + ": not an IDX file: " + why);
  };
  if (size < 4 || d[0] != 0 || d[1] != 0) return bad("its first two bytes are not zero");
  IdxHeader h;
  switch (d[2]) {
    case 0x08: h.dtype = DType::kUInt8; break;
    case 0x09: h.dtype = DType::kInt8; break;
    case 0x0B: h.dtype = DType::kInt16; break;
    case 0x0C: h.dtype = DType::kInt32; break;
    case 0x0D: h.dtype = DType::kFloat32; break;
    case 0x0E: h.dtype = DType::kFloat64; break;
    default: return bad("unknown type code " + std::to_string(d[2]) + " at byte 2");
  }
  const int ndim = d[3];
  if (ndim < 1) return bad("no dimensions (byte 3 is 0)");
  h.data_at = 4 + 4 * static_cast<size_t>(ndim);
  if (size < h.data_at) return bad("the header is cut short at byte " + std::to_string(size));
  for (int i = 0; i < ndim; ++i) {
    const uint8_t* p = d + 4 + 4 * i;
    h.dims.push_back((int64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3]);
  }
  // Sizes that overflow come from a corrupt header (they would wrap round to sizes that fit).
  int64_t row_bytes = static_cast<int64_t>(ItemSize(h.dtype)), data_bytes = 0;
  for (int i = 1; i < ndim; ++i) {
    if (__builtin_mul_overflow(row_bytes, h.dims[i], &row_bytes)) {
      return bad("its dimensions overflow 64 bits");
    }
  }
  if (__builtin_mul_overflow(row_bytes, h.dims[0], &data_bytes)) {
    return bad("its dimensions overflow 64 bits");
  }
  const size_t want = h.data_at + static_cast<size_t>(data_bytes);
  if (size < want) {
    const size_t in_row = (size - h.data_at) / static_cast<size_t>(std::max<int64_t>(1, row_bytes));
    return Status::InvalidArgument(file.path() + ": truncated: the header promises " +
                                   std::to_string(h.dims[0]) + " rows (" + std::to_string(want) +
                                   " bytes) but the file ends at byte " + std::to_string(size) +
                                   ", in row " + std::to_string(in_row));
  }
  return h;
}

std::string MnistName(const std::string& path) {
  std::string name = ColumnNameOf(path);
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("images")) return "image";
  if (ends("labels")) return "label";
  return name;
}

Result<FixedColumn> OpenColumn(const std::string& name, const std::vector<std::string>& files) {
  FixedColumn column;
  column.schema.name = name;
  column.big_endian = true;
  for (const std::string& path : files) {
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
    RAYD_ASSIGN_OR_RETURN(IdxHeader h, ParseHeader(*bytes));
    ColumnSchema schema{name, h.dtype, std::vector<int64_t>(h.dims.begin() + 1, h.dims.end())};
    if (!column.runs.empty() && schema != column.schema) {
      return Status::InvalidArgument(path + ": its rows are " + DescribeSchema({schema}) + " but " +
                                     column.runs[0].path + "'s are " +
                                     DescribeSchema({column.schema}));
    }
    column.schema = schema;
    Column probe{.schema = schema};
    AddRun(column, {.owner = bytes, .first_row = bytes->data() + h.data_at, .rows = h.dims[0],
                    .stride = probe.RowBytes(), .path = path});
  }
  return column;
}

Result<std::unique_ptr<Reader>> OpenIdx(const DatasetSpec& spec,
                                        const std::vector<std::string>& files) {
  std::map<std::string, std::vector<std::string>> by_column;
  if (spec.options.contains("columns")) {
    if (!spec.options["columns"].is_object()) {
      return Status::InvalidArgument("columns: expected a map of column names to paths or globs");
    }
    for (const auto& [name, glob] : spec.options["columns"].items()) {
      if (!glob.is_string()) {
        return Status::InvalidArgument("columns." + name + ": expected a path or glob");
      }
      RAYD_ASSIGN_OR_RETURN(by_column[name], ExpandGlob(glob.get<std::string>()));
    }
  } else {
    for (const std::string& f : files) by_column[MnistName(f)].push_back(f);
  }
  std::vector<FixedColumn> columns;
  for (const auto& [name, paths] : by_column) {
    RAYD_ASSIGN_OR_RETURN(FixedColumn c, OpenColumn(name, paths));
    columns.push_back(std::move(c));
  }
  return FixedColumnsReader::Make(std::move(columns));
}

const bool registered = RegisterFormat("idx", OpenIdx);

}  // namespace rayd::data::internal::idx_format
