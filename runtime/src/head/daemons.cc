// RunHeadDaemon and RunNodeDaemon: a daemon process, run until SIGTERM / SIGINT and shut down
// cleanly. The head's parts are composed by head::Head (head.h), as the embedded cluster's are.

#include <spdlog/spdlog.h>
#include <csignal>
#include <unistd.h>

#include <memory>

#include "head/head.h"
#include "node/node_daemon.h"
#include "node/resource_detection.h"
#include "rayd/base/http.h"
#include "rayd/base/logging.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"

namespace rayd {
namespace {

// Stops the daemon on SIGTERM or SIGINT by running `on_signal` once.
class SignalWatcher {
 public:
  SignalWatcher(EventLoop& loop, std::function<void(int)> on_signal)
      : on_signal_(std::move(on_signal)) {
    for (int signum : {SIGTERM, SIGINT}) {
      auto* h = new uv_signal_t;
      uv_signal_init(loop.uv(), h);
      h->data = this;
      uv_signal_start(
          h,
          [](uv_signal_t* h, int signum) {
            auto* self = static_cast<SignalWatcher*>(h->data);
            if (self->fired_) return;
            self->fired_ = true;
            self->on_signal_(signum);
          },
          signum);
      handles_.push_back(h);
    }
  }
  ~SignalWatcher() {
    for (auto* h : handles_) {
      uv_close(reinterpret_cast<uv_handle_t*>(h),
               [](uv_handle_t* h) { delete reinterpret_cast<uv_signal_t*>(h); });
    }
  }

 private:
  std::function<void(int)> on_signal_;
  std::vector<uv_signal_t*> handles_;
  bool fired_ = false;
};

// Runs the loop until a signal, then shuts the node down (unregistering) and returns.
template <typename Daemon>
void ServeUntilSignal(EventLoop& loop, Daemon& node) {
  SignalWatcher signals(loop, [&](int signum) {
    spdlog::info("received signal {}; shutting down", signum);
    node.Shutdown("stopped (signal " + std::to_string(signum) + ")", [&loop] { loop.Stop(); });
  });
  loop.Run();
}

}  // namespace

int RunHeadDaemon(const HeadOptions& options, const std::string& session_dir,
                  const ReadyCallback& on_ready) {
  const std::string log_file = session_dir + "/logs/head.log";
  ::signal(SIGPIPE, SIG_IGN);  // a peer that dies mid-write is an error value, not a signal
  InitLogging("head", log_file);
  spdlog::info("starting head daemon (pid {}) in {}", getpid(), session_dir);
  auto fail = [&](const Status& s) {
    spdlog::error("head failed to start: {}", s.message());
    on_ready(s);
    return 1;
  };

  EventLoop loop;
  auto started = head::Head::Start(loop, {options, session_dir, log_file});
  if (!started.ok()) return fail(started.status());
  std::unique_ptr<head::Head> head = std::move(*started);
  on_ready(head->info());
  ServeUntilSignal(loop, *head);
  head.reset();
  spdlog::info("head stopped");
  return 0;
}

int RunNodeDaemon(const NodeOptions& options, const std::string& session_dir,
                  const ReadyCallback& on_ready) {
  const std::string log_file = session_dir + "/logs/node.log";
  ::signal(SIGPIPE, SIG_IGN);
  InitLogging("node", log_file);
  spdlog::info("starting node daemon (pid {}) in {}, joining {}", getpid(), session_dir,
               options.head_address);
  EventLoop loop;
  node::NodeDaemonConfig config;
  config.gcs_address = options.head_address;
  config.token = options.token;
  config.node_ip = options.node_ip;
  config.total = node::ResolveNodeResources(options.resources);
  config.prestart_workers = node::DefaultPrestartWorkers(config.total);
  config.labels = options.resources.labels;
  config.session_dir = session_dir;
  config.join_timeout = options.join_timeout;
  config.infeasible_timeout = options.infeasible_timeout;
  node::NodeDaemon node(loop, config);
  Status s = head::Await(loop, [&](auto done) { node.Start(done); },
                   options.join_timeout + Millis(1000), "joining the cluster");
  if (!s.ok()) {
    spdlog::error("node failed to start: {}", s.message());
    on_ready(s);
    return 1;
  }
  DaemonInfo info{options.head_address, node.node_id().Hex(), node.address(), options.token,
                  session_dir, log_file, config.total};
  auto metrics =
      head::ServeNodeMetrics(loop, node, options.node_ip, options.metrics_port, options.token);
  if (!metrics.ok()) {
    spdlog::error("node failed to start: {}", metrics.status().message());
    on_ready(metrics.status());
    return 1;
  }
  if (*metrics) info.metrics_address = options.node_ip + ":" + std::to_string((*metrics)->port());
  on_ready(info);
  // A drained node leaves as a stopped one does, and its process ends.
  node.SetOnDrained(
      [&](const std::string& reason) { node.Shutdown(reason, [&loop] { loop.Stop(); }); });
  ServeUntilSignal(loop, node);
  spdlog::info("node stopped");
  return 0;
}

}  // namespace rayd
