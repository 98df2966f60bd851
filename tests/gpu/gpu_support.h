#pragma once
// What the GPU tests share: whether they can run here, device memory as the CUDA runtime sees
// it, and a place to leave measured figures for scripts/gpu-check.sh (docs/gpu.md).

#include <rayd/train/process_group.h>
#include <torch/cuda.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace rayd::gpu_test {

// CTest's SKIP_RETURN_CODE for this binary.
inline constexpr int kSkipped = 77;

// Empty when the GPU tests can run here; else why not.
inline std::string Unavailable() {
  if (!rayd::train::NcclBuilt()) {
    return "rayd was built against a CPU-only LibTorch (scripts/gpu-check.sh builds it against "
           "CUDA LibTorch with -DRAYD_WITH_CUDA=ON)";
  }
  if (!torch::cuda::is_available()) return "no CUDA device answers on this machine";
  return "";
}

// Ends the test as skipped (before it has started anything) when `why` is not empty.
inline void SkipIf(const std::string& why) {
  if (why.empty()) return;
  std::cout << "skipped: " << why << "\n";
  std::exit(kSkipped);
}

// Bytes in use on device 0, as cudaMemGetInfo reports (every process's, this one's context
// included).
int64_t DeviceBytesUsed();

// Appends "name value unit" to the file named by RAYD_GPU_FIGURES, when set.
inline void Figure(const std::string& name, double value, const std::string& unit) {
  std::cout << "figure: " << name << " " << value << " " << unit << "\n";
  if (const char* path = std::getenv("RAYD_GPU_FIGURES")) {
    std::ofstream(path, std::ios::app) << name << " " << value << " " << unit << "\n";
  }
}

}  // namespace rayd::gpu_test
