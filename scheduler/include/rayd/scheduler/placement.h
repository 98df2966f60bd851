#pragma once
// Placement policies as pure functions over a snapshot of the cluster: no I/O, no clocks, no
// randomness (ties break by node order), so that the head, the node daemons and the tests all
// get the same answer from the same snapshot.
//
//   - PlaceOne: one task or actor. The hybrid policy packs work onto nodes whose utilisation
//     stays below a threshold (the preferred node first, e.g. the caller's own), and once every
//     node is past it, spreads to the least utilised one. Node affinity and label selectors
//     narrow the candidates first.
//   - PlaceGroup: a placement group, all bundles or none (PACK, SPREAD, STRICT_PACK,
//     STRICT_SPREAD). The answer is a plan; committing it (two-phase, across nodes) is the
//     runtime's job, and Apply() lets a simulation or a test commit it to a snapshot.
//
// Outcomes distinguish "not now" (feasible on some node's totals, so waiting can help) from
// "never" (no node's totals could ever hold it): the runtime reports the latter as infeasible.
// kInfeasible is only returned when proven; a group whose bounded search gives up is kNotNow.
//
// Choices the contract leaves open (fixed here so that answers are reproducible):
//   - The "largest node" an infeasible reason names is the candidate whose totals cover the
//     most of the demand's resources in full, then the largest sum of min(total/demand, 1) over
//     them, then the most total CPU, then the earlier node. The reason shows that node's id and
//     its totals of just the demanded resources, zeros included: "no node can ever satisfy
//     {CPU: 64, GPU: 1}: the largest node (n3) has {CPU: 8, GPU: 1}".
//   - STRICT_PACK takes the first node in snapshot order that holds the sum of the bundles (and
//     carries every bundle's labels), not the tightest fit: it packs towards the front like the
//     hybrid policy and stops at the first fit instead of scanning every node.
//   - STRICT_SPREAD tries each bundle on the first unused fitting node in order; if that fails it
//     runs a maximum bipartite matching (bundles to distinct nodes), so it finds a placement
//     whenever one exists.
//   - PACK repeatedly fills the node that holds the most remaining bundles (first fit in bundle
//     order; the first such node wins ties). SPREAD walks the nodes round-robin, preferring ones
//     the group has not used, then reuses. If either greedy pass fails, a depth-first search
//     (most constrained bundle first, bounded to about a millisecond of work) looks for any
//     assignment; for groups of identical bundles the greedy pass is already exact.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "rayd/base/status.h"
#include "rayd/scheduler/resources.h"

namespace rayd::scheduler {

// One node in a snapshot. `id` is opaque to the policies (the runtime uses the node id hex).
struct NodeState {
  std::string id;
  NodeResources resources;
  bool alive = true;  // dead nodes are skipped

  friend bool operator==(const NodeState&, const NodeState&) = default;
};

// The cluster as a policy sees it: nodes in a stable order (ties break towards the front).
struct ClusterSnapshot {
  std::vector<NodeState> nodes;
  // The index of the node called `id`, or nullopt.
  std::optional<size_t> Find(const std::string& id) const;

  friend bool operator==(const ClusterSnapshot&, const ClusterSnapshot&) = default;
};

enum class Outcome {
  kPlaced,      // the answer names where
  kNotNow,      // some node could hold it when resources free up
  kInfeasible,  // no alive node could ever hold it (its totals are too small or it is excluded)
};

struct NodeAffinity {
  std::string node_id;
  bool soft = false;  // soft: prefer the node, fall back to the others; hard: only that node
};

struct PlacementRequest {
  ResourceSet demand;
  Labels label_selector;  // the node must carry every one of these key=value
  std::optional<NodeAffinity> affinity;
  std::string preferred_node;  // hybrid policy: tried first (e.g. the local node)
};

struct HybridOptions {
  // A node counts as "below the threshold" when, after placing the request, its most used
  // resource (used/total, over the resources the request names) is at most this.
  double spread_threshold = 0.5;
};

struct Placement {
  Outcome outcome = Outcome::kInfeasible;
  size_t node = 0;     // index into the snapshot, when kPlaced
  std::string reason;  // kNotNow / kInfeasible: one line a user can act on, naming the demand
                       // and the largest candidate node
};

// True when `node_labels` carry every key=value of `selector` (an empty selector matches all).
bool MatchesLabels(const Labels& node_labels, const Labels& selector);

Placement PlaceOne(const ClusterSnapshot& cluster, const PlacementRequest& request,
                   const HybridOptions& options = {});

// The alive node to name when none can hold `demand`: the one whose totals cover the most of
// the resources it names in full; ties go to the larger sum of min(total / demanded, 1), then to
// the most total CPU, then to the earlier node. nullopt when no node is alive.
std::optional<size_t> LargestNodeFor(const ClusterSnapshot& cluster, const ResourceSet& demand);

enum class GroupStrategy { kPack, kSpread, kStrictPack, kStrictSpread };
const char* GroupStrategyName(GroupStrategy strategy);  // "PACK", ...

struct Bundle {
  ResourceSet demand;
  Labels label_selector;
};

struct GroupRequest {
  std::vector<Bundle> bundles;
  GroupStrategy strategy = GroupStrategy::kPack;
};

// PACK: as few nodes as possible (best effort); SPREAD: as many distinct nodes as possible
// (best effort); STRICT_PACK: all bundles on one node; STRICT_SPREAD: every bundle on a
// different node. kPlaced only if every bundle has a node.
struct GroupPlacement {
  Outcome outcome = Outcome::kInfeasible;
  std::vector<size_t> bundle_nodes;  // per bundle, index into the snapshot, when kPlaced
  std::string reason;
};

// A group with no bundles is kPlaced with no bundle nodes. Reasons start with the strategy
// name: "STRICT_SPREAD: the 3 bundles need 3 distinct nodes, but at most 2 ...".
GroupPlacement PlaceGroup(const ClusterSnapshot& cluster, const GroupRequest& request);

// Takes each bundle's demand from its node's available resources. FailedPrecondition-like
// InvalidArgument (nothing changed) if the plan does not fit the snapshot any more, names a dead
// node or an index past the end, or is not a kPlaced plan for `request`.
Status Apply(ClusterSnapshot& cluster, const GroupRequest& request,
             const GroupPlacement& placement);
// Gives the resources of an applied plan back (capped at each node's total, so giving twice
// creates nothing). Does nothing for a plan Apply would reject as malformed.
void Unapply(ClusterSnapshot& cluster, const GroupRequest& request,
             const GroupPlacement& placement);

}  // namespace rayd::scheduler
