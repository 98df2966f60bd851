#pragma once
// RAYD_REMOTE: makes functions, actor factories and actor methods callable by name.
//
//   int Plus(int a, int b) { return a + b; }
//   RAYD_REMOTE(Plus);
//   RAYD_REMOTE(Counter::FactoryCreate, &Counter::Add, &Counter::Get);
//
// Use it at namespace scope, in any number of places and translation units (and in shared
// libraries on the code search path, which workers dlopen). Each entry registers, at static
// initialisation, under its name as written with a leading '&' and surrounding spaces removed
// ("&Counter::Add" -> "Counter::Add"), so the same source line gives the same name in the
// driver and in every worker. Its kind follows its type:
//   member function pointer                         -> kActorMethod (of the class it names)
//   free or static function returning a pointer T*  -> kActorFactory (the actor is a T)
//   any other free or static function               -> kFunction
// Overloaded functions need a cast to pick one. Register methods on the actor's own class:
// the worker passes the actor as the factory's T*.

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "rayd/api/errors.h"
#include "rayd/api/function_traits.h"
#include "rayd/api/serializer.h"
#include "rayd/base/status.h"  // RAYD_CONCAT
#include "rayd/internal/function_registry.h"

namespace rayd::internal {

template <typename A, typename P>
decltype(auto) PassArg(P& decoded) {
  // Values are moved into by-value and rvalue-reference parameters; lvalue-reference
  // parameters see the decoded object itself.
  if constexpr (std::is_lvalue_reference_v<A>) {
    return (decoded);
  } else {
    return std::move(decoded);
  }
}

template <typename F, size_t... I>
decltype(auto) CallDecoded(F f, void* self, typename FunctionTraits<F>::Params& params,
                           std::index_sequence<I...>) {
  using Traits = FunctionTraits<F>;
  if constexpr (Traits::kIsMethod) {
    auto* object = static_cast<typename Traits::Class*>(self);
    return (object->*f)(
        PassArg<std::tuple_element_t<I, typename Traits::RawArgs>>(std::get<I>(params))...);
  } else {
    return f(PassArg<std::tuple_element_t<I, typename Traits::RawArgs>>(std::get<I>(params))...);
  }
}

// Decodes `args`, calls f (on `self` for methods) and encodes what it returns: msgpack bytes,
// empty for void; factories hand back the new instance in `actor`.
template <typename F>
InvocationResult InvokeDecoded(F f, const std::string& name, void* self,
                               const std::vector<InvocationArg>& args) {
  using Traits = FunctionTraits<F>;
  using R = typename Traits::Return;
  if constexpr (Traits::kIsMethod) {
    if (self == nullptr) throw ArgumentError(name + ": actor method called without an actor");
  }
  typename Traits::Params params = DecodeArgs<F>(args, name);
  auto indices = std::make_index_sequence<Traits::kArity>{};
  InvocationResult result;
  if constexpr (std::is_void_v<R>) {
    CallDecoded(f, self, params, indices);
  } else if constexpr (Traits::kIsFactory) {
    using T = std::remove_pointer_t<R>;
    T* instance = CallDecoded(f, self, params, indices);
    if (instance == nullptr) throw RaydError("actor factory " + name + " returned null");
    result.actor = std::shared_ptr<void>(instance, [](void* p) { delete static_cast<T*>(p); });
  } else {
    NestedRefCollector nested;  // refs returned inside the value: kept until lent to the caller
    result.value = Serialize(CallDecoded(f, self, params, indices));
    result.nested = nested.refs();
    result.nested_handles = nested.TakeHandles();
  }
  return result;
}

template <typename F>
void RegisterOne(std::string name, F f) {
  using Traits = FunctionTraits<F>;
  static_assert(Traits::kIsFunction,
                "RAYD_REMOTE takes functions, static factory functions and member function "
                "pointers (overloads need a cast)");
  using R = typename Traits::Return;
  static_assert(!(Traits::kIsMethod && std::is_pointer_v<R>),
                "RAYD_REMOTE: actor methods cannot return raw pointers");
  static_assert(!Traits::kIsFactory || std::is_class_v<std::remove_pointer_t<R>>,
                "RAYD_REMOTE: a function returning a pointer is an actor factory and must "
                "return T* for a class T");
  FunctionKind kind = Traits::kIsMethod    ? FunctionKind::kActorMethod
                      : Traits::kIsFactory ? FunctionKind::kActorFactory
                                           : FunctionKind::kFunction;
  std::string key = FunctionRegistry::PointerKey(f);
  Invoker invoke = [f, name](void* self, const std::vector<InvocationArg>& args) {
    return InvokeDecoded(f, name, self, args);
  };
  FunctionRegistry::Global().Register(
      FunctionEntry{std::move(name), kind, Traits::kArity, std::move(invoke)}, std::move(key));
}

// "Plus, &Counter::Add" -> {"Plus", "Counter::Add"}: splits at top-level commas (not those
// inside <>, () or []) and normalises each name. Aborts if the count is not `expected`.
std::vector<std::string> SplitRemoteNames(std::string_view names, size_t expected);

template <typename... Fs>
bool RegisterRemote(std::string_view names, Fs... fs) {
  std::vector<std::string> split = SplitRemoteNames(names, sizeof...(Fs));
  size_t i = 0;
  (RegisterOne(std::move(split[i++]), fs), ...);
  return true;
}

}  // namespace rayd::internal

#define RAYD_REMOTE(...)                                                                 \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_remote_registered_, __COUNTER__) = \
      ::rayd::internal::RegisterRemote(#__VA_ARGS__, __VA_ARGS__)
