// The autoscaler when things go wrong: a launch whose node never joins is terminated, retried
// after a backoff and reported; a provider command that fails is reported, not retried in a
// tight loop; a Redis-backed head killed and restarted adopts the nodes it launched instead of
// launching them again.

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "autoscaler_sandbox.h"
#include "redis_server.h"

namespace rayd::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// Writes an executable shell script.
std::string Script(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/bash\n" << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// Lines of `path` that start with `word`.
int CountLines(const std::string& path, const std::string& word) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(word, 0) == 0;
  return n;
}

// A command provider whose instances never become nodes: create answers with an id (or, with
// `fail`, exits 1 saying why); every call is logged to calls.log.
std::string GhostProvider(AutoscalerSandbox& sandbox, bool fail) {
  const std::string dir = sandbox.root();
  const std::string log = dir + "/calls.log";
  Script(dir + "/create.sh",
         "echo \"create $1 $2 $(date +%s)\" >> " + log + "\n" +
             (fail ? std::string("echo \"quota exceeded for $1\" >&2; exit 1\n")
                   : "id=ghost-$RANDOM; echo $id >> " + dir +
                         "/ghosts; echo \"{\\\"instances\\\": [{\\\"id\\\": \\\"$id\\\"}]}\"\n"));
  Script(dir + "/terminate.sh", "echo \"terminate $1\" >> " + log + "\n");
  Script(dir + "/list.sh",
         "echo -n '{\"instances\": ['; sep=; for id in $(cat " + dir +
             "/ghosts 2>/dev/null); do grep -q \"terminate $id\" " + log +
             " || { echo -n \"$sep{\\\"id\\\": \\\"$id\\\", \\\"state\\\": \\\"running\\\"}\"; "
             "sep=,; }; done; echo ']}'\n");
  return "provider: {type: command, create: " + dir + "/create.sh, terminate: " + dir +
         "/terminate.sh, list: " + dir + "/list.sh}\n";
}

TEST_CASE("a launch that never joins is terminated and retried after a backoff and reported",
          "[autoscaler][fault]") {
  AutoscalerSandbox sandbox;
  const std::string log = sandbox.root() + "/calls.log";
  sandbox.StartHead(GhostProvider(sandbox, /*fail=*/false) + R"(
max_nodes: 1
launch_timeout_s: 2
update_interval_s: 0.5
node_types:
  cpu1: {resources: {CPU: 1}}
)");
  std::string out;
  REQUIRE(sandbox.Run({"request-resources", "--cpus", "1"}, &out) == 0);
  // Created, not joined within 2 s: terminated, and the type waits before the next try.
  REQUIRE(WaitFor([&] { return CountLines(log, "terminate ghost-") == 1; }, 30s));
  json status;
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status.is_object() && status["autoscaler"]["node_types"][0].contains("paused_s");
      },
      20s));
  const json type = status["autoscaler"]["node_types"][0];
  CHECK_THAT(type.value("last_error", ""), Catch::Contains("did not join within launch_timeout_s 2"));
  CHECK(CountLines(log, "create cpu1 1") == 1);
  REQUIRE(sandbox.Run({"status"}, &out) == 0);
  CHECK_THAT(out, Catch::Contains("launches paused for"));
  // The backoff ends (10 s) and it tries again, once.
  REQUIRE(WaitFor([&] { return CountLines(log, "create cpu1 1") == 2; }, 40s));
  CHECK(sandbox.Status()["autoscaler"]["counters"].value("launch_failures", 0) >= 1);
}

TEST_CASE("a provider whose create fails is reported with its output and not retried in a "
          "tight loop",
          "[autoscaler][fault]") {
  AutoscalerSandbox sandbox;
  const std::string log = sandbox.root() + "/calls.log";
  sandbox.StartHead(GhostProvider(sandbox, /*fail=*/true) + R"(
max_nodes: 1
update_interval_s: 0.2
node_types:
  cpu1: {resources: {CPU: 1}}
)");
  std::string out;
  REQUIRE(sandbox.Run({"request-resources", "--cpus", "1"}, &out) == 0);
  json status;
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status.is_object() &&
               status["autoscaler"]["node_types"][0].value("last_error", "") != "";
      },
      30s));
  CHECK_THAT(status["autoscaler"]["node_types"][0].value("last_error", ""),
             Catch::Contains("quota exceeded for cpu1"));
  // Updates run every 0.2 s; creates do not: the second waits out the 10 s backoff.
  REQUIRE(WaitFor([&] { return CountLines(log, "create cpu1 1") == 2; }, 40s));
  std::ifstream in(log);
  std::string word, type, count;
  long first = 0, second = 0;
  in >> word >> type >> count >> first >> word >> type >> count >> second;
  CHECK(second - first >= 9);
}

TEST_CASE("a Redis-backed head killed and restarted adopts the nodes its autoscaler launched "
          "and launches no more",
          "[autoscaler][fault]") {
  RedisServer redis;
  AutoscalerSandbox sandbox;
  const std::string config = R"(
provider: {type: local}
max_nodes: 3
idle_timeout_s: 600
update_interval_s: 0.5
node_types:
  cpu1: {resources: {CPU: 1}, max_nodes: 3}
)";
  const std::vector<std::string> head = {"--port", std::to_string(FreeTcpPort()),
                                         "--redis-address", redis.Address()};
  sandbox.StartHead(config, head);
  std::string out;
  REQUIRE(sandbox.Run({"request-resources", "--cpus", "2"}, &out) == 0);
  std::set<std::string> nodes;
  REQUIRE(WaitFor(
      [&] {
        nodes = LaunchedNodes(sandbox.Status());
        return nodes.size() == 2;
      },
      60s));
  // SIGKILL the head (its pid file is in its session, the latest one).
  const pid_t head_pid = std::stoi(ReadFile(sandbox.root() + "/session_latest/head.pid"));
  REQUIRE(::kill(head_pid, SIGKILL) == 0);
  REQUIRE(WaitFor([&] { return ::kill(head_pid, 0) != 0; }, 20s));
  sandbox.StartHead(config, head);
  json status;
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status.is_object() && status.contains("autoscaler") &&
               status["autoscaler"]["node_types"][0].value("running", 0) == 2;
      },
      60s));
  INFO(Joined(Events(status)));
  CHECK(LaunchedNodes(status) == nodes);
  CHECK_THAT(Joined(Events(status)), Catch::Contains("adopted 2 instance(s)"));
  // Several updates later, still the same two nodes, and nothing launched by the new head.
  const int64_t since = status["autoscaler"].value("updated_ms", int64_t{0});
  REQUIRE(WaitFor(
      [&] {
        status = sandbox.Status();
        return status["autoscaler"].value("updated_ms", int64_t{0}) > since + 2000;
      },
      30s));
  CHECK(status["autoscaler"]["counters"].value("launched", -1) == 0);
  CHECK(LaunchedNodes(status) == nodes);
}

}  // namespace
}  // namespace rayd::testing
