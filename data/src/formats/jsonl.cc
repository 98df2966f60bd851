// JSON Lines: one JSON object per line, as Python's json.dumps writes them. The columns are the
// keys of the first row (in its order); a key's type comes from the first file's first 1000
// rows: int64 when every value is an integer, float64 when every value is a number, uint8 for
// booleans, bytes for strings (UTF-8), and float32 with a fixed shape for arrays of numbers
// (nested arrays give a shape of several dimensions). Every row needs every column (extra
// keys are ignored); a row that is not an object, lacks a column or has another type is an
// error naming the file, the row and its line (or skipped and counted, with on_error: skip).

#include <cstring>

#include "../files.h"
#include "text_rows.h"
#include "indexed_reader.h"

namespace rayd::data::internal::jsonl_format {

using Json = nlohmann::ordered_json;

// The shape of a (nested) array of numbers; false when it is ragged or holds anything else.
bool ArrayShape(const Json& value, std::vector<int64_t>& shape) {
  shape.clear();
  const Json* at = &value;
  while (at->is_array()) {
    shape.push_back(static_cast<int64_t>(at->size()));
    if (at->empty()) return true;
    at = &(*at)[0];
  }
  if (!at->is_number()) return false;
  // Every element must have the same shape: checked as it is flattened.
  return true;
}

// Appends the numbers of `value` (of shape `shape`) to `out`; false when its shape differs.
bool Flatten(const Json& value, const std::vector<int64_t>& shape, size_t dim,
             std::vector<float>& out) {
  if (dim == shape.size()) {
    if (!value.is_number()) return false;
    out.push_back(value.get<float>());
    return true;
  }
  if (!value.is_array() || static_cast<int64_t>(value.size()) != shape[dim]) return false;
  for (const Json& v : value) {
    if (!Flatten(v, shape, dim + 1, out)) return false;
  }
  return true;
}

class JsonlReader : public IndexedReader {
 public:
  static Result<std::unique_ptr<Reader>> Open(const DatasetSpec& spec,
                                              const std::vector<std::string>& files);
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  bool skip_ = false;
  std::vector<TextFile> files_;
};

Result<std::unique_ptr<Reader>> JsonlReader::Open(const DatasetSpec& spec,
                                                  const std::vector<std::string>& files) {
  auto reader = std::make_unique<JsonlReader>();
  reader->skip_ = spec.skip_errors();
  for (const std::string& path : files) {
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
    TextFile text = IndexRecords(bytes, 0, /*quotes=*/false);
    reader->index_.Add(text.records());
    reader->files_.push_back(std::move(text));
  }
  // Columns from the first row, types from the first rows.
  Json first;
  std::string first_where;
  int64_t seen = 0;
  std::vector<std::string> names;
  enum Kind { kInt, kFloat, kBool, kText, kArray };
  std::vector<Kind> kinds;
  std::vector<std::vector<int64_t>> shapes;
  for (const TextFile& text : reader->files_) {
    for (int64_t r = 0; r < text.records() && seen < 1000; ++r, ++seen) {
      Json row = Json::parse(text.Record(r), nullptr, /*allow_exceptions=*/false);
      if (!row.is_object()) continue;  // reported when read
      if (names.empty()) {
        for (const auto& [key, value] : row.items()) {
          names.push_back(key);
          std::vector<int64_t> shape;
          if (value.is_boolean()) {
            kinds.push_back(kBool);
          } else if (value.is_number_integer()) {
            kinds.push_back(kInt);
          } else if (value.is_number()) {
            kinds.push_back(kFloat);
          } else if (value.is_string()) {
            kinds.push_back(kText);
          } else if (value.is_array() && ArrayShape(value, shape)) {
            kinds.push_back(kArray);
          } else {
            return Status::InvalidArgument(At(text.bytes->path(), "line " +
                                                                     std::to_string(text.lines[r])) +
                                           "key '" + key + "' holds " + value.type_name() +
                                           ", which rayd Data does not read as a column");
          }
          shapes.push_back(shape);
        }
        continue;
      }
      for (size_t c = 0; c < names.size(); ++c) {
        if (!row.contains(names[c])) continue;
        const Json& v = row[names[c]];
        if (kinds[c] == kInt && v.is_number() && !v.is_number_integer()) kinds[c] = kFloat;
      }
    }
  }
  for (size_t c = 0; c < names.size(); ++c) {
    DType dtype = kinds[c] == kInt     ? DType::kInt64
                  : kinds[c] == kFloat ? DType::kFloat64
                  : kinds[c] == kBool  ? DType::kUInt8
                  : kinds[c] == kText  ? DType::kBytes
                                       : DType::kFloat32;
    reader->schema_.push_back({names[c], dtype, shapes[c]});
  }
  return std::unique_ptr<Reader>(std::move(reader));
}

Result<Block> JsonlReader::Read(std::span<const int64_t> rows) {
  const size_t width = schema_.size();
  std::vector<std::vector<uint8_t>> fixed(width);
  std::vector<std::vector<std::string>> texts(width);
  std::vector<float> floats;
  int64_t kept = 0;
  for (const int64_t row : rows) {
    if (row < 0 || row >= num_rows()) {
      return Status::InvalidArgument("row " + std::to_string(row) + " is outside the dataset's " +
                                     std::to_string(num_rows()));
    }
    const auto [file, local] = index_.Locate(row);
    const TextFile& text = files_[file];
    std::string problem;
    Json value = Json::parse(text.Record(local), nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      problem = "not valid JSON";
    } else if (!value.is_object()) {
      problem = "a JSON " + std::string(value.type_name()) + ", not an object";
    }
    // Convert every column first, so that a bad row adds nothing.
    std::vector<std::string> cells(width);
    for (size_t c = 0; c < width && problem.empty(); ++c) {
      const ColumnSchema& col = schema_[c];
      if (!value.contains(col.name)) {
        problem = "no key '" + col.name + "'";
        break;
      }
      const Json& v = value[col.name];
      std::string& cell = cells[c];
      auto put = [&cell](const auto& x) {
        cell.assign(reinterpret_cast<const char*>(&x), sizeof(x));
      };
      switch (col.dtype) {
        case DType::kInt64:
          if (!v.is_number_integer()) problem = "'" + col.name + "' is not an integer";
          else put(v.get<int64_t>());
          break;
        case DType::kFloat64:
          if (!v.is_number()) problem = "'" + col.name + "' is not a number";
          else put(v.get<double>());
          break;
        case DType::kUInt8:
          if (!v.is_boolean()) problem = "'" + col.name + "' is not true or false";
          else put(static_cast<uint8_t>(v.get<bool>()));
          break;
        case DType::kBytes:
          if (!v.is_string()) problem = "'" + col.name + "' is not a string";
          else cell = v.get<std::string>();
          break;
        default:
          floats.clear();
          if (!Flatten(v, col.shape, 0, floats)) {
            problem = "'" + col.name + "' is not an array of numbers of shape " +
                      DescribeSchema({{"", DType::kFloat32, col.shape}}).substr(2);
          } else {
            cell.assign(reinterpret_cast<const char*>(floats.data()), floats.size() * 4);
          }
      }
    }
    if (!problem.empty()) {
      if (skip_) {
        ++skipped_;
        continue;
      }
      return Status::InvalidArgument(
          At(text.bytes->path(), "row " + std::to_string(local + 1) + " (line " +
                                     std::to_string(text.lines[local]) + ")") +
          problem);
    }
    for (size_t c = 0; c < width; ++c) {
      if (schema_[c].dtype == DType::kBytes) {
        texts[c].push_back(std::move(cells[c]));
      } else {
        fixed[c].insert(fixed[c].end(), cells[c].begin(), cells[c].end());
      }
    }
    ++kept;
  }
  BlockBuilder out(kept);
  for (size_t c = 0; c < width; ++c) {
    if (schema_[c].dtype == DType::kBytes) {
      out.AddBytes(schema_[c].name, texts[c]);
    } else if (!fixed[c].empty()) {
      std::memcpy(out.AddFixed(schema_[c]), fixed[c].data(), fixed[c].size());
    } else {
      out.AddFixed(schema_[c]);
    }
  }
  return std::move(out).Finish();
}

const bool registered = RegisterFormat("jsonl", JsonlReader::Open) &&
                        RegisterFormat("json", JsonlReader::Open);

}  // namespace rayd::data::internal::jsonl_format
