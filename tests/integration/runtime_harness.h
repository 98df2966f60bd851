#pragma once
// What the runtime_test binary's test files share: the binary's own path, embedded and
// CLI-started clusters that clean up after themselves, and the constants they wait with.

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <rayd/api.h>
#include <set>
#include <string>
#include <vector>

#include "rayd_sandbox.h"
#include "test_util.h"

namespace rayd_runtime_test {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::FreeTcpPort;
using rayd::testing::ProcessGone;
using rayd::testing::RunCommand;
using rayd::testing::TempDir;

inline constexpr auto kCommandTimeout = 30s;  // one `rayd` command
inline constexpr auto kSettleTimeout = 20s;   // a kill, restart or clean-up becomes visible

inline std::string SelfExe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

inline // True when `pid` is a live process running `exe` (so we never signal a recycled pid).
bool Runs(pid_t pid, const std::string& exe) {
  if (pid <= 1 || pid == getpid() || ProcessGone(pid)) return false;
  std::error_code ec;
  auto target = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return !ec && target.string() == exe;
}

// An embedded single-node cluster (2 CPUs) in its own temp root, for one test.
class EmbeddedRayd {
 public:
  // `object_store_memory` < 0: the default size.
  explicit EmbeddedRayd(int64_t object_store_memory = -1) {
    ::unsetenv("RAYD_ADDRESS");  // embedded, whatever the environment says
    ::unsetenv("RAYD_TOKEN");
    rayd::RaydConfig config;
    config.temp_dir = dir_.path();
    config.num_cpus = 2;
    config.object_store_memory = object_store_memory;
    rayd::Init(config);
  }
  ~EmbeddedRayd() { rayd::Shutdown(); }
  EmbeddedRayd(const EmbeddedRayd&) = delete;
  EmbeddedRayd& operator=(const EmbeddedRayd&) = delete;

  // A path in this test's temp root.
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

 private:
  TempDir dir_;
};

// What an exception of type E thrown by f says; fails the test if f throws nothing.
template <typename E, typename F>
std::string ThrownMessage(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("nothing was thrown");
  return "";
}

using rayd::testing::StartedNodeId;

// One test's CLI-started cluster: owns its temp root and port, runs `rayd` commands in it, and
// on destruction stops it (`rayd stop --force`) and SIGKILLs every daemon and worker it saw.
class CliCluster : public rayd::testing::RaydSandbox {
 public:
  CliCluster()
      : RaydSandbox(RAYD_BINARY, kCommandTimeout),
        port_(FreeTcpPort()),
        address_("127.0.0.1:" + std::to_string(port_)) {}
  // Before the sandbox stops the daemons: end our driver, and kill the workers it listed.
  ~CliCluster() override {
    rayd::Shutdown();  // a driver of this cluster must not outlive it
    for (pid_t pid : WorkerPids()) {
      if (Runs(pid, SelfExe())) ::kill(pid, SIGKILL);
    }
  }

  const std::string& address() const { return address_; }
  int port() const { return port_; }

  std::string StartHead(int num_cpus) {
    return Start({"--head", "--port", std::to_string(port_), "--num-cpus",
                  std::to_string(num_cpus)});
  }

  // `rayd <args> --format json`, parsed; nullopt when the command fails or prints no JSON.
  std::optional<json> TryJson(std::vector<std::string> args) {
    args.insert(args.end(), {"--format", "json"});
    std::string out;
    if (Rayd(args, &out) != 0) return std::nullopt;
    json j = json::parse(out, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
  }
  json Json(const std::vector<std::string>& args) {
    auto j = TryJson(args);
    REQUIRE(j.has_value());
    return *j;
  }

  // A driver connection to this cluster (token from its session dir), in `ray_namespace`.
  void InitDriver(const std::string& ray_namespace = "") {
    rayd::RaydConfig config;
    config.address = address_;
    config.temp_dir = root();
    config.ray_namespace = ray_namespace;
    rayd::Init(config);
  }

 private:
  // Pids of the workers the cluster lists now (none if it does not answer).
  std::set<pid_t> WorkerPids() {
    std::set<pid_t> pids;
    std::string out;
    if (RunCommand({RAYD_BINARY, "list", "workers", "--format", "json", "--temp-dir", root()},
                   &out, Env(), 10s) != 0) {
      return pids;
    }
    json workers = json::parse(out, nullptr, false);
    if (!workers.is_array()) return pids;
    for (const auto& w : workers) pids.insert(w.value("pid", 0));
    return pids;
  }

  int port_;
  std::string address_;
};

}  // namespace rayd_runtime_test
