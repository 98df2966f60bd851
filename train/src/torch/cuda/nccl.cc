// The CUDA build of cuda_support.h: c10d's NCCL group and the CUDA caching allocator, from a
// LibTorch built with CUDA and NCCL (PyTorch's own; compiled only with RAYD_TORCH_CUDA, and
// with USE_C10D_NCCL defined so that ProcessGroupNCCL.hpp declares the group).

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdlib>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "c10d_error.h"
#include "cuda_support.h"

namespace rayd::train::cuda {

bool Built() { return true; }

int DeviceCount() {
  try {
    return static_cast<int>(c10::cuda::device_count());
  } catch (...) {
    return 0;  // no driver: no devices
  }
}

Result<c10::intrusive_ptr<C10dBackend>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size,
                                                      std::chrono::milliseconds timeout) {
  if (DeviceCount() < 1) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return Status::Unavailable(
        std::string("no CUDA device is visible to this rank (CUDA_VISIBLE_DEVICES=") +
        (visible != nullptr ? visible : "unset") + ")");
  }
  // What torchrun sets: a collective that outlives the group's timeout aborts the communicator
  // (c10d's watchdog then ends the rank's process, which the Trainer sees as a failed attempt
  // and restarts from the latest checkpoint) instead of hanging every rank. Read by c10d when
  // the group is made; a user's own setting wins. The waits on our side (WaitWork) carry the
  // same timeout, so a rank blocked in one fails by itself too.
  ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", /*overwrite=*/0);
  try {
    c10::cuda::set_device(0);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    c10::intrusive_ptr<C10dBackend> group =
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
    return group;
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), "creating the NCCL group");
  }
}

void ShutdownNcclGroup(C10dBackend& group) {
  auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(&group);
  if (nccl == nullptr) return;
// shutdown() takes no argument from PyTorch 2.5 on (2.3 and 2.4 wanted a reason).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  try {
    nccl->shutdown();
  } catch (...) {
    // A communicator that already failed has nothing left to end.
  }
#else
  (void)nccl;  // older c10d ends the communicator in the group's destructor
#endif
}

void ReleaseCachedMemory() {
  try {
    c10::cuda::CUDACachingAllocator::emptyCache();
  } catch (...) {
    // No device was ever used in this process: nothing is cached.
  }
}

}  // namespace rayd::train::cuda
