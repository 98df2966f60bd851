#pragma once
// ObjectRef<T>: a handle on an object (a Put value or a task's result) that may not exist yet.
//
// Reference counting: while a runtime is installed, every live non-nil ObjectRef holds one
// local ref on its object (Runtime::AddLocalRef on construction and copy, RemoveLocalRef on
// destruction); the owner frees the object when no handle remains anywhere. A ref is released
// only into the runtime it was counted in: refs that outlive a Shutdown release nothing.
//
// Serialisation: an ObjectRef inside a value (a task argument, a Put value, a return value)
// packs as [id hex, owner address]; unpacking it registers the ref as borrowed
// (Runtime::RegisterBorrowedRef) so that Get can fetch the object from its owner. The refs
// packed into a value are recorded (NestedRefCollector) and handed to the runtime with it,
// which keeps them alive as long as the value: a ref put inside a value needs no other handle.
//
// Thread safety: like std::shared_ptr — distinct ObjectRef instances may be used from any
// thread; one instance must not be written while another thread reads it.

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rayd/api/serializer.h"
#include "rayd/internal/runtime.h"

namespace rayd {
namespace internal {

// What every ObjectRef<T> holds; not templated so that the counting lives in the library.
class ObjectRefBase {
 public:
  ObjectRefBase() = default;
  // Takes a new local ref on `id` (when a runtime is installed and `id` is not nil).
  ObjectRefBase(ObjectId id, std::string owner_address);
  ObjectRefBase(const ObjectRefBase& other);
  ObjectRefBase(ObjectRefBase&& other) noexcept;
  ObjectRefBase& operator=(const ObjectRefBase& other);
  ObjectRefBase& operator=(ObjectRefBase&& other) noexcept;
  ~ObjectRefBase();

  const ObjectId& id() const { return id_; }
  // The owner's RPC address as received; empty for refs this process created.
  const std::string& owner_address() const { return owner_address_; }
  // owner_address(), or the runtime's answer for refs this process created ("" without one).
  std::string ResolvedOwnerAddress() const;
  bool IsNil() const { return id_.IsNil(); }

 private:
  void Acquire();
  void Release();

  ObjectId id_;
  std::string owner_address_;
  // Generation of the runtime this handle holds a local ref in; 0: none.
  uint64_t counted_in_ = 0;
};

}  // namespace internal

// What Get gives for an ObjectRef<T>: a shared_ptr<T>, nothing for void.
template <typename T>
using GetResult = std::conditional_t<std::is_void_v<T>, void, std::shared_ptr<T>>;

template <typename T>
class ObjectRef : public internal::ObjectRefBase {
 public:
  using ValueType = T;

  // A nil ref: refers to nothing; Get on it fails.
  ObjectRef() = default;
  // For the runtime and the API: users get refs from Put and Remote(). `owner_address` is
  // empty for objects this process owns.
  ObjectRef(ObjectId id, std::string owner_address)
      : ObjectRefBase(std::move(id), std::move(owner_address)) {}

  // The object id as 32 hex digits.
  std::string ID() const { return id().Hex(); }

  // rayd::Get(*this) and rayd::Get(*this, timeout_ms) (rayd/api/objects.h), as members.
  GetResult<T> Get() const;
  GetResult<T> Get(int timeout_ms) const;

  friend bool operator==(const ObjectRef& a, const ObjectRef& b) { return a.id() == b.id(); }
};

namespace internal {

// Records the ObjectRefs packed into values on this thread while it lives: create one around
// a Serialize whose bytes go to the runtime, and pass refs() along with them. The innermost
// live collector records.
class NestedRefCollector {
 public:
  NestedRefCollector();
  ~NestedRefCollector();
  NestedRefCollector(const NestedRefCollector&) = delete;
  NestedRefCollector& operator=(const NestedRefCollector&) = delete;

  // Called by the packer of ObjectRef: records `ref` (not nil) in the current collector, if any.
  static void Record(const ObjectRefBase& ref);
  const std::vector<NestedRef>& refs() const { return refs_; }
  // Handles on the recorded refs (keeping them alive while the result lives), for values that
  // outlive the serialised object, e.g. a task's return value.
  std::shared_ptr<const void> TakeHandles();

 private:
  NestedRefCollector* outer_;
  std::vector<NestedRef> refs_;
  std::vector<ObjectRefBase> handles_;
};

template <typename T>
struct IsObjectRef : std::false_type {};
template <typename T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {
  using ValueType = T;
};

// Registers a ref received from another process (Runtime::RegisterBorrowedRef) and returns a
// handle on it.
void RegisterBorrowed(const ObjectId& id, const std::string& owner_address);
template <typename T>
ObjectRef<T> MakeBorrowedRef(const ObjectId& id, const std::string& owner_address) {
  RegisterBorrowed(id, owner_address);
  return ObjectRef<T>(id, owner_address);
}

}  // namespace internal
}  // namespace rayd

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <typename T>
  struct pack<rayd::ObjectRef<T>> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& out, const rayd::ObjectRef<T>& ref) const {
      if (!ref.IsNil()) rayd::internal::NestedRefCollector::Record(ref);
      out.pack_array(2);
      out.pack(ref.IsNil() ? std::string() : ref.id().Hex());
      out.pack(ref.ResolvedOwnerAddress());
      return out;
    }
  };

  template <typename T>
  struct convert<rayd::ObjectRef<T>> {
    const msgpack::object& operator()(const msgpack::object& o, rayd::ObjectRef<T>& ref) const {
      if (o.type != msgpack::type::ARRAY || o.via.array.size != 2) throw msgpack::type_error();
      auto hex = o.via.array.ptr[0].as<std::string>();
      auto owner = o.via.array.ptr[1].as<std::string>();
      if (hex.empty()) {
        ref = rayd::ObjectRef<T>();
        return o;
      }
      auto id = rayd::ObjectId::FromHex(hex);
      if (!id.ok()) throw msgpack::type_error();
      ref = rayd::internal::MakeBorrowedRef<T>(*id, owner);
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack
