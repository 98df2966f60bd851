#include "rayd/base/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace rayd {

namespace fs = std::filesystem;

Status WriteFileAtomically(const std::string& path_text, const std::string& contents,
                           bool durable) {
  const fs::path path = path_text;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    return Status::Internal("cannot create " + path.parent_path().string() + ": " + ec.message());
  }
  fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return Status::Internal("cannot write " + temp.string());
  bool ok = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  ok = std::fflush(file) == 0 && ok;
  if (durable) ok = ::fsync(::fileno(file)) == 0 && ok;
  ok = std::fclose(file) == 0 && ok;
  if (ok) fs::rename(temp, path, ec);
  if (!ok || ec) {
    fs::remove(temp, ec);
    return Status::Internal("cannot write " + path.string());
  }
  return Status::Ok();
}

Status AppendToFile(const std::string& path_text, const std::string& contents) {
  const fs::path path = path_text;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << contents;
  out.flush();
  if (!out) return Status::Internal("cannot append to " + path.string());
  return Status::Ok();
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)),
      pending_(std::move(other.pending_)),
      fd_(std::exchange(other.fd_, -1)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    (void)Close();
    path_ = std::move(other.path_);
    pending_ = std::move(other.pending_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Status AppendFile::Append(std::string_view contents) {
  pending_.append(contents);
  return pending_.size() >= kFlushAt ? Flush() : Status::Ok();
}

Status AppendFile::Flush() {
  if (pending_.empty()) return Status::Ok();
  if (fd_ < 0) {
    const fs::path path = path_;
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::Internal("cannot open " + path_ + ": " + std::strerror(errno));
  }
  std::string_view contents = pending_;
  while (!contents.empty()) {
    const ssize_t n = ::write(fd_, contents.data(), contents.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      // What was written stays written; the rest is dropped, and the next Flush starts over on
      // a fresh descriptor.
      pending_.clear();
      ::close(fd_);
      fd_ = -1;
      return Status::Internal("cannot append to " + path_ + ": " + why);
    }
    contents.remove_prefix(static_cast<size_t>(n));
  }
  pending_.clear();
  return Status::Ok();
}

Status AppendFile::Close() {
  Status flushed = Flush();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return flushed;
}

}  // namespace rayd
