#include "gcs/gcs_server.h"

#include <spdlog/spdlog.h>

#include "rayd/base/ids.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {

GcsServer::GcsServer(EventLoop& loop, TableStore& store, GcsConfig config)
    : loop_(loop),
      store_(store),
      config_(std::move(config)),
      start_time_ms_(NowUnixMs()),
      node_manager_(loop, store, config_.failure),
      node_clients_(loop, node_manager_, config_.token),
      job_manager_(loop, store),
      kv_manager_(store),
      ledger_(node_manager_),
      placement_group_manager_(loop, store, node_manager_, node_clients_, ledger_,
                               config_.infeasible_timeout),
      actor_manager_(loop, store, node_manager_, node_clients_, ledger_, placement_group_manager_,
                     config_.infeasible_timeout) {
  job_manager_.SetOnJobFinished([this](const std::string& job_id) { OnJobFinished(job_id); });
}

void GcsServer::Start(std::function<void(Status)> done) {
  // The first head to use a store names the cluster; a restarted head keeps the name.
  store_.Put("cluster", "id", JobId::FromRandom().Hex(), /*overwrite=*/false,
             [this, done](Result<bool> put) {
               if (!put.ok()) return done(put.status().WithContext("initialising the cluster"));
               store_.Get("cluster", "id", [this, done](Result<std::optional<std::string>> id) {
                 if (!id.ok()) return done(id.status());
                 cluster_id_ = id->value_or("");
                 node_manager_.Start([this, done](Status s) {
                   if (!s.ok()) return done(s);
                   placement_group_manager_.Start([this, done](Status groups) {
                     if (!groups.ok()) return done(groups);
                     actor_manager_.Start([this, done](Status actors) {
                       if (!actors.ok()) return done(actors);
                       job_manager_.Start(config_.driver_rebind_grace, done);
                     });
                   });
                 });
               });
             });
}

void GcsServer::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::PING>([](const auto& c) { c.Reply(); });
  dispatcher.Handle<proto::Method::GET_CLUSTER_INFO>(
      [this](const auto& c) { HandleClusterInfo(c); });
  node_manager_.RegisterMethods(dispatcher);
  job_manager_.RegisterMethods(dispatcher);
  kv_manager_.RegisterMethods(dispatcher);
  placement_group_manager_.RegisterMethods(dispatcher);
  actor_manager_.RegisterMethods(dispatcher);
}

void GcsServer::OnConnectionClosed(const rpc::Connection& connection) {
  job_manager_.OnConnectionClosed(connection.id());
}

void GcsServer::OnJobFinished(const std::string& job_id) {
  spdlog::info("job {} finished; cleaning up its placement groups, actors and workers", job_id);
  placement_group_manager_.OnJobFinished(job_id);
  actor_manager_.OnJobFinished(job_id);
  for (const runtime::NodeInfo* node : node_manager_.AliveNodes()) {
    node_clients_.Call<proto::Method::JOB_FINISHED>(
        node->node_id, [&job_id](proto::JobFinishedRequest::Builder b) { b.setJobId(job_id); },
        Millis(10000),
        [job_id, id = node->node_id](const Status& s) {
          if (!s.ok()) {
            spdlog::warn("could not tell node {} that job {} finished: {}", id.Hex(), job_id,
                         s.ToString());
          }
        });
  }
}

void GcsServer::HandleClusterInfo(const rpc::Incoming<proto::Method::GET_CLUSTER_INFO>& call) {
  call.Reply([this](proto::ClusterInfo::Builder info) {
    info.setClusterId(cluster_id_);
    info.setGcsAddress(config_.gcs_address);
    info.setStorage(store_.Describe());
    info.setStartTimeMs(start_time_ms_);
    info.setHeartbeatPeriodMs(static_cast<uint32_t>(config_.failure.heartbeat_period.count()));
    info.setHeartbeatMissedLimit(static_cast<uint32_t>(config_.failure.missed_heartbeats));
    info.setDashboardUrl(dashboard_url_);
  });
}

}  // namespace rayd::gcs
