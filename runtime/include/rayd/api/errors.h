#pragma once
// The exceptions of the public API. Everything rayd throws at its users derives from
// RaydError; code inside rayd returns Status / Result<T> and is converted here, at the edge.
//
//   RaydError            the runtime could not do what was asked (not initialised, function not
//                        registered, a value that does not decode, an internal failure)
//   ├─ RemoteError       user code in a task or actor method threw; what() is
//   │                    "<its type>: <its message>" ("std::logic_error: bad input")
//   ├─ ActorDiedError    the actor died (killed, or out of restarts) before answering
//   ├─ ObjectLostError   every copy of the object was lost and it cannot be rebuilt
//   ├─ TimeoutError      Get / Wait with a timeout ran out
//   ├─ InfeasibleError   no node of the cluster could ever satisfy the resource request
//   └─ RuntimeEnvError   a RuntimeEnv field that cannot be set, read or used

#include <stdexcept>
#include <string>
#include <utility>

#include "rayd/base/status.h"
#include "rayd/internal/runtime.h"

namespace rayd {

class RaydError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RemoteError : public RaydError {
 public:
  // `remote_type`: the demangled type of what the user code threw ("std::out_of_range").
  RemoteError(std::string remote_type, std::string message)
      : RaydError(remote_type + ": " + message),
        remote_type_(std::move(remote_type)),
        remote_message_(std::move(message)) {}
  const std::string& remote_type() const { return remote_type_; }
  // What the remote exception's what() said, without its type.
  const std::string& remote_message() const { return remote_message_; }

 private:
  std::string remote_type_;
  std::string remote_message_;
};

class ActorDiedError : public RaydError {
 public:
  using RaydError::RaydError;
};

class ObjectLostError : public RaydError {
 public:
  using RaydError::RaydError;
};

// A Get of a borrowed object whose owner, the process that created it, is gone (it exited, or
// its host cannot be reached), so nobody can say what it held (Ray's OwnerDiedError). An
// ObjectLostError, as in Ray.
class OwnerDiedError : public ObjectLostError {
 public:
  using ObjectLostError::ObjectLostError;
};

// A Put (or a large task result) that the node's object store cannot hold: larger than the
// whole store, or no room freed in time by eviction and spilling.
class ObjectStoreFullError : public RaydError {
 public:
  using RaydError::RaydError;
};

class TimeoutError : public RaydError {
 public:
  using RaydError::RaydError;
};

class InfeasibleError : public RaydError {
 public:
  using RaydError::RaydError;
};

class RuntimeEnvError : public RaydError {
 public:
  using RaydError::RaydError;
};

namespace internal {

// Throws the exception that `value.error` stands for; does nothing when it holds a value.
// `id` names the object in default messages.
void ThrowIfError(const ObjectValue& value, const ObjectId& id);

// Throws the exception for a non-ok status: ResourceExhausted -> InfeasibleError,
// DeadlineExceeded -> TimeoutError, anything else -> RaydError(status.message()).
// Does nothing for an ok status.
void ThrowIfError(const Status& status);

// The current runtime; throws RaydError when rayd is not initialised.
Runtime& RequireRuntime();

}  // namespace internal
}  // namespace rayd
