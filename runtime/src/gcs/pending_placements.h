#pragma once
// PendingPlacements: what the head placed on nodes that their heartbeats may not show yet.
//
// Node daemons report their available resources with every heartbeat (1 s). Between two
// heartbeats the head keeps placing actors and bundles; without this ledger it would see the
// same free resources twice and over-commit a node (the node would then refuse, and the work
// would be placed again: correct, but slow). Each placement counts against its node from Add
// until a heartbeat arrives that was sent after the node took it (Confirm), or until Remove.
//
// The actor manager and the placement-group manager share one ledger, so neither double-books
// what the other placed.
//
// Threading: the GCS event loop only.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gcs/gcs_node_manager.h"
#include "rayd/scheduler/placement.h"

namespace rayd::gcs {

class PendingPlacements {
 public:
  // `nodes` must outlive the ledger.
  explicit PendingPlacements(const GcsNodeManager& nodes) : nodes_(nodes) {}

  // `key` names one placement (an actor id; "<group id>/<node id>" for a group's bundles on a
  // node). Adding an existing key replaces it. It counts while in flight.
  void Add(const std::string& key, const NodeId& node, const scheduler::ResourceSet& resources);
  // The node has taken it: it counts until a heartbeat sent after now.
  void Confirm(const std::string& key);
  void Remove(const std::string& key);

  // The alive nodes (in the node manager's order) as the placement policies see them: their
  // reported availability less what is placed there and not yet reported, except the placement
  // `skip` (a placement being redone must not count against itself). `ids` gets the node id of
  // each snapshot entry.
  scheduler::ClusterSnapshot Snapshot(std::vector<NodeId>* ids, const std::string& skip = "") const;

 private:
  struct Entry {
    NodeId node;
    scheduler::ResourceSet resources;
    int64_t since_ms;  // in flight: INT64_MAX; confirmed: when
  };
  const GcsNodeManager& nodes_;
  std::map<std::string, Entry> entries_;
};

}  // namespace rayd::gcs
