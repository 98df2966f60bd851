#pragma once
// Put, Get and Wait: moving values into and out of the object store.
//
//   rayd::ObjectRef<int> ref = rayd::Put(42);
//   std::shared_ptr<int> v = rayd::Get(ref);            // blocks until the value exists
//   rayd::Get(ref, /*timeout_ms=*/100);                  // or throws TimeoutError
//   rayd::WaitResult<int> w = rayd::Wait(refs, 1, 1000); // the first ready one, or none
//
// Large values (100 KiB and up) live in the node's shared-memory object store. A std::vector of
// numbers is stored as one raw array, and can be read in place, without a copy:
//
//   rayd::ObjectRef<std::vector<float>> ref = rayd::Put(std::vector<float>(1 << 28));
//   rayd::ArrayView<float> view = rayd::GetView(ref);   // points into shared memory
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
using GetAllResult = std::conditional_t<std::is_void_v<T>, void, std::vector<std::shared_ptr<T>>>;

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> unready;
};

// A read-only view of an array object (a std::vector<T> of numbers that was Put or returned),
// read in place from the node's shared memory when it is large. The view keeps the object
// pinned there while it (or a copy of it) lives.
template <typename T>
class ArrayView {
 public:
  ArrayView() = default;
  // For the API: users get views from GetView.
  ArrayView(std::shared_ptr<const internal::SharedBytes> bytes, const T* data, size_t size)
      : bytes_(std::move(bytes)), data_(data), size_(size) {}
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  // True when the elements lie in the node's shared-memory object store (not a private copy).
  bool in_shared_memory() const { return bytes_ && bytes_->in_shared_memory(); }
  std::vector<T> ToVector() const { return std::vector<T>(begin(), end()); }

 private:
  std::shared_ptr<const internal::SharedBytes> bytes_;
  const T* data_ = nullptr;
  size_t size_ = 0;
};

namespace internal {

// Small values arrive as private bytes; this gives them the same shape as shared ones.
class OwnedBytes : public SharedBytes {
 public:
  explicit OwnedBytes(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string_view view() const override { return bytes_; }
  bool in_shared_memory() const override { return false; }

 private:
  std::string bytes_;
};

// Throws the object's error, then decodes its bytes as T (nothing for void).
template <typename T>
GetResult<T> DecodeObject(const ObjectValue& value, const ObjectId& id) {
  ThrowIfError(value, id);
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    try {
      return std::make_shared<T>(Deserialize<T>(value.bytes()));
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

// Stores a copy of `value` owned by this process and returns a ref to it. A large value goes
// to the node's shared-memory store; one that can never fit there throws ObjectStoreFullError.
template <typename T>
ObjectRef<T> Put(const T& value) {
  if constexpr (internal::IsRawArray<T>::value) {
    // Written straight into shared memory: one copy.
    ObjectId id = internal::RequireRuntime().PutSerialized(
        internal::RawArraySize(value), [&](uint8_t* out) { internal::WriteRawArray(value, out); });
    return ObjectRef<T>(id, std::string());
  } else {
    // Refs inside the value live as long as it does.
    internal::NestedRefCollector nested;
    std::string bytes = internal::Serialize(value);
    internal::Runtime& runtime = internal::RequireRuntime();
    ObjectId id = nested.refs().empty() ? runtime.Put(std::move(bytes))
                                        : runtime.PutWithRefs(std::move(bytes), nested.refs());
    return ObjectRef<T>(id, std::string());
  }
}

// Waits for an array object like Get does, and returns a view of its elements without copying
// them (see ArrayView). Throws RaydError if the object is not an array of T.
template <typename T>
ArrayView<T> GetView(const ObjectRef<std::vector<T>>& ref, int timeout_ms = -1) {
  static_assert(internal::IsRawArray<std::vector<T>>::value,
                "rayd::GetView reads vectors of numbers (not bool)");
  if (ref.IsNil()) throw RaydError("GetView of a nil ObjectRef");
  std::vector<internal::ObjectValue> values =
      internal::RequireRuntime().Get({ref.id()}, std::chrono::milliseconds(timeout_ms));
  if (values.size() != 1) throw RaydError("runtime returned the wrong number of values");
  internal::ThrowIfError(values[0], ref.id());
  std::shared_ptr<const internal::SharedBytes> bytes =
      values[0].shared ? values[0].shared
                       : std::make_shared<internal::OwnedBytes>(std::move(values[0].data));
  const T* data = nullptr;
  size_t size = 0;
  try {
    data = internal::FindRawArray<T>(bytes->view(), &size);
  } catch (const std::exception&) {
    data = nullptr;
  }
  if (data == nullptr) {
    throw RaydError("object " + ref.id().Hex() + " is not an array of " +
                    internal::DemangledName(typeid(T)));
  }
  return ArrayView<T>(std::move(bytes), data, size);
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

template <typename T>
GetResult<T> ObjectRef<T>::Get() const {
  return rayd::Get(*this, -1);
}

template <typename T>
GetResult<T> ObjectRef<T>::Get(int timeout_ms) const {
  return rayd::Get(*this, timeout_ms);
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
