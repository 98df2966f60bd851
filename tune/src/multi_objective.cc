// Constraint parsing, constrained non-dominated sorting, crowding distance and hypervolume. The
// algorithms are from the papers named in multi_objective.h; nothing here keeps state.

#include <rayd/tune/multi_objective.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace rayd::tune {
namespace {

using Point = std::vector<double>;
using Fronts = std::vector<std::vector<size_t>>;

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void BadInput(const std::string& message) { throw std::invalid_argument(message); }

std::string Trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

bool IsMetricName(const std::string& name) {
  auto head = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto tail = [&](char c) {
    return head(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '/' ||
           c == '-';
  };
  return !name.empty() && head(name[0]) && std::all_of(name.begin() + 1, name.end(), tail);
}

// The bound of constraint `text` from `s` (trimmed, non-empty); throws on anything but one
// finite number.
double ParseBound(const std::string& text, const std::string& s) {
  const std::string where = "constraint '" + text + "': ";
  // from_chars takes no leading '+'; a user may well write one.
  const size_t skip = (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') ? 1 : 0;
  double bound = 0;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data() + skip, end, bound);
  if (ec == std::errc::invalid_argument) BadInput(where + "bound '" + s + "' is not a number");
  if (ptr != end) {
    BadInput(where + "trailing text '" + Trim(std::string(ptr, end)) + "' after the bound");
  }
  if (ec == std::errc::result_out_of_range || !std::isfinite(bound)) {
    BadInput(where + "bound '" + s + "' is not a finite number");
  }
  return bound;
}

// Throws unless every point has `points[0].size()` > 0 coordinates, all finite.
void CheckPoints(const std::vector<Point>& points, const char* where) {
  if (points.empty()) return;
  const size_t dims = points[0].size();
  if (dims == 0) BadInput(std::string(where) + ": points have no coordinates");
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].size() != dims) {
      BadInput(std::string(where) + ": point " + std::to_string(i) + " has " +
              std::to_string(points[i].size()) + " coordinates, point 0 has " +
              std::to_string(dims));
    }
    for (double x : points[i]) {
      if (!std::isfinite(x)) {
        BadInput(std::string(where) + ": point " + std::to_string(i) +
                " has a non-finite coordinate");
      }
    }
  }
}

void CheckViolations(size_t n, const std::vector<double>& violations, const char* where) {
  if (violations.size() != n) {
    BadInput(std::string(where) + ": " + std::to_string(violations.size()) + " violations for " +
            std::to_string(n) + " points");
  }
  for (double v : violations) {
    if (!(v >= 0)) BadInput(std::string(where) + ": a violation is negative or NaN");
  }
}

// Deb et al.'s fast non-dominated sort over n items under the strict partial order
// `dominates(i, j)`.
template <class Dominates>
Fronts SortInto(size_t n, Dominates dominates) {
  std::vector<std::vector<size_t>> dominated_by(n);  // i -> the items i dominates
  std::vector<size_t> dominators(n, 0);              // how many items dominate i
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (dominates(i, j)) {
        dominated_by[i].push_back(j);
        ++dominators[j];
      } else if (dominates(j, i)) {
        dominated_by[j].push_back(i);
        ++dominators[i];
      }
    }
  }
  Fronts fronts;
  std::vector<size_t> current;
  for (size_t i = 0; i < n; ++i) {
    if (dominators[i] == 0) current.push_back(i);
  }
  while (!current.empty()) {
    std::vector<size_t> next;
    for (size_t p : current) {
      for (size_t q : dominated_by[p]) {
        if (--dominators[q] == 0) next.push_back(q);
      }
    }
    std::sort(next.begin(), next.end());
    fronts.push_back(std::move(current));
    current = std::move(next);
  }
  return fronts;
}

// hi - lo as two halves, so the gap between any two finite doubles stays finite; crowding only
// uses ratios of gaps, which halving does not change.
double HalfGap(double hi, double lo) { return hi * 0.5 - lo * 0.5; }

using PointRefs = std::vector<const Point*>;

// The area dominated by `points` (all strictly below `ref` in both of their first two
// coordinates): sorted by x, each point adds the strip between its y and the lowest y so far.
double Area2d(PointRefs points, const Point& ref) {
  std::sort(points.begin(), points.end(), [](const Point* a, const Point* b) {
    return (*a)[0] != (*b)[0] ? (*a)[0] < (*b)[0] : (*a)[1] < (*b)[1];
  });
  double area = 0;
  double lowest_y = ref[1];
  for (const Point* p : points) {
    if ((*p)[1] >= lowest_y) continue;  // dominated by a point already swept
    area += (ref[0] - (*p)[0]) * (lowest_y - (*p)[1]);
    lowest_y = (*p)[1];
  }
  return area;
}

// The volume dominated by `points` in their first `dims` coordinates (every point strictly
// below `ref` there). For dims >= 3, HSO: sorted along the last axis, the slab between the
// i-th and the next distinct value (or the reference) is covered exactly by the first i points'
// (dims-1)-dimensional volume.
double Volume(PointRefs points, const Point& ref, size_t dims) {
  if (points.empty()) return 0;
  if (dims == 1) {
    double lowest = ref[0];
    for (const Point* p : points) lowest = std::min(lowest, (*p)[0]);
    return ref[0] - lowest;
  }
  if (dims == 2) return Area2d(std::move(points), ref);
  const size_t axis = dims - 1;
  std::sort(points.begin(), points.end(),
            [axis](const Point* a, const Point* b) { return (*a)[axis] < (*b)[axis]; });
  double volume = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const double from = (*points[i])[axis];
    const double to = i + 1 < points.size() ? (*points[i + 1])[axis] : ref[axis];
    if (to <= from) continue;  // the next point shares this slab
    const PointRefs below(points.begin(), points.begin() + i + 1);
    volume += Volume(below, ref, dims - 1) * (to - from);
  }
  return volume;
}

}  // namespace

const char* ToString(Constraint::Op op) {
  switch (op) {
    case Constraint::Op::kLessEqual:
      return "<=";
    case Constraint::Op::kLess:
      return "<";
    case Constraint::Op::kGreaterEqual:
      return ">=";
    case Constraint::Op::kGreater:
      return ">";
  }
  return "?";
}

Constraint ParseConstraint(const std::string& text) {
  Constraint c;
  c.text = Trim(text);
  const std::string where = "constraint '" + c.text + "': ";
  const size_t at = c.text.find_first_of("<>");
  if (at == std::string::npos) BadInput(where + "no comparison operator (<=, <, >=, >)");
  const bool less = c.text[at] == '<';
  const bool or_equal = at + 1 < c.text.size() && c.text[at + 1] == '=';
  using Op = Constraint::Op;
  c.op = less ? (or_equal ? Op::kLessEqual : Op::kLess)
              : (or_equal ? Op::kGreaterEqual : Op::kGreater);

  c.metric = Trim(c.text.substr(0, at));
  if (c.metric.empty()) BadInput(where + "no metric name before '" + ToString(c.op) + "'");
  if (!IsMetricName(c.metric)) {
    BadInput(where + "metric name '" + c.metric + "' must match [A-Za-z_][A-Za-z0-9_./-]*");
  }
  const std::string rest = Trim(c.text.substr(at + (or_equal ? 2 : 1)));
  if (rest.empty()) BadInput(where + "no bound after '" + ToString(c.op) + "'");
  c.bound = ParseBound(c.text, rest);
  return c;
}

double Violation(const Constraint& c, const std::map<std::string, double>& metrics) {
  const auto it = metrics.find(c.metric);
  if (it == metrics.end() || !std::isfinite(it->second)) return kInf;
  const double v = it->second;
  switch (c.op) {
    case Constraint::Op::kLessEqual:
      return v <= c.bound ? 0 : v - c.bound;
    case Constraint::Op::kLess:
      return v < c.bound ? 0 : std::max(v - c.bound, kAtBoundViolation);
    case Constraint::Op::kGreaterEqual:
      return v >= c.bound ? 0 : c.bound - v;
    case Constraint::Op::kGreater:
      return v > c.bound ? 0 : std::max(c.bound - v, kAtBoundViolation);
  }
  return kInf;
}

double TotalViolation(const std::vector<Constraint>& constraints,
                      const std::map<std::string, double>& metrics) {
  double total = 0;
  for (const Constraint& c : constraints) total += Violation(c, metrics);
  return total;
}

std::vector<double> ObjectiveVector(const std::vector<Objective>& objectives,
                                    const std::map<std::string, double>& metrics) {
  std::vector<double> point;
  point.reserve(objectives.size());
  for (const Objective& o : objectives) {
    const auto it = metrics.find(o.metric);
    if (it == metrics.end() || !std::isfinite(it->second)) {
      point.push_back(kWorstObjective);
      continue;
    }
    const double x = o.maximize ? -it->second : it->second;
    point.push_back(std::clamp(x, -kWorstObjective, kWorstObjective));
  }
  return point;
}

bool Dominates(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) {
    BadInput("Dominates: points of " + std::to_string(a.size()) + " and " +
            std::to_string(b.size()) + " coordinates");
  }
  bool better_somewhere = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) return false;
    if (a[i] < b[i]) better_somewhere = true;
  }
  return better_somewhere;
}

std::vector<std::vector<size_t>> NonDominatedSort(const std::vector<std::vector<double>>& points) {
  CheckPoints(points, "NonDominatedSort");
  return SortInto(points.size(),
                  [&](size_t i, size_t j) { return Dominates(points[i], points[j]); });
}

std::vector<std::vector<size_t>> NonDominatedSort(const std::vector<std::vector<double>>& points,
                                                  const std::vector<double>& violations) {
  CheckPoints(points, "NonDominatedSort");
  CheckViolations(points.size(), violations, "NonDominatedSort");
  return SortInto(points.size(), [&](size_t i, size_t j) {
    if (violations[i] != violations[j]) return violations[i] < violations[j];
    return Dominates(points[i], points[j]);
  });
}

std::vector<double> CrowdingDistance(const std::vector<std::vector<double>>& points,
                                     const std::vector<size_t>& front) {
  CheckPoints(points, "CrowdingDistance");
  for (size_t i : front) {
    if (i >= points.size()) {
      BadInput("CrowdingDistance: index " + std::to_string(i) + " out of range for " +
              std::to_string(points.size()) + " points");
    }
  }
  const size_t k = front.size();
  std::vector<double> distance(k, k <= 2 ? kInf : 0.0);
  if (k <= 2) return distance;
  std::vector<size_t> order(k);  // positions in `front`
  for (size_t m = 0; m < points[front[0]].size(); ++m) {
    auto value = [&](size_t pos) { return points[front[pos]][m]; };
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return value(a) != value(b) ? value(a) < value(b) : front[a] < front[b];
    });
    const double span = HalfGap(value(order[k - 1]), value(order[0]));
    if (span <= 0) continue;
    distance[order[0]] = kInf;
    distance[order[k - 1]] = kInf;
    for (size_t r = 1; r + 1 < k; ++r) {
      distance[order[r]] += HalfGap(value(order[r + 1]), value(order[r - 1])) / span;
    }
  }
  return distance;
}

std::vector<size_t> RankByParetoAndCrowding(const std::vector<std::vector<double>>& points,
                                            const std::vector<double>& violations) {
  std::vector<size_t> ranking;
  ranking.reserve(points.size());
  for (const std::vector<size_t>& front : NonDominatedSort(points, violations)) {
    const std::vector<double> distance = CrowdingDistance(points, front);
    std::vector<size_t> order(front.size());  // positions in `front`
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return distance[a] != distance[b] ? distance[a] > distance[b] : front[a] < front[b];
    });
    for (size_t pos : order) ranking.push_back(front[pos]);
  }
  return ranking;
}

std::vector<size_t> ParetoFront(const std::vector<std::vector<double>>& points,
                                const std::vector<double>& violations) {
  Fronts fronts = NonDominatedSort(points, violations);
  return fronts.empty() ? std::vector<size_t>{} : std::move(fronts[0]);
}

double Hypervolume(const std::vector<std::vector<double>>& points,
                   const std::vector<double>& reference) {
  if (reference.empty()) BadInput("Hypervolume: the reference point has no coordinates");
  for (double x : reference) {
    if (!std::isfinite(x)) BadInput("Hypervolume: the reference point is not finite");
  }
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].size() != reference.size()) {
      BadInput("Hypervolume: point " + std::to_string(i) + " has " +
              std::to_string(points[i].size()) + " coordinates, the reference " +
              std::to_string(reference.size()));
    }
  }
  CheckPoints(points, "Hypervolume");
  PointRefs inside;
  for (const Point& p : points) {
    bool below = true;
    for (size_t m = 0; m < p.size(); ++m) below = below && p[m] < reference[m];
    if (below) inside.push_back(&p);
  }
  return Volume(std::move(inside), reference, reference.size());
}

std::vector<double> DerivedReferencePoint(const std::vector<std::vector<double>>& points) {
  if (points.empty()) return {};
  const size_t dims = points.front().size();
  std::vector<double> worst(dims, -kWorstObjective), best(dims, kWorstObjective);
  for (const auto& p : points) {
    if (p.size() != dims) BadInput("DerivedReferencePoint: points of different sizes");
    for (size_t d = 0; d < dims; ++d) {
      if (p[d] >= kWorstObjective) continue;  // not reported, or diverged
      worst[d] = std::max(worst[d], p[d]);
      best[d] = std::min(best[d], p[d]);
    }
  }
  std::vector<double> reference(dims);
  for (size_t d = 0; d < dims; ++d) {
    if (worst[d] < best[d]) return {};  // no point has this coordinate
    const double range = worst[d] - best[d];
    reference[d] = worst[d] + (range > 0 ? 0.1 * range : 1);
  }
  return reference;
}

}  // namespace rayd::tune
