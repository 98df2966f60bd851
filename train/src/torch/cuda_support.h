#pragma once
// What the Trainer needs from a LibTorch built with CUDA and NCCL, behind one interface, so
// that a single file includes CUDA LibTorch's headers: cuda/nccl.cc, compiled when rayd is
// configured against such a LibTorch (-DRAYD_WITH_CUDA=ON, the GPU machine's PyTorch), and
// cuda/none.cc otherwise (Debian's CPU LibTorch: CI, developers' machines), whose functions
// answer "no GPUs" and refuse NCCL with the reason.
//
// Devices: a rank sees only its bundle's GPUs (its node sets CUDA_VISIBLE_DEVICES), so its
// device is always cuda:0, the first of its own.

#include <rayd/base/status.h>
#include <rayd/train/process_group.h>

#include <chrono>
#include <cstdint>

namespace rayd::train::cuda {

// Whether this build trains on GPUs (LibTorch with CUDA, c10d with NCCL).
bool Built();
// CUDA devices this process sees; 0 in a CPU build or without a driver.
int DeviceCount();
// An NCCL group of `size` ranks over `store`, on this process's cuda:0. Its collectives fail
// (and abort the communicator) after `timeout`, with c10d's asynchronous error handling on.
Result<c10::intrusive_ptr<C10dBackend>> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int size,
                                                      std::chrono::milliseconds timeout);
// Ends an NCCL group's communicator now (before the group object goes), so the next run on a
// reused rank starts from a clean device.
void ShutdownNcclGroup(C10dBackend& group);
// Hands the caching allocator's unused blocks back to the driver (after a run, so a reused
// rank holds no memory of the last trial).
void ReleaseCachedMemory();

}  // namespace rayd::train::cuda
