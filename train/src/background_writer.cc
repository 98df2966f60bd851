#include "background_writer.h"

#include <utility>

namespace rayd::train::internal {

BackgroundWriter::~BackgroundWriter() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundWriter::Post(std::function<Status()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Work(); });
  changed_.notify_all();
}

Status BackgroundWriter::Drain() {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return jobs_.empty() && !running_job_; });
  return std::exchange(error_, Status::Ok());
}

Status BackgroundWriter::TakeError() {
  std::lock_guard lock(mu_);
  return std::exchange(error_, Status::Ok());
}

void BackgroundWriter::Work() {
  std::unique_lock lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return !jobs_.empty() || closing_; });
    if (jobs_.empty()) return;  // closing, and nothing left to run
    std::function<Status()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    Status status = job();
    lock.lock();
    running_job_ = false;
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    changed_.notify_all();
  }
}

}  // namespace rayd::train::internal
