#include "cluster_nodes.h"

#include <rayd/internal/runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace rayd::train::internal {

namespace {
// The driver's connection and last read. Never destroyed: a connection's event loop must not be
// torn down among the process's static destructors.
struct DriverView {
  std::mutex mu;
  std::unique_ptr<ClusterClient> client;  // kept: a read over it costs ~0.1 ms
  std::string client_of;                  // the GCS address it is connected to
  std::vector<NodeInfo> nodes;
  std::chrono::steady_clock::time_point read_at;
};
DriverView& TheDriverView() {
  static auto* view = new DriverView;
  return *view;
}
}  // namespace

std::vector<NodeInfo> DriverNodes(std::chrono::milliseconds max_age) {
  DriverView& d = TheDriverView();
  std::lock_guard lock(d.mu);
  const auto now = std::chrono::steady_clock::now();
  const rayd::internal::ClusterEndpoint endpoint = rayd::internal::DriverClusterEndpoint();
  if (endpoint.gcs_address.empty()) return {};
  if (d.client_of == endpoint.gcs_address && d.read_at.time_since_epoch().count() != 0 &&
      now - d.read_at <= max_age) {
    return d.nodes;
  }
  if (d.client_of != endpoint.gcs_address) d.client.reset();
  if (!d.client) {
    auto connected =
        ClusterClient::Connect(endpoint.gcs_address, endpoint.token, std::chrono::seconds(5));
    if (!connected.ok()) {
      spdlog::warn("reading the cluster's nodes: {}", connected.status().message());
      return d.nodes;  // the last view, if any, is the best guess
    }
    d.client = std::move(*connected);
    d.client_of = endpoint.gcs_address;
  }
  Result<ClusterView> view = d.client->Nodes();
  if (!view.ok()) {
    spdlog::warn("reading the cluster's nodes: {}", view.status().message());
    d.client.reset();  // connected again on the next read
    return d.nodes;
  }
  d.nodes = std::move(view->nodes);
  d.read_at = now;
  return d.nodes;
}

std::map<std::string, double> FreeOutsideDrains(const std::vector<NodeInfo>& nodes) {
  std::map<std::string, double> free;
  for (const NodeInfo& node : nodes) {
    if (!node.alive || node.draining()) continue;
    for (const auto& [name, amount] : node.available) free[name] += amount.ToDouble();
  }
  return free;
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
