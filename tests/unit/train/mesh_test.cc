// A trial's gang as a device mesh: coordinates and group members (rayd/train/trainer.h), and
// the groups themselves formed as subgroups of a world of thread-ranks
// (ProcessGroup::Subgroup), each all-reducing over its own members only.

#include <rayd/api/errors.h>
#include <rayd/train/process_group.h>
#include <rayd/train/trainer.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "thread_groups.h"

namespace rayd::train {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("mesh coordinates run tensor fastest, then data, then pipeline", "[train][mesh]") {
  const MeshShape mesh{.data = 2, .pipeline = 2, .tensor = 2};
  const MeshCoordinates at = MeshCoordinatesOf(mesh, 5);
  CHECK(at.tensor_rank == 1);
  CHECK(at.data_rank == 0);
  CHECK(at.pipeline_rank == 1);
  CHECK(MeshGroupRanks(mesh, 5, MeshAxis::kTensor) == std::vector<int>{4, 5});
  CHECK(MeshGroupRanks(mesh, 5, MeshAxis::kData) == std::vector<int>{5, 7});
  CHECK(MeshGroupRanks(mesh, 5, MeshAxis::kPipeline) == std::vector<int>{1, 5});
  // Every rank is in exactly one group per axis, at its own coordinate.
  for (int rank = 0; rank < 8; ++rank) {
    const MeshCoordinates c = MeshCoordinatesOf(mesh, rank);
    CHECK(MeshGroupRanks(mesh, rank, MeshAxis::kTensor)[c.tensor_rank] == rank);
    CHECK(MeshGroupRanks(mesh, rank, MeshAxis::kData)[c.data_rank] == rank);
    CHECK(MeshGroupRanks(mesh, rank, MeshAxis::kPipeline)[c.pipeline_rank] == rank);
  }
}

TEST_CASE("a mesh must be the gang", "[train][mesh]") {
  ScalingConfig scaling;
  scaling.num_workers = 8;
  CHECK(CheckMesh(scaling).empty());  // none: data parallel
  scaling.mesh = {.pipeline = 2, .tensor = 2};
  CHECK(CheckMesh(scaling).empty());
  CHECK(ResolveMesh(scaling) == MeshShape{.data = 2, .pipeline = 2, .tensor = 2});
  scaling.mesh = {.data = 3, .pipeline = 2};
  CHECK_THROWS_WITH(ResolveMesh(scaling),
                    Contains("ScalingConfig.mesh: data x pipeline x tensor "
                             "must equal num_workers (8), but 3 x 2 x 1 = 6"));
  scaling.mesh = {.pipeline = 3};
  CHECK_THAT(CheckMesh(scaling), Contains("pipeline x tensor = 3 does not divide it"));
  scaling.mesh = {.pipeline = 0};
  CHECK_THAT(CheckMesh(scaling), Contains("at least 1"));
}

TEST_CASE("subgroups of a world all-reduce over their own members", "[train][mesh]") {
  const MeshShape mesh{.data = 1, .pipeline = 2, .tensor = 2};
  auto world = testing::FormThreadGroups(4);
  std::vector<double> tensor_sums(4), pipeline_sums(4);
  std::vector<Status> statuses = testing::OnEachThreadRank(4, [&](int rank) -> Status {
    std::vector<std::unique_ptr<ProcessGroup>> groups;
    for (MeshAxis axis : {MeshAxis::kData, MeshAxis::kPipeline, MeshAxis::kTensor}) {
      std::vector<int> ranks = MeshGroupRanks(mesh, rank, axis);
      std::string name = "axis" + std::to_string(static_cast<int>(axis));
      for (int r : ranks) name += "-" + std::to_string(r);
      auto formed = world[rank]->Subgroup(ranks, name);
      if (!formed.ok()) return formed.status();
      groups.push_back(std::move(formed).value());
    }
    const MeshCoordinates at = MeshCoordinatesOf(mesh, rank);
    if (groups[1]->rank() != at.pipeline_rank || groups[2]->rank() != at.tensor_rank ||
        groups[0]->world_size() != 1) {
      return Status::Internal("rank " + std::to_string(rank) + ": wrong subgroup ranks");
    }
    torch::Tensor mine = torch::tensor({static_cast<double>(1 << rank)}, torch::kFloat64);
    torch::Tensor along_pipeline = mine.clone();
    if (Status s = AllReduce(*groups[1], along_pipeline, "pipeline"); !s.ok()) return s;
    if (Status s = AllReduce(*groups[2], mine, "tensor"); !s.ok()) return s;
    tensor_sums[rank] = mine.item<double>();
    pipeline_sums[rank] = along_pipeline.item<double>();
    return Status::Ok();
  });
  for (const Status& s : statuses) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  // Tensor groups {0, 1} and {2, 3}; pipeline groups {0, 2} and {1, 3}.
  CHECK(tensor_sums == std::vector<double>{3, 3, 12, 12});
  CHECK(pipeline_sums == std::vector<double>{5, 10, 5, 10});
  auto refused = world[0]->Subgroup({1, 2}, "without-0");
  CHECK_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Contains("rank 0 is not among its ranks"));
}

}  // namespace
}  // namespace rayd::train
