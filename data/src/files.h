#pragma once
// Fetching a dataset's bytes, apart from decoding them: files mapped read-only (gzip files
// inflated once into memory of their own), and the row index over many files that every
// row-addressable reader shares.

#include <rayd/base/status.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rayd::data::internal {

// A file's bytes: mapped read-only, or, for a gzip file (by its magic, whatever its name), its
// inflated contents. Immutable and safe to share between threads; blocks that view it hold a
// shared_ptr to it.
class FileBytes {
 public:
  // `inflate`: false for formats whose raw bytes may start like gzip's magic (token files).
  static Result<std::shared_ptr<const FileBytes>> Open(const std::string& path,
                                                       bool inflate = true);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }
  bool gzipped() const { return !inflated_.empty() || gzipped_; }

 private:
  FileBytes() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // the mapping, when mapped
  size_t map_size_ = 0;
  std::string read_;      // the contents, when read (a small file)
  std::string inflated_;  // the contents, when gzipped
  bool gzipped_ = false;
};

// Rows spread over files: file i holds rows [starts[i], starts[i+1]).
class RowIndex {
 public:
  void Add(int64_t rows) { starts_.push_back(starts_.back() + rows); }
  int64_t num_rows() const { return starts_.back(); }
  size_t num_files() const { return starts_.size() - 1; }
  // The file holding global row `row`, and the row within it.
  std::pair<size_t, int64_t> Locate(int64_t row) const;

 private:
  std::vector<int64_t> starts_{0};
};

// "file.csv: row 12: " style prefixes.
std::string At(const std::string& path, const std::string& where);

}  // namespace rayd::data::internal
