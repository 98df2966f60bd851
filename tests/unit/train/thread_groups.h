#pragma once
// Process groups whose ranks are threads of the test's process: each thread-rank has its own
// ProcessGroup over 127.0.0.1 (Gloo, and shared memory when asked), as rank processes would.

#include <rayd/train/process_group.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <vector>

namespace rayd::train::testing {

// `world` ranks' groups, formed concurrently (rank 0 hosts the rendezvous).
inline std::vector<std::unique_ptr<ProcessGroup>> FormThreadGroups(
    int world, bool shared_memory = true,
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto host = Rendezvous::Host("127.0.0.1", 0, timeout);
  REQUIRE(host.ok());
  const uint16_t port = (*host)->port();
  std::vector<std::future<Result<std::unique_ptr<ProcessGroup>>>> forming;
  for (int rank = 0; rank < world; ++rank) {
    std::unique_ptr<Rendezvous> rendezvous;
    if (rank == 0) rendezvous = std::move(host).value();
    forming.push_back(std::async(std::launch::async, [=, rendezvous =
                                                             std::move(rendezvous)]() mutable {
      if (!rendezvous) {
        auto joined = Rendezvous::Join("127.0.0.1", port, timeout);
        if (!joined.ok()) return Result<std::unique_ptr<ProcessGroup>>(joined.status());
        rendezvous = std::move(joined).value();
      }
      return ProcessGroup::Connect(
          std::move(rendezvous),
          {.rank = rank, .world_size = world, .timeout = timeout, .shared_memory = shared_memory});
    }));
  }
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  for (auto& group : forming) {
    auto formed = group.get();
    INFO(formed.status().ToString());
    REQUIRE(formed.ok());
    groups.push_back(std::move(formed).value());
  }
  return groups;
}

// Runs `body(rank)` on a thread per rank; each one's Status, in rank order.
inline std::vector<Status> OnEachThreadRank(int world, const std::function<Status(int)>& body) {
  std::vector<std::future<Status>> running;
  for (int rank = 0; rank < world; ++rank) {
    running.push_back(std::async(std::launch::async, [&body, rank] { return body(rank); }));
  }
  std::vector<Status> done;
  for (auto& each : running) done.push_back(each.get());
  return done;
}

}  // namespace rayd::train::testing
