// HostCollectives (train/src/torch/host_collectives.h): the shared-memory collectives of a Gloo
// group whose ranks share a host. The ranks here are threads of this process, each with its own
// ProcessGroup over 127.0.0.1 and its own mapping of the segment; a rank whose process exits is
// ddp_test's (a stage-3 rank whose peer dies).

#include "torch/host_collectives.h"

#include <dirent.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "thread_groups.h"

namespace rayd::train {
namespace {

using namespace std::chrono_literals;

using testing::FormThreadGroups;

// Runs `body(rank, host)` on a thread per rank, and returns each one's Status.
std::vector<Status> OnEachRank(std::vector<std::unique_ptr<ProcessGroup>>& groups,
                               const std::function<Status(int, HostCollectives&)>& body) {
  for (const auto& group : groups) REQUIRE(group->host_collectives() != nullptr);
  return testing::OnEachThreadRank(static_cast<int>(groups.size()), [&](int rank) {
    return body(rank, *groups[rank]->host_collectives());
  });
}

// rank r's n values: r * 1000 + i / 7 (exact in bf16 only when small; used for floats).
torch::Tensor RankValues(int rank, int64_t n, torch::ScalarType type = torch::kFloat) {
  return (torch::arange(n, torch::kDouble).div(7).floor() + rank * 1000).to(type);
}

TEST_CASE("ranks of one host all-gather through shared memory, in chunks, in any dtype",
          "[train][zero]") {
  auto groups = FormThreadGroups(3, true);
  // Over two chunks of a 1 MiB buffer per rank, and not a multiple of one.
  const int64_t n = static_cast<int64_t>(HostCollectives::kBufferBytes / sizeof(float)) * 2 + 123;
  const torch::ScalarType type = GENERATE(torch::kFloat, torch::kBFloat16, torch::kDouble);
  std::vector<Status> statuses = OnEachRank(groups, [&](int rank, HostCollectives& host) {
    torch::Tensor out = torch::full({3 * n}, -1, type);
    RAYD_RETURN_IF_ERROR(host.AllGather(RankValues(rank, n, type), out, "the test's gather"));
    for (int from = 0; from < 3; ++from) {
      if (!out.narrow(0, from * n, n).equal(RankValues(from, n, type))) {
        return Status::Internal("rank " + std::to_string(rank) + " got rank " +
                                std::to_string(from) + "'s part wrong");
      }
    }
    return Status::Ok();
  });
  for (const Status& status : statuses) CHECK(status.ToString() == Status::Ok().ToString());
}

TEST_CASE("ranks of one host reduce-scatter through shared memory: each gets its part's sum",
          "[train][zero]") {
  auto groups = FormThreadGroups(3, true);
  const int64_t n = static_cast<int64_t>(HostCollectives::kBufferBytes / sizeof(float)) + 5;
  std::vector<Status> statuses = OnEachRank(groups, [&](int rank, HostCollectives& host) {
    // Rank r contributes r + 1 times [part 0 | part 1 | part 2] of small integers: exact sums.
    torch::Tensor in = torch::arange(3 * n, torch::kFloat).remainder(1000).mul(rank + 1);
    torch::Tensor mine = torch::empty({n}, torch::kFloat);
    RAYD_RETURN_IF_ERROR(host.ReduceScatter(in, mine, "the test's reduce"));
    torch::Tensor expected =
        torch::arange(3 * n, torch::kFloat).remainder(1000).narrow(0, rank * n, n).mul(1 + 2 + 3);
    if (!mine.equal(expected)) return Status::Internal("rank " + std::to_string(rank) + "'s sum");
    // A second, smaller one right after reuses the buffers.
    torch::Tensor small = torch::full({6}, static_cast<float>(rank));
    torch::Tensor two = torch::empty({2});
    RAYD_RETURN_IF_ERROR(host.ReduceScatter(small, two, "the test's second reduce"));
    if (!two.equal(torch::full({2}, 0.f + 1 + 2))) return Status::Internal("second sum");
    return Status::Ok();
  });
  for (const Status& status : statuses) CHECK(status.ToString() == Status::Ok().ToString());
}

TEST_CASE("Same tells every rank whether all offered one value", "[train][zero]") {
  auto groups = FormThreadGroups(2, true);
  std::vector<bool> same_all(2), same_one(2);
  std::vector<Status> statuses = OnEachRank(groups, [&](int rank, HostCollectives& host) {
    RAYD_ASSIGN_OR_RETURN(bool all, host.Same(42, "the test's check"));
    RAYD_ASSIGN_OR_RETURN(bool one, host.Same(rank == 1 ? 7 : 42, "the test's check"));
    same_all[rank] = all;
    same_one[rank] = one;
    return Status::Ok();
  });
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(statuses[rank].ok());
    CHECK(same_all[rank]);
    CHECK_FALSE(same_one[rank]);
  }
}

TEST_CASE("a rank that never arrives fails the others after the group's timeout, naming it",
          "[train][zero]") {
  auto groups = FormThreadGroups(2, true, 1s);
  HostCollectives* host = groups[0]->host_collectives();
  REQUIRE(host != nullptr);
  const auto start = std::chrono::steady_clock::now();
  Result<bool> same = host->Same(1, "the test's lonely check");
  REQUIRE_FALSE(same.ok());
  CHECK(same.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(same.status().message(), Catch::Contains("the test's lonely check") &&
                                          Catch::Contains("rank 1 did not arrive within 1000 ms"));
  CHECK(std::chrono::steady_clock::now() - start >= 1s);
}

TEST_CASE("shared-memory collectives exist only when asked for and useful, and hold no file",
          "[train][zero]") {
  CHECK(FormThreadGroups(2, false)[0]->host_collectives() == nullptr);
  CHECK(FormThreadGroups(1, true)[0]->host_collectives() == nullptr);
  auto groups = FormThreadGroups(2, true);
  CHECK(groups[1]->host_collectives() != nullptr);
  // The segment is mapped, and no rank keeps a descriptor of it (it goes with the mappings).
  auto descriptors_of_segment = [] {
    int found = 0;
    const std::string dir = "/proc/self/fd";
    DIR* each = opendir(dir.c_str());
    REQUIRE(each != nullptr);
    while (dirent* entry = readdir(each)) {
      char target[256] = {};
      const std::string path = dir + "/" + entry->d_name;
      if (readlink(path.c_str(), target, sizeof(target) - 1) > 0 &&
          std::string(target).find("rayd-host-collectives") != std::string::npos) {
        ++found;
      }
    }
    closedir(each);
    return found;
  };
  CHECK(descriptors_of_segment() == 0);
  CHECK(rayd::testing::ReadFile("/proc/self/maps").find("rayd-host-collectives") !=
        std::string::npos);
  // Nothing named in /dev/shm either.
  DIR* shm = opendir("/dev/shm");
  REQUIRE(shm != nullptr);
  int named = 0;
  while (dirent* entry = readdir(shm)) {
    if (std::string(entry->d_name).find("rayd") != std::string::npos) ++named;
  }
  closedir(shm);
  CHECK(named == 0);
}

}  // namespace
}  // namespace rayd::train
