#include "gcs/pending_placements.h"

#include <limits>

namespace rayd::gcs {
namespace {
constexpr int64_t kInFlight = std::numeric_limits<int64_t>::max();
}

PendingPlacements::PendingPlacements(GcsNodeManager& nodes) : nodes_(nodes) {
  nodes.AddNodeChangeListener([this](const NodeId& node, GcsNodeManager::NodeChange change) {
    if (change == GcsNodeManager::NodeChange::kResources) {
      MarkStale(node);
    } else {
      view_.rebuild = true;  // the set of alive nodes (or a node's totals) changed
    }
  });
}

void PendingPlacements::MarkStale(const NodeId& node) const {
  if (!view_.rebuild) view_.stale.insert(node);
}

void PendingPlacements::Add(const std::string& key, const NodeId& node,
                            const scheduler::ResourceSet& resources) {
  if (auto it = entries_.find(key); it != entries_.end()) Erase(it);
  entries_.emplace(key, Entry{node, resources, kInFlight});
  PerNode& share = per_node_[node];
  share.unreported += resources;
  share.keys.insert(key);
  MarkStale(node);
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
  MarkStale(entry.node);
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
    if (!confirmed.empty() && confirmed.begin()->first < info->last_heartbeat_ms) {
      MarkStale(node->first);
    }
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

scheduler::NodeState PendingPlacements::Seen(const runtime::NodeInfo& node,
                                             const Entry* skip) const {
  scheduler::ResourceSet available = node.available;
  if (auto share = per_node_.find(node.node_id); share != per_node_.end()) {
    scheduler::ResourceSet unreported = share->second.unreported;
    if (skip != nullptr && skip->node == node.node_id) unreported -= skip->resources;
    available -= unreported;
  }
  scheduler::NodeState seen{node.node_id.Hex(),
                            scheduler::NodeResources(node.total, available, node.labels)};
  seen.alive = !node.draining();  // `rayd drain`: nothing new goes there
  return seen;
}

const scheduler::ClusterSnapshot& PendingPlacements::View(const std::vector<NodeId>** ids,
                                                          const std::string& skip) const {
  Prune();
  Cache& view = view_;
  if (view.rebuild) {
    view.cluster.nodes.clear();
    view.ids.clear();
    view.index.clear();
    for (const runtime::NodeInfo* node : nodes_.AliveNodes()) {
      view.index.emplace(node->node_id, view.ids.size());
      view.cluster.nodes.push_back(Seen(*node, nullptr));
      view.ids.push_back(node->node_id);
    }
    view.rebuild = false;
  } else {
    for (const NodeId& id : view.stale) {
      auto at = view.index.find(id);
      const runtime::NodeInfo* node = nodes_.FindAlive(id);
      if (at != view.index.end() && node != nullptr) view.cluster.nodes[at->second] = Seen(*node, nullptr);
    }
  }
  view.stale.clear();
  // A placement being redone must not count against itself: its node's entry leaves it out
  // for this call only.
  if (auto skipped = entries_.find(skip); !skip.empty() && skipped != entries_.end()) {
    const NodeId& node = skipped->second.node;
    auto at = view.index.find(node);
    if (const runtime::NodeInfo* info = nodes_.FindAlive(node); info && at != view.index.end()) {
      view.cluster.nodes[at->second] = Seen(*info, &skipped->second);
      view.stale.insert(node);
    }
  }
  *ids = &view.ids;
  return view.cluster;
}

scheduler::ClusterSnapshot PendingPlacements::Snapshot(std::vector<NodeId>* ids) const {
  const std::vector<NodeId>* view_ids = nullptr;
  scheduler::ClusterSnapshot cluster = View(&view_ids);
  *ids = *view_ids;
  return cluster;
}

}  // namespace rayd::gcs
