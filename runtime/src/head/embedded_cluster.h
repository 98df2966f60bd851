#pragma once
// EmbeddedCluster: a whole single-node cluster (a Head: GCS with in-memory tables + the head
// node daemon) inside the driver's process, on its own thread, for `rayd::Init()` with no
// address. Workers are separate processes as usual. It installs no signal handlers: the program
// owns those.

#include <memory>
#include <string>
#include <thread>

#include "head/head.h"
#include "head/head_args.h"
#include "rayd/base/event_loop.h"
#include "rayd/runtime/cluster.h"

namespace rayd::head {

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
  Head* head_ = nullptr;       // owned by the thread; used on the loop only
  bool stopping_ = false;      // loop only
  std::thread thread_;
};

}  // namespace rayd::head
