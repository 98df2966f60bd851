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

// Every block carries its size in a header of kAlignment bytes just before its data, so that
// freeing one needs no lookup.
class CachingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    void* data = Take(bytes);
    return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }

 private:
  struct Cache {
    std::mutex mu;
    std::unordered_map<size_t, std::vector<void*>> free;  // cached blocks' data, by exact size
    size_t cached = 0;                                    // bytes in `free`
  };
  // Never destroyed: tensors may be freed by static destructors after this file's would run.
  static Cache& cache() {
    static Cache* c = new Cache();
    return *c;
  }
  static size_t& SizeOf(void* data) {
    return *reinterpret_cast<size_t*>(static_cast<char*>(data) - kAlignment);
  }

  static void* Take(size_t bytes) {
    if (bytes == 0) return nullptr;
    if (bytes >= kMinCachedBytes) {
      Cache& c = cache();
      std::lock_guard lock(c.mu);
      if (auto it = c.free.find(bytes); it != c.free.end() && !it->second.empty()) {
        void* data = it->second.back();
        it->second.pop_back();
        c.cached -= bytes;
        return data;
      }
    }
    void* block = nullptr;
    if (::posix_memalign(&block, kAlignment, kAlignment + bytes) != 0) throw std::bad_alloc();
    void* data = static_cast<char*>(block) + kAlignment;
    SizeOf(data) = bytes;
    return data;
  }

  static void Free(void* data) {
    if (data == nullptr) return;
    const size_t bytes = SizeOf(data);
    if (bytes >= kMinCachedBytes) {
      Cache& c = cache();
      std::lock_guard lock(c.mu);
      if (c.cached + bytes <= kMaxCachedBytes) {
        c.free[bytes].push_back(data);
        c.cached += bytes;
        return;
      }
    }
    std::free(static_cast<char*>(data) - kAlignment);
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
