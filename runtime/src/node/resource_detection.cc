#include "node/resource_detection.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#ifdef RAYD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rayd::node {

using scheduler::FixedPoint;

int DetectCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return 1;
}

int64_t DetectTotalMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

int DetectGpus() {
#ifdef RAYD_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

scheduler::ResourceSet ResolveNodeResources(const NodeResourceOptions& options) {
  scheduler::ResourceSet total = options.custom;
  const int64_t ram = DetectTotalMemoryBytes();
  total.Set(scheduler::kCPU, FixedPoint::FromDouble(options.num_cpus.value_or(DetectCpus())));
  total.Set(scheduler::kGPU, FixedPoint::FromDouble(options.num_gpus.value_or(DetectGpus())));
  const int64_t store = options.object_store_memory.value_or(ram * 3 / 10);
  total.Set(scheduler::kObjectStoreMemory, FixedPoint::FromWhole(store));
  total.Set(scheduler::kMemory, FixedPoint::FromWhole(options.memory.value_or(ram * 7 / 10)));
  return total;
}

int DefaultPrestartWorkers(const scheduler::ResourceSet& total) {
  const int64_t cpus = total.Get(scheduler::kCPU).units() / FixedPoint::kScale;
  return static_cast<int>(std::clamp<int64_t>(cpus - 1, 0, 3));
}

}  // namespace rayd::node
