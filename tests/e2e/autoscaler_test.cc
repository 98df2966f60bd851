// `rayd start --head --autoscaler` end to end, with the local provider (real `rayd start`
// nodes on this machine): a sweep on a head with no CPUs of its own scales the cluster up,
// never past max_nodes, finishes, and scales back down with every node drained first;
// demand no node type could hold launches nothing and says so (in `rayd status`, the dashboard's
// API and page, and /metrics); request-resources is a floor.

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "autoscaler_sandbox.h"
#include "test_util.h"

namespace rayd::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Sandbox = AutoscalerSandbox;

// The value of `series` (a name and its labels) in Prometheus text, or -1.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

TEST_CASE("an ASHA sweep of 2-worker trials on a head without CPUs scales up to max_nodes "
          "and finishes and then scales down with every node drained first",
          "[autoscaler][e2e]") {
  Sandbox sandbox;
  sandbox.StartHead(R"(
provider: {type: local}
max_nodes: 2
idle_timeout_s: 3
update_interval_s: 0.5
launch_timeout_s: 60
node_types:
  cpu2: {resources: {CPU: 2}, min_nodes: 0, max_nodes: 2}
)");
  const std::string sweep = sandbox.WriteYaml("sweep.yaml", R"(
name: scaled
trainable: toy_objective
param_space:
  x: {uniform: [0.0, 4.0]}
  iterations: 6
  work_ms: 150
scaling: {num_workers: 2}
tune:
  metric: loss
  mode: min
  num_samples: 8
  seed: 3
  scheduler: {type: asha, max_t: 6, grace_period: 2, reduction_factor: 2}
run: {storage_path: STORAGE}
)");
  ChildProcess tune({RAYD_BINARY, "tune", sweep, "--address", sandbox.address()}, sandbox.Env());
  size_t most = 0;
  std::set<std::string> seen;
  // The sweep's life, watched: never more than max_nodes at once.
  REQUIRE(WaitFor(
      [&] {
        const auto nodes = LaunchedNodes(sandbox.Status());
        most = std::max(most, nodes.size());
        seen.insert(nodes.begin(), nodes.end());
        return !tune.running();
      },
      240s));
  INFO(tune.output());
  REQUIRE(tune.exit_code() == 0);
  CHECK(most >= 1);
  CHECK(most <= 2);
  // Every trial ran to its end or was stopped by ASHA: none failed.
  const json state = ReadJson(sandbox.results() + "/scaled/experiment_state.json");
  int ended = 0;
  for (const json& t : state.at("trials")) {
    CHECK(t.value("status", "") == "TERMINATED");
    ++ended;
  }
  CHECK(ended == 8);

  // Idle past the timeout: every launched node is drained, then terminated, down to min_nodes 0.
  json status;
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status.is_object() && LaunchedNodes(status).empty() &&
               status["autoscaler"]["node_types"][0].value("running", -1) == 0 &&
               status["autoscaler"]["node_types"][0].value("draining", -1) == 0;
      },
      90s));
  const auto events = Events(status);
  INFO(Joined(events));
  int drained = 0, terminated = 0;
  for (const std::string& e : events) {
    if (e.rfind("draining node", 0) == 0) ++drained;
    if (e.rfind("terminating instance", 0) == 0) {
      ++terminated;
      CHECK_THAT(e, Catch::Contains("its node was drained"));
    }
  }
  CHECK(terminated == static_cast<int>(seen.size()));
  CHECK(drained == terminated);
  const json counters = status["autoscaler"]["counters"];
  CHECK(counters.value("launched", 0) == static_cast<int>(seen.size()));
  CHECK(counters.value("launch_failures", -1) == 0);
}

TEST_CASE("demand no node type can hold launches nothing and rayd status says why while a "
          "resource request launches its floor",
          "[autoscaler][e2e]") {
  Sandbox sandbox;
  sandbox.StartHead(R"(
provider: {type: local}
max_nodes: 2
idle_timeout_s: 600
update_interval_s: 0.5
node_types:
  cpu1: {resources: {CPU: 1}, max_nodes: 2}
)");
  // A 4-CPU bundle fits no type: infeasible, nothing launched.
  std::string out;
  REQUIRE(sandbox.Run({"request-resources", "--bundles", R"([{"CPU": 4}])", "--name", "big"},
                      &out) == 0);
  json status;
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status.is_object() && status.contains("autoscaler") &&
               !status["autoscaler"]["unmet"].empty();
      },
      30s));
  const json unmet = status["autoscaler"]["unmet"][0];
  CHECK(unmet.value("infeasible", false));
  CHECK_THAT(unmet.value("reason", ""), Catch::Contains("no node type can hold 1 x {CPU: 4}"));
  CHECK(status["autoscaler"]["counters"].value("launched", -1) == 0);
  REQUIRE(sandbox.Run({"status"}, &out) == 0);
  CHECK_THAT(out, Catch::Contains("Autoscaler (local provider") &&
                      Catch::Contains("Launching nothing for:") &&
                      Catch::Contains("requested resources (big)"));

  // The dashboard serves the same state: the list without the detail-only members, the feed
  // with everything; /metrics exports its samples; the page has the panel that shows them.
  {
    std::smatch m;
    const std::string head_out = sandbox.last_start_output();
    REQUIRE(std::regex_search(
        head_out, m, std::regex(R"(Dashboard:\s+http://127\.0\.0\.1:(\d+)/\?token=(\w+))")));
    const int port = std::stoi(m[1]);
    const std::string bearer = "Authorization: Bearer " + std::string(m[2]) + "\r\n";
    const HttpReply listed = HttpGet(port, "/api/autoscalers", bearer);
    INFO("GET /api/autoscalers: " << listed.body);
    REQUIRE(listed.status == 200);
    const json list = json::parse(listed.body)["autoscalers"];
    REQUIRE(list.size() == 1);
    CHECK(list[0]["name"] == "cluster");
    CHECK_FALSE(list[0].contains("events"));
    CHECK_FALSE(list[0].contains("instances"));
    const HttpReply feed = HttpGet(port, "/api/autoscalers/cluster", bearer);
    INFO("GET /api/autoscalers/cluster: " << feed.body);
    REQUIRE(feed.status == 200);
    const json scaler = json::parse(feed.body);
    CHECK(scaler["provider"] == "local");
    CHECK(scaler["node_types"][0]["name"] == "cpu1");
    CHECK(scaler["instances"].is_array());
    CHECK(scaler["events"].is_array());
    REQUIRE(!scaler["unmet"].empty());
    CHECK(scaler["unmet"][0].value("infeasible", false));
    CHECK_THAT(scaler["unmet"][0].value("reason", ""),
               Catch::Contains("no node type can hold 1 x {CPU: 4}"));
    const HttpReply metrics = HttpGet(port, "/metrics", bearer);
    INFO("GET /metrics: " << metrics.body);
    REQUIRE(metrics.status == 200);
    CHECK_THAT(metrics.body, Catch::Contains("rayd_autoscaler_nodes{"));
    CHECK(Sample(metrics.body, R"(rayd_autoscaler_nodes{node_type="cpu1",state="running"})") == 0);
    CHECK(Sample(metrics.body, "rayd_autoscaler_unmet_demand") >= 1);
    CHECK(Sample(metrics.body, "rayd_autoscaler_launched_total") == 0);
    const HttpReply page = HttpGet(port, "/", bearer);
    REQUIRE(page.status == 200);
    CHECK_THAT(page.body,
               Catch::Contains("id=\"sec-autoscaler\"") && Catch::Contains("/api/autoscalers/"));
  }

  // Withdrawn, and two CPUs asked for instead: two 1-CPU nodes join, and stay while requested.
  REQUIRE(sandbox.Run({"request-resources", "--name", "big", "--clear"}, &out) == 0);
  REQUIRE(sandbox.Run({"request-resources", "--cpus", "2"}, &out) == 0);
  REQUIRE(WaitFor([&] { return LaunchedNodes(sandbox.Status()).size() == 2; }, 60s));
  // A third CPU would pass max_nodes: the status says so, and nothing more launches.
  REQUIRE(sandbox.Run({"request-resources", "--cpus", "3"}, &out) == 0);
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status.is_object() && !status["autoscaler"]["unmet"].empty();
      },
      30s));
  CHECK_THAT(status["autoscaler"]["unmet"][0].value("reason", ""),
             Catch::Contains("max_nodes reached"));
  CHECK(LaunchedNodes(status).size() == 2);
}

TEST_CASE("rayd start --autoscaler with a bad file says which key and line and starts nothing",
          "[autoscaler][e2e]") {
  Sandbox sandbox;
  const std::string path = sandbox.WriteYaml("bad.yaml", R"(provider: {type: local}
max_nodes: 2
node_types:
  cpu2: {resources: {CPU: 2}, min_nodes: 3}
)");
  std::string out;
  const int rc = sandbox.Run({"start", "--head", "--port", "0", "--autoscaler", path}, &out);
  INFO(out);
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("bad.yaml:4") && Catch::Contains("min_nodes"));
  CHECK(sandbox.Run({"start", "--head", "--port", "0", "--autoscaler", "/no/such.yaml"}, &out) != 0);
  CHECK_THAT(out, Catch::Contains("/no/such.yaml"));
}

}  // namespace
}  // namespace rayd::testing

namespace rayd::testing {
namespace {

TEST_CASE("an elastic sweep's trial grows onto a node the autoscaler launches for its growth",
          "[autoscaler][e2e]") {
  AutoscalerSandbox sandbox;
  sandbox.StartHead(R"(
provider: {type: local}
max_nodes: 2
idle_timeout_s: 600
update_interval_s: 0.5
node_types:
  cpu2: {resources: {CPU: 2}, max_nodes: 2}
)");
  const std::string sweep = sandbox.WriteYaml("grow.yaml", R"(
name: grow
trainable: toy_objective
param_space: {x: 1.0, iterations: 60, work_ms: 200}
scaling: {num_workers: [2, 4], resize_interval_s: 0.5}
tune: {metric: loss, mode: min, num_samples: 1}
run: {storage_path: STORAGE}
)");
  std::string out;
  const int rc = sandbox.Run({"tune", sweep, "--address", sandbox.address()}, &out,
                             std::chrono::seconds(240));
  INFO(out);
  REQUIRE(rc == 0);
  const nlohmann::json status = sandbox.Status();
  INFO(Joined(Events(status)));
  CHECK_THAT(Joined(Events(status)), Catch::Contains("elastic trials could grow by 2 worker(s)"));
  CHECK(LaunchedNodes(status).size() == 2);
  // The trial reported from 4 workers before it ended.
  bool grew = false;
  for (const auto& entry : std::filesystem::directory_iterator(sandbox.results() + "/grow")) {
    const std::string path = entry.path().string() + "/result.json";
    if (!std::filesystem::exists(path)) continue;
    for (const nlohmann::json& line : ReadJsonLines(path)) {
      grew = grew || line.value("world_size", 0.0) == 4;
    }
  }
  CHECK(grew);
}

}  // namespace
}  // namespace rayd::testing
