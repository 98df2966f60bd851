#pragma once
// NodeInfo: what the cluster knows about one node, as a plain value. Converted to Cap'n Proto
// for the wire and to JSON for the GCS store, here and nowhere else.

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "rayd/base/ids.h"
#include "rayd/internal/runtime.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/protocol/gcs.capnp.h"
#include "rayd/runtime/cluster.h"
#include "rayd/scheduler/resources.h"

namespace rayd::runtime {

using rayd::NodeInfo;

void ResourcesToProto(const scheduler::ResourceSet& set,
                      capnp::List<proto::ResourceAmount>::Builder list);
// Call with the list builder initialised to set.size() by the caller's init function.
template <typename InitList>
void FillResources(const scheduler::ResourceSet& set, InitList init) {
  ResourcesToProto(set, init(static_cast<unsigned>(set.size())));
}
scheduler::ResourceSet ResourcesFromProto(capnp::List<proto::ResourceAmount>::Reader list);

// A {key: value} map (node labels, a label selector, an environment) as a list of Label, and
// back. FillLabels calls `init(n)` for the list builder, like FillResources.
void LabelsToProto(const std::map<std::string, std::string>& labels,
                   capnp::List<proto::Label>::Builder list);
template <typename InitList>
void FillLabels(const std::map<std::string, std::string>& labels, InitList init) {
  LabelsToProto(labels, init(static_cast<unsigned>(labels.size())));
}
scheduler::Labels LabelsFromProto(capnp::List<proto::Label>::Reader list);

void DemandsToProto(const std::vector<ResourceDemand>& demands,
                    capnp::List<proto::ResourceDemand>::Builder out);
std::vector<ResourceDemand> DemandsFromProto(capnp::List<proto::ResourceDemand>::Reader in);

void NodeInfoToProto(const NodeInfo& info, proto::NodeInfo::Builder out);
Result<NodeInfo> NodeInfoFromProto(proto::NodeInfo::Reader in);

// "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD": how tables and the store name states.
const char* ActorStateName(proto::ActorState state);

// "PENDING", "CREATED", "RESCHEDULING", "REMOVED", "FAILED".
const char* PlacementGroupStateName(proto::PlacementGroupState state);
// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD" (the scheduler's names).
const char* PlacementStrategyName(proto::PlacementStrategy strategy);
// A group as GET_PLACEMENT_GROUP reports it, as a plain value (bundle nodes "" while unplaced).
internal::PlacementGroupInfo PlacementGroupFromProto(proto::PlacementGroupInfo::Reader in);

// The node a driver on this host attaches to, among the alive `nodes`: its own host's node if
// there is one, else the head's. Its own host's node is one whose IP is an address of this host
// (as Ray matches the node IP), preferring one with this hostname too; failing that, one with
// this hostname. The node's address, or "" when there is none.
std::string ChooseDriverNode(const std::vector<NodeInfo>& nodes, const std::string& hostname,
                             const std::set<std::string>& local_addresses);
// The IPv4 addresses of this host's interfaces (its network namespace's, in a container).
std::set<std::string> LocalAddresses();

std::string NodeInfoToJson(const NodeInfo& info);
Result<NodeInfo> NodeInfoFromJson(const std::string& text);

}  // namespace rayd::runtime
