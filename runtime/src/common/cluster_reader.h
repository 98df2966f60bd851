#pragma once
// ClusterReader: reads of the whole cluster on an event loop, asynchronously: the GCS's tables
// through one persistent GcsClient, and what only the nodes know (their workers, the objects
// in their stores) from every alive node at once. The dashboard keeps one on its loop; the CLI
// uses one through rayd::ClusterClient (rayd/runtime/cluster.h).
//
// Threading: the loop's thread only.

#include <string>

#include "common/client_pool.h"
#include "common/gcs_client.h"
#include "rayd/runtime/cluster.h"

namespace rayd::runtime {

class ClusterReader {
 public:
  // `timeout` bounds every call. `loop` must outlive the reader.
  ClusterReader(EventLoop& loop, const std::string& gcs_address, const std::string& token,
                const std::string& role, Millis timeout);

  GcsClient& gcs() { return gcs_; }

  // Asks every alive node for its workers / the objects in its store; nodes that do not
  // answer are listed as unreachable.
  void GetWorkers(Done<WorkersView> done);
  void GetObjects(Done<ObjectsView> done);

 private:
  Millis timeout_;
  GcsClient gcs_;
  core::ClientPool nodes_;
};

}  // namespace rayd::runtime
