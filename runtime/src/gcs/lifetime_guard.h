#pragma once
// LifetimeGuard: for GCS components whose callbacks (of the store, of RPC clients they do not
// own) may run after the component is gone. Wrap each such callback with the guard; once the
// guard is invalidated (its owner's destructor does that first) or destroyed, the wrapped
// callbacks do nothing.
//
// Threading: the owner's event loop only.

#include <memory>
#include <utility>

namespace rayd::gcs {

class LifetimeGuard {
 public:
  LifetimeGuard() = default;
  ~LifetimeGuard() { Invalidate(); }
  LifetimeGuard(const LifetimeGuard&) = delete;
  LifetimeGuard& operator=(const LifetimeGuard&) = delete;

  // From now on the wrapped callbacks do nothing.
  void Invalidate() { *alive_ = false; }

  template <typename F>
  auto operator()(F fn) const {
    return [alive = std::weak_ptr<bool>(alive_), fn = std::move(fn)](auto&&... args) {
      auto a = alive.lock();
      if (a && *a) fn(std::forward<decltype(args)>(args)...);
    };
  }

 private:
  // Co-owned only by this guard; the wrapped callbacks hold weak references.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rayd::gcs
