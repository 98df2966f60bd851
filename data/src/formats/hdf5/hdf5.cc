// HDF5 files (.h5, .hdf5), as h5py writes them, read with the HDF5 C library (Debian's
// libhdf5-dev, 1.10). Built only when CMake finds HDF5 (data/cmake/hdf5.cmake).
//
//   datasets:
//     train: {format: hdf5, paths: [data/train-*.h5], datasets: [/images, /labels]}
//
// Options: `datasets` (HDF5 paths inside each file; default: every dataset at the file's root,
// sorted by name). Each dataset is a column named by the last component of its path
// (/images -> images, /meta/ids -> ids); the first dimension is the rows, the others the
// per-row shape. Types: HDF5's integers and floats of the sizes rayd Data holds (uint8 to
// int64, float32, float64; either byte order: HDF5 converts to the machine's); strings,
// compounds, enums (a NumPy bool array), uint64 and float16 are refused, naming the dataset
// and the file. Several files are row shards of one table, in sorted order: each must hold the
// same columns with the same types and per-row shapes, else an error names both files.
//
// How it works: opening a Reader opens every file read-only (H5Fopen) and every column's
// dataset, and keeps them open until the Reader is destroyed; rows are located with a RowIndex
// over the files. A dataset stored contiguous (h5py's default without compression) in the
// machine's byte order is read from a read-only mapping of the file (FileBytes), as a .npy
// is: its rows are plain bytes at one offset. The others go through HDF5: Read() groups the
// requested rows by file, sorts and deduplicates them, coalesces runs of consecutive rows into
// one hyperslab each, reads up to 16 runs per H5Dread (their hyperslabs ORed into one
// selection), then copies the rows into the requested order (rows requested in ascending order
// are read straight into the block). Each dataset keeps a 16 MiB chunk cache, so reading a
// chunked, compressed dataset in order decodes each chunk once; reading it in a random order
// decodes a chunk per row once the dataset outgrows that cache (measured: ~280 us a row for
// gzip chunks of 64 KiB), so shuffle such files within windows, or store them contiguous.
//
// Processes: each Reader opens its own handles in the process that opens it, and a Reader is
// for that process alone. This is what makes rayd's reader safe where PyTorch's DataLoader with
// h5py is not (pytorch#11887): there the Dataset opens the h5py.File in the parent and the
// DataLoader forks workers that all read through the parent's handle (one HDF5 file object,
// its caches and file descriptor, copied into every worker mid-state), which fails with
// corrupt reads. A rayd read task opens its own Reader (H5Fopen in the process that reads).
// One caveat HDF5 imposes: within a process it shares one low-level file object among all
// opens of the same file, so a child forked while its parent holds a file open reuses the
// parent's inherited, copy-on-write object when it opens that file again. That is safe for
// reading: the file is read-only, the copies of its caches are private to each process after
// the fork, and the sec2 driver reads with pread (H5_HAVE_PREADWRITE), never through the file
// offset that a forked descriptor shares. Fork only while no other thread is inside HDF5 (a
// lock held at the fork stays held in the child).
//
// Threads: Debian's libhdf5 (serial flavour, 1.10.8) is built thread-safe (its
// libhdf5.settings says "Threadsafety: yes"; H5_HAVE_THREADSAFE): the library serialises every
// API call behind its own global lock, so Readers on different threads need nothing more (they
// do not read in parallel, though). A build of HDF5 that is not thread-safe (HDF5's own default
// when built from source) is detected at run time (H5is_library_threadsafe), and then every
// HDF5 call here is made under one process-wide mutex instead. HDF5's automatic printing of
// error stacks is turned off around each call; the innermost error's text goes in the Status.

#include <hdf5.h>
#include <rayd/data/reader.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>

#include "../../files.h"

namespace rayd::data::internal::hdf5_format {

// Held around every use of HDF5 in this file: locks the process-wide mutex when the library is
// not thread-safe, and silences HDF5's printing of error stacks (per thread in a thread-safe
// build) until destroyed.
class Hdf5Call {
 public:
  Hdf5Call() {
    if (!ThreadSafe()) lock_ = std::unique_lock<std::recursive_mutex>(Mutex());
    H5Eget_auto2(H5E_DEFAULT, &saved_func_, &saved_data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Hdf5Call() { H5Eset_auto2(H5E_DEFAULT, saved_func_, saved_data_); }
  Hdf5Call(const Hdf5Call&) = delete;
  Hdf5Call& operator=(const Hdf5Call&) = delete;

 private:
  static bool ThreadSafe() {
    static const bool thread_safe = [] {
      hbool_t is_ts = false;
      return H5is_library_threadsafe(&is_ts) >= 0 && is_ts;
    }();
    return thread_safe;
  }
  // Recursive: a Reader destroyed while its opener holds an Hdf5Call takes one of its own.
  static std::recursive_mutex& Mutex() {
    static auto* mu = new std::recursive_mutex();  // never destroyed: Readers may outlive it
    return *mu;
  }

  std::unique_lock<std::recursive_mutex> lock_;
  H5E_auto2_t saved_func_ = nullptr;
  void* saved_data_ = nullptr;
};

// The innermost message on this thread's HDF5 error stack (then cleared).
std::string Hdf5Error() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        if (n == 0 && e->desc != nullptr) *static_cast<std::string*>(data) = e->desc;
        return 0;
      },
      &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "HDF5 error" : text;
}

// One HDF5 identifier, closed by the destructor (under the caller's Hdf5Call).
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), close_(other.close_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      Reset();
      id_ = std::exchange(other.id_, -1);
      close_ = other.close_;
    }
    return *this;
  }
  ~Handle() { Reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  void Reset() {
    if (id_ >= 0) close_(id_);
    id_ = -1;
  }
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// One column's dataset in one file.
struct Dataset {
  Handle id;
  hid_t mem_type = -1;  // a predefined native type: never closed
  std::vector<hsize_t> dims;
  const uint8_t* mapped = nullptr;  // its first row in File::bytes, when read from the mapping
};

struct File {
  std::string path;
  Handle id;
  std::vector<Dataset> datasets;  // one per column, in the schema's order
  int64_t rows = 0;
  std::shared_ptr<const FileBytes> bytes;  // the file mapped, when a dataset is read from it
};

// The rayd dtype of an HDF5 datatype, and the native type HDF5 converts it to; an error text
// for one rayd Data does not hold.
Result<std::pair<DType, hid_t>> MapType(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      switch (size) {
        case 1:
          return is_signed ? std::pair{DType::kInt8, H5T_NATIVE_INT8}
                           : std::pair{DType::kUInt8, H5T_NATIVE_UINT8};
        case 2:
          return is_signed ? std::pair{DType::kInt16, H5T_NATIVE_INT16}
                           : std::pair{DType::kUInt16, H5T_NATIVE_UINT16};
        case 4:
          return is_signed ? std::pair{DType::kInt32, H5T_NATIVE_INT32}
                           : std::pair{DType::kUInt32, H5T_NATIVE_UINT32};
        case 8:
          if (is_signed) return std::pair{DType::kInt64, H5T_NATIVE_INT64};
          return Status::InvalidArgument("uint64 (rayd Data holds integers up to int64)");
        default:
          break;
      }
      return Status::InvalidArgument(std::to_string(size * 8) + "-bit integers");
    }
    case H5T_FLOAT:
      if (size == 4) return std::pair{DType::kFloat32, H5T_NATIVE_FLOAT};
      if (size == 8) return std::pair{DType::kFloat64, H5T_NATIVE_DOUBLE};
      return Status::InvalidArgument(std::to_string(size * 8) + "-bit floats");
    case H5T_STRING:
      return Status::InvalidArgument("strings");
    case H5T_COMPOUND:
      return Status::InvalidArgument("a compound type (a NumPy record array)");
    case H5T_ENUM:
      return Status::InvalidArgument("an enum (h5py stores NumPy bools so: store them as uint8)");
    case H5T_VLEN:
      return Status::InvalidArgument("variable-length sequences");
    case H5T_ARRAY:
      return Status::InvalidArgument("an array type");
    case H5T_OPAQUE:
      return Status::InvalidArgument("an opaque type");
    case H5T_REFERENCE:
      return Status::InvalidArgument("references");
    default:
      return Status::InvalidArgument("a type rayd Data does not hold");
  }
}

// The datasets at the root of `file`, sorted by name ("/name").
Result<std::vector<std::string>> RootDatasets(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t at = 0;
  if (H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &at, collect, &names) < 0) {
    return Status::InvalidArgument(path + ": cannot list its root group: " + Hdf5Error());
  }
  std::vector<std::string> out;
  for (const std::string& name : names) {
    Handle object(H5Oopen(file, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!object.ok()) {
      H5Eclear2(H5E_DEFAULT);  // a dangling soft or external link: not a dataset here
      continue;
    }
    if (H5Iget_type(object.get()) == H5I_DATASET) out.push_back("/" + name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "/meta/ids" -> "ids".
std::string ColumnName(const std::string& dataset) {
  std::string name = dataset;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  return name.substr(name.find_last_of('/') + 1);
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

class Hdf5Reader : public Reader {
 public:
  static Result<std::unique_ptr<Reader>> Open(const DatasetSpec& spec,
                                              const std::vector<std::string>& files);
  ~Hdf5Reader() override {
    Hdf5Call call;
    files_.clear();
  }
  const Schema& schema() const override { return schema_; }
  int64_t num_rows() const override { return index_.num_rows(); }
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  // Opens `path` and the datasets `listed` in it (null: those at its root); the first file sets
  // the schema, later ones must match it. Under an Hdf5Call.
  Status AddFile(const std::string& path, const std::vector<std::string>* listed);
  // Reads the rows `locals` of file `f` (ascending, distinct) of column `c` into `to`. Under an
  // Hdf5Call.
  Status ReadRows(const File& f, size_t c, const std::vector<int64_t>& locals, uint8_t* to);

  // Runs of rows read by one H5Dread. HDF5 1.10 merges each run ORed into a selection with a
  // walk over the runs already there, so one selection of n runs costs O(n^2): measured on
  // 4,096 random rows of 256 bytes, one selection took 215 ms, one read per run 12.5 ms and
  // reads of 16 runs 10 ms.
  static constexpr int kRunsPerRead = 16;

  std::vector<std::string> names_;  // the datasets' HDF5 paths, one per column
  Schema schema_;
  std::vector<File> files_;
  RowIndex index_;
};

Result<std::unique_ptr<Reader>> Hdf5Reader::Open(const DatasetSpec& spec,
                                                 const std::vector<std::string>& files) {
  std::optional<std::vector<std::string>> listed;
  if (spec.options.contains("datasets")) {
    nlohmann::json d = spec.options.at("datasets");
    if (d.is_string()) d = nlohmann::json::array({d});
    if (!d.is_array() || d.empty()) {
      return Status::InvalidArgument("datasets: expected a list of HDF5 dataset paths (/x, /y)");
    }
    listed.emplace();
    for (const nlohmann::json& name : d) {
      if (!name.is_string() || name.get<std::string>().empty()) {
        return Status::InvalidArgument("datasets: expected HDF5 dataset paths (/x, /y)");
      }
      std::string path = name.get<std::string>();
      if (path[0] != '/') path = "/" + path;
      listed->push_back(std::move(path));
    }
  }
  auto reader = std::make_unique<Hdf5Reader>();
  Hdf5Call call;
  for (const std::string& path : files) {
    RAYD_RETURN_IF_ERROR(reader->AddFile(path, listed ? &*listed : nullptr));
  }
  return std::unique_ptr<Reader>(std::move(reader));
}

Status Hdf5Reader::AddFile(const std::string& path, const std::vector<std::string>* listed) {
  File f;
  f.path = path;
  f.id = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.id.ok()) return Status::InvalidArgument(path + ": cannot open: " + Hdf5Error());
  const bool first = files_.empty();
  std::vector<std::string> names;
  if (listed != nullptr) {
    names = *listed;
  } else {
    RAYD_ASSIGN_OR_RETURN(names, RootDatasets(f.id.get(), path));
    if (names.empty()) {
      return Status::InvalidArgument(path +
                                     ": no datasets at its root (name them with "
                                     "`datasets: [/group/x, ...]`)");
    }
    if (!first && names != names_) {
      return Status::InvalidArgument(path + ": its datasets (" + Join(names) + ") differ from " +
                                     files_[0].path + "'s (" + Join(names_) + ")");
    }
  }
  // A larger chunk cache than HDF5's 1 MiB default, so that reading a chunked dataset block by
  // block decodes each chunk once even when a block ends inside a chunk of a few MiB.
  Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  H5Pset_chunk_cache(dapl.get(), 1009, 16 << 20, 0.75);
  for (size_t c = 0; c < names.size(); ++c) {
    const std::string& name = names[c];
    const std::string where = path + ": dataset '" + name + "'";
    if (H5Lexists(f.id.get(), name.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      RAYD_ASSIGN_OR_RETURN(std::vector<std::string> there, RootDatasets(f.id.get(), path));
      return Status::NotFound(path + ": no dataset '" + name + "' (its root holds: " +
                              (there.empty() ? std::string("no datasets") : Join(there)) + ")");
    }
    Dataset d;
    d.id = Handle(H5Dopen2(f.id.get(), name.c_str(), dapl.get()), H5Dclose);
    if (!d.id.ok()) return Status::InvalidArgument(where + ": cannot open: " + Hdf5Error());
    Handle type(H5Dget_type(d.id.get()), H5Tclose);
    Handle space(H5Dget_space(d.id.get()), H5Sclose);
    if (!type.ok() || !space.ok()) return Status::InvalidArgument(where + ": " + Hdf5Error());
    Result<std::pair<DType, hid_t>> mapped = MapType(type.get());
    if (!mapped.ok()) {
      return Status::InvalidArgument(where + " holds " + mapped.status().message() +
                                     ", which rayd Data does not read (it reads uint8 to int64, "
                                     "float32 and float64)");
    }
    d.mem_type = mapped->second;
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 1) {
      return Status::InvalidArgument(where + " is a scalar (or empty) dataset: it has no rows");
    }
    d.dims.resize(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), d.dims.data(), nullptr);
    ColumnSchema schema{ColumnName(name), mapped->first, {}};
    for (int i = 1; i < rank; ++i) schema.shape.push_back(static_cast<int64_t>(d.dims[i]));
    const int64_t rows = static_cast<int64_t>(d.dims[0]);
    // h5py's default layout (contiguous: no chunks, so no compression) in the machine's byte
    // order holds the rows as plain bytes at one offset in the file: read them from a mapping,
    // as for .npy, instead of through HDF5 (measured on random rows of 256 bytes from a 51 MB
    // file: 3 to 13 us a row through HDF5's selections, 0.13 us from the mapping).
    const haddr_t offset = H5Dget_offset(d.id.get());
    if (offset != HADDR_UNDEF && H5Tequal(type.get(), d.mem_type) > 0) {
      if (f.bytes == nullptr) {
        Result<std::shared_ptr<const FileBytes>> bytes = FileBytes::Open(path);
        if (bytes.ok() && !(*bytes)->gzipped()) f.bytes = *bytes;
      }
      const uint64_t size = static_cast<uint64_t>(rows * Column{.schema = schema}.RowBytes());
      if (f.bytes != nullptr && offset + size <= f.bytes->size()) {
        d.mapped = f.bytes->data() + offset;
      }
    }
    H5Eclear2(H5E_DEFAULT);
    if (first) {
      for (size_t other = 0; other < schema_.size(); ++other) {
        if (schema_[other].name == schema.name) {
          return Status::InvalidArgument(path + ": datasets '" + names_[other] + "' and '" + name +
                                         "' both make column '" + schema.name + "'");
        }
      }
      schema_.push_back(schema);
      names_.push_back(name);
    } else if (schema != schema_[c]) {
      return Status::InvalidArgument(where + " is " + DescribeSchema({schema}) + " but " +
                                     DescribeSchema({schema_[c]}) + " in " + files_[0].path +
                                     " (shards must hold the same columns and row shapes)");
    }
    if (c == 0) {
      f.rows = rows;
    } else if (rows != f.rows) {
      return Status::InvalidArgument(path + ": datasets of different lengths: '" + names[0] +
                                     "' has " + std::to_string(f.rows) + " rows, '" + name + "' " +
                                     std::to_string(rows));
    }
    f.datasets.push_back(std::move(d));
  }
  index_.Add(f.rows);
  files_.push_back(std::move(f));
  return Status::Ok();
}

Status Hdf5Reader::ReadRows(const File& f, size_t c, const std::vector<int64_t>& locals,
                            uint8_t* to) {
  const Dataset& d = f.datasets[c];
  const int64_t row_bytes = Column{.schema = schema_[c]}.RowBytes();
  Handle file_space(H5Dget_space(d.id.get()), H5Sclose);
  std::vector<hsize_t> start(d.dims.size(), 0), count = d.dims;
  for (size_t i = 0; i < locals.size();) {
    // Up to kRunsPerRead runs of consecutive rows, one hyperslab each, ORed into one selection.
    const size_t first = i;
    H5S_seloper_t op = H5S_SELECT_SET;
    for (int runs = 0; i < locals.size() && runs < kRunsPerRead; ++runs) {
      size_t j = i + 1;
      while (j < locals.size() && locals[j] == locals[j - 1] + 1) ++j;
      start[0] = static_cast<hsize_t>(locals[i]);
      count[0] = static_cast<hsize_t>(j - i);
      if (H5Sselect_hyperslab(file_space.get(), op, start.data(), nullptr, count.data(), nullptr) <
          0) {
        return Status::Internal(f.path + ": selecting rows: " + Hdf5Error());
      }
      op = H5S_SELECT_OR;
      i = j;
    }
    count[0] = static_cast<hsize_t>(i - first);
    Handle mem_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr),
                     H5Sclose);
    if (H5Dread(d.id.get(), d.mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT,
                to + static_cast<int64_t>(first) * row_bytes) < 0) {
      return Status::InvalidArgument(At(f.path, "dataset '" + names_[c] + "'") +
                                     "cannot read rows " + std::to_string(locals[first]) + " to " +
                                     std::to_string(locals[i - 1]) + ": " + Hdf5Error());
    }
  }
  return Status::Ok();
}

Result<Block> Hdf5Reader::Read(std::span<const int64_t> rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  bool ascending = true;
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || rows[i] >= num_rows()) {
      return Status::InvalidArgument("row " + std::to_string(rows[i]) +
                                     " is outside the dataset's " + std::to_string(num_rows()));
    }
    if (i > 0 && rows[i] <= rows[i - 1]) ascending = false;
  }
  // Each file's requested rows: (row in the file, position in the block), sorted by row.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> wanted(files_.size());
  for (int64_t i = 0; i < n; ++i) {
    const auto [file, local] = index_.Locate(rows[i]);
    wanted[file].emplace_back(local, i);
  }
  BlockBuilder out(n);
  std::vector<uint8_t*> to;
  std::vector<int64_t> row_bytes;
  for (const ColumnSchema& c : schema_) {
    to.push_back(out.AddFixed(c));
    row_bytes.push_back(Column{.schema = c}.RowBytes());
  }
  Hdf5Call call;
  std::vector<int64_t> locals;
  std::vector<uint8_t> buffer;
  for (size_t f = 0; f < files_.size(); ++f) {
    auto& these = wanted[f];
    if (these.empty()) continue;
    if (!ascending) std::sort(these.begin(), these.end());
    locals.clear();
    for (const auto& [local, pos] : these) {
      if (locals.empty() || locals.back() != local) locals.push_back(local);
    }
    for (size_t c = 0; c < schema_.size(); ++c) {
      if (row_bytes[c] == 0) continue;  // a dimension of 0: nothing to read
      if (const uint8_t* mapped = files_[f].datasets[c].mapped) {
        for (const auto& [local, pos] : these) {
          std::memcpy(to[c] + pos * row_bytes[c], mapped + local * row_bytes[c],
                      static_cast<size_t>(row_bytes[c]));
        }
        continue;
      }
      if (ascending) {  // distinct rows whose places in the block are consecutive
        RAYD_RETURN_IF_ERROR(
            ReadRows(files_[f], c, locals, to[c] + these.front().second * row_bytes[c]));
        continue;
      }
      buffer.resize(locals.size() * static_cast<size_t>(row_bytes[c]));
      RAYD_RETURN_IF_ERROR(ReadRows(files_[f], c, locals, buffer.data()));
      size_t at = 0;  // index into locals of the current row
      for (const auto& [local, pos] : these) {
        while (locals[at] != local) ++at;
        std::memcpy(to[c] + pos * row_bytes[c], buffer.data() + at * row_bytes[c],
                    static_cast<size_t>(row_bytes[c]));
      }
    }
  }
  return std::move(out).Finish();
}

const bool registered = RegisterFormat("hdf5", Hdf5Reader::Open);

}  // namespace rayd::data::internal::hdf5_format
