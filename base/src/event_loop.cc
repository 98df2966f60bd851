#include "rayd/base/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "rayd/base/logging.h"

namespace rayd {

// Why not uv_async_t: its sender writes the loop's eventfd and only then marks the handle
// done, and the woken loop spins (997 tries, then sched_yield, over and over) until it sees
// that mark. On a busy 2-core machine the write's wake-up often preempts the sender inside
// that window, so each cross-thread post cost the loop ~50 us of spinning and a storm of
// involuntary context switches (measured on synchronous tasks: the loop threads of the driver
// and the worker each burned ~60 us of CPU per call). Here the queue is the only shared state,
// under mu_, and the eventfd is just a doorbell: nothing waits for the sender to finish.

EventLoop::EventLoop() {
  RAYD_CHECK(uv_loop_init(&loop_) == 0);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  RAYD_CHECK(wake_fd_ >= 0);
  wake_ = new uv_poll_t;
  RAYD_CHECK(uv_poll_init(&loop_, wake_, wake_fd_) == 0);
  wake_->data = this;
  // The wake-up handle keeps Run() alive by itself: Run() ends with Stop().
  RAYD_CHECK(uv_poll_start(wake_, UV_READABLE, &EventLoop::OnWake) == 0);
}

EventLoop::~EventLoop() {
  DrainPosted();
  uv_close(reinterpret_cast<uv_handle_t*>(wake_),
           [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
  // Handles still open here belong to objects that outlived the loop's users (a bug); close
  // them so the loop can be closed, and say so.
  uv_walk(
      &loop_,
      [](uv_handle_t* h, void*) {
        if (!uv_is_closing(h)) {
          spdlog::warn("event loop destroyed with an open {} handle", uv_handle_type_name(h->type));
          uv_close(h, nullptr);
        }
      },
      nullptr);
  uv_run(&loop_, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&loop_);
  if (rc != 0) spdlog::warn("event loop closed with handles still open: {}", uv_strerror(rc));
  ::close(wake_fd_);
}

void EventLoop::Run() {
  // A Stop() that came before Run() still counts: its wake-up makes the first iteration stop.
  uv_run(&loop_, UV_RUN_DEFAULT);
}

bool EventLoop::NeedsWakeLocked() {
  if (wake_pending_) return false;
  wake_pending_ = true;
  return true;
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  // EAGAIN only if the counter is near 2^64: it is readable then anyway.
  while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void EventLoop::Stop() {
  bool wake;
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
    wake = NeedsWakeLocked();
  }
  if (wake) Wake();
}

void EventLoop::Post(std::function<void()> fn) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(fn));
    wake = NeedsWakeLocked();
  }
  if (wake) Wake();
}

void EventLoop::OnWake(uv_poll_t* handle, int status, int) {
  auto* self = static_cast<EventLoop*>(handle->data);
  if (status == 0) {
    uint64_t count;
    while (::read(self->wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
    }
  }
  self->DrainPosted();
  bool stop;
  {
    std::lock_guard lock(self->mu_);
    stop = self->stop_requested_;
    self->stop_requested_ = false;
  }
  if (stop) uv_stop(&self->loop_);
}

void EventLoop::DrainPosted() {
  // A batch of its own: a posted function may run the loop (RunUntil) and drain again.
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(posted_);
    posted_.swap(spare_);
    // The doorbell was read before this drain: a Post from now on rings it again.
    wake_pending_ = false;
  }
  for (auto& fn : batch) fn();
  batch.clear();
  std::lock_guard lock(mu_);
  if (batch.capacity() > spare_.capacity()) spare_.swap(batch);
}

bool EventLoop::RunUntil(const std::function<bool()>& done, Millis timeout) {
  if (done()) return true;
  bool expired = false;
  Timer deadline(*this);
  deadline.Start(timeout, Millis(0), [&] { expired = true; });
  while (!done() && !expired) uv_run(&loop_, UV_RUN_ONCE);
  return done();
}

Timer::Timer(EventLoop& loop) : handle_(new uv_timer_t) {
  RAYD_CHECK(uv_timer_init(loop.uv(), handle_) == 0);
  handle_->data = this;
}

Timer::~Timer() {
  handle_->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(handle_),
           [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
}

void Timer::Start(Millis delay, Millis repeat, std::function<void()> fn) {
  fn_ = std::move(fn);
  uv_timer_start(
      handle_,
      [](uv_timer_t* h) {
        auto* self = static_cast<Timer*>(h->data);
        if (self == nullptr) return;
        // Copy: the callback may restart or destroy this timer.
        auto fn = self->fn_;
        fn();
      },
      static_cast<uint64_t>(delay.count()), static_cast<uint64_t>(repeat.count()));
}

void Timer::Stop() { uv_timer_stop(handle_); }

bool Timer::active() const {
  return uv_is_active(reinterpret_cast<const uv_handle_t*>(handle_)) != 0;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace rayd
