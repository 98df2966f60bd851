#pragma once
// One thread that runs a rank's checkpoint work in the order it was posted, so that writing and
// shipping a checkpoint overlap the train loop's next steps.
//
// The session posts each Report (reading a checkpoint directory and handing it to the driver)
// and each PreparedOptimizer::SaveState (writing a snapshot of the optimizer's shard): posted in
// order, run in order, so a Report of a directory runs after the writes into it, and reports
// reach the driver in the order the loop made them.
//
// Errors: a job returns a Status; the first failure is kept (later jobs still run: a report
// without its checkpoint is better than none) and handed to the loop by TakeError or Drain.
//
// Threading: Post, Drain and TakeError are called by the train loop's thread; jobs run on the
// writer's own thread, which is started on the first Post. The destructor runs what is still
// posted, then joins.

#include <rayd/base/status.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace rayd::train::internal {

class BackgroundWriter {
 public:
  BackgroundWriter() = default;
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  void Post(std::function<Status()> job);
  // Waits until every job posted so far has run; returns the first failure not yet taken.
  Status Drain();
  // The first failure not yet taken, without waiting.
  Status TakeError();

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::function<Status()>> jobs_;  // guarded by mu_
  bool running_job_ = false;                  // guarded by mu_
  bool closing_ = false;                      // guarded by mu_
  Status error_;                              // guarded by mu_
  std::thread thread_;                        // last: started once the rest exists
};

}  // namespace rayd::train::internal
