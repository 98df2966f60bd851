#include "spill.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "rayd/base/logging.h"

namespace rayd::object_store {

IoThread::IoThread() : thread_([this] { Loop(); }) {}

IoThread::~IoThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void IoThread::Submit(std::function<void()> job, bool run_at_shutdown) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back({std::move(job), run_at_shutdown});
  }
  cv_.notify_one();
}

void IoThread::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    if (stop_ && !job.run_at_shutdown) continue;
    lock.unlock();
    job.fn();
    lock.lock();
  }
}

namespace {

std::string Errno(int err) { return std::strerror(err); }

Status SpillError(const std::string& dir, const std::string& reason) {
  return Status::ResourceExhausted("spilling to " + dir + " failed: " + reason);
}

// write(2) until everything is out; returns 0 or an errno.
int WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

Status WriteSpillFile(const std::string& dir, const std::string& path, const uint8_t* data,
                      size_t size) {
  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);  // 0700
  }
  if (ec) return SpillError(dir, ec.message());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return SpillError(dir, Errno(errno));
  int err = WriteAll(fd, data, size);
  // close() is where some file systems (NFS) report a failed write-back.
  if (close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    unlink(path.c_str());
    return SpillError(dir, Errno(err));
  }
  return Status::Ok();
}

Status ReadSpillFile(const std::string& path, uint8_t* out, size_t size) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Internal("opening spill file " + path + ": " + Errno(errno));
  size_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, out + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? Errno(errno) : "the file is shorter than the object";
      close(fd);
      return Status::Internal("reading spill file " + path + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return Status::Ok();
}

void RemoveSpillFile(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("removing spill file {} failed: {}", path, Errno(errno));
  }
}

}  // namespace rayd::object_store
