#include "cluster_nodes.h"

#include <rayd/internal/runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

namespace rayd::train::internal {

std::vector<NodeInfo> DriverNodes(std::chrono::milliseconds max_age) {
  static std::mutex mu;
  static std::vector<NodeInfo> nodes;
  static std::string read_from;  // the GCS address `nodes` came from
  static std::chrono::steady_clock::time_point read_at;
  std::lock_guard lock(mu);
  const auto now = std::chrono::steady_clock::now();
  const rayd::internal::ClusterEndpoint endpoint = rayd::internal::DriverClusterEndpoint();
  if (endpoint.gcs_address.empty()) return {};
  if (read_from == endpoint.gcs_address && now - read_at <= max_age) return nodes;
  Result<ClusterView> view =
      FetchClusterView(endpoint.gcs_address, endpoint.token, std::chrono::seconds(10));
  if (!view.ok()) {
    spdlog::warn("reading the cluster's nodes: {}", view.status().message());
    return read_from == endpoint.gcs_address ? nodes : std::vector<NodeInfo>{};
  }
  nodes = std::move(view->nodes);
  read_from = endpoint.gcs_address;
  read_at = now;
  return nodes;
}

std::set<std::string> DrainedOf(const std::vector<NodeInfo>& nodes,
                                const std::vector<std::string>& gang_nodes) {
  std::set<std::string> drained;
  for (const NodeInfo& node : nodes) {
    if (node.drain_deadline_ms == 0) continue;
    const std::string id = node.node_id.Hex();
    if (std::find(gang_nodes.begin(), gang_nodes.end(), id) != gang_nodes.end()) {
      drained.insert(id);
    }
  }
  return drained;
}

}  // namespace rayd::train::internal
