#include "core/growing_thread_pool.h"

#include <utility>

namespace rayd::core {

GrowingThreadPool::GrowingThreadPool(std::chrono::milliseconds idle_timeout)
    : idle_timeout_(idle_timeout) {}

GrowingThreadPool::~GrowingThreadPool() { Shutdown(); }

void GrowingThreadPool::Post(std::function<void()> work) {
  std::vector<std::thread> ended;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
    // Each idle thread takes one queued item; more items than idle threads need a new thread.
    // (A thread woken but not yet running still counts as idle: at worst one thread too many.)
    if (queue_.size() > idle_) {
      const uint64_t id = next_id_++;
      threads_.emplace(id, std::thread([this, id] { Run(id); }));
    } else {
      cv_.notify_one();
    }
    ended.swap(ended_);
  }
  // Threads that ended idle have left Run (or are leaving it): joining them is quick.
  for (std::thread& t : ended) t.join();
}

void GrowingThreadPool::Run(uint64_t id) {
  std::unique_lock lock(mu_);
  while (true) {
    if (!queue_.empty()) {
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      work = nullptr;  // what it captured goes outside the lock
      lock.lock();
      continue;
    }
    if (stopping_) return;  // Shutdown joins us
    ++idle_;
    const bool woken =
        cv_.wait_for(lock, idle_timeout_, [this] { return !queue_.empty() || stopping_; });
    --idle_;
    if (!woken) {
      // Idle for the whole timeout, and not stopping: Shutdown has not taken our handle, so it
      // is still in threads_. Hand it to whoever joins next.
      auto it = threads_.find(id);
      ended_.push_back(std::move(it->second));
      threads_.erase(it);
      thread_ended_.notify_all();
      return;
    }
  }
}

void GrowingThreadPool::Shutdown() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  // Work still running may post more (and so start threads): join until none is left.
  while (!threads_.empty() || !ended_.empty()) {
    std::vector<std::thread> joining;
    for (auto& [id, t] : threads_) joining.push_back(std::move(t));
    threads_.clear();
    thread_ended_.notify_all();
    for (auto& t : ended_) joining.push_back(std::move(t));
    ended_.clear();
    lock.unlock();
    for (std::thread& t : joining) t.join();
    lock.lock();
  }
}

size_t GrowingThreadPool::ThreadCount() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

bool GrowingThreadPool::WaitForThreadCount(size_t count, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return thread_ended_.wait_for(lock, timeout, [&] { return threads_.size() <= count; });
}

}  // namespace rayd::core
