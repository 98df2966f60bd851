#pragma once
// The GCS: the head's cluster tables (nodes, jobs, placement groups, actors, KV) behind one
// dispatcher.
// Member declaration order follows the dependency order.
//
// Threading: everything runs on `loop`'s thread.

#include <memory>

#include "gcs/gcs_actor_manager.h"
#include "gcs/gcs_job_manager.h"
#include "gcs/gcs_kv_manager.h"
#include "gcs/gcs_node_manager.h"
#include "gcs/gcs_placement_group_manager.h"
#include "gcs/node_client_pool.h"
#include "gcs/pending_placements.h"
#include "gcs/table_store.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

struct GcsConfig {
  FailureDetectorConfig failure;
  std::string gcs_address;  // as shown to clients, host:port
  std::string token;        // the cluster token, for the GCS's own calls to nodes and workers
  // How long an actor or placement group no node can ever hold waits for one to join (0: it
  // is DEAD or FAILED at once).
  Millis infeasible_timeout{0};
  // A restarted head ends the jobs alive in its store whose drivers have not reconnected
  // (added them again) within this long: they died while it was away. Drivers retry every
  // second at most, so this is many of their attempts.
  Millis driver_rebind_grace{30000};
};

class GcsServer {
 public:
  // `loop` and `store` must outlive the server.
  GcsServer(EventLoop& loop, TableStore& store, GcsConfig config);

  // Loads (or creates) the cluster id and recovers the tables; then `done`.
  void Start(std::function<void(Status)> done);
  // Serves the GCS methods on `dispatcher`, which must outlive this server's use of it.
  void RegisterMethods(rpc::Dispatcher& dispatcher);
  // Tells the GCS that a client connection closed (wire RpcServer::SetOnConnectionClosed to
  // it): the jobs whose driver it was end.
  void OnConnectionClosed(const rpc::Connection& connection);

  const std::string& cluster_id() const { return cluster_id_; }
  // The address shown to clients, once the server knows it (a head started on port 0 learns
  // its port when it listens).
  void set_gcs_address(std::string address) { config_.gcs_address = std::move(address); }
  // The head's dashboard, for clients that connect by address (rayd status, rayd tune).
  void set_dashboard_url(std::string url) { dashboard_url_ = std::move(url); }
  const GcsNodeManager& node_manager() const { return node_manager_; }
  const GcsActorManager& actor_manager() const { return actor_manager_; }
  const GcsPlacementGroupManager& placement_group_manager() const {
    return placement_group_manager_;
  }
  GcsNodeManager& mutable_node_manager() { return node_manager_; }

 private:
  void HandleClusterInfo(const rpc::Incoming<proto::Method::GET_CLUSTER_INFO>& call);
  // A job ended: its placement groups are removed, its actors die and every alive node ends the
  // job's workers.
  void OnJobFinished(const std::string& job_id);

  EventLoop& loop_;
  TableStore& store_;
  GcsConfig config_;
  int64_t start_time_ms_;
  std::string cluster_id_;
  std::string dashboard_url_;
  GcsNodeManager node_manager_;
  NodeClientPool node_clients_;
  GcsJobManager job_manager_;
  GcsKvManager kv_manager_;
  PendingPlacements ledger_;  // shared by the placement-group and actor managers
  GcsPlacementGroupManager placement_group_manager_;
  GcsActorManager actor_manager_;
};

}  // namespace rayd::gcs
