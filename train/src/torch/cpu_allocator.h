#pragma once
// LibTorch's CPU tensors, allocated through a cache that keeps freed large blocks for the next
// allocation of the same size.
//
// Why: glibc gives each thread but the first an arena of its own, made of 64 MiB heaps, and a
// heap that becomes wholly free is unmapped at once (no trim threshold applies to it). A rank's
// loop thread allocates and frees the same activations and gradients every step, so each step
// mapped new heaps and faulted their pages in again: a 2-rank Fashion-MNIST CNN on 2 cores spent
// a third of its CPU in the kernel (about 25 mmap/munmap pairs a second, 7 million page faults
// in 40 s). PyTorch's own advice for CPU training is a caching malloc (jemalloc, tcmalloc) under
// LD_PRELOAD; a rank's process is started before it knows it is one, so the cache is installed
// in-process instead, as LibTorch's CPU allocator (c10::SetCPUAllocator).

namespace rayd::train::internal {

// Installs the cache as LibTorch's CPU allocator, once per process (later calls do nothing).
// Blocks of kMinCachedBytes and more are kept, up to kMaxCachedBytes in all; smaller ones go
// straight to malloc, which keeps them well. Tensors allocated before the call keep their own
// deleters.
void UseCachingCpuAllocator();

}  // namespace rayd::train::internal
