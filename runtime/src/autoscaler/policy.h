#pragma once
// The autoscaler's decisions, as pure functions of the demand, the nodes and the config: no
// I/O, no clocks, no provider. Autoscaler (autoscaler.h) gathers the inputs every update and
// carries the decisions out; the tests call Decide directly.
//
// How it decides
// - The nodes as placement sees them: running nodes with their available resources, launching
//   ones (asked of the provider, not joined yet) as if they had joined empty. Draining nodes
//   take nothing.
// - Requests (`rayd request-resources`, rayd::RequestResources: a floor the cluster must be
//   able to hold, whatever runs now) are placed on the nodes' totals; what does not fit
//   launches nodes. Then each waiting unit (a placement group, an actor, tasks, a sweep's
//   queued trial) is placed on what is left, in order. A unit is a gang: it is placed whole by
//   scheduler::PlaceGroup or not at all. One that does not fit tries, for each node type in
//   order of cost, the fewest new nodes of that type with which it fits, and takes the cheapest
//   such choice (ties: fewer resources per node, then the file's order); a unit never gets
//   half of the nodes it needs.
// - Limits: a type's max_nodes, the cluster's max_nodes (nodes the autoscaler launched, all
//   types, draining ones included until they are gone), and upscaling_speed: a unit launches
//   only while fewer than max(5, speed x running managed nodes) launches are in flight (a
//   unit that starts under the limit launches all it needs, even past it).
// - Every type keeps min_nodes (launched first, before demand).
// - A managed node idle for idle_timeout_s is drained, unless some waiting unit or request was
//   placed on it above (the Tuner's queued trials keep the nodes they will use) or its type
//   would fall below min_nodes. Nodes the autoscaler did not launch (the head, nodes started by
//   hand) are never drained.
// - Each launch says which demand caused it; each unit that launches nothing says why (no
//   type could ever hold it; a max reached; the upscaling limit).

#include <map>
#include <string>
#include <vector>

#include "autoscaler/config.h"
#include "rayd/scheduler/placement.h"

namespace rayd::autoscaler {

// One gang of demand: its bundles are placed all together or not at all. `count` identical
// units (tasks of one shape) are one entry.
struct DemandUnit {
  std::vector<scheduler::Bundle> bundles;
  scheduler::GroupStrategy strategy = scheduler::GroupStrategy::kPack;
  int count = 1;
  std::string source;  // what a user calls it: "placement group 3f2a1b0c", "actor Trainer", ...
};

// A node as the autoscaler sees it.
struct NodeView {
  enum class Status { kLaunching, kRunning, kDraining };
  std::string node_id;      // "" while launching (not joined)
  std::string instance_id;  // "" for a node the autoscaler did not launch
  std::string node_type;    // "" for a node the autoscaler did not launch
  Status status = Status::kRunning;
  scheduler::NodeResources resources;  // launching: the type's, all available
  double idle_s = 0;                   // how long nothing has run on it; 0 while busy

  bool managed() const { return !instance_id.empty(); }
};

struct PolicyInput {
  std::vector<NodeView> nodes;
  std::vector<DemandUnit> waiting;    // placed on what is available now
  std::vector<DemandUnit> requested;  // floors: placed on the nodes' totals
};

struct Launch {
  std::string node_type;
  int count = 0;
  std::string reason;  // "placement group 3f2a1b0c (2 x {CPU: 1}, PACK) and 3 more waiting"
};

struct Drain {
  std::string node_id;
  std::string instance_id;
  std::string reason;  // "idle for 61 s (idle_timeout_s 60)"
};

// Demand that launches nothing this time, and why.
struct Unmet {
  std::string source;
  std::string reason;
  bool infeasible = false;  // no node type could ever hold it (as opposed to a limit)
};

struct Decision {
  std::vector<Launch> launches;  // at most one entry per type
  std::vector<Drain> drains;
  std::vector<Unmet> unmet;
};

Decision Decide(const AutoscalerConfig& config, const PolicyInput& input);

// The labels a node of `type` carries: its own, plus rayd.io/node-type.
scheduler::Labels TypeLabels(const NodeTypeConfig& type);
// "2 x {CPU: 1}, PACK" for the unit's bundles (identical bundles counted).
std::string DescribeBundles(const DemandUnit& unit);

}  // namespace rayd::autoscaler
