// FileBytes and RowIndex.

#include "files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rayd::data::internal {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return Status::NotFound(path + ": " + what + ": " + std::strerror(errno));
}

// Inflates a whole gzip stream (several members too, as gzip -d does).
Result<std::string> Inflate(const std::string& path, const uint8_t* data, size_t size) {
  std::string out;
  out.resize(std::max<size_t>(size * 4, 1 << 16));
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return Status::Internal("zlib inflateInit failed");
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  size_t have = 0;
  while (true) {
    if (have == out.size()) out.resize(out.size() * 2);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    z.avail_out = static_cast<uInt>(out.size() - have);
    const int rc = inflate(&z, Z_NO_FLUSH);
    have = out.size() - z.avail_out;
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      inflateReset(&z);  // another member follows
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string why = z.msg ? z.msg : "corrupt data";
      const size_t at = size - z.avail_in;
      inflateEnd(&z);
      return Status::InvalidArgument(path + ": gzip: " + why + " at compressed byte " +
                                     std::to_string(at));
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0) {
      inflateEnd(&z);
      return Status::InvalidArgument(path + ": gzip: the file is truncated (" +
                                     std::to_string(have) + " bytes inflated)");
    }
  }
  inflateEnd(&z);
  out.resize(have);
  return out;
}

// Files smaller than this are read, not mapped. A mapping costs a page fault, and its munmap
// in a process with other threads running costs a TLB shootdown on their CPUs: a 1.2 KiB JPEG
// took ~11 us to open, map, touch and unmap beside one other busy thread, ~4.5 us to read.
constexpr size_t kReadBelow = 64 * 1024;

// Reads [0, size) of `fd` into `out`, shorter if the file shrank meanwhile.
Status ReadWhole(int fd, size_t size, std::string& out, const std::string& path) {
  out.resize(size);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, out.data() + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read", path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<const FileBytes>> FileBytes::Open(const std::string& path,
                                                          bool inflate) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = Errno("cannot stat", path);
    ::close(fd);
    return s;
  }
  std::shared_ptr<FileBytes> file(new FileBytes());
  file->path_ = path;
  const size_t size = static_cast<size_t>(st.st_size);
  Status opened = Status::Ok();
  if (size > 0 && size < kReadBelow) {
    opened = ReadWhole(fd, size, file->read_, path);
    file->data_ = reinterpret_cast<const uint8_t*>(file->read_.data());
    file->size_ = file->read_.size();
  } else if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      opened = Errno("cannot map", path);
    } else {
      file->map_ = map;
      file->map_size_ = size;
      file->data_ = static_cast<const uint8_t*>(map);
      file->size_ = size;
    }
  }
  ::close(fd);
  if (!opened.ok()) return opened;
  if (inflate && file->size_ >= 2 && file->data_[0] == 0x1f && file->data_[1] == 0x8b) {
    Result<std::string> inflated = Inflate(path, file->data_, file->size_);
    if (!inflated.ok()) return inflated.status();
    if (file->map_ != nullptr) ::munmap(file->map_, file->map_size_);
    file->map_ = nullptr;
    file->read_.clear();
    file->inflated_ = std::move(*inflated);
    file->gzipped_ = true;
    file->data_ = reinterpret_cast<const uint8_t*>(file->inflated_.data());
    file->size_ = file->inflated_.size();
  } else if (size > (1 << 20)) {
    ::madvise(file->map_, size, MADV_WILLNEED);
  }
  return std::shared_ptr<const FileBytes>(std::move(file));
}

FileBytes::~FileBytes() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

std::pair<size_t, int64_t> RowIndex::Locate(int64_t row) const {
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), row);
  const size_t file = static_cast<size_t>(it - starts_.begin()) - 1;
  return {file, row - starts_[file]};
}

std::string At(const std::string& path, const std::string& where) {
  return path + ": " + where + ": ";
}

}  // namespace rayd::data::internal
