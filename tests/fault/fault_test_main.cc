// What fault_test does before its tests (tests/test_main.h). The binary plays three parts:
//   - worker: node daemons re-run it with RAYD_WORKER_MODE set; rayd::Init then serves tasks
//     and actors until its node lets it go, and never returns;
//   - child driver: with FAULT_TEST_DRIVER_MODE=<mode>, scenarios_test.cc's RunChildDriver (a
//     driver the test runs inside a test-bed host and may SIGKILL);
//   - the Catch2 test runner otherwise (tests/main.cc, after this hook).

#include <rayd/api.h>

#include <cstdlib>

#include "test_main.h"

int RunChildDriver(const char* mode);

int RaydTestPreMain(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  if (const char* mode = std::getenv("FAULT_TEST_DRIVER_MODE")) return RunChildDriver(mode);
  return kRunTheTests;
}
