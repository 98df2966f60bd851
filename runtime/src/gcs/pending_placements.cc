#include "gcs/pending_placements.h"

#include <limits>

namespace rayd::gcs {
namespace {
constexpr int64_t kInFlight = std::numeric_limits<int64_t>::max();
}

void PendingPlacements::Add(const std::string& key, const NodeId& node,
                            const scheduler::ResourceSet& resources) {
  entries_[key] = Entry{node, resources, kInFlight};
}

void PendingPlacements::Confirm(const std::string& key) {
  if (auto it = entries_.find(key); it != entries_.end()) it->second.since_ms = NowUnixMs();
}

void PendingPlacements::Remove(const std::string& key) { entries_.erase(key); }

scheduler::ClusterSnapshot PendingPlacements::Snapshot(std::vector<NodeId>* ids,
                                                       const std::string& skip) const {
  std::map<NodeId, scheduler::ResourceSet> unreported;
  for (const auto& [key, entry] : entries_) {
    if (key == skip) continue;
    const runtime::NodeInfo* node = nodes_.FindAlive(entry.node);
    // A heartbeat that arrived after the node took the placement already shows it.
    if (node == nullptr || entry.since_ms < node->last_heartbeat_ms) continue;
    unreported[entry.node] += entry.resources;
  }
  scheduler::ClusterSnapshot cluster;
  for (const runtime::NodeInfo* node : nodes_.AliveNodes()) {
    scheduler::ResourceSet available = node->available;
    if (auto it = unreported.find(node->node_id); it != unreported.end()) available -= it->second;
    cluster.nodes.push_back(
        {node->node_id.Hex(), scheduler::NodeResources(node->total, available, node->labels)});
    ids->push_back(node->node_id);
  }
  return cluster;
}

}  // namespace rayd::gcs
