#pragma once
// EventLoop owns one uv_loop_t, run by one thread (the I/O thread). Everything that touches
// sockets, timers, child processes and Redis runs on it. Other threads hand work to it with
// Post(), the one cross-thread primitive (an eventfd the loop polls; see Post()).
//
// Handles (Timer, the RPC streams) are owned by exactly one object each; closing a handle is
// asynchronous in libuv, so owners give the handle to the loop to free once closed.

#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace rayd {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();  // closes every handle still open and runs the loop until they are freed
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  uv_loop_t* uv() { return &loop_; }

  // Runs until Stop(). Call from the loop's thread only.
  void Run();
  // Thread-safe: makes Run() return after the current iteration.
  void Stop();
  // Thread-safe: runs `fn` on the loop thread, in posting order.
  void Post(std::function<void()> fn);

  // Runs loop iterations until `done()` is true or `timeout` passes; returns done().
  // For tests and one-shot clients (the CLI) that drive the loop themselves.
  bool RunUntil(const std::function<bool()>& done, Millis timeout);

 private:
  static void OnWake(uv_poll_t* handle, int status, int events);
  // Under mu_: notes that the loop has something to do; true when the caller must write
  // wake_fd_ (nothing had woken it since its last drain).
  bool NeedsWakeLocked();
  void Wake();
  void DrainPosted();

  uv_loop_t loop_;
  int wake_fd_ = -1;      // an eventfd; readable while the loop has posted work or a stop
  uv_poll_t* wake_;       // polls wake_fd_; owned, freed by its close callback
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;  // guarded by mu_
  // An emptied batch kept for its capacity, so that draining allocates nothing once warm;
  // guarded by mu_.
  std::vector<std::function<void()>> spare_;
  bool stop_requested_ = false;                // guarded by mu_
  bool wake_pending_ = false;                  // wake_fd_ was written since the last drain; mu_
};

// A one-shot or repeating timer on an EventLoop. Not thread-safe: use on the loop thread.
class Timer {
 public:
  explicit Timer(EventLoop& loop);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Calls `fn` after `delay`, then every `repeat` if non-zero. Restarting replaces the callback.
  void Start(Millis delay, Millis repeat, std::function<void()> fn);
  void Stop();
  bool active() const;

 private:
  uv_timer_t* handle_;  // owned; freed by its close callback
  std::function<void()> fn_;
};

// Milliseconds since the Unix epoch, for timestamps that cross processes.
int64_t NowUnixMs();

}  // namespace rayd
