#include "core/embedded_cluster.h"

#include <spdlog/spdlog.h>

#include <future>

#include "gcs/gcs_server.h"
#include "node/node_daemon.h"
#include "node/resource_detection.h"
#include "rayd/base/auth.h"
#include "rayd/runtime/session.h"

namespace rayd::core {

Result<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(
    const EmbeddedClusterOptions& options, const std::string& temp_root) {
  const NodeResourceOptions& resources = options.resources;
  std::unique_ptr<EmbeddedCluster> cluster(new EmbeddedCluster());
  RAYD_ASSIGN_OR_RETURN(cluster->session_dir_, session::CreateSessionDir(temp_root, "embedded"));
  cluster->token_ = GenerateToken();
  RAYD_RETURN_IF_ERROR(session::WriteFileWithMode(cluster->session_dir_ + "/token",
                                                  cluster->token_ + "\n", 0600));
  std::promise<Status> ready;
  auto* self = cluster.get();
  cluster->thread_ = std::thread([self, resources, &options, &ready] {
    EventLoop loop;
    auto store = gcs::MakeInMemoryStoreClient();
    gcs::GcsConfig config;
    config.token = self->token_;
    config.infeasible_timeout = options.infeasible_timeout;
    gcs::GcsServer gcs(loop, *store, config);
    rpc::Dispatcher dispatcher;
    rpc::RpcServer server(loop, rpc::Options{self->token_, "gcs"}, dispatcher);
    std::optional<Status> started;
    gcs.Start([&](Status s) { started = s; });
    loop.RunUntil([&] { return started.has_value(); }, Millis(10000));
    Status s = started.value_or(Status::DeadlineExceeded("starting the GCS"));
    if (s.ok()) {
      gcs.RegisterMethods(dispatcher);
      server.SetOnConnectionClosed(
          [&gcs](rpc::Connection& c, const Status&) { gcs.OnConnectionClosed(c); });
      s = server.Listen("unix:" + self->session_dir_ + "/gcs.sock");
    }
    if (!s.ok()) return ready.set_value(s);
    self->gcs_address_ = server.bound_addresses().front();

    node::NodeDaemonConfig node_config;
    node_config.gcs_address = self->gcs_address_;
    node_config.token = self->token_;
    node_config.is_head = true;
    node_config.total = node::ResolveNodeResources(resources);
    node_config.prestart_workers = node::DefaultPrestartWorkers(node_config.total);
    node_config.labels = resources.labels;
    node_config.session_dir = self->session_dir_;
    node_config.infeasible_timeout = options.infeasible_timeout;
    node::NodeDaemon node(loop, node_config);
    std::optional<Status> joined;
    node.Start([&](Status st) { joined = st; });
    loop.RunUntil([&] { return joined.has_value(); }, Millis(15000));
    s = joined.value_or(Status::DeadlineExceeded("starting the node daemon"));
    if (!s.ok()) return ready.set_value(s);
    self->node_address_ = "unix:" + self->session_dir_ + "/node.sock";
    self->loop_ = &loop;
    bool stopping = false;
    self->stop_ = [&] {
      if (stopping) return;
      stopping = true;
      node.Shutdown("the driver shut down", [&] { loop.Stop(); });
    };
    ready.set_value(Status::Ok());
    loop.Run();
    server.SetOnConnectionClosed(nullptr);  // stopping is no driver's exit
    server.Close();
  });
  Status s = ready.get_future().get();
  if (!s.ok()) {
    cluster->thread_.join();
    return s.WithContext("starting the embedded cluster");
  }
  return cluster;
}

Result<std::string> EmbeddedCluster::StartDashboard(int port) {
  RAYD_ASSIGN_OR_RETURN(dashboard_, head::Dashboard::Start({"127.0.0.1", port, gcs_address_,
                                                           token_, session_dir_}));
  return dashboard_->url();
}

EmbeddedCluster::~EmbeddedCluster() {
  dashboard_.reset();
  if (!thread_.joinable()) return;
  if (loop_) loop_->Post([this] { stop_(); });
  thread_.join();
}

}  // namespace rayd::core
