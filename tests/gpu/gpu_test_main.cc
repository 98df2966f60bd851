// What gpu_test (label `gpu`) does before its tests (tests/test_main.h). Node daemons re-run
// this binary as its own worker (RAYD_WORKER_MODE set): rayd::Init serves the Trainer's rank
// actors and never returns.
// Otherwise it runs the Catch2 tests, but only where they can run: a build against CUDA
// LibTorch on a machine where a CUDA device answers. Elsewhere every test exits with 77, which
// CTest reports as skipped (SKIP_RETURN_CODE), never as passed. Listing the tests (CTest's
// discovery at build time) works everywhere.

#include <rayd/api.h>
#include <rayd/train/process_group.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <iostream>
#include <string_view>

#include "gpu_support.h"
#include "test_main.h"

int RaydTestPreMain(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    listing = listing || std::string_view(argv[i]).starts_with("--list");
  if (!listing) {
    if (std::string why = rayd::gpu_test::Unavailable(); !why.empty()) {
      std::cout << "skipped: " << why << "\n";
      return rayd::gpu_test::kSkipped;
    }
  }
  return kRunTheTests;
}
