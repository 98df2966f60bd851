#include "rayd/base/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
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

namespace {

// A descriptor of the directory at `path` (not following a link), or -1.
int OpenDirectory(const fs::path& path) {
  return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// Whether the directory open at `fd` has a live owner: someone holds a lock on it. When nobody
// does, this call's exclusive lock is left held (until `fd` closes), so that no owner can take
// it meanwhile.
bool Owned(int fd) {
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EINTR) return true;  // EWOULDBLOCK: held
  }
  return false;
}

// rename(2) that fails with EEXIST where `to` exists (a plain rename would replace an empty
// directory there).
int RenameNoReplace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
  // A file system without the flag: the same, with a moment between the look and the rename.
  struct stat st {};
  if (::lstat(to.c_str(), &st) == 0) {
    errno = EEXIST;
    return -1;
  }
  return ::rename(from.c_str(), to.c_str());
}

}  // namespace

Status MakeOwnedDirectory(const std::string& path_text) {
  const fs::path path = path_text;
  const fs::path making = path_text + ".new";
  std::string why;
  // A node that starts may remove `making` while it is not yet locked (it looks dead then):
  // the rename fails and this makes it again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::error_code ec;
    fs::remove_all(making, ec);  // only this process uses this name
    if (::mkdir(making.c_str(), 0755) != 0) {
      why = std::strerror(errno);
      continue;
    }
    // Not O_CLOEXEC: the processes this one starts hold the lock too, while they run.
    const int fd = ::open(making.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int locked;
    while ((locked = ::flock(fd, LOCK_SH)) != 0 && errno == EINTR) {
    }
    if (locked == 0 && RenameNoReplace(making, path) == 0) {
      return Status::Ok();  // `fd` stays open: the lock lasts as long as this process
    }
    const int error = errno;
    why = std::strerror(error);
    ::close(fd);
    fs::remove_all(making, ec);
    if (error == EEXIST || error == ENOTEMPTY) break;  // `path` is someone else's
  }
  return Status::Internal("cannot make the directory " + path.string() + ": " + why);
}

std::vector<std::string> RemoveDeadOwnedDirectories(const std::string& parent,
                                                    std::string_view prefix) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.filename().string().rfind(prefix, 0) != 0) continue;
    if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
    const int fd = OpenDirectory(path);
    if (fd < 0) continue;
    if (!Owned(fd)) {
      std::error_code gone;
      fs::remove_all(path, gone);
      if (!gone) removed.push_back(path.string());
    }
    ::close(fd);
  }
  return removed;
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
