// The security of ARCHITECTURE.md §3 and §11, checked from outside as an attacker on the same
// network or machine would meet it: a head that binds to loopback unless told otherwise; a
// node from another host with a wrong or missing token refused and logged; a connection that
// sends garbage dropped with a logged reason while the head serves on; session files 0700 /
// 0600 and the shared-memory arena 0600; a Redis that requires a password.

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rayd_sandbox.h"
#include "redis_server.h"
#include "test_util.h"
#include "testbed.h"

namespace {

using namespace std::chrono_literals;
using Catch::Contains;
using rayd::testing::ConnectLoopback;
using rayd::testing::FreeTcpPort;
using rayd::testing::RaydSandbox;
using rayd::testing::ReadFile;
using rayd::testing::RedisServer;
using rayd::testing::RedisServerOptions;
using rayd::testing::Testbed;
using rayd::testing::WaitFor;

constexpr char kToken[] = "security-test-token";

std::string FindTool(const char* name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"}) {
    const std::string path = std::string(dir) + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return name;
}

// The local addresses that listen for TCP inside `host` (`ss -Hltn`'s fourth column).
std::vector<std::string> Listeners(const Testbed& bed, int host) {
  std::string out;
  REQUIRE(bed.Run(host, {FindTool("ss"), "-Hltn"}, &out) == 0);
  std::vector<std::string> addresses;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string state, recv_q, send_q, local;
    if (words >> state >> recv_q >> send_q >> local) addresses.push_back(local);
  }
  return addresses;
}

std::string LogsOf(const std::string& session) { return ReadFile(session + "/logs/head.log"); }

}  // namespace

TEST_CASE("without --node-ip-address the head listens on loopback only and no other host can "
          "join",
          "[fault][security]") {
  Testbed::SkipUnlessSupported();
  Testbed bed(2);
  const std::map<std::string, std::string> env0 = {{"RAYD_TEMP_DIR", bed.root(0)}};
  std::string out;
  REQUIRE(bed.Run(0, {RAYD_BINARY, "start", "--head", "--port", "6380", "--token", kToken,
                      "--temp-dir", bed.root(0)},
                  &out, env0) == 0);
  const auto listening = Listeners(bed, 0);
  INFO(out);
  REQUIRE(!listening.empty());
  for (const auto& address : listening) {
    INFO(address);
    CHECK(address.starts_with("127.0.0.1:"));
  }
  // From the other host, the head's address cannot be joined, however right the token.
  const int rc = bed.Run(1, {RAYD_BINARY, "start", "--address", bed.ip(0) + ":6380", "--token",
                             kToken, "--temp-dir", bed.root(1), "--join-timeout-ms", "3000"},
                         &out, {{"RAYD_TEMP_DIR", bed.root(1)}});
  INFO(out);
  CHECK(rc != 0);
  CHECK_THAT(out, Contains(bed.ip(0) + ":6380"));
}

TEST_CASE("nodes from another host with a wrong or missing token are refused and the head logs "
          "who",
          "[fault][security]") {
  Testbed::SkipUnlessSupported();
  Testbed bed(2);
  std::string out;
  REQUIRE(bed.Run(0, {RAYD_BINARY, "start", "--head", "--node-ip-address", bed.ip(0), "--port",
                      "6380", "--token", kToken, "--temp-dir", bed.root(0)},
                  &out, {{"RAYD_TEMP_DIR", bed.root(0)}}) == 0);
  const std::string address = bed.ip(0) + ":6380";
  std::string head_session;
  for (const auto& e : std::filesystem::directory_iterator(bed.root(0))) {
    if (e.path().filename().string().ends_with("_head") && !e.is_symlink()) head_session = e.path();
  }
  REQUIRE(!head_session.empty());

  // Wrong token: refused at once, and the head names the peer's address in its log.
  int rc = bed.Run(1, {RAYD_BINARY, "start", "--address", address, "--node-ip-address", bed.ip(1),
                       "--token", "not-the-token", "--temp-dir", bed.root(1)},
                   &out, {{"RAYD_TEMP_DIR", bed.root(1)}});
  INFO(out);
  CHECK(rc != 0);
  CHECK_THAT(out, Contains("token"));
  CHECK(WaitFor(
      [&] {
        const std::string log = LogsOf(head_session);
        const auto at = log.find("wrong cluster token");
        return at != std::string::npos &&
               log.rfind("from " + bed.ip(1) + ":", at) > log.rfind('\n', at);
      },
      10s));
  // No token at all (none given, none in this host's session directories): a clear error
  // before anything is sent.
  rc = bed.Run(1, {RAYD_BINARY, "start", "--address", address, "--node-ip-address", bed.ip(1),
                   "--temp-dir", bed.root(1)},
               &out, {{"RAYD_TEMP_DIR", bed.root(1)}});
  INFO(out);
  CHECK(rc != 0);
  CHECK_THAT(out, Contains("token"));
  // The head has only itself, and still serves.
  rc = bed.Run(0, {RAYD_BINARY, "status", "--format", "json", "--temp-dir", bed.root(0)}, &out,
               {{"RAYD_TEMP_DIR", bed.root(0)}, {"RAYD_TOKEN", kToken}});
  REQUIRE(rc == 0);
  auto status = nlohmann::json::parse(out, nullptr, false);
  REQUIRE_FALSE(status.is_discarded());
  CHECK(status.at("nodes").size() == 1);
}

TEST_CASE("a connection that sends garbage instead of a handshake is dropped with a logged "
          "reason and the head serves on",
          "[fault][security]") {
  RaydSandbox sandbox(RAYD_BINARY);
  const int port = FreeTcpPort();
  sandbox.Start({"--head", "--port", std::to_string(port), "--num-cpus", "1"});
  const std::string session = sandbox.Sessions("_head").front();

  const int fd = ConnectLoopback(port);
  REQUIRE(fd >= 0);
  // A frame header claiming 2^31 segments, then noise.
  const unsigned char garbage[] = {0xff, 0xff, 0xff, 0x7f, 0x01, 0x02, 0x03, 0x04,
                                   0xde, 0xad, 0xbe, 0xef, 0x00, 0x11, 0x22, 0x33};
  REQUIRE(::write(fd, garbage, sizeof(garbage)) == static_cast<ssize_t>(sizeof(garbage)));
  // The head may greet first (its challenge), then closes it: reads end in EOF or an error,
  // not a hang (a receive timeout bounds the wait).
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char buffer[4096];
  ssize_t n = 0;
  size_t total = 0;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0 && total < (1 << 20)) total += n;
  CHECK(n == 0);  // closed by the head (a timeout would be -1 with EAGAIN)
  ::close(fd);
  CHECK(WaitFor([&] { return LogsOf(session).find("dropping connection") != std::string::npos; },
                10s));
  std::string out;
  CHECK(sandbox.Rayd({"status"}, &out) == 0);
}

TEST_CASE("session directories are 0700 and their files 0600 and the object store arena is 0600",
          "[fault][security]") {
  RaydSandbox sandbox(RAYD_BINARY);
  const int port = FreeTcpPort();
  sandbox.Start({"--head", "--port", std::to_string(port), "--num-cpus", "1",
                 "--object-store-memory", std::to_string(64 << 20)});
  sandbox.Start({"--address", "127.0.0.1:" + std::to_string(port), "--num-cpus", "1",
                 "--object-store-memory", std::to_string(64 << 20)});
  const auto sessions = sandbox.Sessions("");
  REQUIRE(sessions.size() == 2);
  for (const auto& session : sessions) {
    struct stat st {};
    REQUIRE(::lstat(session.c_str(), &st) == 0);
    INFO(session);
    CHECK((st.st_mode & 0777) == 0700);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(session)) {
      REQUIRE(::lstat(entry.path().c_str(), &st) == 0);
      INFO(entry.path() << " mode " << std::oct << (st.st_mode & 0777));
      if (S_ISDIR(st.st_mode)) {
        CHECK((st.st_mode & 0777) == 0700);
      } else {
        CHECK((st.st_mode & 077) == 0);  // files 0600; sockets too (nobody else may connect)
      }
    }
  }
  // Each daemon's arena: a memfd, reachable through /proc/<pid>/fd, mode 0600.
  sandbox.RememberDaemonPids();
  int arenas = 0;
  for (pid_t pid : rayd::testing::DaemonPids(sandbox.root())) {
    const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
    for (const auto& fd : std::filesystem::directory_iterator(fds)) {
      std::error_code ec;
      const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
      if (ec || !target.starts_with("/memfd:")) continue;
      struct stat st {};
      REQUIRE(::stat(fd.path().c_str(), &st) == 0);
      INFO(target << " of pid " << pid << " mode " << std::oct << (st.st_mode & 0777));
      CHECK((st.st_mode & 0777) == 0600);
      ++arenas;
    }
  }
  CHECK(arenas >= 2);
}

TEST_CASE("a head on a Redis that requires a password starts only with the right one",
          "[fault][security]") {
  RedisServer redis(RedisServerOptions{.password = "redis-secret"});
  const std::string redis_address = redis.Address();
  for (const std::string& password : {std::string(), std::string("wrong")}) {
    RaydSandbox sandbox(RAYD_BINARY);
    std::vector<std::string> args = {"start", "--head", "--port", std::to_string(FreeTcpPort()),
                                     "--num-cpus", "1", "--redis-address", redis_address};
    if (!password.empty()) args.insert(args.end(), {"--redis-password", password});
    std::string out;
    const int rc = sandbox.Rayd(args, &out);
    INFO("password '" << password << "': " << out);
    CHECK(rc != 0);
    CHECK_THAT(out, Contains("Redis") && Contains("127.0.0.1:" + std::to_string(redis.port())));
  }
  RaydSandbox sandbox(RAYD_BINARY);
  sandbox.Start({"--head", "--port", std::to_string(FreeTcpPort()), "--num-cpus", "1",
                 "--redis-address", redis_address, "--redis-password", "redis-secret"});
  std::string out;
  REQUIRE(sandbox.Rayd({"status", "--format", "json"}, &out) == 0);
  CHECK_THAT(out, Contains("redis://127.0.0.1:" + std::to_string(redis.port())));
}
