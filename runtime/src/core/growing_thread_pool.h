#pragma once
// GrowingThreadPool: runs posted work on threads of its own, taking it first in, first out, and
// starts one more thread whenever work is posted while every thread is busy. So work that
// blocks until other posted work has run (a task in Get of another task's result, an actor
// call waiting for an argument) never starves the pool, however deep it nests. A thread that
// found nothing to do for `idle_timeout` ends; the next Post (or Shutdown) joins it.
//
// Threading: Post may be called from any thread, from posted work too, and while Shutdown
// runs. Shutdown (and the destructor, which calls it) runs everything posted, work posted
// meanwhile included, waits for it to return, then joins every thread: never detaches. It must
// not be called from one of the pool's threads. Work must not throw.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace rayd::core {

class GrowingThreadPool {
 public:
  explicit GrowingThreadPool(std::chrono::milliseconds idle_timeout);
  ~GrowingThreadPool();
  GrowingThreadPool(const GrowingThreadPool&) = delete;
  GrowingThreadPool& operator=(const GrowingThreadPool&) = delete;

  // Queues `work`; an idle thread takes it, or a new thread does when none is idle. Must not be
  // called once Shutdown returned.
  void Post(std::function<void()> work);
  // Runs what is queued, then joins every thread. Idempotent.
  void Shutdown();
  // Threads alive now (busy or idle).
  size_t ThreadCount() const;
  // Waits until at most `count` threads are alive (idle ones ended): true, or false when
  // `timeout` ran out first.
  bool WaitForThreadCount(size_t count, std::chrono::milliseconds timeout);

 private:
  void Run(uint64_t id);

  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;               // work queued, or stopping
  std::condition_variable thread_ended_;     // a thread left threads_
  std::deque<std::function<void()>> queue_;  // mu_
  size_t idle_ = 0;                          // mu_: threads waiting for work
  bool stopping_ = false;                    // mu_
  uint64_t next_id_ = 0;                     // mu_
  std::map<uint64_t, std::thread> threads_;  // mu_: live threads, by id
  std::vector<std::thread> ended_;           // mu_: threads that ended idle, not yet joined
};

}  // namespace rayd::core
