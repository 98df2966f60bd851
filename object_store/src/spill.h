#pragma once
// The object store's disk side: one I/O thread fed by a queue, and the spill-file operations it
// runs. Private to rayd_object_store.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "rayd/base/status.h"

namespace rayd::object_store {

// Runs jobs one at a time, in submission order, on its own thread. Jobs report back by posting
// to an event loop themselves. Thread-safe.
class IoThread {
 public:
  IoThread();
  // Stops the thread: the job running finishes, queued jobs are dropped except those submitted
  // with `run_at_shutdown` (file removals), which run before the thread exits.
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  void Submit(std::function<void()> job, bool run_at_shutdown = false);

 private:
  struct Job {
    std::function<void()> fn;
    bool run_at_shutdown;
  };
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;    // last: starts after the fields above exist
};

// Writes `size` bytes from `data` to `path`, creating `dir` (and its parents) first. On failure
// the partial file is removed and the Status reads "spilling to <dir> failed: <reason>".
Status WriteSpillFile(const std::string& dir, const std::string& path, const uint8_t* data,
                      size_t size);
// Reads exactly `size` bytes of `path` into `out`.
Status ReadSpillFile(const std::string& path, uint8_t* out, size_t size);
// Removes `path`; a missing file is fine, other errors are logged.
void RemoveSpillFile(const std::string& path);

}  // namespace rayd::object_store
