// The quickstart example as a user runs it: built by the project, run with no address (an
// embedded cluster that starts and stops with the program), and run again against a cluster
// started with `rayd start --head` (RAYD_ADDRESS), where it shows up as a finished job.

#include <catch2/catch.hpp>
#include <string>

#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using rayd::testing::FreeTcpPort;
using rayd::testing::RunCommand;
using rayd::testing::TempDir;

// Every line the example prints, in order; each checks a result computed remotely.
void CheckQuickstartOutput(const std::string& out) {
  for (const char* line : {"Plus(1, 2) = 3\n", "Plus(Plus(1, 2), 1) = 4\n",
                           "SumOfRef(Put([1,2,3,4])) = 10\n", "Scale(...)[0] = 2\n",
                           "Scale(64 MiB)[last] = 1 (read in place: yes)\n",
                           "Counter.Add(5) = 5 (ready: 1)\n", "GetActor(\"c\").Get() = 5\n",
                           "placement group reserved: yes, Plus(2, 3) in bundle 1 = 5\n",
                           "Fail(7) raised std::out_of_range: x must not be positive, got 7\n"}) {
    INFO(out);
    CHECK(out.find(line) != std::string::npos);
  }
}

TEST_CASE("the quickstart runs on an embedded cluster", "[e2e][example]") {
  TempDir root;
  std::string out;
  int rc = RunCommand({QUICKSTART_BINARY}, &out,
                      {{"RAYD_TEMP_DIR", root.path()}, {"RAYD_ADDRESS", ""}}, 120s);
  INFO(out);
  REQUIRE(rc == 0);
  CheckQuickstartOutput(out);
}

TEST_CASE("the README's ported Ray program runs on an embedded cluster", "[e2e][example]") {
  TempDir root;
  std::string out;
  int rc = RunCommand({RAY_PORT_BINARY}, &out,
                      {{"RAYD_TEMP_DIR", root.path()}, {"RAYD_ADDRESS", ""}}, 120s);
  INFO(out);
  REQUIRE(rc == 0);
  for (const char* line : {"Fib(6) = 8\n", "Sum(1, 2) = 3\n", "MODE in a worker = fast\n",
                           "Relay = hello again, ray\n",
                           "namespace = team, found by name: yes\n"}) {
    CHECK(out.find(line) != std::string::npos);
  }
}

TEST_CASE("the quickstart runs against rayd start --head", "[e2e][example]") {
  TempDir root;
  const std::string port = std::to_string(FreeTcpPort());
  const std::map<std::string, std::string> env = {{"RAYD_TEMP_DIR", root.path()}};
  struct Stop {
    std::string root;
    ~Stop() {
      RunCommand({RAYD_BINARY, "stop", "--force", "--temp-dir", root}, nullptr, {}, 60s);
    }
  } stop{root.path()};
  std::string out;
  REQUIRE(RunCommand({RAYD_BINARY, "start", "--head", "--port", port, "--num-cpus", "2",
                      "--temp-dir", root.path()},
                     &out, env, 60s) == 0);
  int rc = RunCommand({QUICKSTART_BINARY}, &out,
                      {{"RAYD_TEMP_DIR", root.path()}, {"RAYD_ADDRESS", "127.0.0.1:" + port}},
                      120s);
  INFO(out);
  REQUIRE(rc == 0);
  CheckQuickstartOutput(out);
  // The head still serves after the driver left.
  REQUIRE(RunCommand({RAYD_BINARY, "status", "--temp-dir", root.path()}, &out, env, 60s) == 0);
}

}  // namespace
