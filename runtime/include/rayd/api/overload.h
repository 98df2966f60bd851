#pragma once
// RAYD_FUNC(f, ArgTypes...): names one overload of a function or method, as Ray's RAY_FUNC.
//
//   int Sum(int a) { return a; }
//   int Sum(int a, int b) { return a + b; }
//   RAYD_REMOTE(RAYD_FUNC(Sum, int), RAYD_FUNC(Sum, int, int));
//   rayd::Task(RAYD_FUNC(Sum, int, int)).Remote(1, 2);
//   counter.Task(RAYD_FUNC(&Counter::Add, int)).Remote(1);
//
// The parameter types are given exactly as declared (const and references included); none
// picks the overload without parameters. Each overload registers under its own name (the
// macro's text, "RAYD_FUNC(Sum, int)"), so the driver and its workers agree on it.

namespace rayd::internal {

template <typename... Args>
struct Overload {
  template <typename R>
  static constexpr auto Of(R (*f)(Args...)) {
    return f;
  }
  template <typename R, typename C>
  static constexpr auto Of(R (C::*f)(Args...)) {
    return f;
  }
  template <typename R, typename C>
  static constexpr auto Of(R (C::*f)(Args...) const) {
    return f;
  }
};

}  // namespace rayd::internal

#define RAYD_FUNC(f, ...) ::rayd::internal::Overload<__VA_ARGS__>::Of(f)
