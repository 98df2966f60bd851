// `rayd start`: validates the flags, creates the session directory, and starts the head or
// node daemon in the background (or in the foreground with --block). The command returns once
// the daemon serves, or prints why it could not start.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "rayd/base/rpc.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"

namespace rayd::cli {
namespace {

Result<NodeResourceOptions> ParseResourceFlags(const StartArgs& args) {
  NodeResourceOptions r;
  if (args.num_cpus) {
    if (*args.num_cpus < 0) return Status::InvalidArgument("--num-cpus must be >= 0");
    r.num_cpus = args.num_cpus;
  }
  if (args.num_gpus) {
    if (*args.num_gpus < 0) return Status::InvalidArgument("--num-gpus must be >= 0");
    r.num_gpus = args.num_gpus;
  }
  if (!args.memory.empty()) {
    auto bytes = scheduler::ParseByteSize(args.memory);
    if (!bytes.ok()) return bytes.status().WithContext("--memory");
    r.memory = *bytes;
  }
  if (!args.object_store_memory.empty()) {
    auto bytes = scheduler::ParseByteSize(args.object_store_memory);
    if (!bytes.ok()) return bytes.status().WithContext("--object-store-memory");
    r.object_store_memory = *bytes;
  }
  if (!args.resources.empty()) {
    auto custom = scheduler::ParseResourcesJson(args.resources);
    if (!custom.ok()) return custom.status();  // the message names --resources
    r.custom = *custom;
  }
  if (!args.labels.empty()) {
    auto labels = scheduler::ParseLabels(args.labels);
    if (!labels.ok()) return labels.status().WithContext("--labels");
    r.labels = *labels;
  }
  return r;
}

nlohmann::json InfoToJson(const Result<DaemonInfo>& r) {
  if (!r.ok()) return {{"ok", false}, {"error", r.status().message()}};
  const auto& i = *r;
  return {{"ok", true},          {"gcs_address", i.gcs_address}, {"node_id", i.node_id},
          {"token", i.token},    {"session_dir", i.session_dir}, {"log_file", i.log_file},
          {"resources", i.resources.ToString()}, {"dashboard_url", i.dashboard_url},
          {"metrics_address", i.metrics_address}};
}

void PrintStarted(bool head, const nlohmann::json& info) {
  const std::string address = info["gcs_address"];
  const std::string token = info["token"];
  const std::string session = info["session_dir"];
  if (head) {
    std::cout << "rayd head started.\n"
              << "  Cluster address: " << address << "\n"
              << "  Cluster token:   " << token << "  (also in " << session << "/token)\n"
              << "  Head node:       " << std::string(info["node_id"]) << " "
              << std::string(info["resources"]) << "\n"
              << "  Logs:            " << std::string(info["log_file"]) << "\n";
    const std::string dashboard = info.value("dashboard_url", "");
    if (!dashboard.empty()) std::cout << "  Dashboard:       " << dashboard << "\n";
    const std::string metrics = info.value("metrics_address", "");
    if (!metrics.empty()) std::cout << "  Node metrics:    http://" << metrics << "/metrics\n";
    std::cout << "\n"
              << "To add a node to this cluster (on this or another machine):\n"
              << "  rayd start --address " << address << " --token " << token << "\n"
              << "To see the cluster: rayd status        To stop it: rayd stop\n";
  } else {
    std::cout << "rayd node started and joined the cluster at " << address << ".\n"
              << "  Node:  " << std::string(info["node_id"]) << " "
              << std::string(info["resources"]) << "\n"
              << "  Logs:  " << std::string(info["log_file"]) << "\n";
    const std::string metrics = info.value("metrics_address", "");
    if (!metrics.empty()) std::cout << "  Metrics: http://" << metrics << "/metrics\n";
    std::cout << "To see the cluster: rayd status        To stop: rayd stop\n";
  }
  std::cout.flush();
}

void RedirectStdio(const std::string& path) {
  int in = ::open("/dev/null", O_RDONLY);
  int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (in >= 0) ::dup2(in, 0);
  if (out >= 0) {
    ::dup2(out, 1);
    ::dup2(out, 2);
  }
  if (in > 2) ::close(in);
  if (out > 2) ::close(out);
}

// Runs the daemon in this process (the child after fork, or the foreground with --block).
int RunDaemon(bool head, const HeadOptions& head_options, const NodeOptions& node_options,
              const std::string& session_dir, const ReadyCallback& on_ready) {
  const std::string pid_file = session_dir + (head ? "/head.pid" : "/node.pid");
  session::WriteFileWithMode(pid_file, std::to_string(::getpid()) + "\n", 0600).IgnoreError();
  int rc = head ? RunHeadDaemon(head_options, session_dir, on_ready)
                : RunNodeDaemon(node_options, session_dir, on_ready);
  ::unlink(pid_file.c_str());
  return rc;
}

}  // namespace

int RunStart(const StartArgs& args) {
  if (args.head == !args.address.empty()) {
    return Fail("start", args.head ? "--head and --address are exclusive: a head joins nothing"
                                   : "pass --head to start a cluster or --address HOST:PORT to "
                                     "join one");
  }
  auto resources = ParseResourceFlags(args);
  if (!resources.ok()) return Fail("start", resources.status().message());
  if (args.port < 0 || args.port > 65535) return Fail("start", "--port must be in 0..65535");
  const std::string root = session::ResolveTempRoot(args.temp_dir);

  HeadOptions head_options;
  NodeOptions node_options;
  if (args.head) {
    head_options.port = args.port;
    if (!args.node_ip.empty()) head_options.node_ip = args.node_ip;
    head_options.redis_address = args.redis_address;
    head_options.redis_password = args.redis_password;
    // As for nodes and drivers, RAYD_TOKEN stands in for --token (and keeps it out of `ps`).
    head_options.token = args.token;
    if (const char* env = std::getenv("RAYD_TOKEN"); head_options.token.empty() && env) {
      head_options.token = env;
    }
    head_options.heartbeat_period = Millis(args.heartbeat_period_ms);
    head_options.missed_heartbeats = args.missed_heartbeats;
    // With an autoscaler, a request no node holds yet may get one: it waits longer.
    head_options.infeasible_timeout =
        Millis(args.infeasible_timeout_ms.value_or(args.autoscaler.empty() ? 60000 : 600000));
    head_options.autoscaler_config = args.autoscaler;
    if (!args.autoscaler.empty()) {
      std::error_code ec;
      head_options.autoscaler_config = std::filesystem::absolute(args.autoscaler, ec).string();
    }
    head_options.resources = *resources;
    head_options.dashboard_host = args.dashboard_host;
    head_options.dashboard_port = args.include_dashboard ? args.dashboard_port.value_or(8265) : -1;
    head_options.dashboard_required = args.dashboard_port.has_value();
    head_options.metrics_port = args.metrics_port;
  } else {
    auto ep = rpc::ParseEndpoint(args.address);
    if (!ep.ok()) return Fail("start", "--address: " + ep.status().message());
    auto target = FindCluster(args.address, args.token, root);
    if (!target.ok()) return Fail("start", target.status().message());
    node_options.head_address = target->address;
    node_options.token = target->token;
    if (!args.node_ip.empty()) node_options.node_ip = args.node_ip;
    node_options.join_timeout = Millis(args.join_timeout_ms);
    if (!args.autoscaler.empty()) {
      return Fail("start", "--autoscaler is the head's: pass it with --head");
    }
    node_options.infeasible_timeout = Millis(args.infeasible_timeout_ms.value_or(60000));
    node_options.resources = *resources;
    node_options.metrics_port = args.metrics_port;
  }

  auto session_dir = session::CreateSessionDir(root, args.head ? "head" : "node");
  if (!session_dir.ok()) return Fail("start", session_dir.status().message());

  if (args.block) {
    bool ready = false;
    int rc = RunDaemon(args.head, head_options, node_options, *session_dir,
                       [&](const Result<DaemonInfo>& r) {
                         ready = r.ok();
                         if (ready) {
                           if (args.head) session::MarkLatestHead(root, *session_dir).IgnoreError();
                           PrintStarted(args.head, InfoToJson(r));
                         } else {
                           Fail("start", r.status().message());
                         }
                       });
    return ready ? rc : 1;
  }

  int fds[2];
  if (::pipe(fds) != 0) return Fail("start", "pipe failed");
  std::cout.flush();
  pid_t pid = ::fork();
  if (pid < 0) return Fail("start", "fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();
    ::signal(SIGPIPE, SIG_IGN);
    RedirectStdio(*session_dir + (args.head ? "/logs/head.out" : "/logs/node.out"));
    int rc = RunDaemon(args.head, head_options, node_options, *session_dir,
                       [&](const Result<DaemonInfo>& r) {
                         std::string msg = InfoToJson(r).dump();
                         if (::write(fds[1], msg.data(), msg.size()) < 0) {
                           // The starter went away; the daemon serves regardless.
                         }
                         ::close(fds[1]);
                         fds[1] = -1;
                       });
    ::_exit(rc);
  }
  ::close(fds[1]);
  std::string reply;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) reply.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  auto info = nlohmann::json::parse(reply, nullptr, false);
  if (info.is_discarded() || !info.value("ok", false)) {
    ::waitpid(pid, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(*session_dir, ec);
    return Fail("start", info.is_discarded() ? "the daemon exited before it was ready"
                                             : std::string(info["error"]));
  }
  if (args.head) session::MarkLatestHead(root, *session_dir).IgnoreError();
  PrintStarted(args.head, info);
  return 0;
}

}  // namespace rayd::cli
