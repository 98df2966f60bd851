#pragma once
// How many threads a process's tensor math uses: LibTorch's intra-op pool, and OpenBLAS's pool
// when LibTorch's BLAS is OpenBLAS (Debian's is). at::set_num_threads leaves OpenBLAS's own pool
// alone, at a thread per core by default, and its idle threads spin in sched_yield: on 2 cores,
// each of 2 ranks' second BLAS thread took 15% of its rank's CPU, four fifths in the kernel.

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace rayd::train::internal {

inline void SetComputeThreads(int threads) {
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
  }
}

}  // namespace rayd::train::internal
