#pragma once
// LifetimeGuard: for objects whose callbacks (of a store, of RPC clients or libuv requests they
// do not own) may run after the object is gone. The one way rayd writes "is its owner still
// alive?":
// - wrap a callback with the guard, `guard_([this](...) {...})`: once the guard is invalidated
//   (its owner's destructor does that first) or destroyed, the wrapped callback does nothing.
//   It accepts exactly the arguments the callback does, so callers that inspect its signature
//   (the typed RPC completions) see the callback's own;
// - or keep a `Watch()` where a callback is no lambda (a libuv request's data) and ask it
//   `alive()`.
//
// Threading: the owner's event loop only.

#include <concepts>
#include <memory>
#include <utility>

namespace rayd {

class LifetimeGuard {
 public:
  // Tells whether the guard's owner is still alive.
  class Watch {
   public:
    bool alive() const {
      auto a = alive_.lock();
      return a && *a;
    }

   private:
    friend class LifetimeGuard;
    explicit Watch(std::weak_ptr<bool> alive) : alive_(std::move(alive)) {}
    std::weak_ptr<bool> alive_;
  };

  LifetimeGuard() = default;
  ~LifetimeGuard() { Invalidate(); }
  LifetimeGuard(const LifetimeGuard&) = delete;
  LifetimeGuard& operator=(const LifetimeGuard&) = delete;

  // From now on the wrapped callbacks do nothing and watches say not alive.
  void Invalidate() { *alive_ = false; }

  Watch watch() const { return Watch(alive_); }

  template <typename F>
  auto operator()(F fn) const {
    return [watch = watch(), fn = std::move(fn)](auto&&... args)
             requires std::invocable<const F&, decltype(args)...>
    {
      if (watch.alive()) fn(std::forward<decltype(args)>(args)...);
    };
  }

 private:
  // Co-owned only by this guard; the wrapped callbacks hold weak references.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rayd
