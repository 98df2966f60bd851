// A real cluster on loopback: `rayd start` a head and nodes (separate daemon processes), then
// check what `rayd status` reports as nodes join, die (SIGKILL, heartbeats stop), the head
// recovers from Redis, and `rayd stop` ends everything.
//
// Every test runs in its own temp root (passed as --temp-dir and RAYD_TEMP_DIR) on its own
// free port; a Cluster guard runs `rayd stop --force` and SIGKILLs every daemon pid it saw, so
// a failed REQUIRE leaves nothing behind. Tests synchronise by polling with deadlines.

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "redis_server.h"
#include "rayd_sandbox.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::FreeTcpPort;
using rayd::testing::ReadFile;
using rayd::testing::RedisServer;
using rayd::testing::RunCommand;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;

constexpr auto kCommandTimeout = 30s;  // one `rayd` command, start included
constexpr auto kGoneTimeout = 10s;     // a killed or stopped daemon disappears

// True when `pid` no longer runs: no such process, or a zombie nobody reaped yet.
using rayd::testing::ProcessGone;
bool IsRayd(pid_t pid) { return rayd::testing::IsRaydProcess(pid); }

using rayd::testing::StartedNodeId;

const json* FindNode(const json& status, const std::string& node_id) {
  for (const auto& n : status.at("nodes")) {
    if (n.at("node_id") == node_id) return &n;
  }
  return nullptr;
}

std::string StateOf(const json& status, const std::string& node_id) {
  const json* n = FindNode(status, node_id);
  return n ? n->at("state").get<std::string>() : "MISSING";
}

// One test's cluster: its own temp root, rayd commands run in it, everything stopped and
// killed on destruction (RaydSandbox); plus `rayd status` as JSON.
class Cluster : public rayd::testing::RaydSandbox {
 public:
  Cluster() : RaydSandbox(RAYD_BINARY, kCommandTimeout) {}

  // `rayd status --format json`; false when the command fails or prints no JSON.
  bool TryStatus(json* status) {
    std::string out;
    if (Rayd({"status", "--format", "json"}, &out) != 0) return false;
    *status = json::parse(out, nullptr, false);
    return !status->is_discarded() && status->contains("nodes");
  }
  json Status() {
    json status;
    REQUIRE(TryStatus(&status));
    return status;
  }
};

double Amount(const json& set, const std::string& name) {
  return set.contains(name) ? set.at(name).get<double>() : 0.0;
}

}  // namespace

TEST_CASE("a head and two nodes: status shows three alive nodes and exact totals",
          "[integration]") {
  Cluster cluster;
  const int port = FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string head = cluster.Start({"--head", "--port", std::to_string(port), "--num-cpus",
                                          "4", "--num-gpus", "2", "--resources", R"({"tpu":1})"});
  // --num-gpus 0 on the nodes: GPU detection must not change the sums on a GPU machine.
  const std::string a = cluster.Start({"--address", address, "--num-cpus", "2", "--num-gpus", "0"});
  const std::string b =
      cluster.Start({"--address", address, "--num-cpus", "2", "--num-gpus", "0", "--resources",
                     R"({"foo":3})", "--labels", "rack=r1,zone=z2"});
  REQUIRE(std::set<std::string>{head, a, b}.size() == 3);

  json status = cluster.Status();
  INFO(status.dump(2));
  CHECK(status.at("address") == address);
  CHECK(status.at("storage") == "memory");
  CHECK(status.at("cluster_id").get<std::string>().size() == 32);
  REQUIRE(status.at("nodes").size() == 3);
  for (const auto& id : {head, a, b}) {
    const json* n = FindNode(status, id);
    REQUIRE(n != nullptr);
    CHECK(n->at("state") == "ALIVE");
    CHECK(n->at("is_head") == (id == head));
    CHECK(n->at("death_reason") == "");
    CHECK(n->at("pid").get<int64_t>() > 0);
    CHECK(n->at("available") == n->at("total"));  // nothing runs: nothing is used
  }
  const json& head_total = FindNode(status, head)->at("total");
  CHECK(Amount(head_total, "CPU") == 4);
  CHECK(Amount(head_total, "GPU") == 2);
  CHECK(Amount(head_total, "tpu") == 1);
  CHECK(Amount(head_total, "foo") == 0);
  const json& a_total = FindNode(status, a)->at("total");
  CHECK(Amount(a_total, "CPU") == 2);
  CHECK(Amount(a_total, "GPU") == 0);
  CHECK(Amount(a_total, "tpu") == 0);
  CHECK(Amount(a_total, "foo") == 0);
  const json& b_node = *FindNode(status, b);
  CHECK(Amount(b_node.at("total"), "CPU") == 2);
  CHECK(Amount(b_node.at("total"), "GPU") == 0);
  CHECK(Amount(b_node.at("total"), "foo") == 3);
  // Its own labels, and the node-id label every node carries.
  CHECK(b_node.at("labels") == json{{"rack", "r1"}, {"rayd.io/node-id", b}, {"zone", "z2"}});

  // The cluster totals are the exact sums of the nodes'.
  const json& total = status.at("total");
  CHECK(Amount(total, "CPU") == 8);
  CHECK(Amount(total, "GPU") == 2);
  CHECK(Amount(total, "tpu") == 1);
  CHECK(Amount(total, "foo") == 3);
  CHECK(Amount(total, "memory") == Amount(head_total, "memory") + Amount(a_total, "memory") +
                                       Amount(b_node.at("total"), "memory"));
  CHECK(status.at("available") == total);

  // The table names every node, the head as such, and the summed usage.
  std::string table;
  REQUIRE(cluster.Rayd({"status"}, &table) == 0);
  INFO(table);
  CHECK(table.find("node_" + head + " (head)") != std::string::npos);
  CHECK(table.find("node_" + a) != std::string::npos);
  CHECK(table.find("node_" + b) != std::string::npos);
  CHECK(table.find(" 0/8 CPU\n") != std::string::npos);
  CHECK(table.find(" 0/2 GPU\n") != std::string::npos);
  CHECK(table.find(" 0/3 foo\n") != std::string::npos);
  CHECK(table.find(" 0/1 tpu\n") != std::string::npos);
  CHECK(table.find("(no dead nodes)") != std::string::npos);

  // `rayd list nodes --format json` lists the same three nodes.
  std::string list_out;
  REQUIRE(cluster.Rayd({"list", "nodes", "--format", "json"}, &list_out) == 0);
  json list = json::parse(list_out, nullptr, false);
  REQUIRE(list.is_array());
  std::set<std::string> listed;
  for (const auto& n : list) listed.insert(n.at("node_id").get<std::string>());
  CHECK(listed == std::set<std::string>{head, a, b});
}

TEST_CASE("a SIGKILLed node is declared dead after missed heartbeats, the others stay alive",
          "[integration]") {
  Cluster cluster;
  const int port = FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string head =
      cluster.Start({"--head", "--port", std::to_string(port), "--num-cpus", "4",
                     "--heartbeat-period-ms", "200", "--missed-heartbeats", "5"});
  const std::string victim = cluster.Start({"--address", address, "--num-cpus", "2"});
  const std::string survivor = cluster.Start({"--address", address, "--num-cpus", "2"});

  json status = cluster.Status();
  REQUIRE(StateOf(status, victim) == "ALIVE");
  const pid_t victim_pid = FindNode(status, victim)->at("pid").get<pid_t>();
  const pid_t survivor_pid = FindNode(status, survivor)->at("pid").get<pid_t>();
  REQUIRE(IsRayd(victim_pid));
  REQUIRE(victim_pid != survivor_pid);

  const auto killed_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  REQUIRE(::kill(victim_pid, SIGKILL) == 0);
  REQUIRE(WaitFor([&] { return ProcessGone(victim_pid); }, kGoneTimeout));

  // 5 x 200 ms without a heartbeat: dead within about a second; allow 10 s on a busy machine.
  const bool dead =
      WaitFor([&] { return cluster.TryStatus(&status) && StateOf(status, victim) == "DEAD"; }, 10s);
  INFO(status.dump(2));
  REQUIRE(dead);
  const json& v = *FindNode(status, victim);
  const std::string reason = v.at("death_reason");
  CHECK(reason.find("missed 5 heartbeats") != std::string::npos);
  CHECK(reason.find("1000 ms") != std::string::npos);
  // Not declared dead early: the last heartbeat came at most one period before the kill.
  CHECK(v.at("end_time_ms").get<int64_t>() - killed_at_ms >= 700);
  CHECK(v.at("available").empty());

  CHECK(StateOf(status, head) == "ALIVE");
  CHECK(StateOf(status, survivor) == "ALIVE");
  CHECK(IsRayd(survivor_pid));
  CHECK(status.at("nodes").size() == 3);
  CHECK(Amount(status.at("total"), "CPU") == 6);  // the dead node's 2 CPUs are gone

  std::string table;
  REQUIRE(cluster.Rayd({"status"}, &table) == 0);
  CHECK(table.find("node_" + victim + "  127.0.0.1:") != std::string::npos);
  CHECK(table.find("missed 5 heartbeats") != std::string::npos);
  CHECK(table.find(" 0/6 CPU\n") != std::string::npos);
}

TEST_CASE("a SIGKILLed head restarted on the same Redis keeps its cluster and nodes",
          "[integration][redis]") {
  RedisServer redis;  // declared before the cluster: outlives its daemons
  Cluster cluster;
  const int port = FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::vector<std::string> head_flags = {"--head",
                                               "--port",
                                               std::to_string(port),
                                               "--num-cpus",
                                               "2",
                                               "--redis-address",
                                               redis.Address(),
                                               "--heartbeat-period-ms",
                                               "200",
                                               "--missed-heartbeats",
                                               "5"};
  const std::string old_head = cluster.Start(head_flags);
  REQUIRE(cluster.Sessions("_head").size() == 1);
  const std::string old_session = cluster.Sessions("_head").front();
  const std::string token = ReadFile(old_session + "/token");
  REQUIRE(token.size() > 1);
  const std::string node = cluster.Start({"--address", address, "--num-cpus", "1"});

  json before = cluster.Status();
  INFO("before: " << before.dump(2));
  CHECK(before.at("storage").get<std::string>().find("redis") != std::string::npos);
  const std::string cluster_id = before.at("cluster_id");
  REQUIRE(cluster_id.size() == 32);
  REQUIRE(StateOf(before, node) == "ALIVE");
  const pid_t node_pid = FindNode(before, node)->at("pid").get<pid_t>();
  const pid_t head_pid = FindNode(before, old_head)->at("pid").get<pid_t>();
  CHECK(std::to_string(head_pid) + "\n" == ReadFile(old_session + "/head.pid"));

  REQUIRE(::kill(head_pid, SIGKILL) == 0);
  REQUIRE(WaitFor([&] { return ProcessGone(head_pid); }, kGoneTimeout));
  CHECK(IsRayd(node_pid));  // the node outlives its head

  const std::string new_head = cluster.Start(head_flags);
  CHECK(new_head != old_head);
  // The token comes back from Redis: the node's token still opens the cluster.
  CHECK(cluster.last_start_output().find("Cluster token:   " + token.substr(0, token.size() - 1)) !=
        std::string::npos);
  const auto sessions = cluster.Sessions("_head");
  REQUIRE(sessions.size() == 2);
  const std::string new_session =
      sessions.front() == old_session ? sessions.back() : sessions.front();
  CHECK(ReadFile(new_session + "/token") == token);

  // The node reconnects by itself (backoff up to 2 s) and re-registers under its id.
  json after;
  const std::string new_log = new_session + "/logs/head.log";
  const bool back = WaitFor(
      [&] {
        return ReadFile(new_log).find("re-registered node " + node) != std::string::npos &&
               cluster.TryStatus(&after) && StateOf(after, node) == "ALIVE";
      },
      15s);
  INFO("after: " << after.dump(2) << "\nnew head log:\n" << ReadFile(new_log));
  REQUIRE(back);
  CHECK(after.at("cluster_id") == cluster_id);
  CHECK(FindNode(after, node)->at("pid").get<pid_t>() == node_pid);
  CHECK(Amount(FindNode(after, node)->at("total"), "CPU") == 1);
  CHECK(StateOf(after, new_head) == "ALIVE");
  CHECK(FindNode(after, new_head)->at("is_head") == true);
  // The old head's row was recovered from Redis too (dead, or not yet timed out).
  CHECK(StateOf(after, old_head) != "MISSING");
}

TEST_CASE("rayd stop ends every daemon, and status then fails", "[integration]") {
  Cluster cluster;
  const int port = FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  cluster.Start({"--head", "--port", std::to_string(port), "--num-cpus", "1"});
  cluster.Start({"--address", address, "--num-cpus", "1"});
  cluster.Start({"--address", address, "--num-cpus", "1"});

  json status = cluster.Status();
  REQUIRE(status.at("nodes").size() == 3);
  std::vector<pid_t> pids;
  for (const auto& n : status.at("nodes")) {
    pids.push_back(n.at("pid").get<pid_t>());
    REQUIRE(IsRayd(pids.back()));
  }

  std::string out;
  REQUIRE(cluster.Rayd({"stop"}, &out) == 0);
  CHECK(out.find("Stopped 3 rayd processes (1 head, 2 nodes).") != std::string::npos);
  for (pid_t pid : pids) {
    INFO("pid " << pid);
    CHECK(WaitFor([&] { return ProcessGone(pid); }, kGoneTimeout));
  }
  for (const auto& dir : cluster.Sessions("")) {
    CHECK_FALSE(std::filesystem::exists(dir + "/head.pid"));
    CHECK_FALSE(std::filesystem::exists(dir + "/node.pid"));
  }

  std::string status_out;
  CHECK(cluster.Rayd({"status"}, &status_out) != 0);
  CHECK(status_out.starts_with("rayd status: cannot reach the cluster at " + address));
  CHECK(cluster.Rayd({"stop"}, &out) == 0);
  CHECK(out.find("No rayd processes are running") != std::string::npos);
}
