// Converting runtime errors into the public exceptions, and readable type names for them.

#include "rayd/api/errors.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "rayd/internal/type_names.h"

namespace rayd::internal {

void ThrowIfError(const ObjectValue& value, const ObjectId& id) {
  auto message = [&](const char* fallback) {
    return value.error_message.empty() ? std::string(fallback) + " (object " + id.Hex() + ")"
                                       : value.error_message;
  };
  switch (value.error) {
    case ErrorKind::kNone:
      return;
    case ErrorKind::kRemote:
      throw RemoteError(value.error_type.empty() ? "unknown" : value.error_type,
                        value.error_message);
    case ErrorKind::kActorDied:
      throw ActorDiedError(message("the actor died"));
    case ErrorKind::kObjectLost:
      throw ObjectLostError(message("the object was lost"));
    case ErrorKind::kOwnerDied:
      throw OwnerDiedError(message("the object's owner died"));
    case ErrorKind::kTimeout:
      throw TimeoutError(message("timed out waiting for the object"));
    case ErrorKind::kInfeasible:
      throw InfeasibleError(message("no node can satisfy the resource request"));
    case ErrorKind::kObjectStoreFull:
      throw ObjectStoreFullError(message("the object store is full"));
    case ErrorKind::kSystem:
      break;
  }
  throw RaydError(message("the runtime failed to produce the object"));
}

void ThrowIfError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return;
    case StatusCode::kResourceExhausted:
      throw InfeasibleError(status.message());
    case StatusCode::kDeadlineExceeded:
      throw TimeoutError(status.message());
    default:
      throw RaydError(status.message().empty() ? status.ToString() : status.message());
  }
}

Runtime& RequireRuntime() {
  Runtime* runtime = CurrentRuntime();
  if (runtime == nullptr) throw RaydError("rayd is not initialised: call rayd::Init first");
  return *runtime;
}

std::string DemangledName(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(type.name());
}

std::string DemangledTypeName(const std::exception& e) { return DemangledName(typeid(e)); }

}  // namespace rayd::internal
