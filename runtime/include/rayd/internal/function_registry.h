#pragma once
// The registry behind RAYD_REMOTE: remote functions, actor factories and actor methods by
// name. Drivers look names up from function pointers; workers look invokers up from names.
//
// There is one registry per process (it lives in the rayd_runtime shared library, so user
// libraries loaded with dlopen register into the same one). Registration happens during
// static initialisation; lookups afterwards are read-only and thread-safe.

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rayd/internal/runtime.h"

namespace rayd::internal {

enum class FunctionKind { kFunction, kActorFactory, kActorMethod };

// What an invocation produced: the msgpack bytes of the return value (empty for void and for
// factories), and for actor factories the new instance, which the worker keeps for the actor's
// lifetime.
struct InvocationResult {
  std::string value;
  std::shared_ptr<void> actor;  // factories only; owns the instance (deletes it with its type)
  // The refs inside `value`, and handles keeping them alive until the worker has lent them to
  // the result's owner (Runtime-level NestedRef: see rayd/internal/runtime.h).
  std::vector<NestedRef> nested;
  std::shared_ptr<const void> nested_handles;
};

// Calls the function with deserialized arguments. `self` is the actor instance for methods
// (the factory's T*, as void*) and null otherwise. Throws what the user code throws; throws
// ArgumentError (naming the function and the argument index) when the arguments don't decode
// into the parameter types, their count is wrong, or a method gets no `self`; a factory that
// returns null throws RaydError. To report a user exception, use DemangledTypeName(e) from
// rayd/internal/type_names.h as its type.
using Invoker =
    std::function<InvocationResult(void* self, const std::vector<InvocationArg>& args)>;

struct ArgumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct FunctionEntry {
  std::string name;     // as written in RAYD_REMOTE: "Plus", "Counter::FactoryCreate", "&Counter::Add" normalised to "Counter::Add"
  FunctionKind kind;
  size_t arity;
  Invoker invoke;
};

class FunctionRegistry {
 public:
  static FunctionRegistry& Global();

  // `pointer_key` is the bytes of the function or member-function pointer, so that drivers can
  // find the name of `&Counter::Add`. Registering a name twice keeps the first (and logs).
  void Register(FunctionEntry entry, std::string pointer_key);
  const FunctionEntry* Find(std::string_view name) const;
  // The registered name for a function pointer, or null.
  const std::string* NameFor(std::string_view pointer_key) const;
  std::vector<std::string> Names() const;

  template <typename F>
  static std::string PointerKey(F f) {
    return std::string(reinterpret_cast<const char*>(&f), sizeof(f));
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<FunctionEntry>, std::less<>> by_name_;
  std::map<std::string, std::string, std::less<>> name_by_pointer_;
};

}  // namespace rayd::internal
