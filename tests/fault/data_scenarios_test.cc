// rayd Data across hosts of the network-namespace test bed (testbed.h): preprocessing placed on a
// CPU-only host, its blocks crossing the link into the trainers' host.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "data_yamls.h"
#include "multi_host_cluster.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::kSweepTimeout;
using rayd::testing::MultiHostCluster;
using rayd::testing::TempDir;

}  // namespace

TEST_CASE("a stateful map and data tasks run on a CPU host apart from the trainers, and their "
          "blocks cross the link to the ranks",
          "[fault][data]") {
  REQUIRE_TESTBED();
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    std::printf("skipped: no Fashion-MNIST (apt install dataset-fashion-mnist)\n");
    std::fflush(stdout);
    std::exit(77);
  }
  MultiHostCluster cluster(2);
  // Host 0: the head, holding the trainers' slots (a resource only it has). Host 1: a node
  // labelled kind=cpu, where the images are standardized (a stateful map's actors) and the
  // validation blocks made (tasks needing its CPU): nowhere else fits them.
  cluster.StartHead({"--num-cpus", "2", "--resources", R"({"trainer": 2})"});
  const std::string cpu_node = cluster.StartNode(1, {"--num-cpus", "1", "--labels", "kind=cpu"});
  TempDir work;
  const std::string yaml = work.path() + "/split.yaml";
  std::ofstream(yaml) << rayd::testing::SplitPreprocessingYaml("split-hosts",
                                                               work.path() + "/results");
  ChildProcess driver(
      cluster.bed().In(0, {RAYD_BINARY, "train", yaml, "--address", cluster.head_address()}),
      cluster.Env(0));
  REQUIRE(driver.WaitExit(kSweepTimeout));
  INFO(driver.output());
  REQUIRE(driver.exit_code() == 0);
  std::ifstream results(work.path() + "/results/split-hosts/result.json");
  std::string line;
  REQUIRE(std::getline(results, line));
  const json row = json::parse(line);
  // Scored on standardized blocks made on the other host.
  CHECK(row.at("accuracy").get<double>() > 0.3);

  // The stateful map's actors (one pool per rank and dataset) all ran on the CPU host.
  auto actors = cluster.TryJson({"list", "actors"});
  REQUIRE(actors);
  std::set<std::string> mapper_nodes;
  int mappers = 0;
  for (const json& a : *actors) {
    if (a.value("class_name", "").find("RaydDataMapper") == std::string::npos) continue;
    ++mappers;
    mapper_nodes.insert(a.value("node_id", ""));
  }
  CHECK(mappers == 4);
  CHECK(mapper_nodes == std::set<std::string>{cpu_node});
}
