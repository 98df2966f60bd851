// rayd_train without LibTorch (train/src/rank_session.h): this binary links rayd_train only, as
// a sweep of a loop that just reports does, and so do its ranks (node daemons re-run it as its
// own worker). A single rank runs its loop without LibTorch ever entering its process; a run of
// several ranks loads rayd_train_torch from beside librayd_train.so to form its process group.

#define CATCH_CONFIG_RUNNER
#include <rayd/api.h>
#include <rayd/train/trainer.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

#include "runtime_harness.h"

namespace {

namespace rt = rayd::train;
using rayd_runtime_test::EmbeddedRayd;
using rayd_runtime_test::TempDir;

// Whether this process has mapped a library whose file name starts with `name`.
bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.rfind('/');
    if (slash != std::string::npos && line.compare(slash + 1, name.size(), name) == 0) return true;
  }
  return false;
}

// Reports, from every rank, whether LibTorch and rayd's torch half are in its process.
void WhatIsLoaded(const nlohmann::json&) {
  rt::Report({{"pid", ::getpid()},
              {"libtorch", Mapped("libtorch_cpu.so") ? 1 : 0},
              {"torch_half", Mapped("librayd_train_torch.so") ? 1 : 0},
              {"world_size", rt::GetContext().world_size}});
}
RAYD_TRAIN_LOOP(WhatIsLoaded);

}  // namespace

TEST_CASE("a loop that only reports runs on a rank without LibTorch", "[trainer]") {
  REQUIRE_FALSE(Mapped("libtorch_cpu.so"));  // the driver links rayd_train only
  EmbeddedRayd cluster;
  TempDir storage;
  rt::TrainResult result = rt::Trainer("WhatIsLoaded", {}, {.num_workers = 1},
                                       {.name = "alone", .storage_path = storage.path()})
                               .Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.metrics.at("pid") != ::getpid());  // a rank process of its own
  CHECK(result.metrics.at("libtorch") == 0);
  CHECK(result.metrics.at("torch_half") == 0);
}

TEST_CASE("a run of two ranks loads rayd's torch half to form its process group", "[trainer]") {
  EmbeddedRayd cluster;
  TempDir storage;
  rt::TrainResult result =
      rt::Trainer("WhatIsLoaded", {}, {.num_workers = 2, .collective_timeout_s = 30},
                  {.name = "pair", .storage_path = storage.path()})
          .Fit();
  INFO(result.error);
  REQUIRE(result.ok());
  CHECK(result.metrics.at("world_size") == 2);
  CHECK(result.metrics.at("libtorch") == 1);
  CHECK(result.metrics.at("torch_half") == 1);
  CHECK_FALSE(Mapped("libtorch_cpu.so"));  // the driver's process never needed it
}

int main(int argc, char** argv) {
  if (std::getenv("RAYD_WORKER_MODE")) rayd::Init(rayd::RaydConfig{}, argc, argv);
  return Catch::Session().run(argc, argv);
}
