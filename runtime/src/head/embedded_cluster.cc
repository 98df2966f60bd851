#include "head/embedded_cluster.h"

#include <spdlog/spdlog.h>

#include <future>

#include "head/head.h"
#include "rayd/runtime/session.h"

namespace rayd::head {

Result<std::unique_ptr<EmbeddedCluster>> EmbeddedCluster::Start(
    const EmbeddedClusterOptions& options, const std::string& temp_root) {
  std::unique_ptr<EmbeddedCluster> cluster(new EmbeddedCluster());
  RAYD_ASSIGN_OR_RETURN(cluster->session_dir_, session::CreateSessionDir(temp_root, "embedded"));
  HeadSetup setup;
  setup.options.resources = options.resources;
  setup.options.infeasible_timeout = options.infeasible_timeout;
  setup.options.dashboard_port = -1;  // StartDashboard, when the program asks for one
  setup.session_dir = cluster->session_dir_;
  setup.listen_tcp = false;
  std::promise<Status> ready;
  auto* self = cluster.get();
  cluster->thread_ = std::thread([self, &setup, &ready] {
    EventLoop loop;
    auto head = Head::Start(loop, setup);
    if (!head.ok()) return ready.set_value(head.status());
    self->gcs_address_ = (*head)->info().gcs_address;
    self->token_ = (*head)->info().token;
    self->node_address_ = "unix:" + self->session_dir_ + "/node.sock";
    self->head_ = head->get();
    self->loop_ = &loop;
    ready.set_value(Status::Ok());
    loop.Run();
  });
  Status s = ready.get_future().get();
  if (!s.ok()) {
    cluster->thread_.join();
    return s.WithContext("starting the embedded cluster");
  }
  return cluster;
}

Result<std::string> EmbeddedCluster::StartDashboard(int port) {
  std::promise<Result<std::string>> url;
  loop_->Post([&] { url.set_value(head_->StartDashboard("127.0.0.1", port)); });
  return url.get_future().get();
}

EmbeddedCluster::~EmbeddedCluster() {
  if (!thread_.joinable()) return;
  if (loop_) {
    loop_->Post([this] {
      if (stopping_) return;
      stopping_ = true;
      head_->Shutdown("the driver shut down", [this] { loop_->Stop(); });
    });
  }
  thread_.join();
}

}  // namespace rayd::head
