// The `rayd` command line end to end: every kind of bad input gets exactly one line saying
// what is wrong ("rayd <command>: ...") and a non-zero exit, and leaves no daemon or session
// directory behind; a foreground head (--block) serves until SIGTERM and then exits 0.
//
// Each test runs in a fresh temp root (--temp-dir and RAYD_TEMP_DIR) on its own free ports; a
// Sandbox guard runs `rayd stop --force` and SIGKILLs every daemon pid it saw.

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

#include "rayd_sandbox.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::FreeTcpPort;
using rayd::testing::ReadFile;
using rayd::testing::RunCommand;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;

constexpr auto kCommandTimeout = 30s;

using rayd::testing::ProcessGone;

// True when `out` is exactly one newline-terminated line starting with `prefix`.
bool IsOneLine(const std::string& out, const std::string& prefix) {
  return out.starts_with(prefix) && out.size() > prefix.size() && out.back() == '\n' &&
         std::count(out.begin(), out.end(), '\n') == 1;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A fresh temp root for rayd commands, cleaned up (stop --force, SIGKILL) on destruction.
class Sandbox : public rayd::testing::RaydSandbox {
 public:
  Sandbox() : RaydSandbox(RAYD_BINARY, kCommandTimeout) {}

  // Starts a head on `port` that must come up.
  void StartHead(int port) {
    std::string out;
    int rc = Rayd({"start", "--head", "--port", std::to_string(port), "--num-cpus", "1"}, &out);
    INFO(out);
    REQUIRE(rc == 0);
  }
};

// Runs a command that must fail with one line starting "rayd <command>: " and containing
// every one of `parts`; it must leave no session directory behind.
void ExpectOneLineError(Sandbox& sandbox, const std::vector<std::string>& args,
                        const std::string& command, const std::vector<std::string>& parts) {
  std::string out;
  int rc = sandbox.Rayd(args, &out);
  INFO("rayd " << command << " printed:\n" << out);
  CHECK(rc != 0);
  CHECK(rc != -1);  // -1: it did not finish in time
  CHECK(IsOneLine(out, "rayd " + command + ": "));
  for (const auto& part : parts) CHECK(Contains(out, part));
  CHECK(sandbox.Sessions("").empty());
}

}  // namespace

TEST_CASE("rayd start rejects bad flags with one line and a non-zero exit", "[e2e]") {
  Sandbox sandbox;
  SECTION("unknown flag") {
    ExpectOneLineError(sandbox, {"start", "--head", "--bogus"}, "start", {"--bogus"});
  }
  SECTION("--resources that is not JSON") {
    ExpectOneLineError(sandbox, {"start", "--head", "--resources", R"({"tpu":)"}, "start",
                       {"--resources", "not valid JSON"});
  }
  SECTION("--resources naming a predefined resource") {
    ExpectOneLineError(sandbox, {"start", "--head", "--resources", R"({"CPU":1})"}, "start",
                       {"--resources", "\"CPU\"", "--num-cpus"});
  }
  SECTION("--resources with a negative amount") {
    ExpectOneLineError(sandbox, {"start", "--head", "--resources", R"({"tpu":-1})"}, "start",
                       {"--resources", "tpu"});
  }
  SECTION("--labels without '='") {
    ExpectOneLineError(sandbox, {"start", "--head", "--labels", "rack"}, "start",
                       {"--labels", "rack", "key=value"});
  }
  SECTION("--labels with an empty key") {
    ExpectOneLineError(sandbox, {"start", "--head", "--labels", "=r1"}, "start",
                       {"--labels", "empty key"});
  }
  SECTION("--head together with --address") {
    ExpectOneLineError(sandbox, {"start", "--head", "--address", "127.0.0.1:1"}, "start",
                       {"--head", "--address", "exclusive"});
  }
  SECTION("neither --head nor --address") {
    ExpectOneLineError(sandbox, {"start", "--num-cpus", "1"}, "start", {"--head", "--address"});
  }
  SECTION("a negative --num-cpus") {
    ExpectOneLineError(sandbox, {"start", "--head", "--num-cpus", "-1"}, "start",
                       {"--num-cpus", ">= 0"});
  }
}

TEST_CASE("rayd start --address of a head that is not there fails after the join timeout",
          "[e2e]") {
  Sandbox sandbox;
  const std::string address = "127.0.0.1:" + std::to_string(FreeTcpPort());
  const auto started = std::chrono::steady_clock::now();
  ExpectOneLineError(sandbox,
                     {"start", "--address", address, "--token", "x", "--join-timeout-ms", "1500"},
                     "start", {"could not join the cluster at " + address, "1500 ms"});
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took >= 1400ms);  // it kept trying until the timeout...
  CHECK(took < 15s);      // ...and not much longer
}

TEST_CASE("a second head on a port in use fails and the first one still serves", "[e2e]") {
  Sandbox sandbox;
  const int port = FreeTcpPort();
  sandbox.StartHead(port);
  REQUIRE(sandbox.Sessions("_head").size() == 1);
  const std::string first_session = sandbox.Sessions("_head").front();

  std::string out;
  int rc = sandbox.Rayd({"start", "--head", "--port", std::to_string(port)}, &out);
  INFO(out);
  CHECK(rc != 0);
  CHECK(IsOneLine(out, "rayd start: "));
  CHECK(Contains(out, "127.0.0.1:" + std::to_string(port)));
  CHECK(Contains(out, "already in use"));
  // The failed head cleaned up its session; `rayd status` still finds the first head.
  CHECK(sandbox.Sessions("_head") == std::vector<std::string>{first_session});

  std::string status_out;
  REQUIRE(sandbox.Rayd({"status", "--format", "json"}, &status_out) == 0);
  json status = json::parse(status_out, nullptr, false);
  REQUIRE_FALSE(status.is_discarded());
  CHECK(status.at("address") == "127.0.0.1:" + std::to_string(port));
  REQUIRE(status.at("nodes").size() == 1);
  CHECK(status.at("nodes")[0].at("state") == "ALIVE");
  CHECK(status.at("nodes")[0].at("is_head") == true);
}

TEST_CASE("a node with the wrong token is refused, and the head logs the refusal", "[e2e]") {
  Sandbox sandbox;
  const int port = FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  sandbox.StartHead(port);
  const std::string head_session = sandbox.Sessions("_head").front();

  std::string out;
  const auto started = std::chrono::steady_clock::now();
  int rc = sandbox.Rayd({"start", "--address", address, "--token", "wrong"}, &out);
  INFO(out);
  CHECK(rc != 0);
  CHECK(IsOneLine(out, "rayd start: "));
  CHECK(Contains(out, "token"));
  // A refusal is final: no waiting out the 15 s default join timeout.
  CHECK(std::chrono::steady_clock::now() - started < 10s);
  CHECK(sandbox.Sessions("_node").empty());

  const std::string log = head_session + "/logs/head.log";
  // e.g. "[warning] dropping connection 3 from 127.0.0.1:50314 (node): wrong cluster token"
  const bool logged = WaitFor(
      [&] {
        const std::string text = ReadFile(log);
        const auto at = text.find("wrong cluster token");
        if (at == std::string::npos) return false;
        const auto from = text.rfind("from 127.0.0.1:", at);
        const auto line_start = text.rfind('\n', at);
        return from != std::string::npos && (line_start == std::string::npos || from > line_start);
      },
      10s);
  INFO("head log:\n" << ReadFile(log));
  CHECK(logged);

  // The head still has only itself.
  std::string status_out;
  REQUIRE(sandbox.Rayd({"status", "--format", "json"}, &status_out) == 0);
  json status = json::parse(status_out, nullptr, false);
  REQUIRE_FALSE(status.is_discarded());
  CHECK(status.at("nodes").size() == 1);
}

TEST_CASE("rayd status and list without a cluster, or with a bogus table, fail in one line",
          "[e2e]") {
  Sandbox sandbox;
  SECTION("status with no head started and no RAYD_ADDRESS") {
    ExpectOneLineError(sandbox, {"status"}, "status", {"pass --address", "RAYD_ADDRESS"});
  }
  SECTION("list nodes with no head started") {
    ExpectOneLineError(sandbox, {"list", "nodes"}, "list nodes", {"pass --address"});
  }
  SECTION("list of a table that does not exist") {
    ExpectOneLineError(sandbox, {"list", "bogus"}, "list bogus", {"'bogus'", "nodes"});
  }
  SECTION("status in an unknown format") {
    ExpectOneLineError(sandbox, {"status", "--format", "yaml"}, "status",
                       {"--format", "table or json", "yaml"});
  }
}

TEST_CASE("rayd drain refuses a bad deadline, no cluster, an unknown node and the head's own",
          "[e2e][drain]") {
  Sandbox sandbox;
  ExpectOneLineError(sandbox, {"drain", "0123", "--deadline", "3x"}, "drain",
                     {"--deadline", "30s", "'3x'"});
  ExpectOneLineError(sandbox, {"drain", "0123", "--deadline", "-5s"}, "drain", {"'-5s'"});
  ExpectOneLineError(sandbox, {"drain", "0123"}, "drain", {"pass --address"});
  const int port = rayd::testing::FreeTcpPort();
  sandbox.StartHead(port);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::string out;
  CHECK(sandbox.Rayd({"drain", "zz", "--address", address}, &out) == 1);
  CHECK(
      out.starts_with("rayd drain: no alive node has an id starting with 'zz'; the alive "
                      "nodes:\n"));
  CHECK(Contains(out, "(head)"));
  std::string nodes;
  REQUIRE(sandbox.Rayd({"list", "nodes", "--format", "json"}, &nodes) == 0);
  const std::string head = nlohmann::json::parse(nodes).at(0).at("node_id");
  CHECK(sandbox.Rayd({"drain", head, "--address", address}, &out) == 1);
  CHECK(IsOneLine(out, "rayd drain: "));
  CHECK(Contains(out, "is the head's own node and cannot be drained"));
}

TEST_CASE("rayd start --head --block serves in the foreground and exits 0 on SIGTERM", "[e2e]") {
  Sandbox sandbox;
  const int port = FreeTcpPort();
  ChildProcess head({RAYD_BINARY, "start", "--head", "--block", "--port", std::to_string(port),
                     "--num-cpus", "3", "--temp-dir", sandbox.root()},
                    sandbox.Env());

  json status;
  const bool serving = WaitFor(
      [&] {
        std::string out;
        if (!head.running()) return true;  // exited early: fail below with its output
        if (sandbox.Rayd({"status", "--format", "json"}, &out) != 0) return false;
        status = json::parse(out, nullptr, false);
        return !status.is_discarded();
      },
      20s);
  INFO("head output:\n" << head.output());
  REQUIRE(serving);
  REQUIRE(head.running());
  CHECK(Contains(head.output(), "rayd head started."));
  REQUIRE(status.at("nodes").size() == 1);
  const json& node = status.at("nodes")[0];
  CHECK(node.at("state") == "ALIVE");
  CHECK(node.at("pid").get<pid_t>() == head.pid());  // the daemon is this very process
  CHECK(node.at("total").at("CPU").get<double>() == 3);
  const std::string session = sandbox.Sessions("_head").front();
  CHECK(ReadFile(session + "/head.pid") == std::to_string(head.pid()) + "\n");

  head.Signal(SIGTERM);
  REQUIRE(head.WaitExit(10s));
  CHECK(head.exit_code() == 0);
  CHECK_FALSE(std::filesystem::exists(session + "/head.pid"));
  std::string out;
  CHECK(sandbox.Rayd({"status"}, &out) != 0);
  CHECK(IsOneLine(out, "rayd status: "));
}

// `rayd start --head --port 0` binds an ephemeral port and advertises that one (once a known
// bug whose test was allowed to fail; it passes now and counts like every test).
TEST_CASE("rayd start --head --port 0 advertises the port it bound", "[e2e]") {
  Sandbox sandbox;
  std::string out;
  REQUIRE(sandbox.Rayd({"start", "--head", "--port", "0", "--num-cpus", "1"}, &out) == 0);
  INFO(out);
  static const std::regex kAddress(R"(Cluster address: 127\.0\.0\.1:(\d+)\n)");
  std::smatch m;
  REQUIRE(std::regex_search(out, m, kAddress));
  REQUIRE(std::stoi(m[1].str()) != 0);  // fails today: "Cluster address: 127.0.0.1:0"
  std::string status_out;
  CHECK(sandbox.Rayd({"status", "--format", "json"}, &status_out) == 0);
}

TEST_CASE("rayd list objects shows each node's object store, sized by --object-store-memory",
          "[e2e]") {
  Sandbox sandbox;
  const int port = FreeTcpPort();
  std::string out;
  REQUIRE(sandbox.Rayd({"start", "--head", "--port", std::to_string(port), "--num-cpus", "1",
                        "--object-store-memory", "96MiB"},
                       &out) == 0);
  REQUIRE(sandbox.Rayd({"list", "objects"}, &out) == 0);
  INFO(out);
  CHECK(Contains(out, "OBJECT_ID"));
  CHECK(Contains(out, "Object stores:"));
  CHECK(Contains(out, "0B/96.00MiB used"));
  REQUIRE(sandbox.Rayd({"list", "objects", "--format", "json"}, &out) == 0);
  CHECK(json::parse(out) == json::array());  // nothing stored yet
  REQUIRE(sandbox.Rayd({"status", "--format", "json"}, &out) == 0);
  CHECK(json::parse(out).at("total").at("object_store_memory") == 96.0 * 1024 * 1024);

  Sandbox empty;
  ExpectOneLineError(empty, {"start", "--head", "--object-store-memory", "lots"}, "start",
                     {"--object-store-memory", "lots"});
}
