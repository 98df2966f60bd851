// What runtime_test does before its tests (tests/test_main.h). The binary plays three parts:
//   - worker: node daemons re-run it with RAYD_WORKER_MODE set; rayd::Init then serves tasks
//     and actors until its node lets it go, and never returns;
//   - child driver: with RUNTIME_TEST_DRIVER_MODE=<mode>, runtime_test.cc's RunChildDriver
//     (a driver that ends without Shutdown, or a scenario that may hang or crash on a known
//     bug, run apart so the test process survives it);
//   - the Catch2 test runner otherwise (tests/main.cc, after this hook).

#include <rayd/api.h>

#include <cstdlib>

#include "test_main.h"

// Defined in runtime_test.cc.
int RunChildDriver(int argc, char** argv);

int RaydTestPreMain(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  if (std::getenv("RUNTIME_TEST_DRIVER_MODE")) return RunChildDriver(argc, argv);
  return kRunTheTests;
}
