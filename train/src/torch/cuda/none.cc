// The CPU build of cuda_support.h: Debian's LibTorch has no CUDA, so there is no device and
// no NCCL; asking for an NCCL group says how to get one.

#include "cuda_support.h"

namespace rayd::train::cuda {

bool Built() { return false; }

int DeviceCount() { return 0; }

Result<c10::intrusive_ptr<C10dBackend>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>&, int,
                                                      int, std::chrono::milliseconds) {
  return Status::Unimplemented(
      "NCCL needs rayd built against a LibTorch with CUDA (-DRAYD_WITH_CUDA=ON, docs/gpu.md); "
      "this build's LibTorch is CPU-only");
}

void ShutdownNcclGroup(C10dBackend&) {}

void ReleaseCachedMemory() {}

}  // namespace rayd::train::cuda
