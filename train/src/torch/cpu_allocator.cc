#include "cpu_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace rayd::train::internal {
namespace {

constexpr size_t kMinCachedBytes = size_t{256} << 10;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;
constexpr size_t kAlignment = 64;  // as LibTorch's own CPU allocator (c10::gAlignment)

class CachingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    void* data = Take(bytes);
    return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }

 private:
  struct State {
    std::mutex mu;
    std::unordered_map<void*, size_t> sizes;              // every live or cached large block
    std::unordered_map<size_t, std::vector<void*>> free;  // cached blocks, by exact size
    size_t cached = 0;                                    // bytes in `free`
  };
  // Never destroyed: tensors may be freed by static destructors after this file's would run.
  static State& state() {
    static State* s = new State();
    return *s;
  }

  static void* Take(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (bytes >= kMinCachedBytes) {
      State& s = state();
      std::lock_guard lock(s.mu);
      if (auto it = s.free.find(bytes); it != s.free.end() && !it->second.empty()) {
        void* data = it->second.back();
        it->second.pop_back();
        s.cached -= bytes;
        return data;
      }
    }
    void* data = nullptr;
    if (::posix_memalign(&data, kAlignment, bytes) != 0) throw std::bad_alloc();
    if (bytes >= kMinCachedBytes) {
      State& s = state();
      std::lock_guard lock(s.mu);
      s.sizes.emplace(data, bytes);
    }
    return data;
  }

  static void Free(void* data) {
    if (data == nullptr) return;
    State& s = state();
    {
      std::lock_guard lock(s.mu);
      auto it = s.sizes.find(data);
      if (it != s.sizes.end()) {
        const size_t bytes = it->second;
        if (s.cached + bytes <= kMaxCachedBytes) {
          s.free[bytes].push_back(data);
          s.cached += bytes;
          return;
        }
        s.sizes.erase(it);
      }
    }
    std::free(data);
  }
};

}  // namespace

void UseCachingCpuAllocator() {
  static CachingCpuAllocator* allocator = [] {
    auto* a = new CachingCpuAllocator();  // lives as long as the tensors it made
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  (void)allocator;
}

}  // namespace rayd::train::internal
