// The main of tune_mlflow_sweep_test. Node daemons re-run this binary as its own worker
// (RAYD_WORKER_MODE set): rayd::Init then serves the trials' rank actors, whose train loop is
// registered in mlflow_sweep.cc, and never returns. Otherwise it runs the Catch2 tests.

#define CATCH_CONFIG_RUNNER
#include <rayd/api.h>

#include <catch2/catch.hpp>
#include <cstdlib>

int main(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  return Catch::Session().run(argc, argv);
}
