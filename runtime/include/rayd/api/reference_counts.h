#pragma once
// This process's reference table, as Ray's tests and memory debugging read it:
//
//   auto counts = rayd::GetAllReferenceCounts();
//   auto [handles, for_tasks] = counts.at(rayd::ObjectID::FromBinary(ref.ID()));
//
// For each object referenced here: the references held by this process's ObjectRef handles
// (each copy of a handle is one), and those held for submitted tasks that take it as an argument
// (directly, or inside a by-value argument) and have not finished. A task's are released before
// its result can be read: after Get of a task's result, its arguments no longer count. Other
// references (refs inside stored values, other processes borrowing an object owned here, an
// actor's creation arguments kept for its restarts) are in neither figure, and an object held
// only by them is not listed. Each call takes a snapshot; throws RaydError before Init.

#include <cstddef>
#include <unordered_map>
#include <utility>

#include "rayd/base/ids.h"
#include "rayd/internal/runtime.h"

namespace rayd {

// Ray's name for an object's id; ObjectID::FromBinary(ref.ID()) is the id of `ref`.
using ObjectID = ObjectId;

inline std::unordered_map<ObjectID, std::pair<size_t, size_t>> GetAllReferenceCounts() {
  return internal::RequireRuntime().ReferenceCounts();
}

namespace internal {

// Where Ray's tests read the table (ray::internal::NativeObjectStore), renamed.
class NativeObjectStore {
 public:
  std::unordered_map<ObjectID, std::pair<size_t, size_t>> GetAllReferenceCounts() const {
    return rayd::GetAllReferenceCounts();
  }
};

}  // namespace internal
}  // namespace rayd
