// DatasetWriter: npy, JSON Lines and CSV.

#include <rayd/data/writer.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace rayd::data {
namespace {

namespace fs = std::filesystem;

// A number as text that reads back to the same value (17 significant digits for doubles).
template <typename T>
std::string NumberText(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    std::ostringstream out;
    out << std::setprecision(std::numeric_limits<T>::max_digits10) << v;
    return out.str();
  } else {
    return std::to_string(v);
  }
}

nlohmann::json Element(const Column& c, int64_t index) {
  switch (c.dtype()) {
    case DType::kUInt8: return c.As<uint8_t>()[index];
    case DType::kInt8: return c.As<int8_t>()[index];
    case DType::kUInt16: return c.As<uint16_t>()[index];
    case DType::kInt16: return c.As<int16_t>()[index];
    case DType::kUInt32: return c.As<uint32_t>()[index];
    case DType::kInt32: return c.As<int32_t>()[index];
    case DType::kInt64: return c.As<int64_t>()[index];
    case DType::kFloat32: return c.As<float>()[index];
    case DType::kFloat64: return c.As<double>()[index];
    case DType::kBytes: break;
  }
  return nullptr;
}

std::string ElementText(const Column& c, int64_t index) {
  switch (c.dtype()) {
    case DType::kFloat32: return NumberText(c.As<float>()[index]);
    case DType::kFloat64: return NumberText(c.As<double>()[index]);
    default: return Element(c, index).dump();
  }
}

// Row `row` of a shaped column as nested arrays.
nlohmann::json Shaped(const Column& c, int64_t row) {
  const int64_t per_row = c.RowElements();
  std::function<nlohmann::json(size_t, int64_t)> nest = [&](size_t dim, int64_t at) {
    if (dim == c.schema.shape.size()) return Element(c, at);
    nlohmann::json out = nlohmann::json::array();
    int64_t stride = 1;
    for (size_t d = dim + 1; d < c.schema.shape.size(); ++d) stride *= c.schema.shape[d];
    for (int64_t i = 0; i < c.schema.shape[dim]; ++i) out.push_back(nest(dim + 1, at + i * stride));
    return out;
  };
  return nest(0, row * per_row);
}

std::string CsvField(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

class DatasetWriter::Impl {
 public:
  Impl(std::string format, std::string path) : format_(std::move(format)), path_(std::move(path)) {}
  ~Impl() {
    for (auto& [final_path, temp] : files_) {
      std::error_code ec;
      fs::remove(temp, ec);
    }
  }

  Status Write(const Block& block) {
    if (!started_) {
      RAYD_RETURN_IF_ERROR(Start(block.schema()));
    } else if (block.schema() != schema_) {
      return Status::InvalidArgument("writing " + path_ + ": a block with columns " +
                                     DescribeSchema(block.schema()) + " after " +
                                     DescribeSchema(schema_));
    }
    if (format_ == "npy") {
      for (size_t i = 0; i < block.columns().size(); ++i) {
        const Column& c = block.columns()[i];
        streams_[i]->write(reinterpret_cast<const char*>(c.data),
                           static_cast<std::streamsize>(block.num_rows() * c.RowBytes()));
      }
    } else {
      std::string out;
      for (int64_t r = 0; r < block.num_rows(); ++r) out += format_ == "csv" ? CsvRow(block, r) : JsonRow(block, r);
      *streams_[0] << out;
    }
    rows_ += block.num_rows();
    for (auto& s : streams_) {
      if (!*s) return Status::ResourceExhausted("writing " + path_ + ": " + std::strerror(errno));
    }
    return Status::Ok();
  }

  Status Close() {
    for (auto& s : streams_) s->flush();
    if (format_ == "npy") {
      for (size_t i = 0; i < schema_.size(); ++i) {
        // The header goes first, with the final row count: written now, into its reserved room.
        streams_[i]->seekp(0);
        *streams_[i] << NpyHeader(schema_[i]);
      }
    }
    for (auto& s : streams_) {
      s->close();
      if (!*s) return Status::ResourceExhausted("writing " + path_ + ": " + std::strerror(errno));
    }
    for (auto& [final_path, temp] : files_) {
      std::error_code ec;
      fs::rename(temp, final_path, ec);
      if (ec) return Status::Internal("renaming " + temp + ": " + ec.message());
    }
    files_.clear();
    return Status::Ok();
  }

  int64_t rows_ = 0;

 private:
  Status Start(const Schema& schema) {
    schema_ = schema;
    started_ = true;
    std::error_code ec;
    if (format_ == "npy") {
      fs::create_directories(path_, ec);
      if (ec) return Status::InvalidArgument("cannot create " + path_ + ": " + ec.message());
      for (const ColumnSchema& c : schema) {
        if (c.dtype == DType::kBytes) {
          return Status::InvalidArgument("npy holds fixed-size numbers; column '" + c.name +
                                         "' holds bytes (write jsonl or csv)");
        }
        RAYD_RETURN_IF_ERROR(Open((fs::path(path_) / (c.name + ".npy")).string()));
        *streams_.back() << std::string(kNpyHeaderBytes, ' ');  // room for the header
      }
      return Status::Ok();
    }
    if (format_ != "jsonl" && format_ != "csv") {
      return Status::InvalidArgument("unknown output format '" + format_ + "' (npy, jsonl, csv)");
    }
    if (fs::path(path_).has_parent_path()) fs::create_directories(fs::path(path_).parent_path(), ec);
    RAYD_RETURN_IF_ERROR(Open(path_));
    if (format_ == "csv") {
      std::string header;
      for (const ColumnSchema& c : schema) {
        if (!c.shape.empty()) {
          return Status::InvalidArgument("csv holds one value per field; column '" + c.name +
                                         "' is " + DescribeSchema({c}) + " (write jsonl or npy)");
        }
        header += (header.empty() ? "" : ",") + CsvField(c.name);
      }
      *streams_[0] << header << "\n";
    }
    return Status::Ok();
  }

  Status Open(const std::string& final_path) {
    const std::string temp = final_path + ".tmp";
    auto stream = std::make_unique<std::ofstream>(temp, std::ios::binary | std::ios::trunc);
    if (!*stream) {
      return Status::InvalidArgument("cannot write " + temp + ": " + std::strerror(errno));
    }
    files_.emplace_back(final_path, temp);
    streams_.push_back(std::move(stream));
    return Status::Ok();
  }

  // Format 1.0: magic, version, a little-endian uint16 length, the dict padded with spaces and
  // ending in a newline so that the data starts at kNpyHeaderBytes (a multiple of 64).
  static constexpr size_t kNpyHeaderBytes = 128;
  std::string NpyHeader(const ColumnSchema& c) const {
    std::string shape = "(" + std::to_string(rows_) + ",";
    for (size_t i = 0; i < c.shape.size(); ++i) {
      shape += (i ? ", " : " ") + std::to_string(c.shape[i]);
    }
    shape += ")";
    std::string dict = "{'descr': '" + std::string(NumpyDescr(c.dtype)) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
    const size_t room = kNpyHeaderBytes - 10;
    dict.resize(room - 1, ' ');
    dict += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(room & 0xff);
    out += static_cast<char>(room >> 8);
    return out + dict;
  }

  std::string CsvRow(const Block& block, int64_t r) const {
    std::string line;
    for (size_t i = 0; i < block.columns().size(); ++i) {
      const Column& c = block.columns()[i];
      if (i) line += ",";
      line += c.is_bytes() ? CsvField(c.BytesAt(r)) : ElementText(c, r);
    }
    return line + "\n";
  }

  std::string JsonRow(const Block& block, int64_t r) const {
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    for (const Column& c : block.columns()) {
      if (c.is_bytes()) {
        row[c.name()] = std::string(c.BytesAt(r));
      } else if (c.schema.shape.empty()) {
        row[c.name()] = Element(c, r);
      } else {
        row[c.name()] = Shaped(c, r);
      }
    }
    return row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }

  const std::string format_, path_;
  Schema schema_;
  bool started_ = false;
  std::vector<std::unique_ptr<std::ofstream>> streams_;
  std::vector<std::pair<std::string, std::string>> files_;  // final path, temporary path
};

DatasetWriter::DatasetWriter(std::string format, std::string path)
    : impl_(std::make_unique<Impl>(std::move(format), std::move(path))) {}
DatasetWriter::~DatasetWriter() = default;

Status DatasetWriter::Write(const Block& block) {
  Status s = impl_->Write(block);
  rows_ = impl_->rows_;
  return s;
}

Status DatasetWriter::Close() { return impl_->Close(); }

}  // namespace rayd::data
