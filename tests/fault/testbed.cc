#include "testbed.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace rayd::testing {
namespace {

constexpr char kPrefix[] = "rayd-fault-";  // every namespace this test bed makes
constexpr char kNetnsDir[] = "/var/run/netns";
constexpr char kEtcNetns[] = "/etc/netns";  // per-namespace /etc files (`ip netns exec`)

// iproute2's `ip` (RunCommand does not search PATH).
const std::string& IpBinary() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (::access(p, X_OK) == 0) return std::string(p);
    }
    return std::string("ip");
  }();
  return path;
}

// Runs `ip args...`; throws naming the command and its output when it fails.
void Ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {IpBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  if (RunCommand(argv, &out, {}, std::chrono::seconds(20)) != 0) {
    std::ostringstream cmd;
    for (const auto& a : argv) cmd << a << ' ';
    throw std::runtime_error("test bed: `" + cmd.str() + "` failed: " + out);
  }
}

std::vector<pid_t> PidsIn(const std::string& ns) {
  std::string out;
  std::vector<pid_t> pids;
  if (RunCommand({IpBinary(), "netns", "pids", ns}, &out, {}, std::chrono::seconds(20)) != 0) return pids;
  std::istringstream in(out);
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

// SIGKILLs what runs in `ns` until nothing does (a dying process may fork no more, but one
// that was mid-spawn can leave a child), then deletes it.
void Destroy(const std::string& ns) {
  WaitFor(
      [&] {
        auto pids = PidsIn(ns);
        for (pid_t pid : pids) ::kill(pid, SIGKILL);
        return pids.empty();
      },
      std::chrono::seconds(10));
  RunCommand({IpBinary(), "netns", "delete", ns}, nullptr, {}, std::chrono::seconds(20));
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(kEtcNetns) / ns, ec);
}

// What `ip netns exec NS` shows its processes as /etc/hosts (it bind-mounts
// /etc/netns/NS/hosts there): this host's name resolves to its own address, as on a real
// machine, not to the loopback address this machine's /etc/hosts gives every namespace.
// Software that binds "the address of my hostname" (Horovod's process-set Gloo contexts, for
// one) then binds the host's address.
void WriteHosts(const std::string& ns, const std::string& ip) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::filesystem::create_directories(std::filesystem::path(kEtcNetns) / ns);
  std::ofstream(std::filesystem::path(kEtcNetns) / ns / "hosts") << "127.0.0.1 localhost\n"
                                                                 << ip << " " << name << "\n";
}

// Namespaces left by a test bed whose process is gone (a crashed test run).
void RemoveStale() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename();
    if (!name.starts_with(kPrefix)) continue;
    const pid_t owner = std::atoi(name.c_str() + sizeof(kPrefix) - 1);
    if (owner > 0 && ::kill(owner, 0) != 0) Destroy(name);
  }
}

}  // namespace

void Testbed::SkipUnlessSupported() {
  if (std::string why = Unsupported(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    std::fflush(stdout);
    std::exit(77);
  }
}

std::string Testbed::Unsupported() {
  if (::geteuid() != 0) return "the multi-host test bed needs root (network namespaces)";
  std::string out;
  if (RunCommand({IpBinary(), "-V"}, &out, {}, std::chrono::seconds(10)) != 0) {
    return "the multi-host test bed needs iproute2's `ip`";
  }
  return "";
}

Testbed::Testbed(int hosts) {
  RemoveStale();
  const std::string base = kPrefix + std::to_string(::getpid()) + "-";
  hub_ = base + "hub";
  try {
    Ip({"netns", "add", hub_});
    Ip({"-n", hub_, "link", "set", "lo", "up"});
    Ip({"-n", hub_, "link", "add", "br0", "type", "bridge"});
    Ip({"-n", hub_, "link", "set", "br0", "up"});
    for (int i = 0; i < hosts; ++i) {
      Host host{base + "h" + std::to_string(i), "10.77.0." + std::to_string(i + 1),
                std::make_unique<TempDir>()};
      const std::string port = "p" + std::to_string(i);  // the hub's end of the link
      Ip({"netns", "add", host.ns});
      hosts_.push_back(std::move(host));
      const Host& h = hosts_.back();
      WriteHosts(h.ns, h.ip);
      Ip({"link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", port, "netns",
          hub_});
      Ip({"-n", hub_, "link", "set", port, "master", "br0"});
      Ip({"-n", hub_, "link", "set", port, "up"});
      Ip({"-n", h.ns, "addr", "add", h.ip + "/24", "dev", "eth0"});
      Ip({"-n", h.ns, "link", "set", "eth0", "up"});
      Ip({"-n", h.ns, "link", "set", "lo", "up"});
    }
  } catch (...) {
    for (const Host& h : hosts_) Destroy(h.ns);
    Destroy(hub_);
    throw;
  }
}

Testbed::~Testbed() {
  for (const Host& h : hosts_) Destroy(h.ns);
  Destroy(hub_);
}

std::vector<std::string> Testbed::In(int host, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {IpBinary(), "netns", "exec", ns(host)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

int Testbed::Run(int host, const std::vector<std::string>& argv, std::string* output,
                 const std::map<std::string, std::string>& env,
                 std::chrono::milliseconds timeout) const {
  return RunCommand(In(host, argv), output, env, timeout);
}

void Testbed::SetLink(int host, bool up) {
  Ip({"-n", ns(host), "link", "set", "eth0", up ? "up" : "down"});
}

std::vector<pid_t> Testbed::Pids(int host) const { return PidsIn(ns(host)); }

void Testbed::KillHost(int host) {
  for (pid_t pid : Pids(host)) ::kill(pid, SIGKILL);
}

}  // namespace rayd::testing
