#pragma once
// Where a head's autoscaler (rayd start --head --autoscaler) reads demand that programs publish,
// and where it publishes its state: the one place that names these KV keys. In KV namespace
// kAutoscalerKvNamespace:
//   AutoscalerRequestKey(name)  {"bundles": [{"CPU": 2}, ...]}: a floor the cluster keeps room
//                               for (`rayd request-resources --name`, rayd::RequestResources);
//   AutoscalerSweepKey(name)    {"source": "...", "expires_ms": N, "gangs": [{"bundles": [...],
//                               "strategy": "PACK", "count": N}]}: work a sweep starts next
//                               (`rayd tune`: its elastic trials' room to grow).
// Its state is the dashboard feed (kAutoscalerFeedKind, kAutoscalerFeedName) (cluster.h).

#include <string>

namespace rayd {

inline constexpr char kAutoscalerKvNamespace[] = "autoscaler";
inline constexpr char kAutoscalerRequestPrefix[] = "request:";
inline constexpr char kAutoscalerSweepPrefix[] = "tune:";
inline constexpr char kAutoscalerFeedKind[] = "autoscaler";
inline constexpr char kAutoscalerFeedName[] = "cluster";

inline std::string AutoscalerRequestKey(const std::string& name) {
  return kAutoscalerRequestPrefix + name;
}
inline std::string AutoscalerSweepKey(const std::string& name) {
  return kAutoscalerSweepPrefix + name;
}

}  // namespace rayd
