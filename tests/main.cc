// Catch2's runner for every test binary, compiled once: Catch's implementation is the slowest
// file of any binary that compiles it. A binary that is something else too (the rayd worker its
// node daemons re-run, a child driver, one that skips without a GPU) defines RaydTestPreMain
// (test_main.h), which runs first.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "test_main.h"

// Weak: a binary that defines none runs its tests at once.
__attribute__((weak)) int RaydTestPreMain(int argc, char** argv);

int main(int argc, char** argv) {
  if (RaydTestPreMain != nullptr) {
    if (const int rc = RaydTestPreMain(argc, argv); rc != kRunTheTests) return rc;
  }
  return Catch::Session().run(argc, argv);
}
