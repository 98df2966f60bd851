#pragma once
// Compile-time facts about remote functions, and the two argument conversions built on them:
//
//   caller side  PackArgs<F>(args...)    each argument -> internal::TaskArg
//   worker side  DecodeArgs<F>(args)     each internal::InvocationArg -> the parameter type
//
// Parameter types are taken with references and const removed ("Param" below). An argument is
//   - an ObjectRef<U> where Param is ObjectRef<U>: passed as the ref itself (kRefAsRef);
//   - an ObjectRef<U> where Param is U: passed by ref, resolved to its value before the call
//     (kRef);
//   - anything else: converted to Param as a C++ call would, then serialised as Param (kValue),
//     so Remote(1, 2) for `int Plus(int, int)` and Remote("x") for a `const std::string&`
//     parameter both work.

#include <concepts>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "rayd/api/errors.h"
#include "rayd/api/object_ref.h"
#include "rayd/api/serializer.h"
#include "rayd/internal/function_registry.h"
#include "rayd/internal/runtime.h"
#include "rayd/internal/type_names.h"

namespace rayd::internal {

// Anything that is not a function pointer or a member function pointer.
template <typename F>
struct FunctionTraits {
  static constexpr bool kIsFunction = false;
  static constexpr bool kIsMethod = false;
  static constexpr bool kIsFactory = false;
  static constexpr size_t kArity = 0;
  using Class = void;
  using Return = void;
  using RawArgs = std::tuple<>;
  using Params = std::tuple<>;
};

template <typename R, typename... A>
struct FunctionTraits<R (*)(A...)> {
  using Return = std::remove_cvref_t<R>;
  static constexpr bool kIsFunction = true;
  static constexpr bool kIsMethod = false;
  // A free or static function returning a pointer creates actors.
  static constexpr bool kIsFactory = std::is_pointer_v<Return>;
  static constexpr size_t kArity = sizeof...(A);
  using Class = void;
  using RawArgs = std::tuple<A...>;  // as declared, for passing decoded values on
  using Params = std::tuple<std::remove_cvref_t<A>...>;
};
template <typename R, typename... A>
struct FunctionTraits<R (*)(A...) noexcept> : FunctionTraits<R (*)(A...)> {};

template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...)> : FunctionTraits<R (*)(A...)> {
  static constexpr bool kIsMethod = true;
  static constexpr bool kIsFactory = false;
  using Class = C;
};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...) const> : FunctionTraits<R (C::*)(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...) noexcept> : FunctionTraits<R (C::*)(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...) const noexcept> : FunctionTraits<R (C::*)(A...)> {};

// ---- Caller side ----------------------------------------------------------------------------

// What SetResources takes: a map (ordered or not) from resource names to amounts.
template <typename Map>
concept ResourceMap = std::convertible_to<typename Map::key_type, std::string> &&
                      std::is_arithmetic_v<typename Map::mapped_type>;

template <typename Param, typename Arg>
TaskArg PackArg(Arg&& arg) {
  using A = std::remove_cvref_t<Arg>;
  TaskArg out;
  if constexpr (IsObjectRef<A>::value) {
    using U = typename IsObjectRef<A>::ValueType;
    if constexpr (IsObjectRef<Param>::value) {
      static_assert(std::is_same_v<A, Param>,
                    "rayd: an ObjectRef<U> argument for an ObjectRef<V> parameter needs U == V");
      out.kind = TaskArg::Kind::kRefAsRef;
    } else {
      static_assert(!std::is_void_v<U>,
                    "rayd: an ObjectRef<void> has no value; only an ObjectRef<void> parameter "
                    "takes it");
      static_assert(std::is_same_v<U, Param>,
                    "rayd: an ObjectRef<U> argument needs a parameter of type U (or ObjectRef<U>)");
      out.kind = TaskArg::Kind::kRef;
    }
    if (arg.IsNil()) throw RaydError("a nil ObjectRef cannot be passed as an argument");
    out.ref = arg.id();
    out.owner_address = arg.ResolvedOwnerAddress();
  } else {
    static_assert(std::is_convertible_v<Arg&&, Param>,
                  "rayd: an argument of Remote() does not convert to its parameter's type");
    out.kind = TaskArg::Kind::kValue;
    NestedRefCollector nested;  // refs inside the value are pinned until the task is done
    if constexpr (std::is_same_v<A, Param>) {
      out.value = Serialize(arg);
    } else if constexpr (std::is_convertible_v<Arg&&, Param>) {
      const Param converted = std::forward<Arg>(arg);
      out.value = Serialize(converted);
    }
    out.nested = nested.refs();
  }
  return out;
}

template <typename Traits, typename... Args, size_t... I>
std::vector<TaskArg> PackArgsImpl(std::index_sequence<I...>, Args&&... args) {
  std::vector<TaskArg> out;
  out.reserve(sizeof...(Args));
  (out.push_back(
       PackArg<std::tuple_element_t<I, typename Traits::Params>>(std::forward<Args>(args))),
   ...);
  return out;
}

// The TaskArgs for calling F with `args`; a wrong argument count does not compile.
template <typename F, typename... Args>
std::vector<TaskArg> PackArgs(Args&&... args) {
  using Traits = FunctionTraits<F>;
  static_assert(sizeof...(Args) == Traits::kArity,
                "rayd: Remote() must get exactly as many arguments as the function has "
                "parameters");
  if constexpr (sizeof...(Args) == Traits::kArity) {
    return PackArgsImpl<Traits>(std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
  } else {
    return {};
  }
}

// The name RAYD_REMOTE registered for the function with this pointer key; throws RaydError
// ("function is not registered with RAYD_REMOTE") for others.
const std::string& RemoteNameForKey(std::string_view pointer_key);

template <typename F>
const std::string& RemoteName(F f) {
  return RemoteNameForKey(FunctionRegistry::PointerKey(f));
}

// ---- Worker side ----------------------------------------------------------------------------

template <typename Param>
Param DecodeArg(const InvocationArg& arg, size_t index, const std::string& function) {
  try {
    if constexpr (IsObjectRef<Param>::value) {
      if (arg.is_ref) {
        return MakeBorrowedRef<typename IsObjectRef<Param>::ValueType>(arg.ref, arg.owner_address);
      }
    } else if (arg.is_ref) {
      throw ArgumentError(function + ": argument " + std::to_string(index) + " (" +
                          DemangledName(typeid(Param)) + ") got an unresolved ObjectRef");
    }
    return Deserialize<Param>(arg.bytes());
  } catch (const ArgumentError&) {
    throw;
  } catch (const std::exception& e) {
    throw ArgumentError(function + ": argument " + std::to_string(index) + " does not decode as " +
                        DemangledName(typeid(Param)) + ": " + e.what());
  }
}

template <typename Traits, size_t... I>
typename Traits::Params DecodeArgsImpl(const std::vector<InvocationArg>& args,
                                       const std::string& function, std::index_sequence<I...>) {
  // Braced initialisation decodes left to right.
  return typename Traits::Params{
      DecodeArg<std::tuple_element_t<I, typename Traits::Params>>(args[I], I, function)...};
}

// The arguments of F decoded from `args`; throws ArgumentError naming `function` and the
// argument on a wrong count or bytes that are not the parameter's type.
template <typename F>
typename FunctionTraits<F>::Params DecodeArgs(const std::vector<InvocationArg>& args,
                                              const std::string& function) {
  using Traits = FunctionTraits<F>;
  if (args.size() != Traits::kArity) {
    throw ArgumentError(function + ": expected " + std::to_string(Traits::kArity) +
                        " arguments, got " + std::to_string(args.size()));
  }
  return DecodeArgsImpl<Traits>(args, function, std::make_index_sequence<Traits::kArity>{});
}

}  // namespace rayd::internal
