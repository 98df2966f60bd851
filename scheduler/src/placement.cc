// Placement policies (see placement.h for the contract).
//
// How it works:
//   - PlaceOne scans the snapshot once, in order, and stops at the first node that stays at or
//     below the spread threshold; the full scan (for the least utilised node, or for the
//     "not now" / "never" verdict) only happens when no node is below it.
//   - PlaceGroup never copies the snapshot. A Scratch records what the group being planned has
//     taken from each node it touched (a handful of nodes), with names borrowed from the
//     request, so a fit check is "base - taken >= demand" with no allocation. The base is either
//     the nodes' available resources (placing now) or their totals (could it ever fit?).
//   - Each strategy has a fast greedy pass. When it fails, an exact method decides: STRICT_PACK
//     and STRICT_SPREAD are exact by construction (one node; bipartite matching), PACK and
//     SPREAD fall back to a bounded depth-first search. kInfeasible is only returned with a
//     proof (an exact method said no on the totals); when the search runs out of budget the
//     answer is kNotNow, so waiting is never ruled out wrongly.

#include "rayd/scheduler/placement.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace rayd::scheduler {
namespace {

// Node tries the PACK/SPREAD fallback search may spend per call (about a millisecond).
constexpr int64_t kSearchBudget = 20000;

// Three-way comparison of resource names in ResourceSet's order (bytes as unsigned char), inline:
// names are a few bytes, and a memcmp call per comparison dominated the profile.
inline int CompareNames(std::string_view a, std::string_view b) {
  const size_t common = std::min(a.size(), b.size());
  for (size_t i = 0; i < common; ++i) {
    const auto x = static_cast<unsigned char>(a[i]);
    const auto y = static_cast<unsigned char>(b[i]);
    if (x != y) return x < y ? -1 : 1;
  }
  return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
}

// Looks up the names of a demand, in increasing order, in a name-ordered ResourceSet with one
// merged pass instead of one tree search per name.
class OrderedCursor {
 public:
  explicit OrderedCursor(const ResourceSet& set) : it_(set.begin()), end_(set.end()) {}
  // The amount for `name` (zero when absent). Precondition: names asked so far were smaller.
  FixedPoint Seek(std::string_view name) {
    for (; it_ != end_; ++it_) {
      const int order = CompareNames(it_->first, name);
      if (order == 0) return it_->second;
      if (order > 0) break;
    }
    return {};
  }

 private:
  ResourceSet::const_iterator it_;
  ResourceSet::const_iterator end_;
};

// demand.IsSubsetOf(set), in one merged pass.
bool FitsIn(const ResourceSet& demand, const ResourceSet& set) {
  OrderedCursor cursor(set);
  for (const auto& [name, amount] : demand) {
    if (amount > cursor.Seek(name)) return false;
  }
  return true;
}

bool IsCandidate(const NodeState& node, const Labels& selector) {
  return node.alive && (selector.empty() || MatchesLabels(node.resources.labels(), selector));
}

std::string FormatLabels(const Labels& labels) {
  std::string out = "{";
  for (const auto& [key, value] : labels) {
    if (out.size() > 1) out += ", ";
    out += key + "=" + value;
  }
  return out + "}";
}

// `amounts` restricted to the names `demand` uses, zeros included: "{CPU: 8, GPU: 0}".
std::string FormatFor(const ResourceSet& amounts, const ResourceSet& demand) {
  std::string out = "{";
  for (const auto& [name, unused] : demand) {
    if (out.size() > 1) out += ", ";
    out += name + ": " + FormatResourceAmount(name, amounts.Get(name));
  }
  return out + "}";
}

// The hybrid policy's score: after placing `demand`, the most used of the resources it names
// (used / total). nullopt when `demand` does not fit what is available.
std::optional<double> UtilisationAfter(const NodeResources& node, const ResourceSet& demand) {
  double worst = 0;
  OrderedCursor available_cursor(node.available());
  OrderedCursor total_cursor(node.total());
  for (const auto& [name, amount] : demand) {
    const int64_t available = available_cursor.Seek(name).units();
    if (amount.units() > available) return std::nullopt;
    const int64_t total = total_cursor.Seek(name).units();
    if (total <= 0) continue;
    const double used = static_cast<double>(total - available + amount.units()) / total;
    worst = std::max(worst, used);
  }
  return worst;
}

// LargestNodeFor among the candidates that match `selector`.
std::optional<size_t> LargestCandidate(const ClusterSnapshot& cluster, const ResourceSet& demand,
                                       const Labels& selector) {
  std::optional<size_t> best;
  std::tuple<size_t, double, FixedPoint> best_score;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    if (!IsCandidate(cluster.nodes[i], selector)) continue;
    const ResourceSet& total = cluster.nodes[i].resources.total();
    size_t covered = 0;
    double share = 0;
    for (const auto& [name, amount] : demand) {
      const FixedPoint have = total.Get(name);
      covered += amount <= have ? 1 : 0;
      share += std::min(1.0, have.ToDouble() / amount.ToDouble());
    }
    const std::tuple score(covered, share, total.Get(kCPU));
    if (!best || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

// Why no candidate's totals can hold `demand`. Precondition: that is the case.
std::string NeverReason(const ClusterSnapshot& cluster, const ResourceSet& demand,
                        const Labels& selector) {
  const std::optional<size_t> largest = LargestCandidate(cluster, demand, selector);
  if (!largest) {
    if (selector.empty()) return "no alive node to run " + demand.ToString();
    return "no alive node matches label selector " + FormatLabels(selector) + " (needed for " +
           demand.ToString() + ")";
  }
  const NodeState& node = cluster.nodes[*largest];
  const std::string who =
      selector.empty() ? "no node" : "no node with labels " + FormatLabels(selector);
  return who + " can ever satisfy " + demand.ToString() + ": the largest node (" + node.id +
         ") has " + FormatFor(node.resources.total(), demand);
}

bool AnyCandidateFeasible(const ClusterSnapshot& cluster, const ResourceSet& demand,
                          const Labels& selector, size_t* count = nullptr) {
  size_t found = 0;
  for (const NodeState& node : cluster.nodes) {
    if (!IsCandidate(node, selector) || !FitsIn(demand, node.resources.total())) continue;
    ++found;
    if (count == nullptr) return true;
  }
  if (count != nullptr) *count = found;
  return found > 0;
}

Placement Placed(size_t node) { return {Outcome::kPlaced, node, {}}; }
Placement NotNow(std::string reason) { return {Outcome::kNotNow, 0, std::move(reason)}; }
Placement Infeasible(std::string reason) { return {Outcome::kInfeasible, 0, std::move(reason)}; }

Placement PlaceWithHardAffinity(const ClusterSnapshot& cluster, const PlacementRequest& request) {
  const std::string& id = request.affinity->node_id;
  const std::string prefix = "hard node affinity to node " + id;
  const std::optional<size_t> index = cluster.Find(id);
  if (!index) return Infeasible(prefix + ": no such node in the cluster");
  const NodeState& node = cluster.nodes[*index];
  const ResourceSet& demand = request.demand;
  if (!node.alive) return Infeasible(prefix + ": the node is dead");
  if (!MatchesLabels(node.resources.labels(), request.label_selector)) {
    return Infeasible(prefix + ": the node does not match label selector " +
                      FormatLabels(request.label_selector));
  }
  if (!node.resources.IsFeasible(demand)) {
    return Infeasible(prefix + ": the node can never satisfy " + demand.ToString() + ": it has " +
                      FormatFor(node.resources.total(), demand));
  }
  if (!node.resources.IsAvailable(demand)) {
    return NotNow(prefix + ": the node does not have " + demand.ToString() +
                  " available now (available: " + FormatFor(node.resources.available(), demand) +
                  ")");
  }
  return Placed(*index);
}

Placement PlaceHybrid(const ClusterSnapshot& cluster, const PlacementRequest& request,
                      const HybridOptions& options) {
  const ResourceSet& demand = request.demand;
  const Labels& selector = request.label_selector;
  const double threshold = options.spread_threshold;
  if (!request.preferred_node.empty()) {
    if (std::optional<size_t> index = cluster.Find(request.preferred_node);
        index && IsCandidate(cluster.nodes[*index], selector)) {
      const auto used = UtilisationAfter(cluster.nodes[*index].resources, demand);
      if (used && *used <= threshold) return Placed(*index);
    }
  }
  std::optional<size_t> least;
  double least_used = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    if (!IsCandidate(cluster.nodes[i], selector)) continue;
    const auto used = UtilisationAfter(cluster.nodes[i].resources, demand);
    if (!used) continue;
    if (*used <= threshold) return Placed(i);
    if (*used < least_used) {
      least = i;
      least_used = *used;
    }
  }
  if (least) return Placed(*least);
  size_t feasible = 0;
  if (!AnyCandidateFeasible(cluster, demand, selector, &feasible)) {
    return Infeasible(NeverReason(cluster, demand, selector));
  }
  const std::string where =
      selector.empty() ? "no node" : "no node with labels " + FormatLabels(selector);
  return NotNow(where + " has " + demand.ToString() + " available now; " +
                std::to_string(feasible) + (feasible == 1 ? " node" : " nodes") +
                " could run it once resources free up");
}

// ---- groups ----

// A few amounts keyed by names borrowed from the request's ResourceSets (which outlive the
// call): linear search over a handful of entries beats a map and does not allocate per check.
// FixedPoint saturates, so huge sums cannot wrap.
class FlatAmounts {
 public:
  FixedPoint Get(std::string_view name) const {
    for (const auto& [entry_name, amount] : entries_) {
      if (CompareNames(entry_name, name) == 0) return amount;
    }
    return {};
  }
  void Add(const ResourceSet& amounts, bool subtract = false) {
    for (const auto& [name, amount] : amounts)
      subtract ? Slot(name) -= amount : Slot(name) += amount;
  }
  void Clear() { entries_.clear(); }

 private:
  FixedPoint& Slot(std::string_view name) {
    for (auto& [entry_name, amount] : entries_) {
      if (CompareNames(entry_name, name) == 0) return amount;
    }
    return entries_.emplace_back(name, FixedPoint()).second;
  }
  std::vector<std::pair<std::string_view, FixedPoint>> entries_;
};

// What a plan measures fits against: what is available now, or the totals (an idle cluster,
// to tell "not now" from "never").
enum class Capacity { kAvailableNow, kIdleCluster };

// The resources the group being planned has taken so far, per touched node.
class Scratch {
 public:
  Scratch(const ClusterSnapshot& cluster, Capacity capacity)
      : cluster_(cluster), capacity_(capacity) {}

  const ResourceSet& Base(size_t node) const {
    const NodeResources& resources = cluster_.nodes[node].resources;
    return capacity_ == Capacity::kAvailableNow ? resources.available() : resources.total();
  }
  // Does `demand` fit on `node` on top of what the group took there and `pending` (if any)?
  bool Fits(size_t node, const ResourceSet& demand, const FlatAmounts* pending = nullptr) const {
    const FlatAmounts* taken = Taken(node);
    if (taken == nullptr && pending == nullptr) return FitsIn(demand, Base(node));
    OrderedCursor base(Base(node));
    for (const auto& [name, amount] : demand) {
      FixedPoint need = amount;
      if (taken != nullptr) need += taken->Get(name);
      if (pending != nullptr) need += pending->Get(name);
      if (need > base.Seek(name)) return false;
    }
    return true;
  }
  void Take(size_t node, const ResourceSet& demand) {
    auto it = std::find_if(touched_.begin(), touched_.end(),
                           [&](const Touch& touch) { return touch.node == node; });
    if (it == touched_.end()) it = touched_.insert(touched_.end(), Touch{node, 0, {}});
    ++it->bundles;
    it->taken.Add(demand);
  }
  void Give(size_t node, const ResourceSet& demand) {
    auto it = std::find_if(touched_.begin(), touched_.end(),
                           [&](const Touch& touch) { return touch.node == node; });
    if (it == touched_.end()) return;
    it->taken.Add(demand, /*subtract=*/true);
    if (--it->bundles == 0) touched_.erase(it);
  }
  bool IsTouched(size_t node) const { return Taken(node) != nullptr; }
  // Touched nodes in the order the group first used them.
  std::vector<size_t> TouchedNodes() const {
    std::vector<size_t> nodes;
    for (const Touch& touch : touched_) nodes.push_back(touch.node);
    return nodes;
  }

 private:
  struct Touch {
    size_t node;
    int bundles;
    FlatAmounts taken;
  };
  const FlatAmounts* Taken(size_t node) const {
    for (const Touch& touch : touched_) {
      if (touch.node == node) return &touch.taken;
    }
    return nullptr;
  }

  const ClusterSnapshot& cluster_;
  const Capacity capacity_;
  std::vector<Touch> touched_;
};

bool SameBundle(const Bundle& a, const Bundle& b) {
  return a.demand == b.demand && a.label_selector == b.label_selector;
}

enum class SearchResult { kFound, kNone, kGaveUp };

// Plans one group request. Every method fills `nodes_` (per bundle) and says whether it
// placed every bundle; nodes_ is meaningless after a false.
class GroupPlanner {
 public:
  GroupPlanner(const ClusterSnapshot& cluster, const GroupRequest& request)
      : cluster_(cluster),
        request_(request),
        bundles_(request.bundles),
        nodes_(request.bundles.size(), 0) {}

  GroupPlacement Plan();

 private:
  GroupPlacement PlanStrictPack();
  GroupPlacement PlanStrictSpread();
  GroupPlacement PlanPackOrSpread();

  // PACK: repeatedly take the node that can hold the most of the remaining bundles.
  bool GreedyPack();
  // SPREAD: round-robin over nodes the group has not used yet, then reuse.
  bool GreedySpread();
  // First fit in bundle order, any node (used for the idle-cluster check).
  bool FirstFit(Capacity capacity);
  // Each bundle on the first node, in order, that no earlier bundle took.
  bool GreedyDistinct(Capacity capacity, size_t* placed);
  // Size of a maximum bipartite matching of bundles to distinct nodes (Kuhn's algorithm).
  size_t MaxMatching(Capacity capacity);
  // Bounded exhaustive search for any assignment (nodes may be shared).
  SearchResult Search(Capacity capacity);

  // Nodes where bundle `b` fits alone under `capacity`.
  std::vector<size_t> CandidatesFor(size_t b, Capacity capacity) const;
  bool AllBundlesSame() const;
  std::string Name() const { return GroupStrategyName(request_.strategy); }
  ResourceSet Sum() const;
  GroupPlacement Placed() const { return {Outcome::kPlaced, nodes_, {}}; }
  GroupPlacement Fail(Outcome outcome, const std::string& why) const {
    return {outcome, {}, Name() + ": " + why};
  }
  // kInfeasible naming the first bundle no node's totals can hold, if there is one.
  std::optional<GroupPlacement> SomeBundleNeverFits() const;

  const ClusterSnapshot& cluster_;
  const GroupRequest& request_;
  const std::vector<Bundle>& bundles_;
  std::vector<size_t> nodes_;
};

GroupPlacement GroupPlanner::Plan() {
  if (bundles_.empty()) return Placed();
  if (request_.strategy == GroupStrategy::kStrictPack) return PlanStrictPack();
  if (request_.strategy == GroupStrategy::kStrictSpread) return PlanStrictSpread();
  return PlanPackOrSpread();
}

ResourceSet GroupPlanner::Sum() const {
  ResourceSet sum;
  for (const Bundle& bundle : bundles_) sum += bundle.demand;
  return sum;
}

bool GroupPlanner::AllBundlesSame() const {
  return std::all_of(bundles_.begin(), bundles_.end(),
                     [&](const Bundle& b) { return SameBundle(b, bundles_.front()); });
}

std::vector<size_t> GroupPlanner::CandidatesFor(size_t b, Capacity capacity) const {
  const Scratch empty(cluster_, capacity);
  std::vector<size_t> out;
  for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
    if (IsCandidate(cluster_.nodes[i], bundles_[b].label_selector) &&
        empty.Fits(i, bundles_[b].demand)) {
      out.push_back(i);
    }
  }
  return out;
}

std::optional<GroupPlacement> GroupPlanner::SomeBundleNeverFits() const {
  for (size_t b = 0; b < bundles_.size(); ++b) {
    const Bundle& bundle = bundles_[b];
    if (!AnyCandidateFeasible(cluster_, bundle.demand, bundle.label_selector)) {
      return Fail(Outcome::kInfeasible,
                  "bundle " + std::to_string(b) + " can never be placed: " +
                      NeverReason(cluster_, bundle.demand, bundle.label_selector));
    }
  }
  return std::nullopt;
}

GroupPlacement GroupPlanner::PlanStrictPack() {
  // One node must carry every bundle's labels.
  Labels selector;
  for (size_t b = 0; b < bundles_.size(); ++b) {
    for (const auto& [key, value] : bundles_[b].label_selector) {
      auto [it, inserted] = selector.emplace(key, value);
      if (!inserted && it->second != value) {
        return Fail(Outcome::kInfeasible, "bundles ask for conflicting labels " + key + "=" +
                                              it->second + " and " + key + "=" + value +
                                              ", so no one node can hold them all");
      }
    }
  }
  const ResourceSet sum = Sum();
  // First fit in snapshot order: packs towards the front like the hybrid policy, and stops
  // at the first fitting node instead of scanning all of them for the tightest one.
  for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
    if (IsCandidate(cluster_.nodes[i], selector) &&
        FitsIn(sum, cluster_.nodes[i].resources.available())) {
      std::fill(nodes_.begin(), nodes_.end(), i);
      return Placed();
    }
  }
  if (!AnyCandidateFeasible(cluster_, sum, selector)) {
    return Fail(Outcome::kInfeasible, "the whole group must fit on one node, but " +
                                          NeverReason(cluster_, sum, selector));
  }
  const std::string where =
      selector.empty() ? "no node" : "no node with labels " + FormatLabels(selector);
  return Fail(Outcome::kNotNow,
              where + " has the whole group " + sum.ToString() + " available now");
}

bool GroupPlanner::GreedyDistinct(Capacity capacity, size_t* placed) {
  Scratch scratch(cluster_, capacity);
  *placed = 0;
  for (size_t b = 0; b < bundles_.size(); ++b) {
    size_t node = 0;
    for (; node < cluster_.nodes.size(); ++node) {
      if (!scratch.IsTouched(node) &&
          IsCandidate(cluster_.nodes[node], bundles_[b].label_selector) &&
          scratch.Fits(node, bundles_[b].demand)) {
        break;
      }
    }
    if (node == cluster_.nodes.size()) return false;
    scratch.Take(node, bundles_[b].demand);
    nodes_[b] = node;
    ++*placed;
  }
  return true;
}

size_t GroupPlanner::MaxMatching(Capacity capacity) {
  const size_t k = bundles_.size();
  std::vector<std::vector<size_t>> candidates(k);
  for (size_t b = 0; b < k; ++b) candidates[b] = CandidatesFor(b, capacity);
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> owner(cluster_.nodes.size(), kNone);  // node -> bundle
  std::vector<size_t> assigned(k, kNone);                   // bundle -> node
  std::vector<char> visited(cluster_.nodes.size());
  // Kuhn's augmenting path from bundle b; the recursion is at most k deep.
  auto augment = [&](auto&& self, size_t b) -> bool {
    for (size_t node : candidates[b]) {
      if (visited[node]) continue;
      visited[node] = 1;
      if (owner[node] == kNone || self(self, owner[node])) {
        owner[node] = b;
        assigned[b] = node;
        return true;
      }
    }
    return false;
  };
  size_t matched = 0;
  for (size_t b = 0; b < k; ++b) {
    std::fill(visited.begin(), visited.end(), 0);
    if (augment(augment, b)) ++matched;
  }
  for (size_t b = 0; b < k; ++b) nodes_[b] = assigned[b];
  return matched;
}

GroupPlacement GroupPlanner::PlanStrictSpread() {
  const size_t k = bundles_.size();
  size_t placed = 0;
  if (GreedyDistinct(Capacity::kAvailableNow, &placed)) return Placed();
  // Identical bundles: greedy is exact (fewer than k nodes fit one), so skip the matching.
  size_t now = AllBundlesSame() ? placed : MaxMatching(Capacity::kAvailableNow);
  if (now == k) return Placed();
  if (auto never = SomeBundleNeverFits()) return *never;
  size_t ever = 0;
  if (!GreedyDistinct(Capacity::kIdleCluster, &ever)) {
    ever = AllBundlesSame() ? ever : MaxMatching(Capacity::kIdleCluster);
  }
  const std::string need =
      "the " + std::to_string(k) + " bundles need " + std::to_string(k) + " distinct nodes";
  if (ever < k) {
    return Fail(Outcome::kInfeasible, need + ", but at most " + std::to_string(ever) +
                                          " alive nodes can ever hold one each");
  }
  return Fail(Outcome::kNotNow, need + " with resources available now; only " +
                                    std::to_string(now) + " can take one each");
}

bool GroupPlanner::GreedyPack() {
  Scratch scratch(cluster_, Capacity::kAvailableNow);
  std::vector<size_t> remaining(bundles_.size());
  for (size_t b = 0; b < remaining.size(); ++b) remaining[b] = b;
  FlatAmounts pending;
  std::vector<char> assigned(bundles_.size(), 0);
  // First fit of `remaining` onto `node`; with `commit`, takes them for real and marks them
  // assigned. Returns how many fit.
  // run_start[b]: the first bundle of the run of equal neighbours b belongs to. Once one bundle
  // of a run does not fit a node, the rest of the run cannot either.
  std::vector<size_t> run_start(bundles_.size(), 0);
  for (size_t b = 1; b < bundles_.size(); ++b) {
    run_start[b] = SameBundle(bundles_[b], bundles_[b - 1]) ? run_start[b - 1] : b;
  }
  auto fill = [&](size_t node, bool commit) {
    pending.Clear();
    size_t count = 0;
    size_t failed_run = bundles_.size();
    for (size_t b : remaining) {
      const Bundle& bundle = bundles_[b];
      if (run_start[b] == failed_run) continue;
      if (!IsCandidate(cluster_.nodes[node], bundle.label_selector) ||
          !scratch.Fits(node, bundle.demand, commit ? nullptr : &pending)) {
        failed_run = run_start[b];
        continue;
      }
      ++count;
      if (!commit) {
        pending.Add(bundle.demand);
        continue;
      }
      scratch.Take(node, bundle.demand);
      nodes_[b] = node;
      assigned[b] = 1;
    }
    return count;
  };
  while (!remaining.empty()) {
    size_t best_node = 0;
    size_t best_count = 0;
    for (size_t node = 0; node < cluster_.nodes.size() && best_count < remaining.size(); ++node) {
      // A touched node already took every remaining bundle it could: amounts only grow.
      if (scratch.IsTouched(node)) continue;
      const size_t count = fill(node, false);
      if (count > best_count) {
        best_node = node;
        best_count = count;
      }
    }
    if (best_count == 0) return false;
    fill(best_node, true);
    std::erase_if(remaining, [&](size_t b) { return assigned[b] != 0; });
  }
  return true;
}

bool GroupPlanner::GreedySpread() {
  Scratch scratch(cluster_, Capacity::kAvailableNow);
  const size_t n = cluster_.nodes.size();
  size_t cursor = 0;
  for (size_t b = 0; b < bundles_.size(); ++b) {
    const Bundle& bundle = bundles_[b];
    auto fits = [&](size_t node) {
      return IsCandidate(cluster_.nodes[node], bundle.label_selector) &&
             scratch.Fits(node, bundle.demand);
    };
    std::optional<size_t> chosen;
    for (size_t step = 0; step < n && !chosen; ++step) {
      const size_t node = (cursor + step) % n;
      if (!scratch.IsTouched(node) && fits(node)) chosen = node;
    }
    if (chosen) {
      cursor = *chosen + 1;
    } else {
      for (size_t node : scratch.TouchedNodes()) {
        if (fits(node)) {
          chosen = node;
          break;
        }
      }
    }
    if (!chosen) return false;
    scratch.Take(*chosen, bundle.demand);
    nodes_[b] = *chosen;
  }
  return true;
}

bool GroupPlanner::FirstFit(Capacity capacity) {
  Scratch scratch(cluster_, capacity);
  for (size_t b = 0; b < bundles_.size(); ++b) {
    size_t node = 0;
    for (; node < cluster_.nodes.size(); ++node) {
      if (IsCandidate(cluster_.nodes[node], bundles_[b].label_selector) &&
          scratch.Fits(node, bundles_[b].demand)) {
        break;
      }
    }
    if (node == cluster_.nodes.size()) return false;
    scratch.Take(node, bundles_[b].demand);
    nodes_[b] = node;
  }
  return true;
}

SearchResult GroupPlanner::Search(Capacity capacity) {
  const size_t k = bundles_.size();
  std::vector<std::vector<size_t>> candidates(k);
  std::vector<size_t> first_same(k);  // index of the first bundle equal to this one
  for (size_t b = 0; b < k; ++b) {
    candidates[b] = CandidatesFor(b, capacity);
    if (candidates[b].empty()) return SearchResult::kNone;
    first_same[b] = b;
    for (size_t a = 0; a < b; ++a) {
      if (SameBundle(bundles_[a], bundles_[b])) {
        first_same[b] = a;
        break;
      }
    }
  }
  // Most constrained first; equal bundles next to each other so that they can be assigned in
  // non-decreasing candidate order (any other order is the same plan with bundles swapped).
  std::vector<size_t> order(k);
  for (size_t b = 0; b < k; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(candidates[a].size(), first_same[a]) <
           std::pair(candidates[b].size(), first_same[b]);
  });
  Scratch scratch(cluster_, capacity);
  std::vector<size_t> chosen(k, 0);  // per position in `order`, index into its candidates
  int64_t budget = kSearchBudget;
  auto dfs = [&](auto&& self, size_t pos) -> SearchResult {
    if (pos == k) return SearchResult::kFound;
    const size_t b = order[pos];
    const bool same_as_previous = pos > 0 && first_same[order[pos - 1]] == first_same[b];
    for (size_t c = same_as_previous ? chosen[pos - 1] : 0; c < candidates[b].size(); ++c) {
      if (--budget < 0) return SearchResult::kGaveUp;
      const size_t node = candidates[b][c];
      if (!scratch.Fits(node, bundles_[b].demand)) continue;
      scratch.Take(node, bundles_[b].demand);
      chosen[pos] = c;
      nodes_[b] = node;
      const SearchResult result = self(self, pos + 1);
      if (result != SearchResult::kNone) return result;
      scratch.Give(node, bundles_[b].demand);
    }
    return SearchResult::kNone;
  };
  return dfs(dfs, 0);
}

GroupPlacement GroupPlanner::PlanPackOrSpread() {
  const bool pack = request_.strategy == GroupStrategy::kPack;
  if (pack ? GreedyPack() : GreedySpread()) return Placed();
  // For identical bundles the greedy pass is exact: every node ended up holding as many as
  // it can, so there is nothing to search.
  const bool same = AllBundlesSame();
  if (!same && Search(Capacity::kAvailableNow) == SearchResult::kFound) return Placed();
  if (auto never = SomeBundleNeverFits()) return *never;
  const std::string group =
      "the " + std::to_string(bundles_.size()) + " bundles (" + Sum().ToString() + " in all)";
  bool ever = bundles_.size() == 1 || FirstFit(Capacity::kIdleCluster);
  if (!ever && !same) ever = Search(Capacity::kIdleCluster) != SearchResult::kNone;
  if (!ever) {
    return Fail(Outcome::kInfeasible,
                group + " can never fit the cluster at once, even with every node idle");
  }
  return Fail(Outcome::kNotNow, group + " do not fit the resources available now");
}

// Per node, the sum of the bundles a plan puts there, in first-use order. InvalidArgument when
// the plan does not describe `request` on `cluster`.
Result<std::vector<std::pair<size_t, ResourceSet>>> PerNodeDemand(const ClusterSnapshot& cluster,
                                                                  const GroupRequest& request,
                                                                  const GroupPlacement& placement) {
  if (placement.outcome != Outcome::kPlaced) {
    return Status::InvalidArgument("cannot apply a placement that was not placed: " +
                                   placement.reason);
  }
  if (placement.bundle_nodes.size() != request.bundles.size()) {
    return Status::InvalidArgument(
        "placement has " + std::to_string(placement.bundle_nodes.size()) +
        " bundle nodes for a group of " + std::to_string(request.bundles.size()) + " bundles");
  }
  std::vector<std::pair<size_t, ResourceSet>> per_node;
  for (size_t b = 0; b < request.bundles.size(); ++b) {
    const size_t node = placement.bundle_nodes[b];
    if (node >= cluster.nodes.size()) {
      return Status::InvalidArgument("bundle " + std::to_string(b) + " names node index " +
                                     std::to_string(node) + ", past the end of the snapshot");
    }
    auto it = std::find_if(per_node.begin(), per_node.end(),
                           [&](const auto& entry) { return entry.first == node; });
    if (it == per_node.end()) it = per_node.insert(per_node.end(), {node, ResourceSet()});
    it->second += request.bundles[b].demand;
  }
  return per_node;
}

}  // namespace

bool MatchesLabels(const Labels& node_labels, const Labels& selector) {
  for (const auto& [key, value] : selector) {
    auto it = node_labels.find(key);
    if (it == node_labels.end() || it->second != value) return false;
  }
  return true;
}


std::optional<size_t> ClusterSnapshot::Find(const std::string& id) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].id == id) return i;
  }
  return std::nullopt;
}

Placement PlaceOne(const ClusterSnapshot& cluster, const PlacementRequest& request,
                   const HybridOptions& options) {
  if (request.affinity && !request.affinity->soft) return PlaceWithHardAffinity(cluster, request);
  if (request.affinity) {
    if (std::optional<size_t> index = cluster.Find(request.affinity->node_id);
        index && IsCandidate(cluster.nodes[*index], request.label_selector) &&
        cluster.nodes[*index].resources.IsAvailable(request.demand)) {
      return Placed(*index);
    }
  }
  return PlaceHybrid(cluster, request, options);
}

const char* GroupStrategyName(GroupStrategy strategy) {
  static constexpr const char* kNames[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
  const auto index = static_cast<size_t>(strategy);
  return index < std::size(kNames) ? kNames[index] : "UNKNOWN";
}

GroupPlacement PlaceGroup(const ClusterSnapshot& cluster, const GroupRequest& request) {
  return GroupPlanner(cluster, request).Plan();
}

Status Apply(ClusterSnapshot& cluster, const GroupRequest& request,
             const GroupPlacement& placement) {
  auto per_node = PerNodeDemand(cluster, request, placement);
  if (!per_node.ok()) return per_node.status();
  for (const auto& [node, demand] : *per_node) {
    const NodeState& state = cluster.nodes[node];
    if (!state.alive) {
      return Status::InvalidArgument("node " + state.id + " in the placement is dead");
    }
    if (!state.resources.IsAvailable(demand)) {
      return Status::InvalidArgument("node " + state.id + " no longer has " + demand.ToString() +
                                     " available for the group (available: " +
                                     FormatFor(state.resources.available(), demand) + ")");
    }
  }
  for (const auto& [node, demand] : *per_node) {
    const bool taken = cluster.nodes[node].resources.TryAllocate(demand);
    (void)taken;  // checked above: every node's sum is available
  }
  return Status::Ok();
}

void Unapply(ClusterSnapshot& cluster, const GroupRequest& request,
             const GroupPlacement& placement) {
  auto per_node = PerNodeDemand(cluster, request, placement);
  if (!per_node.ok()) return;
  for (const auto& [node, demand] : *per_node) cluster.nodes[node].resources.Release(demand);
}

std::optional<size_t> LargestNodeFor(const ClusterSnapshot& cluster, const ResourceSet& demand) {
  return LargestCandidate(cluster, demand, Labels());
}

}  // namespace rayd::scheduler
