// The process-wide runtime pointer behind rayd::internal::CurrentRuntime.

#include "api/runtime_global.h"

#include <atomic>

namespace rayd::internal {
namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<uint64_t> g_generation{0};
thread_local bool t_in_actor_call = false;

}  // namespace

Runtime* CurrentRuntime() { return g_runtime.load(std::memory_order_acquire); }

void SetCurrentRuntime(Runtime* runtime) {
  // Generation first: a reader that sees the new pointer also sees the new generation.
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  g_runtime.store(runtime, std::memory_order_release);
}

bool InActorCall() { return t_in_actor_call; }
void SetInActorCall(bool in_actor_call) { t_in_actor_call = in_actor_call; }

RuntimeSlot CurrentRuntimeSlot() {
  RuntimeSlot slot;
  slot.runtime = g_runtime.load(std::memory_order_acquire);
  slot.generation = g_generation.load(std::memory_order_acquire);
  return slot;
}

}  // namespace rayd::internal
