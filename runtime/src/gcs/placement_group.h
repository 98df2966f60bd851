#pragma once
// PlacementGroup: one placement group as the GCS keeps it (what GET_PLACEMENT_GROUP reports,
// plus the reservation attempt in flight), and its stored form. GcsPlacementGroupManager
// (gcs_placement_group_manager.h) schedules and serves them.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rayd/base/ids.h"
#include "rayd/base/rpc.h"
#include "rayd/scheduler/placement.h"
#include "rayd/scheduler/resources.h"

namespace rayd::gcs {

// The states and strategies of placement groups by name, as the group table stores them.
bool Ended(proto::PlacementGroupState state);    // REMOVED or FAILED
bool Settled(proto::PlacementGroupState state);  // CREATED or ended
proto::PlacementGroupState GroupStateFromName(const std::string& name);  // unknown: FAILED
bool KnownStrategy(proto::PlacementStrategy strategy);
Result<proto::PlacementStrategy> GroupStrategyFromName(const std::string& name);

// The cause of a group its user removed.
inline constexpr char kRemovedByUser[] = "removed by its user";

// One placement group: what GET_PLACEMENT_GROUP reports, plus the attempt in flight.
struct PlacementGroup {
  struct Bundle {
    scheduler::ResourceSet resources;
    scheduler::Labels label_selector;
    NodeId node;  // committed there, or being prepared there; nil while unplaced
    bool committed = false;
  };
  // One node's part of the attempt in flight.
  struct Reservation {
    std::vector<uint32_t> indexes;
    bool refused = false;  // its prepare failed, so it holds none of them
  };

  std::string id;
  std::string name;
  std::string ray_namespace;
  std::string job_id;
  proto::PlacementStrategy strategy = proto::PlacementStrategy::PACK;
  proto::PlacementGroupState state = proto::PlacementGroupState::PENDING;
  bool detached = false;
  int64_t create_time_ms = 0;
  int64_t ready_time_ms = 0;
  std::string cause;
  std::vector<Bundle> bundles;
  uint64_t seq = 0;  // creation order

  uint64_t attempt = 0;
  std::map<NodeId, Reservation> in_flight;  // empty: no attempt in flight
  size_t unanswered = 0;                    // nodes yet to answer the phase in progress
  std::optional<Clock::time_point> infeasible_since;
  uint32_t next_bundle = 0;           // FindBundle's round robin over bundles
  std::vector<rpc::Incoming<proto::Method::GET_PLACEMENT_GROUP>> waiters;  // GET_PLACEMENT_GROUP calls waiting for a settled state

  scheduler::GroupStrategy Strategy() const {
    return static_cast<scheduler::GroupStrategy>(strategy);
  }

  // What the group's bundles on `node` amount to (committed or being prepared).
  scheduler::ResourceSet SumOn(const NodeId& node) const {
    scheduler::ResourceSet sum;
    for (const Bundle& bundle : bundles) {
      if (bundle.node == node) sum += bundle.resources;
    }
    return sum;
  }

  std::vector<uint32_t> Unplaced() const {
    std::vector<uint32_t> indexes;
    for (uint32_t i = 0; i < bundles.size(); ++i) {
      if (bundles[i].node.IsNil()) indexes.push_back(i);
    }
    return indexes;
  }

  // Why work in a REMOVED or FAILED group cannot run: "placement group X was removed".
  std::string Ending() const {
    if (state == proto::PlacementGroupState::FAILED) return "placement group " + id + " failed: " + cause;
    return "placement group " + id + " was removed" +
           (cause == kRemovedByUser ? "" : " (" + cause + ")");
  }

  // The bundles of a CREATE_PLACEMENT_GROUP request; InvalidArgument when there are none, or
  // one is empty or asks for a negative amount.
  static Result<std::vector<Bundle>> BundlesFromProto(
      capnp::List<proto::PlacementBundle>::Reader list);
  // The group as its table stores it, and back.
  std::string ToJson() const;
  static Result<std::unique_ptr<PlacementGroup>> FromJson(const std::string& text);
};


}  // namespace rayd::gcs
