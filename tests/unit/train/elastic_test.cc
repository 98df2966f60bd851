// Elastic runs' sizing rules (rayd/train/trainer.h): how many workers an attempt asks for, given
// the cluster's free resources and what the run holds, always within [min_workers,
// num_workers]; and the bounds an elastic ScalingConfig must keep.

#include <rayd/train/trainer.h>

#include <catch2/catch.hpp>

namespace rt = rayd::train;

TEST_CASE("an elastic attempt asks for what fits, clamped to min and max", "[train][elastic]") {
  rt::ScalingConfig scaling{.num_workers = 8, .min_workers = 2};
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 5}}) == 5);
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 5.9}}) == 5);   // whole bundles only
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 20}}) == 8);    // never above max
  CHECK(rt::ElasticWorkers(scaling, {}) == 2);               // never below min: it waits for min
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 3}}, 4) == 7);  // what it holds counts
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 3}}, 6) == 8);

  // Every resource of the bundle must fit: GPUs bound it here.
  scaling.use_gpu = true;
  scaling.resources_per_worker = {{"CPU", 2}};
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 16}, {"GPU", 3}}) == 3);
  CHECK(rt::ElasticWorkers(scaling, {{"CPU", 5}, {"GPU", 3}}) == 2);
}

TEST_CASE("elastic bounds are checked", "[train][elastic]") {
  CHECK(rt::CheckElastic({.num_workers = 4}).empty());  // not elastic
  CHECK(rt::CheckElastic({.num_workers = 4, .min_workers = 4}).empty());
  CHECK(rt::CheckElastic({.num_workers = 4, .min_workers = 5}) ==
        "an elastic run's bounds must satisfy 1 <= min <= max, got [5, 4]");
  CHECK_FALSE(rt::CheckElastic({.num_workers = 4, .min_workers = -1}).empty());
  CHECK(rt::CheckElastic({.num_workers = 4, .min_workers = 1, .resize_interval_s = 0}) ==
        "resize_interval_s must be above 0");
  rt::ScalingConfig meshed{.num_workers = 4, .min_workers = 2};
  meshed.mesh = {.pipeline = 2};
  CHECK(rt::CheckElastic(meshed) == "an elastic run cannot have a mesh (yet)");
}
