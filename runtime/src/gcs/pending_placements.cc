#include "gcs/pending_placements.h"

#include <limits>

namespace rayd::gcs {
namespace {
constexpr int64_t kInFlight = std::numeric_limits<int64_t>::max();
}

void PendingPlacements::Add(const std::string& key, const NodeId& node,
                            const scheduler::ResourceSet& resources) {
  if (auto it = entries_.find(key); it != entries_.end()) Erase(it);
  entries_.emplace(key, Entry{node, resources, kInFlight});
  PerNode& share = per_node_[node];
  share.unreported += resources;
  share.keys.insert(key);
}

void PendingPlacements::Confirm(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.since_ms != kInFlight) return;
  it->second.since_ms = NowUnixMs();
  per_node_[it->second.node].confirmed.emplace(it->second.since_ms, key);
}

void PendingPlacements::Remove(const std::string& key) {
  if (auto it = entries_.find(key); it != entries_.end()) Erase(it);
}

void PendingPlacements::Erase(std::map<std::string, Entry>::iterator it) const {
  const Entry& entry = it->second;
  if (auto node = per_node_.find(entry.node); node != per_node_.end()) {
    PerNode& share = node->second;
    share.unreported -= entry.resources;
    share.keys.erase(it->first);
    if (entry.since_ms != kInFlight) {
      auto [first, last] = share.confirmed.equal_range(entry.since_ms);
      for (auto c = first; c != last; ++c) {
        if (c->second == it->first) {
          share.confirmed.erase(c);
          break;
        }
      }
    }
    if (share.keys.empty()) per_node_.erase(node);
  }
  entries_.erase(it);
}

void PendingPlacements::Prune() const {
  for (auto node = per_node_.begin(); node != per_node_.end();) {
    const runtime::NodeInfo* info = nodes_.FindAlive(node->first);
    if (info == nullptr) {
      for (const std::string& key : node->second.keys) entries_.erase(key);
      node = per_node_.erase(node);
      continue;
    }
    // A heartbeat that arrived after the node took a placement already shows it.
    auto& confirmed = node->second.confirmed;
    while (!confirmed.empty() && confirmed.begin()->first < info->last_heartbeat_ms) {
      const std::string key = confirmed.begin()->second;
      PerNode& share = node->second;
      auto entry = entries_.find(key);
      share.unreported -= entry->second.resources;
      share.keys.erase(key);
      confirmed.erase(confirmed.begin());
      entries_.erase(entry);
    }
    if (node->second.keys.empty()) {
      node = per_node_.erase(node);
    } else {
      ++node;
    }
  }
}

scheduler::ClusterSnapshot PendingPlacements::Snapshot(std::vector<NodeId>* ids,
                                                       const std::string& skip) const {
  Prune();
  const auto skipped = entries_.find(skip);
  scheduler::ClusterSnapshot cluster;
  for (const runtime::NodeInfo* node : nodes_.AliveNodes()) {
    scheduler::ResourceSet available = node->available;
    if (auto share = per_node_.find(node->node_id); share != per_node_.end()) {
      scheduler::ResourceSet unreported = share->second.unreported;
      if (skipped != entries_.end() && skipped->second.node == node->node_id) {
        unreported -= skipped->second.resources;
      }
      available -= unreported;
    }
    cluster.nodes.push_back(
        {node->node_id.Hex(), scheduler::NodeResources(node->total, available, node->labels)});
    ids->push_back(node->node_id);
  }
  return cluster;
}

}  // namespace rayd::gcs
