// The head's dashboard and /metrics as users meet them: `rayd start --head` prints a URL, a
// second node joins, `rayd tune` runs a sweep against the cluster, and
//   - the HTTP API answers only with the token (cookie or Bearer), with the cluster's nodes and
//     the sweep's trials and curves while it runs;
//   - /metrics on the head (cluster) and on a node (its own) is Prometheus text with the
//     figures of this cluster;
//   - headless Chromium (tests/e2e/dashboard/check.mjs, playwright-core) loads the page, sees
//     both nodes, and watches the sweep's learning curves grow; its screenshot is kept in the
//     build directory (artifacts/dashboard.png).

#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "rayd_sandbox.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::ConnectLoopback;
using rayd::testing::RunCommand;
using rayd::testing::WaitFor;

using HttpReply = rayd::testing::HttpReply;

HttpReply Get(int port, const std::string& path, const std::string& extra_headers = "") {
  return rayd::testing::HttpGet(port, path, extra_headers);
}

std::string Bearer(const std::string& token) { return "Authorization: Bearer " + token + "\r\n"; }

// What `rayd start --head --dashboard-port 0` printed: where its cluster and dashboard are.
struct HeadStarted {
  std::string address;  // the cluster's
  std::string url;      // the dashboard's, with ?token=
  int port = 0;         // the dashboard's
  std::string token;
};
HeadStarted ParseHead(const std::string& head_out) {
  HeadStarted head;
  std::smatch m;
  REQUIRE(std::regex_search(head_out, m, std::regex(R"(Cluster address: (\S+))")));
  head.address = m[1];
  REQUIRE(std::regex_search(head_out, m,
                            std::regex(R"(Dashboard:\s+(http://127\.0\.0\.1:(\d+)/\?token=(\w+)))")));
  head.url = m[1];
  head.port = std::stoi(m[2]);
  head.token = m[3];
  return head;
}

// The value of `metric{labels}` in Prometheus text, or -1.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

// What `promtool check metrics` (Prometheus' own linter, Debian's prometheus package) says
// of `text`: "" when it is clean.
std::string PromtoolProblems(const std::string& text) {
  rayd::testing::TempDir dir;
  const std::string file = dir.path() + "/metrics.prom";
  std::ofstream(file) << text;
  std::string out;
  const int rc = RunCommand({"/bin/sh", "-c", "command -v promtool >/dev/null || exit 127; "
                                              "promtool check metrics < " + file},
                            &out);
  if (rc == 127) return "promtool is not installed (scripts/install-deps.sh installs prometheus)";
  return rc == 0 && out.empty() ? "" : "exit " + std::to_string(rc) + ": " + out;
}

}  // namespace

TEST_CASE("the dashboard shows the cluster's nodes and a running sweep's curves, and head and "
          "node serve /metrics",
          "[e2e][dashboard]") {
  rayd::testing::RaydSandbox sandbox(RAYD_BINARY, 60s);
  const std::string head_id =
      sandbox.Start({"--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2",
                     "--metrics-port", "0"});
  const std::string head_out = sandbox.last_start_output();
  const HeadStarted head = ParseHead(head_out);
  const std::string& address = head.address;
  const std::string& url = head.url;
  const int port = head.port;
  const std::string& token = head.token;
  std::smatch m;
  REQUIRE(std::regex_search(head_out, m,
                            std::regex(R"(Node metrics:\s+http://127\.0\.0\.1:(\d+)/metrics)")));
  const int head_metrics_port = std::stoi(m[1]);
  const std::string node_id = sandbox.Start(
      {"--address", address, "--token", token, "--num-cpus", "2", "--metrics-port", "0"});
  REQUIRE(std::regex_search(sandbox.last_start_output(), m,
                            std::regex(R"(Metrics: http://127\.0\.0\.1:(\d+)/metrics)")));
  const int node_metrics_port = std::stoi(m[1]);

  // The token gate: nothing without it, a cookie for the printed URL, Bearer for programs.
  CHECK(Get(port, "/api/cluster").status == 401);
  CHECK(Get(port, "/metrics").status == 401);
  CHECK(Get(port, "/api/cluster", Bearer("wrong")).status == 401);
  const HttpReply opened = Get(port, "/?token=" + token);
  CHECK(opened.status == 302);
  CHECK(opened.headers.find("Set-Cookie: rayd_token=" + token) != std::string::npos);
  CHECK(opened.headers.find("HttpOnly") != std::string::npos);
  const HttpReply page = Get(port, "/", "Cookie: rayd_token=" + token + "\r\n");
  CHECK(page.status == 200);
  CHECK(page.body.find("data-testid=\"nodes-table\"") != std::string::npos);
  CHECK(Get(port, "/nope", Bearer(token)).status == 404);
  CHECK(Get(node_metrics_port, "/metrics").status == 401);

  const HttpReply cluster = Get(port, "/api/cluster", Bearer(token));
  REQUIRE(cluster.status == 200);
  std::set<std::string> alive;
  const json cluster_json = json::parse(cluster.body);
  for (const json& node : cluster_json["nodes"]) {
    if (node["alive"].get<bool>()) alive.insert(node["node_id"].get<std::string>());
  }
  INFO("GET /api/cluster: " << cluster.body);
  CHECK(alive == std::set<std::string>{head_id, node_id});

  // A sweep to watch: 2 single-worker trials of the example MLP, long enough (~15 min) to be
  // still running when the browser looks however slow a busy machine makes Chromium's start.
  // The test stops it with Ctrl-C once it has seen it (below).
  const std::string yaml = sandbox.root() + "/watch.yaml";
  std::ofstream(yaml) << R"(
name: watched
trainable: mlp_classifier
scaling: {num_workers: 1, resources_per_worker: {CPU: 1}}
param_space:
  lr: {grid_search: [0.01, 0.05]}
  hidden: 32
  epochs: 5000
  train_size: 8192
tune: {metric: loss, mode: min}
run: {storage_path: )" + sandbox.root() + R"(/results})";
  ChildProcess tune({RAYD_BINARY, "tune", yaml, "--address", address}, sandbox.Env());

  // The sweep appears with results while it runs.
  json sweep;
  const bool running = WaitFor(
      [&] {
        const HttpReply r = Get(port, "/api/sweeps/watched", Bearer(token));
        if (r.status != 200) return false;
        sweep = json::parse(r.body);
        return sweep["state"] == "RUNNING" && sweep["results"].get<int>() >= 2;
      },
      120s);
  if (!running) FAIL("the sweep never showed up RUNNING with results; rayd tune said:\n" << tune.output());
  CHECK(sweep["metric"] == "loss");
  CHECK(sweep["num_trials"] == 2);
  CHECK(sweep["trials"].size() == 2);
  bool some_curve = false;
  for (const auto& [trial, points] : sweep["series"].items()) {
    some_curve |= !points.empty();
    for (const json& point : points) CHECK(point[1].get<double>() > 0);  // a loss
  }
  CHECK(some_curve);

  // /metrics: the head's view of the cluster and the sweep; the node's view of itself.
  const HttpReply head_metrics = Get(port, "/metrics", Bearer(token));
  INFO("GET /metrics: " << head_metrics.headers << "\n" << head_metrics.body);
  REQUIRE(head_metrics.status == 200);
  CHECK(head_metrics.headers.find("text/plain; version=0.0.4") != std::string::npos);
  CHECK(Sample(head_metrics.body, "rayd_cluster_nodes{state=\"ALIVE\"}") == 2);
  CHECK(Sample(head_metrics.body, "rayd_cluster_resource_capacity{resource=\"CPU\"}") == 4);
  CHECK(Sample(head_metrics.body, "rayd_tune_sweep_running{sweep=\"watched\"}") == 1);
  CHECK(Sample(head_metrics.body, "rayd_tune_results_total{sweep=\"watched\"}") >= 2);
  CHECK(Sample(head_metrics.body, "rayd_jobs{state=\"RUNNING\"}") >= 1);
  // The two running trials' bundles show as used once the nodes' heartbeats report them.
  const bool reserved = WaitFor(
      [&] {
        const HttpReply r = Get(port, "/metrics", Bearer(token));
        return Sample(r.body, "rayd_cluster_resource_available{resource=\"CPU\"}") == 2;
      },
      10s);
  CHECK(reserved);
  const HttpReply node_metrics = Get(node_metrics_port, "/metrics", Bearer(token));
  REQUIRE(node_metrics.status == 200);
  CHECK(Sample(node_metrics.body,
               "rayd_node_resource_capacity{node_id=\"" + node_id + "\",resource=\"CPU\"}") == 2);
  CHECK(Sample(node_metrics.body,
               "rayd_object_store_capacity_bytes{node_id=\"" + node_id + "\"}") > 0);
  // The two trials' rank actors hold a lease each, on one node or the other.
  const HttpReply head_node_metrics = Get(head_metrics_port, "/metrics", Bearer(token));
  REQUIRE(head_node_metrics.status == 200);
  const double actor_leases =
      Sample(node_metrics.body, "rayd_node_leases_granted_total{node_id=\"" + node_id +
                                    "\",kind=\"actor\"}") +
      Sample(head_node_metrics.body, "rayd_node_leases_granted_total{node_id=\"" + head_id +
                                         "\",kind=\"actor\"}");
  CHECK(actor_leases >= 2);
  // A job submitted to the cluster, for the page to list with its log.
  std::string submitted;
  REQUIRE(RunCommand({RAYD_BINARY, "job", "submit", "--address", address, "--token", token,
                      "--submission-id", "dashboard-job", "--", "sh", "-c",
                      "echo job-log-marker"},
                     &submitted, sandbox.Env(), 60s) == 0);
  INFO("rayd job submit said:\n" << submitted);
  const HttpReply jobs = Get(port, "/api/jobs", Bearer(token));
  REQUIRE(jobs.status == 200);
  CHECK(json::parse(jobs.body)["jobs"][0]["status"] == "SUCCEEDED");
  // The page in a real browser, while the sweep runs: both nodes, curves that grow, and the
  // submitted job with its log.
  const std::string artifacts = std::string(RAYD_ARTIFACT_DIR);
  std::filesystem::create_directories(artifacts);
  std::string browser;
  const int rc = RunCommand({RAYD_NODE_EXECUTABLE, std::string(RAYD_DASHBOARD_CHECK), "--url", url,
                             "--screenshot", artifacts + "/dashboard.png", "--nodes",
                             head_id + "," + node_id, "--sweep", "watched", "--expect-live", "--job", "dashboard-job",
                             "--job-log", "job-log-marker",
                             "--timeout-ms", "90000"},
                            &browser, {}, 120s);
  INFO("check.mjs said:\n" << browser);
  CHECK(rc == 0);
  CHECK(std::filesystem::exists(artifacts + "/dashboard.png"));

  // Every worker reports the tasks and actor calls it ran, by function (the trials' rank
  // actors were created and called): within a report period, on one node or the other.
  std::string worker_metrics;
  const bool per_function = WaitFor(
      [&] {
        worker_metrics = Get(node_metrics_port, "/metrics", Bearer(token)).body +
                         Get(head_metrics_port, "/metrics", Bearer(token)).body;
        return worker_metrics.find("rayd_tasks_total{") != std::string::npos &&
               worker_metrics.find("rayd_task_duration_seconds_bucket{") != std::string::npos;
      },
      10s);
  INFO("the nodes' /metrics:\n" << worker_metrics);
  CHECK(per_function);
  // Prometheus' linter finds the head's and both nodes' /metrics clean.
  for (const auto& [who, text] :
       {std::pair{"head", Get(port, "/metrics", Bearer(token)).body},
        std::pair{"node", Get(node_metrics_port, "/metrics", Bearer(token)).body},
        std::pair{"head node", Get(head_metrics_port, "/metrics", Bearer(token)).body}}) {
    INFO(who << "'s /metrics:\n" << text);
    CHECK(PromtoolProblems(text) == "");
  }


  // Ctrl-C ends the sweep (rayd tune exits 130, resumable); ended sweeps stay listed, as
  // FINISHED, with their trials.
  tune.Signal(SIGINT);
  REQUIRE(tune.WaitExit(120s));
  INFO("rayd tune said:\n" << tune.output());
  CHECK(tune.exit_code() == 130);
  CHECK(tune.output().find("--resume") != std::string::npos);
  const HttpReply sweeps = Get(port, "/api/sweeps", Bearer(token));
  REQUIRE(sweeps.status == 200);
  INFO("GET /api/sweeps: " << sweeps.body);
  const json list = json::parse(sweeps.body)["sweeps"];
  REQUIRE(list.size() == 1);
  CHECK(list[0]["state"] == "FINISHED");
  CHECK(list[0]["num_trials"] == 2);
}

TEST_CASE("the dashboard shows a command trial's rank logs", "[e2e][dashboard]") {
  rayd::testing::RaydSandbox sandbox(RAYD_BINARY, 60s);
  sandbox.Start({"--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2"});
  const HeadStarted head = ParseHead(sandbox.last_start_output());
  const std::string& address = head.address;
  const int port = head.port;
  const std::string& token = head.token;

  // Two ranks, each printing a line of its own, then reporting for ~3 s.
  const std::string script = sandbox.root() + "/talk.sh";
  std::ofstream(script) << R"(#!/bin/bash
echo "hello from rank $RAYD_WORLD_RANK"; echo "warning on rank $RAYD_WORLD_RANK" >&2
exec 3<>"/dev/tcp/${RAYD_REPORT_ADDR%:*}/${RAYD_REPORT_ADDR##*:}"
for i in 1 2 3; do
  sleep 1
  printf '{"token":"%s","metrics":{"score":%d}}\n' "$RAYD_REPORT_TOKEN" "$i" >&3; read -r r <&3
done
)";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const std::string yaml = sandbox.root() + "/talk.yaml";
  std::ofstream(yaml) << "name: talk\ntrainable: {command: [" << script
                      << "], launcher: none}\nscaling: {num_workers: 2}\n"
                         "tune: {metric: score, mode: max}\nrun: {storage_path: "
                      << sandbox.root() << "/results}\n";
  std::string out;
  const int rc = RunCommand({RAYD_BINARY, "tune", yaml, "--address", address}, &out,
                            sandbox.Env(), 120s);
  INFO(out);
  REQUIRE(rc == 0);
  const HttpReply reply = Get(port, "/api/sweeps/talk", Bearer(token));
  REQUIRE(reply.status == 200);
  const json sweep = json::parse(reply.body);
  REQUIRE(sweep["logs"].size() == 1);
  const json& logs = sweep["logs"].begin().value();
  CHECK(logs["rank_0.log"].get<std::string>().find("hello from rank 0") != std::string::npos);
  CHECK(logs["rank_1.log"].get<std::string>().find("warning on rank 1") != std::string::npos);
  // The page has the place a clicked trial's logs go (tests/e2e/dashboard/check.mjs drives it).
  const HttpReply page = Get(port, "/", "Cookie: rayd_token=" + token + "\r\n");
  CHECK(page.body.find("trial-logs") != std::string::npos);
}

TEST_CASE("the dashboard plots a sweep's Pareto front and hypervolume and /metrics exports it",
          "[e2e][dashboard]") {
  rayd::testing::RaydSandbox sandbox(RAYD_BINARY, 60s);
  sandbox.Start({"--head", "--port", "0", "--dashboard-port", "0", "--num-cpus", "2"});
  const HeadStarted head = ParseHead(sandbox.last_start_output());
  const std::string& address = head.address;
  const std::string& url = head.url;
  const int port = head.port;
  const std::string& token = head.token;

  const std::string yaml = sandbox.root() + "/front.yaml";
  std::ofstream(yaml) << "name: front\ntrainable: toy_objective\n"
                         "param_space:\n  x: {uniform: [0.0, 6.0]}\n  y: {uniform: [-3.0, 1.0]}\n"
                         "  lr: {loguniform: [0.01, 1.0]}\n  iterations: {choice: [1, 2, 3]}\n"
                         "tune:\n  metric: [loss, iteration]\n  mode: [min, max]\n"
                         "  reference_point: [100, 0]\n  num_samples: 6\n  seed: 3\n"
                         "run: {storage_path: "
                      << sandbox.root() << "/results}\n";
  std::string out;
  const int rc = RunCommand({RAYD_BINARY, "tune", yaml, "--address", address}, &out,
                            sandbox.Env(), 120s);
  INFO(out);
  REQUIRE(rc == 0);
  std::smatch printed;
  REQUIRE(std::regex_search(out, printed, std::regex(R"(hypervolume (\S+) at \(loss 100, iteration 0\))")));

  const HttpReply reply = Get(port, "/api/sweeps/front", Bearer(token));
  REQUIRE(reply.status == 200);
  const json front = json::parse(reply.body).at("front");
  CHECK(front["objectives"][0]["metric"] == "loss");
  CHECK(front["objectives"][1]["mode"] == "max");
  CHECK(front["reference"] == json::array({100, 0}));
  CHECK(front["points"].size() == 6);
  int on_front = 0;
  for (const json& p : front["points"]) on_front += p["on_front"].get<bool>() ? 1 : 0;
  CHECK(on_front >= 1);
  REQUIRE_FALSE(front["hypervolume"].empty());
  const double hypervolume = front["hypervolume"].back()[1].get<double>();
  CHECK(hypervolume == Approx(std::stod(printed[1])).epsilon(1e-5));
  CHECK(Sample(Get(port, "/metrics", Bearer(token)).body,
               "rayd_tune_hypervolume{sweep=\"front\"}") == Approx(hypervolume));
  // The sweep's progress.csv ends at the same hypervolume.
  const std::string progress = rayd::testing::ReadFile(sandbox.root() + "/results/front/progress.csv");
  CHECK(progress.starts_with("elapsed_s,results,trials_reported,front_size,hypervolume,"
                             "reference/loss,reference/iteration\n"));

  const std::string artifacts = std::string(RAYD_ARTIFACT_DIR);
  std::filesystem::create_directories(artifacts);
  std::string browser;
  const int checked = RunCommand({RAYD_NODE_EXECUTABLE, std::string(RAYD_DASHBOARD_CHECK), "--url",
                                  url, "--screenshot", artifacts + "/dashboard_front.png",
                                  "--sweep", "front", "--expect-front", "--timeout-ms", "60000"},
                                 &browser, {}, 90s);
  INFO("check.mjs said:\n" << browser);
  CHECK(checked == 0);
}
