#include "gcs/gcs_server.h"

#include <spdlog/spdlog.h>

#include "rayd/base/ids.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {

GcsServer::GcsServer(EventLoop& loop, StoreClient& store, GcsConfig config)
    : loop_(loop),
      store_(store),
      config_(std::move(config)),
      start_time_ms_(NowUnixMs()),
      node_manager_(loop, store, config_.failure),
      job_manager_(store),
      kv_manager_(store) {}

void GcsServer::Start(std::function<void(Status)> done) {
  // The first head to use a store names the cluster; a restarted head keeps the name.
  store_.Put("cluster", "id", JobId::FromRandom().Hex(), /*overwrite=*/false,
             [this, done](Result<bool> put) {
               if (!put.ok()) return done(put.status().WithContext("initialising the cluster"));
               store_.Get("cluster", "id", [this, done](Result<std::optional<std::string>> id) {
                 if (!id.ok()) return done(id.status());
                 cluster_id_ = id->value_or("");
                 node_manager_.Start(done);
               });
             });
}

void GcsServer::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Register(proto::Method::PING, [](const rpc::CallPtr& c) { c->Reply(); });
  dispatcher.Register(proto::Method::GET_CLUSTER_INFO,
                      [this](const rpc::CallPtr& c) { HandleClusterInfo(c); });
  node_manager_.RegisterMethods(dispatcher);
  job_manager_.RegisterMethods(dispatcher);
  kv_manager_.RegisterMethods(dispatcher);
}

void GcsServer::HandleClusterInfo(const rpc::CallPtr& call) {
  call->Reply([this](capnp::AnyPointer::Builder b) {
    auto info = b.initAs<proto::ClusterInfo>();
    info.setClusterId(cluster_id_);
    info.setGcsAddress(config_.gcs_address);
    info.setStorage(store_.Describe());
    info.setStartTimeMs(start_time_ms_);
    info.setHeartbeatPeriodMs(static_cast<uint32_t>(config_.failure.heartbeat_period.count()));
    info.setHeartbeatMissedLimit(static_cast<uint32_t>(config_.failure.missed_heartbeats));
  });
}

}  // namespace rayd::gcs
