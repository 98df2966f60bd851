#pragma once
// The process's current runtime together with a generation number that changes every time it
// is set, so that a handle can tell whether the runtime it counted a ref in is still the one
// installed (see ObjectRefBase).

#include <cstdint>

#include "rayd/internal/runtime.h"

namespace rayd::internal {

struct RuntimeSlot {
  Runtime* runtime = nullptr;
  uint64_t generation = 0;  // 0 only while no runtime was ever set
};

RuntimeSlot CurrentRuntimeSlot();

}  // namespace rayd::internal
