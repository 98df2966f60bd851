#pragma once
// A multi-host test bed on one machine: every "host" is a network namespace with its own
// address (10.77.0.<i+1>/24 on an eth0), linked by a veth pair to a bridge in a hub namespace
// the test bed also owns. Nothing is added to the machine's own namespace: addresses, links and
// the bridge exist only inside namespaces this object made, and its destructor SIGKILLs every
// process left in them and deletes them. Each host's /etc/hosts (/etc/netns/<ns>/hosts, which
// `ip netns exec` mounts over it) maps the machine's hostname to the host's own address, as a
// real machine's does; it goes with its namespace. Each host also gets its own temp root (its
// "/tmp/rayd"), so hosts share nothing but the filesystem the test chooses to share.
//
// Needs root (CAP_NET_ADMIN) and iproute2; Unsupported() says why not when they are missing.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"

namespace rayd::testing {

class Testbed {
 public:
  // "" when namespaces can be made here; else the reason they cannot.
  static std::string Unsupported();
  // Ends the running test as skipped when the bed cannot be made here: prints why and exits
  // with 77, which CTest reports as skipped (SKIP_RETURN_CODE), never as passed. Call first
  // thing in a test, before it has started anything.
  static void SkipUnlessSupported();

  // Makes `hosts` hosts; throws std::runtime_error naming the failed `ip` command.
  explicit Testbed(int hosts);
  ~Testbed();
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  const std::string& ns(int host) const { return hosts_.at(host).ns; }
  const std::string& ip(int host) const { return hosts_.at(host).ip; }
  // The host's temp root: its daemons' and commands' --temp-dir.
  const std::string& root(int host) const { return hosts_.at(host).root->path(); }

  // `argv` run inside the host's namespace (`ip netns exec NS argv...`).
  std::vector<std::string> In(int host, const std::vector<std::string>& argv) const;
  // Runs a command inside the host to completion (RunCommand's contract).
  int Run(int host, const std::vector<std::string>& argv, std::string* output,
          const std::map<std::string, std::string>& env = {},
          std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;

  // Cuts (false) or restores (true) the host's only link, from its side.
  void SetLink(int host, bool up);
  // Every process that runs inside the host's namespace.
  std::vector<pid_t> Pids(int host) const;
  // SIGKILLs every process of the host at once: the machine loses power.
  void KillHost(int host);

 private:
  struct Host {
    std::string ns;
    std::string ip;
    std::unique_ptr<TempDir> root;
  };
  std::string hub_;
  std::vector<Host> hosts_;
};

}  // namespace rayd::testing
