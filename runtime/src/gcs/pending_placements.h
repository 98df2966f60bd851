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
// The ledger also keeps the policies' view of the cluster between decisions: placing one actor
// on a 2,000-node cluster must not copy 2,000 nodes' resources. The view is rebuilt when nodes
// join or die, and one node's entry is recomputed when its heartbeat or its share of the ledger
// changes.
//
// Threading: the GCS event loop only.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gcs/gcs_node_manager.h"
#include "rayd/scheduler/placement.h"

namespace rayd::gcs {

class PendingPlacements {
 public:
  // `nodes` must outlive the ledger.
  explicit PendingPlacements(GcsNodeManager& nodes);
  PendingPlacements(const PendingPlacements&) = delete;
  PendingPlacements& operator=(const PendingPlacements&) = delete;

  // `key` names one placement (an actor id; "<group id>/<node id>" for a group's bundles on a
  // node). Adding an existing key replaces it. It counts while in flight.
  void Add(const std::string& key, const NodeId& node, const scheduler::ResourceSet& resources);
  // The node has taken it: it counts until a heartbeat sent after now.
  void Confirm(const std::string& key);
  void Remove(const std::string& key);

  // The alive nodes (in the node manager's order) as the placement policies see them: their
  // reported availability less what is placed there and not yet reported, except the placement
  // `skip` (a placement being redone must not count against itself). `ids` gets the node id of
  // each snapshot entry. Drops the placements that heartbeats now show (or whose node is gone),
  // so the ledger holds only the last heartbeat period's work.
  // The view and *ids stay valid until the next View or Snapshot. Costs O(nodes changed since
  // the last call + placements retired); O(alive nodes) after a node joined or died.
  const scheduler::ClusterSnapshot& View(const std::vector<NodeId>** ids,
                                         const std::string& skip = "") const;
  // A copy of the view, for a caller that changes it (O(alive nodes)).
  scheduler::ClusterSnapshot Snapshot(std::vector<NodeId>* ids) const;

 private:
  struct Entry {
    NodeId node;
    scheduler::ResourceSet resources;
    int64_t since_ms;  // in flight: INT64_MAX; confirmed: when
  };
  // One node's share: the sum of its entries, and its confirmed entries by confirmation time,
  // so that a heartbeat retires the ones it covers without a scan of the whole ledger.
  struct PerNode {
    scheduler::ResourceSet unreported;
    std::set<std::string> keys;
    std::multimap<int64_t, std::string> confirmed;  // since_ms -> key
  };
  void Erase(std::map<std::string, Entry>::iterator it) const;
  // Forgets the placements on nodes that are gone and those that heartbeats now show.
  void Prune() const;
  // The node as the policies see it, less `skip` when that is placed there.
  scheduler::NodeState Seen(const runtime::NodeInfo& node, const Entry* skip) const;
  void MarkStale(const NodeId& node) const;

  const GcsNodeManager& nodes_;
  // Pruned by Snapshot (a lookup that forgets what heartbeats now show; hence mutable).
  mutable std::map<std::string, Entry> entries_;
  mutable std::map<NodeId, PerNode> per_node_;

  // The policies' view (see View). `stale`: nodes whose entry must be recomputed.
  struct Cache {
    scheduler::ClusterSnapshot cluster;
    std::vector<NodeId> ids;
    std::map<NodeId, size_t> index;
    std::set<NodeId> stale;
    bool rebuild = true;
  };
  mutable Cache view_;
};

}  // namespace rayd::gcs
