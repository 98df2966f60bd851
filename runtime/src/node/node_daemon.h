#pragma once
// The node daemon: serves this node's RPC endpoint, joins the cluster through the GCS and
// heartbeats its available resources. It owns the worker pool and the lease manager (see
// worker_pool.h, lease_manager.h) and serves their methods; it reports workers that die to the
// GCS (WORKER_FAILED) and kills every worker on Shutdown and in its destructor. Its
// ObjectService holds the node's shared-memory object store (sized by the node's
// object_store_memory resource).
//
// Membership: on every (re)connection to the GCS it registers under its id (idempotent on the
// GCS side), so a restarted head learns it again. If the GCS answers that this id was declared
// dead, the node takes a new id and joins as a new node: work never runs twice under one id.

#include <functional>
#include <memory>
#include <string>

#include "node/app_metrics.h"
#include "node/lease_manager.h"
#include "node/object_service.h"
#include "node/worker_pool.h"
#include "rayd/base/rpc.h"
#include "rayd/runtime/cluster.h"

namespace rayd::node {

struct NodeDaemonConfig {
  std::string gcs_address;  // host:port or unix:path
  std::string token;
  std::string node_ip = "127.0.0.1";
  bool is_head = false;
  scheduler::ResourceSet total;
  scheduler::Labels labels;
  std::string session_dir;
  Millis join_timeout{15000};
  Millis heartbeat_period{1000};       // replaced by the head's period once connected
  Millis worker_start_timeout{30000};  // spawn to REGISTER_WORKER
  Millis worker_idle_timeout{60000};   // idle workers older than this are killed
  size_t worker_max_starting = 0;      // WorkerPoolConfig::max_starting; 0: 4 a core, >= 8
  int prestart_workers = 0;            // see LeaseManagerConfig::prestart_workers
  Millis infeasible_timeout{60000};    // see LeaseManagerConfig::infeasible_timeout
};

// Member declaration order follows the dependency order.
class NodeDaemon {
 public:
  // `loop` must outlive the daemon.
  NodeDaemon(EventLoop& loop, NodeDaemonConfig config);
  ~NodeDaemon();

  // Starts serving and joining. `on_joined` runs once: after the first registration, or with
  // the reason the node could not join within join_timeout (or was refused).
  void Start(std::function<void(Status)> on_joined);
  // Kills every worker, fails queued lease requests, tells the GCS this node is going away
  // (bounded wait), then runs `done`.
  void Shutdown(const std::string& reason, std::function<void()> done);

  // Runs once when a drain (`rayd drain`) is over: its deadline came, or nothing ran here any
  // more. The owner shuts the daemon down with `reason` ("drained (its reason)"), which ends
  // the workers left (a command rank's group gets SIGTERM, then SIGKILL after its grace).
  void SetOnDrained(std::function<void(const std::string& reason)> on_drained) {
    on_drained_ = std::move(on_drained);
  }

  const NodeId& node_id() const { return node_id_; }
  const std::string& address() const { return address_; }
  bool registered() const { return registered_; }
  const LeaseManager& lease_manager() const { return lease_manager_; }
  WorkerPool& worker_pool() { return pool_; }
  // This node's figures in Prometheus' text format (node_metrics.cc): resources, workers,
  // leases, its object store's use, spills and restores, and its processes' application
  // metrics.
  std::string MetricsText() const;

 private:
  void OnGcsStateChange(const Status& status);
  void Register();
  // Kills every worker, drops every lease, queued request and bundle, and registers under a
  // new id: what a node declared dead does when it can reach the GCS again.
  void RejoinAsNewNode(const std::string& why);
  void SendHeartbeat();
  // Sends a heartbeat (this node's free resources) soon: the lease manager freed some.
  void ReportSoon();
  static constexpr Millis kMinReportGap{20};
  // A heartbeat's reply said this node is draining (deadline 0: it is not): remember it, tell
  // the processes here through the notice file, and leave at the deadline or once idle.
  void NoteDrain(int64_t deadline_ms, const std::string& reason);
  void Drained(const std::string& why);
  void FinishJoin(const Status& status);
  NodeInfo SelfInfo() const;
  void OnWorkerExit(Worker& worker, WorkerState previous);
  static void ListAliveNodes(rpc::RpcClient& gcs,
                             std::function<void(Result<std::vector<NodeInfo>>)> done);

  EventLoop& loop_;
  NodeDaemonConfig config_;
  NodeId node_id_;
  std::string address_;
  int64_t start_time_ms_;
  rpc::Dispatcher dispatcher_;
  rpc::RpcServer server_;
  rpc::RpcClient gcs_;
  WorkerPool pool_;             // refers to node_id_
  LeaseManager lease_manager_;  // refers to pool_, node_id_ and gcs_
  std::unique_ptr<ObjectService> objects_;  // created by Start
  AppMetrics app_metrics_;
  Timer heartbeat_timer_;
  Timer join_timer_;
  Timer retry_timer_;
  Timer drain_timer_;
  Timer report_timer_;  // a report of resources freed, sent ahead of the next heartbeat
  Clock::time_point last_report_{};
  int64_t drain_deadline_ms_ = 0;  // from the GCS; 0: not draining
  std::string drain_reason_;
  std::function<void(const std::string&)> on_drained_;
  std::function<void(Status)> on_joined_;
  bool registered_ = false;
  bool shutting_down_ = false;
};

}  // namespace rayd::node
