#include "head/head.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>

#include "autoscaler/autoscaler.h"
#include "common/prometheus.h"
#include "gcs/gcs_server.h"
#include "gcs/table_store.h"
#include "head/autoscaler_host.h"
#include "node/node_daemon.h"
#include "node/resource_detection.h"
#include "rayd/base/auth.h"
#include "rayd/runtime/session.h"

namespace rayd::head {
namespace {

// Connects the store the head was asked for, running the loop until it answers.
Result<std::unique_ptr<gcs::TableStore>> OpenStore(EventLoop& loop, const HeadOptions& options) {
  if (options.redis_address.empty()) return gcs::MakeInMemoryTableStore();
  RAYD_ASSIGN_OR_RETURN(auto redis,
                        gcs::ParseRedisAddress(options.redis_address, options.redis_password));
  std::optional<Result<std::unique_ptr<gcs::TableStore>>> result;
  const auto timeout = redis.connect_timeout;
  gcs::ConnectRedisTableStore(loop, redis, [&](auto r) { result.emplace(std::move(r)); });
  loop.RunUntil([&] { return result.has_value(); }, timeout + Millis(1000));
  if (!result) return Status::Unavailable("no answer from Redis at " + options.redis_address);
  return std::move(*result);
}

// The cluster token: given, else the one a Redis-backed cluster already uses, else new.
Result<std::string> ResolveToken(EventLoop& loop, gcs::TableStore& store,
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

}  // namespace

Status Await(EventLoop& loop, const std::function<void(std::function<void(Status)>)>& step,
             Millis timeout, const std::string& what) {
  std::optional<Status> result;
  step([&](Status s) { result = std::move(s); });
  loop.RunUntil([&] { return result.has_value(); }, timeout);
  return result.value_or(Status::DeadlineExceeded(what + " took longer than " +
                                                  std::to_string(timeout.count()) + " ms"));
}

Result<std::unique_ptr<http::HttpServer>> ServeNodeMetrics(EventLoop& loop,
                                                           const node::NodeDaemon& node,
                                                           const std::string& host, int port,
                                                           const std::string& token) {
  if (port < 0) return std::unique_ptr<http::HttpServer>();
  auto server = std::make_unique<http::HttpServer>(
      loop, [&node, token](const http::Request& request, http::Respond respond) {
        if (!http::CarriesToken(request, "rayd_token", token)) {
          return respond(
              http::Response::Text(401, "send the cluster token: Authorization: Bearer TOKEN\n"));
        }
        if (request.path != "/metrics") {
          return respond(http::Response::Text(404, "only /metrics here\n"));
        }
        http::Response r;
        r.content_type = prometheus::kContentType;
        r.body = node.MetricsText();
        respond(std::move(r));
      });
  RAYD_RETURN_IF_ERROR(server->Listen(host, port).WithContext("serving /metrics"));
  return server;
}

Head::Head(EventLoop& loop) : loop_(loop) {}

Result<std::unique_ptr<Head>> Head::Start(EventLoop& loop, const HeadSetup& setup) {
  std::unique_ptr<Head> head(new Head(loop));
  RAYD_RETURN_IF_ERROR(head->Compose(setup));
  return head;
}

Status Head::Compose(const HeadSetup& setup) {
  const HeadOptions& options = setup.options;
  const std::string& session_dir = setup.session_dir;
  RAYD_ASSIGN_OR_RETURN(store_, OpenStore(loop_, options));
  RAYD_ASSIGN_OR_RETURN(const std::string token, ResolveToken(loop_, *store_, options.token));
  RAYD_RETURN_IF_ERROR(session::WriteFileWithMode(session_dir + "/token", token + "\n", 0600));

  const std::string gcs_socket = "unix:" + session_dir + "/gcs.sock";
  const std::string tcp_address = options.node_ip + ":" + std::to_string(options.port);
  gcs::GcsConfig gcs_config;
  gcs_config.failure.heartbeat_period = options.heartbeat_period;
  gcs_config.failure.missed_heartbeats = options.missed_heartbeats;
  gcs_config.gcs_address = setup.listen_tcp ? tcp_address : gcs_socket;
  gcs_config.token = token;
  gcs_config.infeasible_timeout = options.infeasible_timeout;
  gcs_ = std::make_unique<gcs::GcsServer>(loop_, *store_, gcs_config);
  RAYD_RETURN_IF_ERROR(
      Await(loop_, [&](auto done) { gcs_->Start(done); }, Millis(30000), "recovering the GCS"));

  gcs_->RegisterMethods(dispatcher_);
  jobs_ = std::make_unique<JobManager>(
      loop_, *store_, JobManagerConfig{session_dir, setup.listen_tcp ? tcp_address : gcs_socket, token});
  RAYD_RETURN_IF_ERROR(Await(loop_, [&](auto done) { jobs_->Recover(done); }, Millis(30000),
                             "recovering submitted jobs"));
  jobs_->RegisterMethods(dispatcher_);
  server_ = std::make_unique<rpc::RpcServer>(loop_, rpc::Options{token, "gcs"}, dispatcher_);
  // A driver's connection closing ends its job (its actors and workers are cleaned up).
  server_->SetOnConnectionClosed(
      [gcs = gcs_.get()](rpc::Connection& connection, const Status&) {
        gcs->OnConnectionClosed(connection);
      });
  if (setup.listen_tcp) RAYD_RETURN_IF_ERROR(server_->Listen(tcp_address));
  RAYD_RETURN_IF_ERROR(server_->Listen(gcs_socket));
  // --port 0 asks for any free port: from here on the address is the one bound.
  const std::string gcs_address = server_->bound_addresses().front();
  gcs_->set_gcs_address(gcs_address);
  jobs_->set_gcs_address(gcs_address);
  RAYD_RETURN_IF_ERROR(
      session::WriteFileWithMode(session_dir + "/gcs_address", gcs_address + "\n", 0600));

  node::NodeDaemonConfig node_config;
  node_config.gcs_address = gcs_socket;
  node_config.token = token;
  node_config.node_ip = options.node_ip;
  node_config.is_head = true;
  node_config.total = node::ResolveNodeResources(options.resources);
  node_config.prestart_workers = node::DefaultPrestartWorkers(node_config.total);
  node_config.labels = options.resources.labels;
  node_config.session_dir = session_dir;
  node_config.infeasible_timeout = options.infeasible_timeout;
  node_ = std::make_unique<node::NodeDaemon>(loop_, node_config);
  RAYD_RETURN_IF_ERROR(Await(loop_, [&](auto done) { node_->Start(done); }, Millis(30000),
                             "registering the head node"));

  info_ = DaemonInfo{gcs_address, node_->node_id().Hex(), node_->address(), token, session_dir,
                     setup.log_file, node_config.total};
  RAYD_ASSIGN_OR_RETURN(metrics_, ServeNodeMetrics(loop_, *node_, options.node_ip,
                                                   options.metrics_port, token));
  if (metrics_) info_.metrics_address = options.node_ip + ":" + std::to_string(metrics_->port());

  // The dashboard reads the GCS like any client; it must not stop the head from serving.
  if (options.dashboard_port >= 0) {
    auto url = StartDashboard(options.dashboard_host, options.dashboard_port);
    if (url.ok()) {
      info_.dashboard_url = *url;
      spdlog::info("dashboard at http://{}:{}/", options.dashboard_host, dashboard_->port());
    } else if (options.dashboard_required) {
      return url.status();
    } else {
      spdlog::warn("no dashboard: {}", url.status().message());
    }
  }
  if (!options.autoscaler_config.empty()) {
    RAYD_RETURN_IF_ERROR(StartAutoscaler(options.autoscaler_config, setup));
  }
  spdlog::info("head serving at {} (cluster {}, storage {})", gcs_address, gcs_->cluster_id(),
               store_->Describe());
  return Status::Ok();
}

Status Head::StartAutoscaler(const std::string& path, const HeadSetup& setup) {
  if (!setup.listen_tcp) {
    return Status::InvalidArgument("--autoscaler needs a head other nodes can join (rayd start "
                                   "--head), not an embedded cluster");
  }
  RAYD_ASSIGN_OR_RETURN(auto config, autoscaler::LoadAutoscalerConfig(path));
  autoscaler::ProviderContext context;
  context.loop = &loop_;
  context.gcs_address = info_.gcs_address;
  context.token = info_.token;
  std::error_code ec;
  context.rayd_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  context.log_dir = info_.session_dir + "/logs";
  // Local nodes keep their sessions beside the head's, so that `rayd stop` there stops them too.
  context.temp_root = std::filesystem::path(info_.session_dir).parent_path().string();
  RAYD_ASSIGN_OR_RETURN(auto provider, autoscaler::MakeNodeProvider(config, context));
  autoscaler_host_ = std::make_unique<GcsAutoscalerHost>(*gcs_, *store_);
  autoscaler_ = std::make_unique<autoscaler::Autoscaler>(loop_, std::move(config),
                                                         std::move(provider), *autoscaler_host_);
  return Await(loop_, [&](auto done) { autoscaler_->Start(done); }, Millis(30000),
               "starting the autoscaler").WithContext(path);
}

Result<std::string> Head::StartDashboard(const std::string& host, int port) {
  RAYD_ASSIGN_OR_RETURN(dashboard_,
                        Dashboard::Start({host, port, "unix:" + info_.session_dir + "/gcs.sock",
                                          info_.token, info_.session_dir}));
  gcs_->set_dashboard_url(dashboard_->url());
  return dashboard_->url();
}

void Head::Shutdown(const std::string& reason, std::function<void()> done) {
  jobs_->StopAll("the cluster was stopped (" + reason + ")",
                 [this, reason, done = std::move(done)]() mutable {
                   auto stop_node = [this, reason, done = std::move(done)]() mutable {
                     node_->Shutdown(reason, std::move(done));
                   };
                   // The nodes the autoscaler launched go with the cluster.
                   if (autoscaler_) return autoscaler_->Shutdown(std::move(stop_node));
                   stop_node();
                 });
}

Head::~Head() {
  dashboard_.reset();
  if (server_) {
    // Connections closing because the head stops are no driver's exit: jobs stay as they are
    // (a head restarted on Redis picks them up again).
    server_->SetOnConnectionClosed(nullptr);
    server_->Close();
  }
}

}  // namespace rayd::head
