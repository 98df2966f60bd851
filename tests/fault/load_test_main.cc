// The main of load_test. The binary plays two parts:
//   - worker: node daemons re-run it with RAYD_WORKER_MODE set; rayd::Init then serves tasks
//     and actors until its node lets it go, and never returns;
//   - the Catch2 test runner otherwise.

#define CATCH_CONFIG_RUNNER
#include <rayd/api.h>

#include <catch2/catch.hpp>
#include <cstdlib>

int main(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  return Catch::Session().run(argc, argv);
}
