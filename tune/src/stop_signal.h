#pragma once
// StopSignal: a Tuner's stop request (Ctrl-C), raised from any thread or a signal handler and
// seen by the controller's event loop at once. Raising sets a lock-free flag and writes a byte
// to a pipe the loop watches (both async-signal-safe); the pipe lives as long as the signal, so
// a handler racing the end of a sweep writes to an open pipe.

#include <atomic>

namespace rayd::tune::internal {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  void Raise() noexcept;
  bool raised() const noexcept { return raised_.load(); }
  // Readable once raised (level-triggered: it stays readable).
  int fd() const { return fds_[0]; }

 private:
  std::atomic<bool> raised_{false};
  int fds_[2] = {-1, -1};
};

}  // namespace rayd::tune::internal
