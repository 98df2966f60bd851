#pragma once
// Put, Get and Wait: moving values into and out of the object store.
//
//   rayd::ObjectRef<int> ref = rayd::Put(42);
//   std::shared_ptr<int> v = rayd::Get(ref);            // blocks until the value exists
//   rayd::Get(ref, /*timeout_ms=*/100);                  // or throws TimeoutError
//   rayd::WaitResult<int> w = rayd::Wait(refs, 1, 1000); // the first ready one, or none
//
// Get rethrows what the producing task ended with (RemoteError, ActorDiedError, ...); for an
// ObjectRef<void> (a function returning void) it only waits and rethrows. All of these block
// the calling thread only, and may be called from any thread once rayd is initialised; before
// Init they throw RaydError.

#include <chrono>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "rayd/api/errors.h"
#include "rayd/api/object_ref.h"
#include "rayd/api/serializer.h"
#include "rayd/internal/type_names.h"

namespace rayd {

template <typename T>
using GetResult = std::conditional_t<std::is_void_v<T>, void, std::shared_ptr<T>>;
template <typename T>
using GetAllResult = std::conditional_t<std::is_void_v<T>, void, std::vector<std::shared_ptr<T>>>;

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> unready;
};

namespace internal {

// Throws the object's error, then decodes its bytes as T (nothing for void).
template <typename T>
GetResult<T> DecodeObject(const ObjectValue& value, const ObjectId& id) {
  ThrowIfError(value, id);
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    try {
      return std::make_shared<T>(Deserialize<T>(value.data));
    } catch (const std::exception& e) {
      throw RaydError("object " + id.Hex() + " does not decode as " + DemangledName(typeid(T)) +
                      ": " + e.what());
    }
  }
}

template <typename T>
GetAllResult<T> GetAll(const std::vector<ObjectRef<T>>& refs, int timeout_ms) {
  std::vector<ObjectId> ids;
  ids.reserve(refs.size());
  for (const auto& ref : refs) {
    if (ref.IsNil()) throw RaydError("Get of a nil ObjectRef");
    ids.push_back(ref.id());
  }
  std::vector<ObjectValue> values =
      RequireRuntime().Get(ids, std::chrono::milliseconds(timeout_ms));
  if (values.size() != ids.size()) throw RaydError("runtime returned the wrong number of values");
  if constexpr (std::is_void_v<T>) {
    for (size_t i = 0; i < ids.size(); ++i) DecodeObject<void>(values[i], ids[i]);
  } else {
    // Errors first, so that a failed object is reported even if an earlier one decodes badly.
    for (size_t i = 0; i < ids.size(); ++i) ThrowIfError(values[i], ids[i]);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) out.push_back(DecodeObject<T>(values[i], ids[i]));
    return out;
  }
}

}  // namespace internal

// Stores a copy of `value` owned by this process and returns a ref to it.
template <typename T>
ObjectRef<T> Put(const T& value) {
  return ObjectRef<T>(internal::RequireRuntime().Put(internal::Serialize(value)), std::string());
}

// Blocks until the object exists, at most `timeout_ms` (< 0: forever), and returns it (void for
// ObjectRef<void>). Throws the task's error, TimeoutError when time runs out, RaydError for a
// nil ref.
template <typename T>
GetResult<T> Get(const ObjectRef<T>& ref, int timeout_ms) {
  if (ref.IsNil()) throw RaydError("Get of a nil ObjectRef");
  std::vector<internal::ObjectValue> values =
      internal::RequireRuntime().Get({ref.id()}, std::chrono::milliseconds(timeout_ms));
  if (values.size() != 1) throw RaydError("runtime returned the wrong number of values");
  return internal::DecodeObject<T>(values[0], ref.id());
}

template <typename T>
GetResult<T> Get(const ObjectRef<T>& ref) {
  return Get(ref, -1);
}

// All the objects, in order; throws the first error found.
template <typename T>
GetAllResult<T> Get(const std::vector<ObjectRef<T>>& refs) {
  return internal::GetAll(refs, -1);
}

template <typename T>
GetAllResult<T> Get(const std::vector<ObjectRef<T>>& refs, int timeout_ms) {
  return internal::GetAll(refs, timeout_ms);
}

// Waits until `num_objects` of `refs` are ready or `timeout_ms` passes (< 0: no limit), and
// splits `refs` into ready and unready, each in the order given. A ready object may hold an
// error; Get tells. Throws RaydError unless 0 <= num_objects <= refs.size().
template <typename T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, int num_objects, int timeout_ms) {
  if (num_objects < 0 || static_cast<size_t>(num_objects) > refs.size()) {
    throw RaydError("Wait: num_objects must be between 0 and the number of refs (" +
                    std::to_string(refs.size()) + "), got " + std::to_string(num_objects));
  }
  std::vector<ObjectId> ids;
  ids.reserve(refs.size());
  for (const auto& ref : refs) ids.push_back(ref.id());
  internal::WaitOutcome outcome = internal::RequireRuntime().Wait(
      ids, static_cast<size_t>(num_objects), std::chrono::milliseconds(timeout_ms));
  WaitResult<T> result;
  for (size_t i : outcome.ready) result.ready.push_back(refs.at(i));
  for (size_t i : outcome.not_ready) result.unready.push_back(refs.at(i));
  return result;
}

}  // namespace rayd
