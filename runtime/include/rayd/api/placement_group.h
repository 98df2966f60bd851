#pragma once
// Placement groups: sets of resource bundles reserved together (gang scheduling), then used by
// tasks and actors that target a bundle.
//
//   rayd::PlacementGroup pg = rayd::CreatePlacementGroup(
//       {.name = "gang", .bundles = {{{"GPU", 1}}, {{"GPU", 1}}},
//        .strategy = rayd::PlacementStrategy::STRICT_SPREAD});
//   if (!pg.Wait(10)) { ... }                 // seconds; true once every bundle is reserved
//   rayd::Task(Train).SetPlacementGroup(pg, 0).SetResource("GPU", 1).Remote();
//   rayd::RemovePlacementGroup(pg.GetID());   // frees the bundles, kills what ran in them
//
// Every bundle is reserved, or none is: the head reserves the bundles on their nodes in two
// phases (prepare everywhere, then commit) and gives back any partial hold at once, so groups
// competing for the same resources never deadlock holding halves. Strategies:
//   PACK           as few nodes as possible (best effort)
//   SPREAD         as many distinct nodes as possible (best effort)
//   STRICT_PACK    every bundle on one node
//   STRICT_SPREAD  every bundle on a different node
// A task or actor in a group takes its resources from its bundle's reservation (they must fit
// the bundle; bundle index -1: any bundle of the group). A group lives until removed, or until
// its job ends unless detached. When a node holding bundles dies, they are reserved again on
// the remaining nodes (state RESCHEDULING meanwhile), and the actors in them restart there
// within their max_restarts.
//
// A group that no set of alive nodes could ever hold (a bundle larger than every node, more
// STRICT_SPREAD bundles than nodes) is listed as an infeasible demand in `rayd status`, waits
// for a node that fits to join, and fails after the cluster's infeasible timeout; Wait then
// throws InfeasibleError with the reason.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rayd/api/errors.h"
#include "rayd/internal/runtime.h"

namespace rayd {

// The label every node carries with its own node id (32 hex digits) as the value.
inline constexpr char kNodeIdLabel[] = "rayd.io/node-id";

enum class PlacementStrategy { PACK = 0, SPREAD = 1, STRICT_PACK = 2, STRICT_SPREAD = 3 };

// Ray's field order, so that {name, bundles, strategy} initialises it as in Ray.
struct PlacementGroupCreationOptions {
  std::string name;  // empty: anonymous; else unique in its namespace until removed
  std::vector<std::unordered_map<std::string, double>> bundles;  // each {resource: amount}
  PlacementStrategy strategy = PlacementStrategy::PACK;
  // Per bundle (empty, or one per bundle): labels its node must carry. Every node carries
  // kNodeIdLabel = its node id, so {{kNodeIdLabel, rayd::GetNodeId()}} pins a bundle to this node.
  std::vector<std::map<std::string, std::string>> bundle_label_selector;
  bool detached = false;      // outlives its job until removed
  std::string ray_namespace;  // empty: the job's namespace
};

enum class PlacementGroupState { PENDING, CREATED, RESCHEDULING, REMOVED, FAILED };

// A handle on a placement group: a plain value (its id and how it was asked for). An empty
// handle (Empty()) is what the lookups give for a group that does not exist, as in Ray.
class PlacementGroup {
 public:
  PlacementGroup() = default;
  explicit PlacementGroup(internal::PlacementGroupInfo info) : info_(std::move(info)) {
    for (const auto& bundle : info_.bundles) bundles_.emplace_back(bundle.begin(), bundle.end());
  }

  // The group's id as 32 hex digits ("" for an empty handle).
  const std::string& GetID() const { return info_.id; }
  const std::string& GetName() const { return info_.name; }
  const std::vector<std::unordered_map<std::string, double>>& GetBundles() const {
    return bundles_;
  }
  PlacementStrategy GetStrategy() const { return static_cast<PlacementStrategy>(info_.strategy); }
  bool Empty() const { return info_.id.empty(); }
  bool IsNil() const { return Empty(); }

  // Blocks until every bundle is reserved (true) or `timeout_seconds` pass (false; negative:
  // wait forever). Throws InfeasibleError when the group failed as infeasible, RaydError when
  // it was removed or is unknown.
  bool Wait(int timeout_seconds) const {
    Result<bool> ready = internal::RequireRuntime().WaitPlacementGroupReady(
        info_.id, timeout_seconds < 0 ? std::chrono::milliseconds(-1)
                                      : std::chrono::milliseconds(timeout_seconds * 1000LL));
    internal::ThrowIfError(ready.status());
    return *ready;
  }

  // Asks the head for the group's current state and where each bundle is reserved ("" while
  // unplaced). Throws RaydError when the group is unknown.
  PlacementGroupState GetState() const { return StateOf(Refresh().state); }
  std::vector<std::string> GetBundleNodes() const { return Refresh().bundle_nodes; }

  static PlacementGroupState StateOf(const std::string& state) {
    if (state == "CREATED") return PlacementGroupState::CREATED;
    if (state == "RESCHEDULING") return PlacementGroupState::RESCHEDULING;
    if (state == "REMOVED") return PlacementGroupState::REMOVED;
    if (state == "FAILED") return PlacementGroupState::FAILED;
    return PlacementGroupState::PENDING;
  }

 private:
  internal::PlacementGroupInfo Refresh() const {
    auto found = internal::RequireRuntime().GetPlacementGroup(info_.id, "", "");
    internal::ThrowIfError(found.status());
    if (!found->has_value()) throw RaydError("no placement group " + info_.id);
    return std::move(**found);
  }

  internal::PlacementGroupInfo info_;
  std::vector<std::unordered_map<std::string, double>> bundles_;
};

// Records the group with the head and returns at once; the bundles are reserved in the
// background (PlacementGroup::Wait). Throws RaydError for no bundles, an empty bundle, a
// negative amount or a taken name.
inline PlacementGroup CreatePlacementGroup(const PlacementGroupCreationOptions& options) {
  internal::PlacementGroupOptions o;
  o.name = options.name;
  o.ray_namespace = options.ray_namespace;
  for (const auto& bundle : options.bundles) o.bundles.emplace_back(bundle.begin(), bundle.end());
  o.bundle_label_selector = options.bundle_label_selector;
  o.strategy = static_cast<int>(options.strategy);
  o.detached = options.detached;
  Result<std::string> id = internal::RequireRuntime().CreatePlacementGroup(o);
  internal::ThrowIfError(id.status());
  internal::PlacementGroupInfo info;
  info.id = std::move(id).value();
  info.name = o.name;
  info.ray_namespace = o.ray_namespace;
  info.strategy = o.strategy;
  info.bundles = o.bundles;
  info.detached = o.detached;
  info.state = "PENDING";
  return PlacementGroup(std::move(info));
}

// Frees the group's bundles and kills the tasks and actors running in them. Removing a group
// twice is fine; an unknown id throws RaydError.
inline void RemovePlacementGroup(const std::string& placement_group_id) {
  internal::ThrowIfError(internal::RequireRuntime().RemovePlacementGroup(placement_group_id));
}

// The group with this id, if the head knows it (removed ones included); else an empty handle.
inline PlacementGroup GetPlacementGroupById(const std::string& placement_group_id) {
  auto found = internal::RequireRuntime().GetPlacementGroup(placement_group_id, "", "");
  internal::ThrowIfError(found.status());
  if (!found->has_value()) return PlacementGroup();
  return PlacementGroup(std::move(**found));
}

// The group named `name` in `ray_namespace` (empty: the job's) that is not removed; else an
// empty handle.
inline PlacementGroup GetPlacementGroup(const std::string& name,
                                        const std::string& ray_namespace = "") {
  auto found = internal::RequireRuntime().GetPlacementGroup("", name, ray_namespace);
  internal::ThrowIfError(found.status());
  if (!found->has_value()) return PlacementGroup();
  return PlacementGroup(std::move(**found));
}

// PlacementGroup::Wait by id (Ray's ray::WaitPlacementGroupReady).
inline bool WaitPlacementGroupReady(const std::string& placement_group_id,
                                    int64_t timeout_seconds) {
  internal::PlacementGroupInfo info;
  info.id = placement_group_id;
  return PlacementGroup(std::move(info)).Wait(static_cast<int>(timeout_seconds));
}

// Every group the head knows, removed ones included, in creation order.
inline std::vector<PlacementGroup> GetAllPlacementGroups() {
  auto all = internal::RequireRuntime().GetAllPlacementGroups();
  internal::ThrowIfError(all.status());
  std::vector<PlacementGroup> out;
  out.reserve(all->size());
  for (auto& info : *all) out.emplace_back(std::move(info));
  return out;
}

}  // namespace rayd
