#include "autoscaler/policy.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "autoscaler/node_provider.h"

namespace rayd::autoscaler {
namespace {

using scheduler::ClusterSnapshot;
using scheduler::GroupRequest;
using scheduler::NodeResources;
using scheduler::NodeState;

constexpr int kMinLaunchLimit = 5;  // launches always allowed in flight, whatever the size

std::string Seconds(double s) { return std::to_string(static_cast<long long>(std::llround(s))); }

// The sum of a type's resources, to break cost ties towards the smaller type.
double Size(const NodeTypeConfig& type) {
  double sum = 0;
  for (const auto& [name, amount] : type.resources) sum += amount.ToDouble();
  return sum;
}

// Plans one update: the nodes as placement sees them (in `cluster`, existing nodes first, then
// the ones this plan adds), the counts the limits apply to, and the launches so far.
class Planner {
 public:
  Planner(const AutoscalerConfig& config, const std::vector<NodeView>& nodes, bool totals)
      : config_(config) {
    int running = 0;
    for (const NodeView& node : nodes) {
      if (node.managed()) {
        ++per_type_[node.node_type];
        ++managed_;
        if (node.status == NodeView::Status::kLaunching) ++in_flight_;
        if (node.status == NodeView::Status::kRunning) ++running;
        if (node.status != NodeView::Status::kDraining) ++staying_[node.node_type];
      }
      // Draining nodes take nothing; keeping them in the snapshot (with nothing available)
      // keeps indexes aligned with `nodes`.
      NodeResources r = node.resources;
      if (node.status == NodeView::Status::kDraining) {
        r = NodeResources(r.total(), scheduler::ResourceSet(), r.labels());
      } else if (totals) {
        r = NodeResources(r.total(), r.total(), r.labels());
      }
      cluster_.nodes.push_back(NodeState{node.node_id, std::move(r), true});
    }
    launch_limit_ = std::max(kMinLaunchLimit,
                             static_cast<int>(std::floor(config.upscaling_speed * running)));
  }

  ClusterSnapshot& cluster() { return cluster_; }
  const std::set<size_t>& used() const { return used_; }
  const std::map<std::string, Launch>& launches() const { return launches_; }
  int staying(const std::string& type) const {
    auto it = staying_.find(type);
    return it == staying_.end() ? 0 : it->second;
  }

  // Adds nodes of `type` to the plan, and to `mirror`'s (a second planner that must see and
  // count them too), if given.
  void AddNodes(const NodeTypeConfig& type, int count, const std::string& reason,
                Planner* mirror = nullptr) {
    for (int i = 0; i < count; ++i) {
      cluster_.nodes.push_back(
          NodeState{"", NodeResources(type.resources, TypeLabels(type)), true});
    }
    per_type_[type.name] += count;
    staying_[type.name] += count;
    managed_ += count;
    in_flight_ += count;
    Launch& launch = launches_[type.name];
    launch.node_type = type.name;
    launch.count += count;
    if (launch.reason.empty()) {
      launch.reason = reason;
    } else {
      ++more_[type.name];
    }
    if (mirror != nullptr) mirror->AddNodes(type, count, reason);
  }

  // " and N more" for the launches of `type` that more than one unit asked for.
  std::string More(const std::string& type) const {
    auto it = more_.find(type);
    return it == more_.end() ? "" : " and " + std::to_string(it->second) + " more";
  }

  // How many more nodes of `type` the limits allow now (ignoring upscaling_speed).
  int Room(const NodeTypeConfig& type) const {
    auto it = per_type_.find(type.name);
    const int have = it == per_type_.end() ? 0 : it->second;
    return std::max(0, std::min(type.max_nodes - have, config_.max_nodes - managed_));
  }

  // Places the unit on the plan's nodes as they are. True (and applied) when it fits.
  bool PlaceOnPlan(const GroupRequest& request) {
    scheduler::GroupPlacement p = scheduler::PlaceGroup(cluster_, request);
    if (p.outcome != scheduler::Outcome::kPlaced) return false;
    scheduler::Apply(cluster_, request, p).IgnoreError();
    used_.insert(p.bundle_nodes.begin(), p.bundle_nodes.end());
    return true;
  }

  // The fewest nodes of `type` (up to `most`) with which `request` fits beside the plan's
  // nodes, or nullopt. Leaves the plan as it was.
  std::optional<int> FewestNew(const NodeTypeConfig& type, const GroupRequest& request, int most) {
    const size_t before = cluster_.nodes.size();
    std::optional<int> fits;
    for (int k = 1; k <= most && !fits; ++k) {
      cluster_.nodes.push_back(NodeState{"", NodeResources(type.resources, TypeLabels(type)), true});
      if (scheduler::PlaceGroup(cluster_, request).outcome == scheduler::Outcome::kPlaced) fits = k;
    }
    cluster_.nodes.resize(before);
    return fits;
  }

  // Places one unit, launching nodes for it if it must. nullopt when placed; else why not.
  std::optional<Unmet> Place(const DemandUnit& unit, Planner* mirror) {
    GroupRequest request{unit.bundles, unit.strategy};
    if (PlaceOnPlan(request)) return std::nullopt;
    const int most = static_cast<int>(unit.bundles.size());
    struct Choice {
      const NodeTypeConfig* type;
      int count;
    };
    std::optional<Choice> best;
    bool fits_some_type = false;
    for (const NodeTypeConfig& type : config_.node_types) {
      if (!FewestNew(type, request, most)) continue;
      fits_some_type = true;
      auto k = FewestNew(type, request, std::min(most, Room(type)));
      if (!k) continue;
      const auto better = [&](const Choice& c) {
        const double a = *k * type.cost, b = c.count * c.type->cost;
        return a < b || (a == b && Size(type) < Size(*c.type));
      };
      if (!best || better(*best)) best = Choice{&type, *k};
    }
    if (!fits_some_type) return Infeasible(unit);
    if (!best) {
      return Unmet{unit.source, "max_nodes reached (" + std::to_string(managed_) + " of " +
                                    std::to_string(config_.max_nodes) +
                                    " nodes, or every type that fits it at its own max_nodes)"};
    }
    if (in_flight_ >= launch_limit_) {
      return Unmet{unit.source, std::to_string(in_flight_) + " launches in flight (the limit: " +
                                    std::to_string(launch_limit_) + ", upscaling_speed " +
                                    FormatSpeed() + ")"};
    }
    AddNodes(*best->type, best->count, unit.source + " (" + DescribeBundles(unit) + ")", mirror);
    PlaceOnPlan(request);
    return std::nullopt;
  }

 private:
  Unmet Infeasible(const DemandUnit& unit) const {
    std::string types;
    for (const NodeTypeConfig& type : config_.node_types) {
      types += (types.empty() ? "" : ", ") + type.name + " " + type.resources.ToString();
    }
    return Unmet{unit.source,
                 "no node type can hold " + DescribeBundles(unit) + " (types: " + types + ")",
                 true};
  }
  std::string FormatSpeed() const {
    std::string s = std::to_string(config_.upscaling_speed);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const AutoscalerConfig& config_;
  ClusterSnapshot cluster_;
  std::set<size_t> used_;
  std::map<std::string, int> per_type_;  // managed nodes of each type, draining ones included
  std::map<std::string, int> staying_;   // ... not draining
  std::map<std::string, Launch> launches_;
  std::map<std::string, int> more_;
  int managed_ = 0;
  int in_flight_ = 0;
  int launch_limit_ = kMinLaunchLimit;
};

}  // namespace

scheduler::Labels TypeLabels(const NodeTypeConfig& type) {
  scheduler::Labels labels = type.labels;
  labels[kNodeTypeLabel] = type.name;
  return labels;
}

std::string DescribeBundles(const DemandUnit& unit) {
  std::vector<std::pair<std::string, int>> shapes;  // in order of first appearance
  for (const scheduler::Bundle& b : unit.bundles) {
    const std::string shape = b.demand.ToString();
    auto it = std::find_if(shapes.begin(), shapes.end(),
                           [&](const auto& s) { return s.first == shape; });
    if (it == shapes.end()) {
      shapes.emplace_back(shape, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [shape, n] : shapes) {
    out += (out.empty() ? "" : " + ") + std::to_string(n) + " x " + shape;
  }
  if (unit.bundles.size() > 1) {
    out += std::string(", ") + scheduler::GroupStrategyName(unit.strategy);
  }
  return out;
}

Decision Decide(const AutoscalerConfig& config, const PolicyInput& input) {
  Decision decision;
  Planner now(config, input.nodes, /*totals=*/false);
  Planner floors(config, input.nodes, /*totals=*/true);

  // min_nodes first: they are there whatever the demand.
  for (const NodeTypeConfig& type : config.node_types) {
    const int missing = std::min(type.min_nodes - now.staying(type.name), now.Room(type));
    if (missing <= 0) continue;
    now.AddNodes(type, missing, "min_nodes " + std::to_string(type.min_nodes), &floors);
  }
  // Floors on totals; what they launch joins `now` empty, and counts there.
  std::vector<Unmet> unmet;
  for (const DemandUnit& unit : input.requested) {
    for (int i = 0; i < unit.count; ++i) {
      auto why = floors.Place(unit, &now);
      if (!why) continue;
      unmet.push_back(std::move(*why));
      break;
    }
  }
  for (const DemandUnit& unit : input.waiting) {
    for (int i = 0; i < unit.count; ++i) {
      auto why = now.Place(unit, nullptr);
      if (!why) continue;
      unmet.push_back(std::move(*why));
      break;  // the same shape again would be refused for the same reason
    }
  }
  for (const auto& [type, launch] : now.launches()) {
    if (launch.count <= 0) continue;
    Launch out = launch;
    out.reason += now.More(type);
    decision.launches.push_back(std::move(out));
  }
  decision.unmet = std::move(unmet);

  // Scale down: idle past the timeout, not needed by anything placed above, above min_nodes.
  std::map<std::string, int> left;
  for (const NodeTypeConfig& type : config.node_types) left[type.name] = now.staying(type.name);
  std::vector<size_t> idle;
  for (size_t i = 0; i < input.nodes.size(); ++i) {
    const NodeView& node = input.nodes[i];
    if (!node.managed() || node.status != NodeView::Status::kRunning) continue;
    if (node.idle_s < config.idle_timeout_s) continue;
    if (now.used().count(i) || floors.used().count(i)) continue;
    idle.push_back(i);
  }
  std::stable_sort(idle.begin(), idle.end(), [&](size_t a, size_t b) {
    return input.nodes[a].idle_s > input.nodes[b].idle_s;
  });
  for (size_t i : idle) {
    const NodeView& node = input.nodes[i];
    const NodeTypeConfig* type = config.FindType(node.node_type);
    const int min_nodes = type ? type->min_nodes : 0;
    if (left[node.node_type] <= min_nodes) continue;
    --left[node.node_type];
    decision.drains.push_back({node.node_id, node.instance_id,
                               "idle for " + Seconds(node.idle_s) + " s (idle_timeout_s " +
                                   Seconds(config.idle_timeout_s) + ")"});
  }
  return decision;
}

}  // namespace rayd::autoscaler
