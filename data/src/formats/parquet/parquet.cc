// Apache Parquet files, read with Apache Arrow's C++ Parquet library (parquet::arrow). Built
// only when CMake finds that library (data/cmake/parquet.cmake; Debian 12 packages none).
//
//   datasets:
//     train: {format: parquet, paths: [data/*.parquet], columns: [text, label],
//             shapes: {embedding: [768]}}
//
// Options: `columns` (the top-level fields to read, in that order; default: every one), and
// `shapes` (a per-row shape for a list column: each row must hold exactly that many values).
// Types: int8 to int64, uint8 to uint32, float, double; bool as uint8; string, binary (also
// large and fixed-size) as bytes; fixed-size lists of numbers (nested ones too) as a fixed
// per-row shape, e.g. fixed_size_list<float, 4> -> float32[4] (`shapes` may reshape one with
// the same number of values); variable-length lists of numbers only with a shape in `shapes`.
// Other types (uint64, timestamps, decimals, structs, maps...) are refused, naming the column;
// leave them out with `columns`. A null is an error naming the file, row and column (with
// on_error: skip, its row is left out and counted). Several files are row shards of one table:
// the columns read must have the same types and per-row shapes in each, else an error names
// both files.
//
// How it works: opening reads each file's footer (schema, row groups and their row counts) and
// indexes the row groups with a RowIndex, so any row is addressable. Read() sorts the requested
// rows by row group, decodes each row group it needs once (only the columns read), and copies
// the rows into their places in the block. The last decoded row group stays cached, so reading
// in order decodes each row group once; a random order over the whole dataset decodes a row
// group per Read for each group it touches, so shuffle Parquet data within windows of row
// groups, or write small row groups.
//
// Threads and processes: a Reader is for one thread and the process that opened it; each
// Reader opens its own files (Arrow's ReadableFile reads with pread) and starts no threads
// (Arrow's use_threads and pre_buffer off).

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/util/config.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <rayd/data/reader.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "../../files.h"
#include "../indexed_reader.h"

namespace rayd::data::internal::parquet_format {

// Arrow's errors become rayd's here: an unreadable file is NotFound, the rest InvalidArgument.
Status FromArrow(const arrow::Status& s, const std::string& where) {
  if (s.ok()) return Status::Ok();
  return s.IsIOError() ? Status::NotFound(where + ": " + s.ToString())
                       : Status::InvalidArgument(where + ": " + s.ToString());
}

std::optional<DType> NumberType(arrow::Type::type id) {
  switch (id) {
    case arrow::Type::INT8:
      return DType::kInt8;
    case arrow::Type::INT16:
      return DType::kInt16;
    case arrow::Type::INT32:
      return DType::kInt32;
    case arrow::Type::INT64:
      return DType::kInt64;
    case arrow::Type::UINT8:
      return DType::kUInt8;
    case arrow::Type::UINT16:
      return DType::kUInt16;
    case arrow::Type::UINT32:
      return DType::kUInt32;
    case arrow::Type::FLOAT:
      return DType::kFloat32;
    case arrow::Type::DOUBLE:
      return DType::kFloat64;
    default:
      return std::nullopt;
  }
}

bool IsBytes(arrow::Type::type id) {
  return id == arrow::Type::STRING || id == arrow::Type::BINARY ||
         id == arrow::Type::LARGE_STRING || id == arrow::Type::LARGE_BINARY ||
         id == arrow::Type::FIXED_SIZE_BINARY;
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The rayd column of an Arrow field; `shape` is the field's entry in `shapes`, if any.
Result<ColumnSchema> MapField(const arrow::Field& field, const std::vector<int64_t>* shape) {
  const std::string& name = field.name();
  const arrow::DataType& type = *field.type();
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument(
        "column '" + name + "' is " + type.ToString() + ": " + why +
        " (rayd Data reads int8 to int64, uint8 to uint32, float, double, bool, string, binary "
        "and fixed-size lists of numbers; leave it out with `columns: [...]`)");
  };
  ColumnSchema out{name, DType::kUInt8, {}};
  if (std::optional<DType> d = NumberType(type.id())) {
    out.dtype = *d;
  } else if (type.id() == arrow::Type::BOOL) {
    out.dtype = DType::kUInt8;
  } else if (IsBytes(type.id())) {
    out.dtype = DType::kBytes;
  } else if (type.id() == arrow::Type::FIXED_SIZE_LIST) {
    const arrow::DataType* t = &type;
    while (t->id() == arrow::Type::FIXED_SIZE_LIST) {
      const auto& list = static_cast<const arrow::FixedSizeListType&>(*t);
      out.shape.push_back(list.list_size());
      t = list.value_type().get();
    }
    std::optional<DType> d = NumberType(t->id());
    if (!d) return refuse("its values are not numbers");
    out.dtype = *d;
  } else if (type.id() == arrow::Type::LIST || type.id() == arrow::Type::LARGE_LIST) {
    const auto& list = static_cast<const arrow::BaseListType&>(type);
    std::optional<DType> d = NumberType(list.value_type()->id());
    if (!d) return refuse("a list whose values are not numbers");
    if (shape == nullptr) {
      return refuse("a list of any length; give its per-row shape with `shapes: {" + name +
                    ": [N, ...]}`, or write it as a fixed-size list,");
    }
    out.dtype = *d;
    out.shape = *shape;
    return out;
  } else if (type.id() == arrow::Type::UINT64) {
    return refuse("rayd Data holds integers up to int64");
  } else {
    return refuse("not a type rayd Data holds");
  }
  if (shape != nullptr) {
    if (out.dtype == DType::kBytes || Elements(*shape) != Elements(out.shape)) {
      return Status::InvalidArgument("shapes." + name + ": column '" + name + "' (" +
                                     type.ToString() + ") cannot take that shape");
    }
    out.shape = *shape;
  }
  return out;
}

// The leaf (Parquet column) indices under a field.
void Leaves(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.is_leaf()) out.push_back(field.column_index);
  for (const parquet::arrow::SchemaField& child : field.children) Leaves(child, out);
}

struct File {
  std::string path;
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<int> leaves;  // the Parquet columns the dataset's columns need
};

struct RowGroup {
  size_t file = 0;
  int group = 0;
  int64_t first_row = 0;  // its first row's place in the file
};

// Copies the values of row `i` of `a` (a chunk of a fixed column of `dtype`, `elements` values
// per row) to `to`; returns what is wrong with the row ("" when nothing is).
std::string CopyFixed(const arrow::Array& a, int64_t i, DType dtype, int64_t elements,
                      uint8_t* to) {
  if (a.IsNull(i)) return "null";
  if (a.type_id() == arrow::Type::BOOL) {
    *to = static_cast<const arrow::BooleanArray&>(a).Value(i) ? 1 : 0;
    return "";
  }
  // Descend lists to the numbers: [start, start + count) in `leaf`.
  const arrow::Array* leaf = &a;
  int64_t start = i, count = 1;
  while (leaf->type_id() == arrow::Type::FIXED_SIZE_LIST) {
    const auto& list = static_cast<const arrow::FixedSizeListArray&>(*leaf);
    start = list.value_offset(start);
    count *= list.list_type()->list_size();
    leaf = list.values().get();
    if (leaf->null_count() > 0) {
      for (int64_t j = start; j < start + count; ++j) {
        if (leaf->IsNull(j)) return "a null inside its list";
      }
    }
  }
  if (leaf->type_id() == arrow::Type::LIST || leaf->type_id() == arrow::Type::LARGE_LIST) {
    int64_t length = 0;
    if (leaf->type_id() == arrow::Type::LIST) {
      const auto& list = static_cast<const arrow::ListArray&>(*leaf);
      start = list.value_offset(i);
      length = list.value_length(i);
      leaf = list.values().get();
    } else {
      const auto& list = static_cast<const arrow::LargeListArray&>(*leaf);
      start = list.value_offset(i);
      length = list.value_length(i);
      leaf = list.values().get();
    }
    if (length != elements) {
      return "a list of " + std::to_string(length) + " values where its shape holds " +
             std::to_string(elements);
    }
    count = length;
    if (leaf->null_count() > 0) {
      for (int64_t j = start; j < start + count; ++j) {
        if (leaf->IsNull(j)) return "a null inside its list";
      }
    }
  }
  const auto& values = static_cast<const arrow::PrimitiveArray&>(*leaf);
  const size_t item = ItemSize(dtype);
  std::memcpy(to, values.values()->data() + (values.offset() + start) * item,
              static_cast<size_t>(count) * item);
  return "";
}

// The bytes of row `i` of `a` (a chunk of a bytes column); nullopt for a null.
std::optional<std::string_view> BytesOf(const arrow::Array& a, int64_t i) {
  if (a.IsNull(i)) return std::nullopt;
  switch (a.type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
      return static_cast<const arrow::BinaryArray&>(a).GetView(i);
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      return static_cast<const arrow::LargeBinaryArray&>(a).GetView(i);
    default:
      return static_cast<const arrow::FixedSizeBinaryArray&>(a).GetView(i);
  }
}

class ParquetReader : public IndexedReader {
 public:
  static Result<std::unique_ptr<Reader>> Open(const DatasetSpec& spec,
                                              const std::vector<std::string>& files);
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  // Opens `path`: its schema (the first file's sets the dataset's, later ones must match) and
  // its row groups.
  Status AddFile(const std::string& path);
  // Makes row group `g` the cached one.
  Status Decode(size_t g);

  std::optional<std::vector<std::string>> columns_;  // `columns`, when given
  std::map<std::string, std::vector<int64_t>> shapes_;
  bool skip_ = false;
  std::vector<std::string> first_fields_;  // the first file's fields, when `columns` is not given
  std::vector<File> files_;
  std::vector<RowGroup> groups_;
  // The last decoded row group: each column's chunks and where each chunk starts.
  std::optional<size_t> cached_;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> cached_columns_;
  std::vector<std::vector<int64_t>> cached_starts_;
};

Result<std::unique_ptr<Reader>> ParquetReader::Open(const DatasetSpec& spec,
                                                    const std::vector<std::string>& files) {
  auto reader = std::make_unique<ParquetReader>();
  reader->skip_ = spec.skip_errors();
  if (spec.options.contains("columns")) {
    const nlohmann::json& c = spec.options.at("columns");
    if (!c.is_array() || c.empty()) {
      return Status::InvalidArgument("columns: expected a list of column names");
    }
    reader->columns_.emplace();
    for (const nlohmann::json& name : c) {
      if (!name.is_string()) return Status::InvalidArgument("columns: expected column names");
      reader->columns_->push_back(name.get<std::string>());
    }
  }
  if (spec.options.contains("shapes")) {
    const nlohmann::json& s = spec.options.at("shapes");
    if (!s.is_object()) {
      return Status::InvalidArgument("shapes: expected a map of column names to shapes");
    }
    for (const auto& [name, dims] : s.items()) {
      std::vector<int64_t>& shape = reader->shapes_[name];
      if (!dims.is_array() || dims.empty()) {
        return Status::InvalidArgument("shapes." + name + ": expected a list of dimensions");
      }
      for (const nlohmann::json& d : dims) {
        if (!d.is_number_integer() || d.get<int64_t>() <= 0) {
          return Status::InvalidArgument("shapes." + name + ": expected positive dimensions");
        }
        shape.push_back(d.get<int64_t>());
      }
    }
  }
  for (const std::string& path : files) {
    try {
      RAYD_RETURN_IF_ERROR(reader->AddFile(path));
    } catch (const std::exception& e) {  // parquet::ParquetException from a corrupt footer
      return Status::InvalidArgument(path + ": " + e.what());
    }
  }
  for (const auto& [name, shape] : reader->shapes_) {
    if (std::none_of(reader->schema_.begin(), reader->schema_.end(),
                     [&](const ColumnSchema& c) { return c.name == name; })) {
      return Status::InvalidArgument("shapes." + name + ": no such column is read");
    }
  }
  return std::unique_ptr<Reader>(std::move(reader));
}

Status ParquetReader::AddFile(const std::string& path) {
  File f;
  f.path = path;
  arrow::Result<std::shared_ptr<arrow::io::ReadableFile>> input =
      arrow::io::ReadableFile::Open(path);
  if (!input.ok()) return FromArrow(input.status(), path);
  parquet::arrow::FileReaderBuilder builder;
  RAYD_RETURN_IF_ERROR(FromArrow(builder.Open(*input), path));
  parquet::ArrowReaderProperties properties(/*use_threads=*/false);
  properties.set_pre_buffer(false);
  RAYD_RETURN_IF_ERROR(FromArrow(builder.properties(properties)->Build(&f.reader), path));
  std::shared_ptr<arrow::Schema> arrow_schema;
  RAYD_RETURN_IF_ERROR(FromArrow(f.reader->GetSchema(&arrow_schema), path));

  std::vector<std::string> names = columns_.value_or(arrow_schema->field_names());
  const bool first = files_.empty();
  if (!columns_) {
    if (first) {
      first_fields_ = names;
    } else if (names != first_fields_) {
      auto join = [](const std::vector<std::string>& v) {
        std::string out;
        for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
        return out;
      };
      return Status::InvalidArgument(path + ": its columns (" + join(names) + ") differ from " +
                                     files_[0].path + "'s (" + join(first_fields_) +
                                     "); pick the shared ones with `columns: [...]`");
    }
  }
  for (size_t c = 0; c < names.size(); ++c) {
    const int index = arrow_schema->GetFieldIndex(names[c]);
    if (index < 0) {
      const bool twice = arrow_schema->GetAllFieldIndices(names[c]).size() > 1;
      std::string there;
      for (const std::string& n : arrow_schema->field_names()) {
        there += (there.empty() ? "" : ", ") + n;
      }
      return twice ? Status::InvalidArgument(path + ": two columns are named '" + names[c] + "'")
                   : Status::NotFound(path + ": no column '" + names[c] + "' (it has: " + there +
                                      ")");
    }
    auto shape = shapes_.find(names[c]);
    Result<ColumnSchema> column =
        MapField(*arrow_schema->field(index), shape == shapes_.end() ? nullptr : &shape->second);
    if (!column.ok()) return Status::InvalidArgument(path + ": " + column.status().message());
    if (first) {
      schema_.push_back(*column);
    } else if (*column != schema_[c]) {
      return Status::InvalidArgument(path + ": column '" + names[c] + "' is " +
                                     DescribeSchema({*column}) + " here but " +
                                     DescribeSchema({schema_[c]}) + " in " + files_[0].path +
                                     " (shards must hold the same columns and per-row shapes)");
    }
    Leaves(f.reader->manifest().schema_fields[static_cast<size_t>(index)], f.leaves);
  }
  std::shared_ptr<parquet::FileMetaData> metadata = f.reader->parquet_reader()->metadata();
  int64_t first_row = 0;
  for (int g = 0; g < metadata->num_row_groups(); ++g) {
    const int64_t rows = metadata->RowGroup(g)->num_rows();
    groups_.push_back({files_.size(), g, first_row});
    index_.Add(rows);
    first_row += rows;
  }
  files_.push_back(std::move(f));
  return Status::Ok();
}

Status ParquetReader::Decode(size_t g) {
  if (cached_ == g) return Status::Ok();
  cached_.reset();
  cached_columns_.clear();
  cached_starts_.clear();
  const File& f = files_[groups_[g].file];
  const std::string where = f.path + ": row group " + std::to_string(groups_[g].group);
  std::shared_ptr<arrow::Table> table;
  try {
#if ARROW_VERSION_MAJOR >= 24
    arrow::Result<std::shared_ptr<arrow::Table>> read =
        f.reader->ReadRowGroup(groups_[g].group, f.leaves);
    if (!read.ok()) return FromArrow(read.status(), where);
    table = *std::move(read);
#else
    RAYD_RETURN_IF_ERROR(
        FromArrow(f.reader->ReadRowGroup(groups_[g].group, f.leaves, &table), where));
#endif
  } catch (const std::exception& e) {
    return Status::InvalidArgument(where + ": " + e.what());
  }
  for (const ColumnSchema& c : schema_) {
    std::shared_ptr<arrow::ChunkedArray> column = table->GetColumnByName(c.name);
    if (column == nullptr) return Status::Internal(where + ": column '" + c.name + "' not read");
    std::vector<int64_t> starts{0};
    for (const std::shared_ptr<arrow::Array>& chunk : column->chunks()) {
      starts.push_back(starts.back() + chunk->length());
    }
    cached_columns_.push_back(std::move(column));
    cached_starts_.push_back(std::move(starts));
  }
  cached_ = g;
  return Status::Ok();
}

Result<Block> ParquetReader::Read(std::span<const int64_t> rows) {
  const size_t n = rows.size();
  // (row group, row in it, place in the block), ordered by row group; the cached one first.
  struct Wanted {
    size_t group;
    int64_t local;
    size_t pos;
  };
  std::vector<Wanted> wanted;
  wanted.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= num_rows()) {
      return Status::InvalidArgument("row " + std::to_string(rows[i]) +
                                     " is outside the dataset's " + std::to_string(num_rows()));
    }
    const auto [group, local] = index_.Locate(rows[i]);
    wanted.push_back({group, local, i});
  }
  std::stable_sort(wanted.begin(), wanted.end(), [&](const Wanted& a, const Wanted& b) {
    const bool a_cached = cached_ == a.group, b_cached = cached_ == b.group;
    return a_cached != b_cached ? a_cached : a.group < b.group;
  });

  std::vector<std::shared_ptr<std::vector<uint8_t>>> fixed(schema_.size());
  std::vector<std::vector<std::string>> bytes(schema_.size());
  std::vector<int64_t> row_bytes(schema_.size()), elements(schema_.size());
  for (size_t c = 0; c < schema_.size(); ++c) {
    if (schema_[c].dtype == DType::kBytes) {
      bytes[c].resize(n);
      continue;
    }
    const Column probe{.schema = schema_[c]};
    row_bytes[c] = probe.RowBytes();
    elements[c] = probe.RowElements();
    fixed[c] = std::make_shared<std::vector<uint8_t>>(n * static_cast<size_t>(row_bytes[c]));
  }
  std::vector<uint8_t> keep(n, 1);
  for (const Wanted& w : wanted) {
    RAYD_RETURN_IF_ERROR(Decode(w.group));
    for (size_t c = 0; c < schema_.size(); ++c) {
      const std::vector<int64_t>& starts = cached_starts_[c];
      const size_t chunk = static_cast<size_t>(
          std::upper_bound(starts.begin(), starts.end(), w.local) - starts.begin() - 1);
      const arrow::Array& array = *cached_columns_[c]->chunk(static_cast<int>(chunk));
      const int64_t i = w.local - starts[chunk];
      std::string problem;
      if (schema_[c].dtype == DType::kBytes) {
        std::optional<std::string_view> value = BytesOf(array, i);
        if (value) {
          bytes[c][w.pos].assign(value->data(), value->size());
        } else {
          problem = "null";
        }
      } else {
        problem = CopyFixed(array, i, schema_[c].dtype, elements[c],
                            fixed[c]->data() + w.pos * static_cast<size_t>(row_bytes[c]));
      }
      if (problem.empty()) continue;
      if (!skip_) {
        const RowGroup& g = groups_[w.group];
        return Status::InvalidArgument(
            At(files_[g.file].path, "row " + std::to_string(g.first_row + w.local) +
                                        " (row group " + std::to_string(g.group) + ")") +
            "column '" + schema_[c].name + "': " + problem);
      }
      keep[w.pos] = 0;
      break;
    }
  }
  BlockBuilder out(static_cast<int64_t>(n));
  for (size_t c = 0; c < schema_.size(); ++c) {
    if (schema_[c].dtype == DType::kBytes) {
      out.AddBytes(schema_[c].name, bytes[c]);
    } else {
      out.AddColumn({.schema = schema_[c], .data = fixed[c]->data()}, fixed[c]);
    }
  }
  Block block = std::move(out).Finish();
  const int64_t kept = std::count(keep.begin(), keep.end(), 1);
  if (kept == static_cast<int64_t>(n)) return block;
  skipped_ += static_cast<int64_t>(n) - kept;
  std::vector<int64_t> kept_rows;
  for (size_t i = 0; i < n; ++i) {
    if (keep[i]) kept_rows.push_back(static_cast<int64_t>(i));
  }
  return block.Take(kept_rows);
}

const bool registered = RegisterFormat("parquet", ParquetReader::Open);

}  // namespace rayd::data::internal::parquet_format
