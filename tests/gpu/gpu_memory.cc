// Device memory through the CUDA runtime alone (no LibTorch), as an outside observer sees it.

#ifdef RAYD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "gpu_support.h"

namespace rayd::gpu_test {

int64_t DeviceBytesUsed() {
#ifdef RAYD_HAVE_CUDA
  size_t free = 0;
  size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  return static_cast<int64_t>(total - free);
#else
  return -1;
#endif
}

}  // namespace rayd::gpu_test
