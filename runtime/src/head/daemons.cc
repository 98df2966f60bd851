// RunHeadDaemon and RunNodeDaemon: wire the components of a daemon together, run the loop,
// shut down cleanly on SIGTERM / SIGINT.

#include <spdlog/spdlog.h>
#include <csignal>
#include <unistd.h>

#include <memory>

#include "common/prometheus.h"
#include "gcs/gcs_server.h"
#include "gcs/store_client.h"
#include "node/node_daemon.h"
#include "head/dashboard.h"
#include "node/resource_detection.h"
#include "rayd/base/auth.h"
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

// Connects the store the head was asked for, running the loop until it answers.
Result<std::unique_ptr<gcs::StoreClient>> OpenStore(EventLoop& loop, const HeadOptions& options) {
  if (options.redis_address.empty()) return gcs::MakeInMemoryStoreClient();
  RAYD_ASSIGN_OR_RETURN(auto redis,
                        gcs::ParseRedisAddress(options.redis_address, options.redis_password));
  std::optional<Result<std::unique_ptr<gcs::StoreClient>>> result;
  const auto timeout = redis.connect_timeout;
  gcs::ConnectRedisStoreClient(loop, redis, [&](auto r) { result.emplace(std::move(r)); });
  loop.RunUntil([&] { return result.has_value(); }, timeout + Millis(1000));
  if (!result) return Status::Unavailable("no answer from Redis at " + options.redis_address);
  return std::move(*result);
}

// Runs `step` (which calls back with a Status) on the loop and waits for it.
Status Await(EventLoop& loop, const std::function<void(std::function<void(Status)>)>& step,
             Millis timeout, const std::string& what) {
  std::optional<Status> result;
  step([&](Status s) { result = std::move(s); });
  loop.RunUntil([&] { return result.has_value(); }, timeout);
  return result.value_or(Status::DeadlineExceeded(what + " took longer than " +
                                                  std::to_string(timeout.count()) + " ms"));
}

// The cluster token: given, else the one a Redis-backed cluster already uses, else new.
Result<std::string> ResolveToken(EventLoop& loop, gcs::StoreClient& store,
                                 const std::string& given) {
  std::optional<Result<std::optional<std::string>>> stored;
  store.Get("cluster", "token", [&](auto r) { stored.emplace(std::move(r)); });
  loop.RunUntil([&] { return stored.has_value(); }, Millis(10000));
  if (!stored) return Status::DeadlineExceeded("reading the cluster token from the store");
  if (!stored->ok()) return stored->status();
  std::string token = given;
  if (token.empty()) token = (*stored)->value_or(GenerateToken());
  if ((*stored)->value_or("") != token) {
    Status put = Await(
        loop,
        [&](auto done) {
          store.Put("cluster", "token", token, true, [done](Result<bool> r) { done(r.status()); });
        },
        Millis(10000), "storing the cluster token");
    RAYD_RETURN_IF_ERROR(put);
  }
  return token;
}

// Serves the node's /metrics on host:port (token-gated like the dashboard: a Bearer token, as
// Prometheus' `authorization` setting sends it). Null when port < 0.
Result<std::unique_ptr<http::HttpServer>> ServeNodeMetrics(EventLoop& loop,
                                                           const node::NodeDaemon& node,
                                                           const std::string& host, int port,
                                                           const std::string& token) {
  if (port < 0) return std::unique_ptr<http::HttpServer>();
  auto server = std::make_unique<http::HttpServer>(
      loop, [&node, token](const http::Request& request, http::Respond respond) {
        if (!http::CarriesToken(request, "rayd_token", token)) {
          return respond(http::Response::Text(401, "send the cluster token: Authorization: Bearer TOKEN\n"));
        }
        if (request.path != "/metrics") return respond(http::Response::Text(404, "only /metrics here\n"));
        http::Response r;
        r.content_type = prometheus::kContentType;
        r.body = node.MetricsText();
        respond(std::move(r));
      });
  RAYD_RETURN_IF_ERROR(server->Listen(host, port).WithContext("serving /metrics"));
  return server;
}

// Runs the loop until a signal, then shuts the node down (unregistering) and returns.
void ServeUntilSignal(EventLoop& loop, node::NodeDaemon& node) {
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
  auto store = OpenStore(loop, options);
  if (!store.ok()) return fail(store.status());
  auto token = ResolveToken(loop, **store, options.token);
  if (!token.ok()) return fail(token.status());
  Status s = session::WriteFileWithMode(session_dir + "/token", *token + "\n", 0600);
  if (!s.ok()) return fail(s);

  const std::string gcs_address = options.node_ip + ":" + std::to_string(options.port);
  gcs::GcsConfig gcs_config;
  gcs_config.failure.heartbeat_period = options.heartbeat_period;
  gcs_config.failure.missed_heartbeats = options.missed_heartbeats;
  gcs_config.gcs_address = gcs_address;
  gcs_config.token = *token;
  gcs_config.infeasible_timeout = options.infeasible_timeout;
  gcs::GcsServer gcs(loop, **store, gcs_config);
  s = Await(loop, [&](auto done) { gcs.Start(done); }, Millis(30000), "recovering the GCS");
  if (!s.ok()) return fail(s);

  rpc::Dispatcher dispatcher;
  gcs.RegisterMethods(dispatcher);
  rpc::RpcServer server(loop, rpc::Options{*token, "gcs"}, dispatcher);
  // A driver's connection closing ends its job (its actors and workers are cleaned up).
  server.SetOnConnectionClosed(
      [&gcs](rpc::Connection& connection, const Status&) { gcs.OnConnectionClosed(connection); });
  s = server.Listen(gcs_address);
  if (s.ok()) s = server.Listen("unix:" + session_dir + "/gcs.sock");
  if (!s.ok()) return fail(s);
  // --port 0 asks for any free port: from here on the address is the one bound.
  const std::string gcs_address_bound = server.bound_addresses().front();
  gcs.set_gcs_address(gcs_address_bound);
  s = session::WriteFileWithMode(session_dir + "/gcs_address", gcs_address_bound + "\n", 0600);
  if (!s.ok()) return fail(s);

  node::NodeDaemonConfig node_config;
  node_config.gcs_address = "unix:" + session_dir + "/gcs.sock";
  node_config.token = *token;
  node_config.node_ip = options.node_ip;
  node_config.is_head = true;
  node_config.total = node::ResolveNodeResources(options.resources);
  node_config.prestart_workers = node::DefaultPrestartWorkers(node_config.total);
  node_config.labels = options.resources.labels;
  node_config.session_dir = session_dir;
  node_config.infeasible_timeout = options.infeasible_timeout;
  node::NodeDaemon node(loop, node_config);
  s = Await(loop, [&](auto done) { node.Start(done); }, Millis(30000), "registering the head node");
  if (!s.ok()) return fail(s);

  DaemonInfo info{gcs_address_bound, node.node_id().Hex(), node.address(), *token, session_dir,
                  log_file, node_config.total};
  auto metrics = ServeNodeMetrics(loop, node, options.node_ip, options.metrics_port, *token);
  if (!metrics.ok()) return fail(metrics.status());
  if (*metrics) info.metrics_address = options.node_ip + ":" + std::to_string((*metrics)->port());

  // The dashboard reads the GCS like any client; it must not stop the head from serving.
  std::unique_ptr<head::Dashboard> dashboard;
  if (options.dashboard_port >= 0) {
    auto started = head::Dashboard::Start({options.dashboard_host, options.dashboard_port,
                                           "unix:" + session_dir + "/gcs.sock", *token,
                                           session_dir});
    if (started.ok()) {
      dashboard = std::move(*started);
      info.dashboard_url = dashboard->url();
      spdlog::info("dashboard at http://{}:{}/", options.dashboard_host, dashboard->port());
    } else if (options.dashboard_required) {
      return fail(started.status());
    } else {
      spdlog::warn("no dashboard: {}", started.status().message());
    }
  }

  spdlog::info("head serving at {} (cluster {}, storage {})", gcs_address_bound, gcs.cluster_id(),
               (*store)->Describe());
  on_ready(info);
  ServeUntilSignal(loop, node);
  // Connections closing because the head stops are no driver's exit: jobs stay as they are
  // (a head restarted on Redis picks them up again).
  server.SetOnConnectionClosed(nullptr);
  server.Close();
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
  Status s = Await(loop, [&](auto done) { node.Start(done); },
                   options.join_timeout + Millis(1000), "joining the cluster");
  if (!s.ok()) {
    spdlog::error("node failed to start: {}", s.message());
    on_ready(s);
    return 1;
  }
  DaemonInfo info{options.head_address, node.node_id().Hex(), node.address(), options.token,
                  session_dir, log_file, config.total};
  auto metrics = ServeNodeMetrics(loop, node, options.node_ip, options.metrics_port, options.token);
  if (!metrics.ok()) {
    spdlog::error("node failed to start: {}", metrics.status().message());
    on_ready(metrics.status());
    return 1;
  }
  if (*metrics) info.metrics_address = options.node_ip + ":" + std::to_string((*metrics)->port());
  on_ready(info);
  ServeUntilSignal(loop, node);
  spdlog::info("node stopped");
  return 0;
}

}  // namespace rayd
