#include "rayd/base/event_loop.h"

#include "rayd/base/logging.h"

namespace rayd {

EventLoop::EventLoop() {
  RAYD_CHECK(uv_loop_init(&loop_) == 0);
  async_ = new uv_async_t;
  RAYD_CHECK(uv_async_init(&loop_, async_, &EventLoop::OnAsync) == 0);
  async_->data = this;
  // The wake-up handle must not keep Run() alive by itself once everything else is gone;
  // Run() uses Stop() to end, so it stays referenced.
}

EventLoop::~EventLoop() {
  DrainPosted();
  uv_close(reinterpret_cast<uv_handle_t*>(async_),
           [](uv_handle_t* h) { delete reinterpret_cast<uv_async_t*>(h); });
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
}

void EventLoop::Run() {
  // A Stop() that came before Run() still counts: its wake-up makes the first iteration stop.
  uv_run(&loop_, UV_RUN_DEFAULT);
}

void EventLoop::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
  }
  uv_async_send(async_);
}

void EventLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(fn));
  }
  uv_async_send(async_);
}

void EventLoop::OnAsync(uv_async_t* handle) {
  auto* self = static_cast<EventLoop*>(handle->data);
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
