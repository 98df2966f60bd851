#pragma once
// The GCS: the head's cluster tables (nodes, jobs, KV) behind one dispatcher.
// Member declaration order follows the dependency order.

#include <memory>

#include "gcs/gcs_job_manager.h"
#include "gcs/gcs_kv_manager.h"
#include "gcs/gcs_node_manager.h"
#include "gcs/store_client.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

struct GcsConfig {
  FailureDetectorConfig failure;
  std::string gcs_address;  // as shown to clients, host:port
};

class GcsServer {
 public:
  // `loop` and `store` must outlive the server.
  GcsServer(EventLoop& loop, StoreClient& store, GcsConfig config);

  // Loads (or creates) the cluster id and recovers the tables; then `done`.
  void Start(std::function<void(Status)> done);
  // Serves the GCS methods on `dispatcher`, which must outlive this server's use of it.
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  const std::string& cluster_id() const { return cluster_id_; }
  const GcsNodeManager& node_manager() const { return node_manager_; }

 private:
  void HandleClusterInfo(const rpc::CallPtr& call);

  EventLoop& loop_;
  StoreClient& store_;
  GcsConfig config_;
  int64_t start_time_ms_;
  std::string cluster_id_;
  GcsNodeManager node_manager_;
  GcsJobManager job_manager_;
  GcsKvManager kv_manager_;
};

}  // namespace rayd::gcs
