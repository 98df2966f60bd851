// The RaydTestPreMain (test_main.h) of a test binary that is its own rayd worker: node daemons
// re-run it with RAYD_WORKER_MODE set, and rayd::Init then serves tasks and actors until its
// node lets it go, never returning.
#include <rayd/api.h>

#include <cstdlib>

#include "test_main.h"

int RaydTestPreMain(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  return kRunTheTests;
}
