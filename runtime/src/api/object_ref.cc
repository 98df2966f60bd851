// Local reference counting for ObjectRef handles.

#include "rayd/api/object_ref.h"

#include "api/runtime_global.h"

namespace rayd::internal {

ObjectRefBase::ObjectRefBase(ObjectId id, std::string owner_address)
    : id_(std::move(id)), owner_address_(std::move(owner_address)) {
  Acquire();
}

ObjectRefBase::ObjectRefBase(const ObjectRefBase& other)
    : id_(other.id_), owner_address_(other.owner_address_) {
  Acquire();
}

ObjectRefBase::ObjectRefBase(ObjectRefBase&& other) noexcept
    : id_(other.id_),
      owner_address_(std::move(other.owner_address_)),
      counted_in_(other.counted_in_) {
  other.id_ = ObjectId::Nil();
  other.counted_in_ = 0;
}

ObjectRefBase& ObjectRefBase::operator=(const ObjectRefBase& other) {
  // Take the new count before dropping the old one: with the same id the count never touches
  // zero, which would free the object.
  if (this != &other) *this = ObjectRefBase(other);
  return *this;
}

ObjectRefBase& ObjectRefBase::operator=(ObjectRefBase&& other) noexcept {
  if (this == &other) return *this;
  Release();
  id_ = other.id_;
  owner_address_ = std::move(other.owner_address_);
  counted_in_ = other.counted_in_;
  other.id_ = ObjectId::Nil();
  other.counted_in_ = 0;
  return *this;
}

ObjectRefBase::~ObjectRefBase() { Release(); }

std::string ObjectRefBase::ResolvedOwnerAddress() const {
  if (!owner_address_.empty() || id_.IsNil()) return owner_address_;
  Runtime* runtime = CurrentRuntime();
  return runtime != nullptr ? runtime->OwnerAddress(id_) : std::string();
}

void ObjectRefBase::Acquire() {
  counted_in_ = 0;
  if (id_.IsNil()) return;
  RuntimeSlot slot = CurrentRuntimeSlot();
  if (slot.runtime == nullptr) return;
  slot.runtime->AddLocalRef(id_);
  counted_in_ = slot.generation;
}

void ObjectRefBase::Release() {
  if (counted_in_ == 0) return;
  RuntimeSlot slot = CurrentRuntimeSlot();
  if (slot.runtime != nullptr && slot.generation == counted_in_) slot.runtime->RemoveLocalRef(id_);
  counted_in_ = 0;
}

namespace {
thread_local NestedRefCollector* t_collector = nullptr;
}  // namespace

NestedRefCollector::NestedRefCollector() : outer_(t_collector) { t_collector = this; }

NestedRefCollector::~NestedRefCollector() { t_collector = outer_; }

void NestedRefCollector::Record(const ObjectRefBase& ref) {
  if (t_collector == nullptr || ref.IsNil()) return;
  t_collector->refs_.push_back(NestedRef{ref.id(), ref.ResolvedOwnerAddress()});
  t_collector->handles_.push_back(ref);
}

std::shared_ptr<const void> NestedRefCollector::TakeHandles() {
  if (handles_.empty()) return nullptr;
  return std::make_shared<const std::vector<ObjectRefBase>>(std::move(handles_));
}

void RegisterBorrowed(const ObjectId& id, const std::string& owner_address) {
  if (id.IsNil()) return;
  if (Runtime* runtime = CurrentRuntime()) runtime->RegisterBorrowedRef(id, owner_address);
}

}  // namespace rayd::internal
