#pragma once
// Several objectives and constraints at once: the pure functions a multi-objective scheduler
// (MO-ASHA, Schmucker et al. 2021) and the results report are built from. No state, no I/O;
// every answer is deterministic (ties are broken by index).
//
// How it works:
//   - A trial's metrics become a point to MINIMISE (ObjectiveVector: a maximised metric is
//     negated) and a total constraint violation (TotalViolation: 0 = feasible).
//   - Trials are ranked by constrained non-dominated sorting (Deb et al. 2002, NSGA-II): a
//     smaller violation always wins, so every feasible trial ranks above every infeasible one
//     and infeasible ones rank by how far they miss; at equal violation (in particular between
//     two feasible trials) Pareto dominance decides. Within a front the crowding distance
//     prefers trials in sparse regions, which keeps a promoted set spread along the front.
//   - The report shows the Pareto front (ParetoFront) and the hypervolume it dominates up to a
//     reference point (Hypervolume), exact in any dimension.
//
// Points: every function taking points requires them to have the same, non-zero number of
// coordinates and all coordinates finite (ObjectiveVector's output always is); otherwise it
// throws std::invalid_argument. `violations`, where taken, has one entry per point, each >= 0
// (+infinity allowed) and not NaN, or std::invalid_argument.

#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace rayd::tune {

// One metric to optimise. `maximize` false = minimise ("mode: min").
struct Objective {
  std::string metric;
  bool maximize = false;
};

// "metric op bound", e.g. "latency_ms <= 5".
struct Constraint {
  enum class Op { kLessEqual, kLess, kGreaterEqual, kGreater };
  std::string metric;
  Op op = Op::kLessEqual;
  double bound = 0;
  std::string text;  // as the user wrote it, trimmed: for messages and reports
};

// "<=", "<", ">=", ">".
const char* ToString(Constraint::Op op);

// Parses "metric <= 5", "latency_ms<5", "accuracy >= 0.9", "x > -1e-3": a metric name matching
// [A-Za-z_][A-Za-z0-9_./-]*, one of <=, <, >=, >, and a finite decimal number (optional sign
// and exponent); whitespace around each part is optional. Throws std::invalid_argument with a
// one-line reason that quotes the text: no operator, empty or malformed metric name, missing
// bound, bound not a number or not finite, trailing text after the bound.
Constraint ParseConstraint(const std::string& text);

// The smallest normal double: the violation of a strict constraint ("<", ">") whose value sits
// exactly on the bound. The trial is infeasible, yet ranks ahead of any that misses by a real
// amount.
inline constexpr double kAtBoundViolation = std::numeric_limits<double>::min();

// How far `metrics` misses `c`: 0 when satisfied, else |value - bound| (at least
// kAtBoundViolation). +infinity when the metric is absent or not finite (NaN or an infinity: a
// diverged value is no evidence that the constraint holds).
double Violation(const Constraint& c, const std::map<std::string, double>& metrics);

// The sum of Violation over `constraints`; 0 for none.
double TotalViolation(const std::vector<Constraint>& constraints,
                      const std::map<std::string, double>& metrics);

// What a missing or diverged objective scores, before negation: worse than any real value yet
// far enough from the double's limits that crowding spans and hypervolume slabs stay finite.
inline constexpr double kWorstObjective = 1e300;

// The point to minimise, one coordinate per objective in order: the metric's value, negated
// when maximised. An absent, NaN or infinite value becomes kWorstObjective (the worst, after
// negation); finite values are clamped to [-kWorstObjective, kWorstObjective] so that nothing
// real is worse than absent.
std::vector<double> ObjectiveVector(const std::vector<Objective>& objectives,
                                    const std::map<std::string, double>& metrics);

// Pareto dominance for minimisation: `a` is no worse than `b` in every coordinate and better in
// at least one. Equal points do not dominate each other. Throws std::invalid_argument when the
// sizes differ.
bool Dominates(const std::vector<double>& a, const std::vector<double>& b);

// Deb et al.'s fast non-dominated sort: fronts of indices into `points`, front 0 the
// non-dominated ones, front k+1 those dominated only by members of fronts 0..k. Indices ascend
// within a front; every index appears exactly once. Empty input: no fronts. O(n^2 * dims).
std::vector<std::vector<size_t>> NonDominatedSort(const std::vector<std::vector<double>>& points);

// The same under constrained domination: `a` dominates `b` when its violation is smaller, or
// when the violations are equal and `a` Pareto-dominates `b`. So a feasible point (violation 0)
// dominates every infeasible one, infeasible points sort by violation, and feasible points by
// Pareto dominance. (Deb 2002 leaves infeasible points with equal violations incomparable; here
// Pareto dominance breaks that tie.)
std::vector<std::vector<size_t>> NonDominatedSort(const std::vector<std::vector<double>>& points,
                                                  const std::vector<double>& violations);

// NSGA-II crowding distance of each member of `front` (indices into `points`), in the order of
// `front`: per objective, the members sorted by value (ties by index), the two ends get
// +infinity and each other member the gap between its neighbours divided by the objective's
// span (max - min over the front); the distance is the sum over objectives. An objective with
// zero span adds nothing to anyone (there are no ends to tell apart). A front of one or two
// members: all +infinity. Throws std::invalid_argument for an index out of range.
std::vector<double> CrowdingDistance(const std::vector<std::vector<double>>& points,
                                     const std::vector<size_t>& front);

// Every index of `points`, best first: by constrained front (NonDominatedSort with
// `violations`), then crowding distance within the front descending, then index ascending.
// What a scheduler promotes from the top of.
std::vector<size_t> RankByParetoAndCrowding(const std::vector<std::vector<double>>& points,
                                            const std::vector<double>& violations);

// Indices (ascending) of the constrained front 0. When some point is feasible these are exactly
// the feasible points no feasible point dominates; when none is, the least-violating points
// (check `violations` before calling them a Pareto front). Empty input: empty.
std::vector<size_t> ParetoFront(const std::vector<std::vector<double>>& points,
                                const std::vector<double>& violations);

// The volume of the region dominated by `points` and bounded above by `reference`
// (minimisation): the union of the boxes [p, reference]. A point not strictly below the
// reference in every coordinate adds nothing; no such points: 0. Exact: one or two objectives
// by a sweep (O(n log n)); three or more by slicing along the last axis into slabs, each the
// (d-1)-dimensional volume of the points below it (HSO, While et al. 2006): O(n^(d-1) log n),
// meant for fronts of tens to a few hundred points. Throws std::invalid_argument when
// `reference` is empty or not finite, or a point's size differs from the reference's.
double Hypervolume(const std::vector<std::vector<double>>& points,
                   const std::vector<double>& reference);

// The reference point a sweep's hypervolume is taken at when the user gives none: per
// coordinate, the worst value among `points` plus a tenth of the coordinate's range (plus 1
// when every point has the same value), so that every point, the worst included, adds volume.
// Coordinates >= kWorstObjective (unreported or diverged) are left out. Empty when some
// coordinate has no such value, or `points` is empty. Throws std::invalid_argument when the
// points' sizes differ.
std::vector<double> DerivedReferencePoint(const std::vector<std::vector<double>>& points);

}  // namespace rayd::tune
