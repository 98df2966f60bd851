#pragma once
// EmbeddedCluster: a whole single-node cluster (GCS with in-memory tables + a node daemon)
// inside the driver's process, on its own thread, for `rayd::Init()` with no address. Workers
// are separate processes as usual. It installs no signal handlers: the program owns those.

#include <memory>
#include <string>
#include <thread>

#include "core/head_args.h"
#include "head/dashboard.h"
#include "rayd/base/event_loop.h"
#include "rayd/runtime/cluster.h"

namespace rayd::core {

class EmbeddedCluster {
 public:
  static Result<std::unique_ptr<EmbeddedCluster>> Start(const EmbeddedClusterOptions& options,
                                                        const std::string& temp_root);
  ~EmbeddedCluster();  // stops the node (killing its workers) and the GCS

  // Serves the head's dashboard for this cluster on 127.0.0.1:`port` (0: any free port).
  // Returns its URL (with the token).
  Result<std::string> StartDashboard(int port);

  const std::string& gcs_address() const { return gcs_address_; }
  const std::string& node_address() const { return node_address_; }
  const std::string& token() const { return token_; }
  const std::string& session_dir() const { return session_dir_; }

 private:
  EmbeddedCluster() = default;

  std::string gcs_address_;
  std::string node_address_;
  std::string token_;
  std::string session_dir_;
  EventLoop* loop_ = nullptr;  // owned by the thread
  std::function<void()> stop_;  // posted to the loop by the destructor
  std::thread thread_;
  std::unique_ptr<head::Dashboard> dashboard_;  // stopped first
};

}  // namespace rayd::core
