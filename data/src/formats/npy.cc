// NumPy's .npy (format versions 1 to 3) and .npz (a zip of .npy files, stored or deflated), as
// numpy.save and numpy.savez write them. C order only; the first dimension is the rows.
//
// Columns: a .npy file is one column, named by its file name without ".npy" (x.npy -> x);
// files that give one name are its shards in sorted order (use `columns: {NAME: GLOB}` to name
// shards like x_000.npy, x_001.npy as one column). Each array in an .npz is a column of that
// name; several .npz files are row shards of one table. `format: npy` takes both.

#include <zlib.h>

#include <charconv>
#include <cstring>
#include <map>
#include <regex>

#include "../files.h"
#include "fixed_columns.h"

namespace rayd::data::internal::npy_format {

struct NpyHeader {
  DType dtype;
  std::vector<int64_t> shape;
  size_t data_at;
};

// Parses the header dict ("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }") of
// the .npy at `d` (`size` bytes); `where` names it in errors.
Result<NpyHeader> ParseNpy(const uint8_t* d, size_t size, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(where + ": not a .npy array: " + why);
  };
  if (size < 10 || std::memcmp(d, "\x93NUMPY", 6) != 0) return bad("no \\x93NUMPY magic");
  const int major = d[6];
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = d[8] | (d[9] << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return bad("the header is cut short");
    header_len = d[8] | (d[9] << 8) | (d[10] << 16) | (size_t{d[11]} << 24);
    header_at = 12;
  } else {
    return bad("format version " + std::to_string(major) + " (rayd reads 1 to 3)");
  }
  if (size < header_at + header_len) return bad("the header runs past the end of the file");
  const std::string header(reinterpret_cast<const char*>(d) + header_at, header_len);
  static const std::regex descr_re(R"('descr'\s*:\s*'([^']*)')");
  static const std::regex fortran_re(R"('fortran_order'\s*:\s*(True|False))");
  static const std::regex shape_re(R"('shape'\s*:\s*\(([^)]*)\))");
  std::smatch m;
  if (!std::regex_search(header, m, descr_re)) return bad("its header has no 'descr'");
  Result<DType> dtype = ParseDType(m[1].str());
  if (!dtype.ok()) return Status::InvalidArgument(where + ": " + dtype.status().message());
  if (std::regex_search(header, m, fortran_re) && m[1] == "True") {
    return bad("Fortran order (save it with np.ascontiguousarray)");
  }
  if (!std::regex_search(header, m, shape_re)) return bad("its header has no 'shape'");
  NpyHeader h{*dtype, {}, header_at + header_len};
  const std::string dims = m[1].str();
  static const std::regex int_re(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), int_re);
       it != std::sregex_iterator(); ++it) {
    int64_t dim = 0;
    const std::string digits = it->str();
    if (std::from_chars(digits.data(), digits.data() + digits.size(), dim).ec != std::errc()) {
      return bad("its shape overflows 64 bits");
    }
    h.shape.push_back(dim);
  }
  if (h.shape.empty()) return bad("a 0-dimensional array has no rows");
  // Sizes that overflow come from a corrupt header (they would wrap round to sizes that fit).
  int64_t row_bytes = static_cast<int64_t>(ItemSize(h.dtype)), data_bytes = 0;
  for (size_t i = 1; i < h.shape.size(); ++i) {
    if (__builtin_mul_overflow(row_bytes, h.shape[i], &row_bytes)) {
      return bad("its shape overflows 64 bits");
    }
  }
  if (__builtin_mul_overflow(row_bytes, h.shape[0], &data_bytes)) {
    return bad("its shape overflows 64 bits");
  }
  const size_t want = h.data_at + static_cast<size_t>(data_bytes);
  if (size < want) {
    return Status::InvalidArgument(
        where + ": truncated: its header promises " + std::to_string(h.shape[0]) + " rows (" +
        std::to_string(want) + " bytes) but it ends at byte " + std::to_string(size) +
        ", in row " + std::to_string((size - h.data_at) / std::max<int64_t>(row_bytes, 1)));
  }
  return h;
}

uint32_t U32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t{p[3]} << 24); }
uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// One member of a zip archive: its bytes, and what keeps them alive (the mapped archive for a
// stored member, its inflated copy for a deflated one).
struct Member {
  std::string name;
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

Result<std::string> InflateRaw(const uint8_t* data, size_t size, size_t out_size,
                               const std::string& where) {
  std::string out(out_size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -15) != Z_OK) return Status::Internal("zlib inflateInit failed");
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return Status::InvalidArgument(where + ": a corrupt deflated member");
  return out;
}

// The members of the zip archive `file`, from its central directory (no zip64: members under
// 4 GiB).
Result<std::vector<Member>> ListZip(const std::shared_ptr<const FileBytes>& file) {
  const uint8_t* d = file->data();
  const size_t size = file->size();
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(file->path() + ": not an .npz (zip) archive: " + why);
  };
  if (size < 22) return bad("too short");
  size_t eocd = size - 22;
  while (U32(d + eocd) != 0x06054b50) {
    if (eocd == 0 || size - eocd > 22 + 65535) return bad("no end of central directory");
    --eocd;
  }
  const size_t count = U16(d + eocd + 10);
  size_t at = U32(d + eocd + 16);
  std::vector<Member> members;
  for (size_t i = 0; i < count; ++i) {
    if (at + 46 > size || U32(d + at) != 0x02014b50) return bad("a bad central directory entry");
    const uint16_t method = U16(d + at + 10);
    const size_t csize = U32(d + at + 20), usize = U32(d + at + 24);
    const size_t name_len = U16(d + at + 28), extra = U16(d + at + 30), comment = U16(d + at + 32);
    const size_t local = U32(d + at + 42);
    if (at + 46 + name_len > size) return bad("a bad central directory entry");
    std::string name(reinterpret_cast<const char*>(d + at + 46), name_len);
    at += 46 + name_len + extra + comment;
    if (local + 30 > size || U32(d + local) != 0x04034b50) return bad("a bad local header");
    const size_t data_at = local + 30 + U16(d + local + 26) + U16(d + local + 28);
    if (data_at + csize > size) return bad("member '" + name + "' runs past the end");
    if (method == 0) {
      members.push_back({name, file, d + data_at, csize});
    } else if (method == 8) {
      RAYD_ASSIGN_OR_RETURN(std::string inflated,
                            InflateRaw(d + data_at, csize, usize, file->path() + ": " + name));
      auto owned = std::make_shared<const std::string>(std::move(inflated));
      members.push_back({name, owned, reinterpret_cast<const uint8_t*>(owned->data()),
                         owned->size()});
    } else {
      return bad("member '" + name + "' uses compression method " + std::to_string(method));
    }
  }
  return members;
}

class Columns {
 public:
  // Adds the array at `data` as rows of column `name`.
  Status Add(const std::string& name, std::shared_ptr<const void> owner, const uint8_t* data,
             size_t size, const std::string& where) {
    RAYD_ASSIGN_OR_RETURN(NpyHeader h, ParseNpy(data, size, where));
    ColumnSchema schema{name, h.dtype, std::vector<int64_t>(h.shape.begin() + 1, h.shape.end())};
    auto [it, fresh] = columns_.try_emplace(name);
    FixedColumn& column = it->second;
    if (fresh) {
      order_.push_back(name);
    } else if (schema != column.schema) {
      return Status::InvalidArgument(where + ": column '" + name + "' is " +
                                     DescribeSchema({schema}) + " here but " +
                                     DescribeSchema({column.schema}) + " in " +
                                     column.runs[0].path);
    }
    column.schema = schema;
    Column probe{.schema = schema};
    AddRun(column, {.owner = std::move(owner), .first_row = data + h.data_at, .rows = h.shape[0],
                    .stride = probe.RowBytes(), .path = where});
    return Status::Ok();
  }
  Result<std::unique_ptr<Reader>> Finish() {
    std::vector<FixedColumn> out;
    for (const std::string& name : order_) out.push_back(std::move(columns_[name]));
    return FixedColumnsReader::Make(std::move(out));
  }

 private:
  std::map<std::string, FixedColumn> columns_;
  std::vector<std::string> order_;
};

Result<std::unique_ptr<Reader>> OpenNpy(const DatasetSpec& spec,
                                        const std::vector<std::string>& files) {
  std::vector<std::pair<std::string, std::string>> named;  // column, file
  if (spec.options.contains("columns")) {
    if (!spec.options["columns"].is_object()) {
      return Status::InvalidArgument("columns: expected a map of column names to paths or globs");
    }
    for (const auto& [name, glob] : spec.options["columns"].items()) {
      if (!glob.is_string()) {
        return Status::InvalidArgument("columns." + name + ": expected a path or glob");
      }
      RAYD_ASSIGN_OR_RETURN(std::vector<std::string> matched, ExpandGlob(glob.get<std::string>()));
      for (const std::string& f : matched) named.emplace_back(name, f);
    }
  } else {
    for (const std::string& f : files) named.emplace_back(ColumnNameOf(f), f);
  }
  Columns columns;
  for (const auto& [name, path] : named) {
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
    const bool zip = bytes->size() >= 4 && U32(bytes->data()) == 0x04034b50;
    if (!zip) {
      RAYD_RETURN_IF_ERROR(columns.Add(name, bytes, bytes->data(), bytes->size(), path));
      continue;
    }
    RAYD_ASSIGN_OR_RETURN(std::vector<Member> members, ListZip(bytes));
    for (const Member& m : members) {
      std::string column = m.name;
      if (column.size() > 4 && column.compare(column.size() - 4, 4, ".npy") == 0) {
        column.resize(column.size() - 4);
      }
      RAYD_RETURN_IF_ERROR(columns.Add(column, m.owner, m.data, m.size, path + ":" + m.name));
    }
  }
  return columns.Finish();
}

const bool registered = RegisterFormat("npy", OpenNpy) && RegisterFormat("npz", OpenNpy);

}  // namespace rayd::data::internal::npy_format
