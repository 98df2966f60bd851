#pragma once
// Head: the one composition root of a cluster's head. It wires the GCS (its table store, the
// cluster token, its RPC server), the head's node daemon, the node's /metrics and the web
// dashboard together on one event loop. `rayd start --head` (RunHeadDaemon) and the embedded
// cluster of `rayd::Init()` both build their head here, so they differ only in what they
// are told (HeadSetup), never in how the parts are joined.
//
// Threading: the loop's thread only (the dashboard runs on a thread of its own).

#include <functional>
#include <memory>
#include <string>

#include "head/dashboard.h"
#include "head/job_manager.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/http.h"
#include "rayd/base/rpc.h"
#include "rayd/runtime/cluster.h"

namespace rayd::gcs {
class GcsServer;
class TableStore;
}  // namespace rayd::gcs
namespace rayd::node {
class NodeDaemon;
}  // namespace rayd::node
namespace rayd::autoscaler {
class Autoscaler;
class AutoscalerHost;
}  // namespace rayd::autoscaler

namespace rayd::head {

struct HeadSetup {
  HeadOptions options;
  std::string session_dir;  // exists, 0700; the token and sockets go here
  std::string log_file;     // shown in DaemonInfo
  // False: the GCS listens on the session's Unix socket only (an embedded cluster, which no
  // other machine joins), and options.node_ip/port are not used for it.
  bool listen_tcp = true;
};

class Head {
 public:
  // Builds the head on `loop`, running the loop until it serves (the store connected, the
  // tables recovered, the head node registered), or returns the reason it could not.
  static Result<std::unique_ptr<Head>> Start(EventLoop& loop, const HeadSetup& setup);
  ~Head();  // stops serving; connections closing now end no driver's job

  // Stops the submitted jobs still running, shuts the head node down (unregistering it,
  // killing its workers), then `done`.
  void Shutdown(const std::string& reason, std::function<void()> done);
  // Serves the dashboard on host:port (0: any free port); returns its URL with the token.
  Result<std::string> StartDashboard(const std::string& host, int port);

  const DaemonInfo& info() const { return info_; }
  const node::NodeDaemon& node() const { return *node_; }

 private:
  explicit Head(EventLoop& loop);
  Status Compose(const HeadSetup& setup);

  // Starts the autoscaler `path` configures (a head that listens on TCP only).
  Status StartAutoscaler(const std::string& path, const HeadSetup& setup);

  EventLoop& loop_;
  DaemonInfo info_;
  // Destroyed in reverse: the dashboard and /metrics first, the store last.
  std::unique_ptr<gcs::TableStore> store_;
  std::unique_ptr<gcs::GcsServer> gcs_;
  std::unique_ptr<JobManager> jobs_;
  rpc::Dispatcher dispatcher_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::unique_ptr<node::NodeDaemon> node_;
  std::unique_ptr<http::HttpServer> metrics_;
  std::unique_ptr<Dashboard> dashboard_;
  std::unique_ptr<autoscaler::AutoscalerHost> autoscaler_host_;
  std::unique_ptr<autoscaler::Autoscaler> autoscaler_;
};

// Runs `step` (which calls back with a Status) and the loop until it does; DeadlineExceeded
// naming `what` after `timeout`.
Status Await(EventLoop& loop, const std::function<void(std::function<void(Status)>)>& step,
             Millis timeout, const std::string& what);

// Serves a node's /metrics on host:port (token-gated like the dashboard: a Bearer token, as
// Prometheus' `authorization` setting sends it). Null when port < 0.
Result<std::unique_ptr<http::HttpServer>> ServeNodeMetrics(EventLoop& loop,
                                                           const node::NodeDaemon& node,
                                                           const std::string& host, int port,
                                                           const std::string& token);

}  // namespace rayd::head
