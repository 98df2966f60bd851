// rayd/api/autoscaler.h: requests and the cluster's possible size, through the KV store the
// head's autoscaler reads and publishes to (runtime/src/head/autoscaler_host.h).

#include "rayd/api/autoscaler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "rayd/api.h"
#include "rayd/api/kv.h"
#include "rayd/runtime/autoscaler_kv.h"
#include "rayd/runtime/cluster.h"

namespace rayd {
namespace {

// Every driver's calls share one request, as Ray's request_resources does.
const std::string kRequestKey = AutoscalerRequestKey("api");

}  // namespace

void RequestResources(std::optional<double> num_cpus,
                      const std::vector<std::map<std::string, double>>& bundles) {
  nlohmann::json list = nlohmann::json::array();
  if (num_cpus) {
    if (!(*num_cpus >= 0) || *num_cpus != std::floor(*num_cpus) || *num_cpus > 100000) {
      throw RaydError("RequestResources: num_cpus must be a whole number from 0 to 100000");
    }
    for (int i = 0; i < static_cast<int>(*num_cpus); ++i) list.push_back({{"CPU", 1}});
  }
  for (const auto& bundle : bundles) {
    nlohmann::json b = nlohmann::json::object();
    for (const auto& [name, amount] : bundle) {
      if (!(amount >= 0) || name.empty()) {
        throw RaydError("RequestResources: a bundle's amounts must be named and >= 0");
      }
      if (amount > 0) b[name] = amount;
    }
    if (b.empty()) throw RaydError("RequestResources: a bundle asks for nothing");
    list.push_back(std::move(b));
  }
  if (list.empty()) {
    KvDel(kAutoscalerKvNamespace, kRequestKey);
  } else {
    KvPut(kAutoscalerKvNamespace, kRequestKey, nlohmann::json{{"bundles", list}}.dump());
  }
}

std::map<std::string, double> MaxClusterResources() {
  std::map<std::string, double> total = ClusterResources();
  auto feed = KvGet(kFeedKvNamespace, FeedKey(kAutoscalerFeedKind, kAutoscalerFeedName));
  if (!feed) return total;
  auto state = nlohmann::json::parse(*feed, nullptr, false);
  if (!state.is_object()) return total;
  int managed = 0;
  const auto types = state.value("node_types", nlohmann::json::array());
  for (const auto& t : types) {
    managed += t.value("running", 0) + t.value("launching", 0) + t.value("draining", 0);
  }
  int room = state.value("max_nodes", 0) - managed;
  for (const auto& t : types) {
    const int have = t.value("running", 0) + t.value("launching", 0) + t.value("draining", 0);
    const int more = std::min(room, t.value("max_nodes", 0) - have);
    if (more <= 0) continue;
    room -= more;
    const nlohmann::json resources = t.value("resources_json", nlohmann::json::object());
    for (const auto& [name, amount] : resources.items()) {
      if (amount.is_number()) total[name] += amount.get<double>() * more;
    }
  }
  return total;
}

}  // namespace rayd
