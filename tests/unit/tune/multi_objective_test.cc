// Multi-objective ranking on hand-made points: every expected front, distance and volume below
// is worked out by hand (the arithmetic is in the comments), and the hypervolume is also checked
// against inclusion-exclusion over all subsets of small random sets.

#include <rayd/tune/multi_objective.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Catch::Matchers::Contains;
using rayd::tune::Constraint;
using rayd::tune::CrowdingDistance;
using rayd::tune::Dominates;
using rayd::tune::Hypervolume;
using rayd::tune::kAtBoundViolation;
using rayd::tune::kWorstObjective;
using rayd::tune::NonDominatedSort;
using rayd::tune::Objective;
using rayd::tune::ObjectiveVector;
using rayd::tune::ParetoFront;
using rayd::tune::ParseConstraint;
using rayd::tune::RankByParetoAndCrowding;
using rayd::tune::TotalViolation;
using rayd::tune::Violation;
using Op = Constraint::Op;
using Points = std::vector<std::vector<double>>;
using Fronts = std::vector<std::vector<size_t>>;
using Metrics = std::map<std::string, double>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The union of the boxes [p, ref] by inclusion-exclusion: the sum over non-empty subsets S of
// (-1)^(|S|+1) times the box of the coordinate-wise maximum of S. Exponential; an oracle for
// a handful of points that shares no code with Hypervolume.
double InclusionExclusion(const Points& points, const std::vector<double>& ref) {
  double total = 0;
  const size_t n = points.size();
  for (uint32_t subset = 1; subset < (1u << n); ++subset) {
    std::vector<double> corner(ref.size(), -kInf);
    int members = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!(subset & (1u << i))) continue;
      ++members;
      for (size_t m = 0; m < ref.size(); ++m) corner[m] = std::max(corner[m], points[i][m]);
    }
    double box = 1;
    for (size_t m = 0; m < ref.size(); ++m) box *= std::max(0.0, ref[m] - corner[m]);
    total += (members % 2 == 1 ? 1 : -1) * box;
  }
  return total;
}

// `n` points of `dims` small integer coordinates in [0, 9], so every volume is exact.
Points IntegerPoints(size_t n, size_t dims, uint32_t seed) {
  std::mt19937 rng(seed);
  Points points(n, std::vector<double>(dims));
  for (auto& p : points) {
    for (double& x : p) x = static_cast<double>(rng() % 10);
  }
  return points;
}

}  // namespace

TEST_CASE("ParseConstraint reads each operator with or without spaces", "[tune]") {
  Constraint c = ParseConstraint("metric <= 5");
  CHECK(c.metric == "metric");
  CHECK(c.op == Op::kLessEqual);
  CHECK(c.bound == 5);
  CHECK(c.text == "metric <= 5");

  c = ParseConstraint("latency_ms<5");
  CHECK(c.metric == "latency_ms");
  CHECK(c.op == Op::kLess);
  CHECK(c.bound == 5);

  c = ParseConstraint("accuracy >= 0.9");
  CHECK(c.metric == "accuracy");
  CHECK(c.op == Op::kGreaterEqual);
  CHECK(c.bound == 0.9);

  c = ParseConstraint("x > -1e-3");
  CHECK(c.metric == "x");
  CHECK(c.op == Op::kGreater);
  CHECK(c.bound == -1e-3);

  // The whole name alphabet, a leading '+', and surrounding blanks (trimmed from `text`).
  c = ParseConstraint("  eval/loss-ema.v_2>=+3  ");
  CHECK(c.metric == "eval/loss-ema.v_2");
  CHECK(c.op == Op::kGreaterEqual);
  CHECK(c.bound == 3);
  CHECK(c.text == "eval/loss-ema.v_2>=+3");

  c = ParseConstraint("_m<-.5");
  CHECK(c.metric == "_m");
  CHECK(c.op == Op::kLess);
  CHECK(c.bound == -0.5);
  CHECK(std::string(rayd::tune::ToString(Op::kGreater)) == ">");
}

TEST_CASE("ParseConstraint names what is wrong", "[tune]") {
  CHECK_THROWS_AS(ParseConstraint("latency_ms 5"), std::invalid_argument);
  CHECK_THROWS_WITH(ParseConstraint("latency_ms 5"),
                    Contains("constraint 'latency_ms 5'") && Contains("no comparison operator"));
  CHECK_THROWS_WITH(ParseConstraint("latency_ms == 5"), Contains("no comparison operator"));
  CHECK_THROWS_WITH(ParseConstraint(""), Contains("no comparison operator"));
  CHECK_THROWS_WITH(ParseConstraint("<= 5"), Contains("no metric name before '<='"));
  CHECK_THROWS_WITH(ParseConstraint("  > 5"), Contains("no metric name before '>'"));
  CHECK_THROWS_WITH(ParseConstraint("2fast <= 5"), Contains("metric name '2fast' must match"));
  CHECK_THROWS_WITH(ParseConstraint("lat ency <= 5"), Contains("metric name 'lat ency'"));
  CHECK_THROWS_WITH(ParseConstraint("x =< 5"), Contains("metric name 'x ='"));
  CHECK_THROWS_WITH(ParseConstraint("x <= "), Contains("no bound after '<='"));
  CHECK_THROWS_WITH(ParseConstraint("x <= abc"), Contains("bound 'abc' is not a number"));
  CHECK_THROWS_WITH(ParseConstraint("x <= -"), Contains("is not a number"));
  CHECK_THROWS_WITH(ParseConstraint("x <= inf"), Contains("bound 'inf' is not a finite number"));
  CHECK_THROWS_WITH(ParseConstraint("x <= nan"), Contains("not a finite number"));
  CHECK_THROWS_WITH(ParseConstraint("x <= 1e999"), Contains("not a finite number"));
  CHECK_THROWS_WITH(ParseConstraint("x <= 5 ms"), Contains("trailing text 'ms' after the bound"));
  CHECK_THROWS_WITH(ParseConstraint("x <= 5 <= 6"), Contains("trailing text '<= 6'"));
}

TEST_CASE("Violation is the miss past the bound and infinite without a value", "[tune]") {
  const Constraint le = ParseConstraint("latency_ms <= 5");
  CHECK(Violation(le, {{"latency_ms", 3}}) == 0);
  CHECK(Violation(le, {{"latency_ms", 5}}) == 0);
  CHECK(Violation(le, {{"latency_ms", 7}}) == 2);

  // Strict: on the bound is a miss, the smallest there is.
  const Constraint lt = ParseConstraint("latency_ms < 5");
  CHECK(Violation(lt, {{"latency_ms", 4}}) == 0);
  CHECK(Violation(lt, {{"latency_ms", 5}}) == kAtBoundViolation);
  CHECK(kAtBoundViolation > 0);
  CHECK(Violation(lt, {{"latency_ms", 5.5}}) == 0.5);

  const Constraint ge = ParseConstraint("acc >= 0.5");
  CHECK(Violation(ge, {{"acc", 0.75}}) == 0);
  CHECK(Violation(ge, {{"acc", 0.25}}) == 0.25);
  const Constraint gt = ParseConstraint("acc > 0.5");
  CHECK(Violation(gt, {{"acc", 0.5}}) == kAtBoundViolation);
  CHECK(Violation(gt, {{"acc", 0.5625}}) == 0);

  // Absent, NaN or infinite: unknown, so as infeasible as can be.
  CHECK(Violation(le, {{"other", 1}}) == kInf);
  CHECK(Violation(le, {{"latency_ms", kNaN}}) == kInf);
  CHECK(Violation(ge, {{"acc", kInf}}) == kInf);
  CHECK(Violation(le, {{"latency_ms", -kInf}}) == kInf);
}

TEST_CASE("TotalViolation sums the misses", "[tune]") {
  const std::vector<Constraint> cs = {ParseConstraint("latency_ms <= 5"),
                                      ParseConstraint("memory_mb <= 2000")};
  CHECK(TotalViolation(cs, {{"latency_ms", 4}, {"memory_mb", 1500}}) == 0);
  CHECK(TotalViolation(cs, {{"latency_ms", 4}, {"memory_mb", 2500}}) == 500);
  CHECK(TotalViolation(cs, {{"latency_ms", 7}, {"memory_mb", 2500}}) == 502);  // 2 + 500
  CHECK(TotalViolation(cs, {{"latency_ms", 4}}) == kInf);
  CHECK(TotalViolation(cs, {{"latency_ms", kNaN}, {"memory_mb", 0}}) == kInf);
  CHECK(TotalViolation({}, {}) == 0);
}

TEST_CASE("ObjectiveVector negates maximised metrics and scores missing ones worst", "[tune]") {
  const std::vector<Objective> objs = {{"val_accuracy", true}, {"params", false}};
  CHECK(ObjectiveVector(objs, {{"val_accuracy", 0.9}, {"params", 1e6}}) ==
        std::vector<double>{-0.9, 1e6});
  CHECK(ObjectiveVector(objs, {{"params", 3}}) == std::vector<double>{kWorstObjective, 3});
  CHECK(ObjectiveVector(objs, {{"val_accuracy", kNaN}, {"params", kInf}}) ==
        std::vector<double>{kWorstObjective, kWorstObjective});
  // +inf accuracy is divergence, not the best score; -inf params likewise.
  CHECK(ObjectiveVector(objs, {{"val_accuracy", kInf}, {"params", -kInf}}) ==
        std::vector<double>{kWorstObjective, kWorstObjective});
  // Clamped, so nothing real is worse than absent.
  CHECK(ObjectiveVector(objs, {{"val_accuracy", 1e305}, {"params", 1e305}}) ==
        std::vector<double>{-kWorstObjective, kWorstObjective});
  CHECK(ObjectiveVector({}, {{"x", 1}}).empty());
}

TEST_CASE("Dominates is strict Pareto dominance for minimisation", "[tune]") {
  CHECK(Dominates({1, 2}, {2, 2}));
  CHECK_FALSE(Dominates({2, 2}, {1, 2}));
  CHECK_FALSE(Dominates({1, 2}, {1, 2}));
  CHECK_FALSE(Dominates({1, 3}, {2, 2}));
  CHECK_FALSE(Dominates({2, 2}, {1, 3}));
  CHECK(Dominates({0, 0, 0}, {0, 0, 1}));
  CHECK_THROWS_AS(Dominates({1, 2}, {1, 2, 3}), std::invalid_argument);
}

TEST_CASE("NonDominatedSort peels three fronts and keeps duplicates together", "[tune]") {
  const Points points = {
      {1, 5},  // 0: front 0
      {2, 3},  // 1: front 0
      {4, 1},  // 2: front 0
      {2, 3},  // 3: front 0, equal to 1 (neither dominates)
      {3, 4},  // 4: front 1, dominated by 1 and 3 only
      {5, 2},  // 5: front 1, dominated by 2 only
      {4, 5},  // 6: front 2, dominated by 0, 1, 3 and 4
  };
  CHECK(NonDominatedSort(points) == Fronts{{0, 1, 2, 3}, {4, 5}, {6}});
  CHECK(NonDominatedSort(Points{}).empty());
  CHECK(NonDominatedSort(Points{{7, 7}}) == Fronts{{0}});
  CHECK(NonDominatedSort(Points{{1, 1}, {1, 1}, {1, 1}}) == Fronts{{0, 1, 2}});
  CHECK_THROWS_WITH(NonDominatedSort(Points{{1, 2}, {1, 2, 3}}),
                    Contains("point 1 has 3 coordinates"));
  CHECK_THROWS_WITH(NonDominatedSort(Points{{1, kNaN}}), Contains("non-finite"));
}

TEST_CASE("Constrained sort puts feasible first and infeasible by violation", "[tune]") {
  const Points points = {
      {1, 1},  // 0: violation 2, dominated by 5 at the same violation
      {5, 5},  // 1: feasible
      {3, 3},  // 2: violation 0.5, better objectives than every feasible point
      {4, 6},  // 3: feasible
      {6, 4},  // 4: feasible
      {0, 0},  // 5: violation 2
      {2, 2},  // 6: violation +infinity (a missing metric)
  };
  const std::vector<double> violations = {2, 0, 0.5, 0, 0, 2, kInf};
  CHECK(NonDominatedSort(points, violations) == Fronts{{1, 3, 4}, {2}, {5}, {0}, {6}});
  CHECK(ParetoFront(points, violations) == std::vector<size_t>{1, 3, 4});
  // All feasible: the plain sort.
  CHECK(NonDominatedSort(points, std::vector<double>(7, 0)) == NonDominatedSort(points));

  // None feasible: front 0 is the least-violating, Pareto among themselves.
  const Points none = {{1, 2}, {2, 1}, {0, 0}, {2, 2}};
  CHECK(ParetoFront(none, {3, 3, 5, 3}) == std::vector<size_t>{0, 1});
  CHECK(ParetoFront(Points{}, {}).empty());

  CHECK_THROWS_WITH(NonDominatedSort(points, {0, 0}), Contains("2 violations for 7 points"));
  CHECK_THROWS_WITH(NonDominatedSort(Points{{1, 1}}, {-1}), Contains("negative or NaN"));
  CHECK_THROWS_WITH(NonDominatedSort(Points{{1, 1}}, {kNaN}), Contains("negative or NaN"));
}

TEST_CASE("CrowdingDistance on a four-point front worked by hand", "[tune]") {
  // A=(0,10) B=(1,6) C=(3,3) D=(10,0); both spans are 10.
  //   objective 0, sorted A B C D: A, D infinite; B (3-0)/10 = 0.3; C (10-1)/10 = 0.9
  //   objective 1, sorted D C B A: D, A infinite; C (6-0)/10 = 0.6; B (10-3)/10 = 0.7
  //   B = 0.3 + 0.7 = 1.0, C = 0.9 + 0.6 = 1.5
  const Points points = {{0, 10}, {1, 6}, {3, 3}, {10, 0}};
  // Answers come in the order of `front`, not of `points`.
  const std::vector<double> d = CrowdingDistance(points, {3, 1, 0, 2});
  REQUIRE(d.size() == 4);
  CHECK(d[0] == kInf);
  CHECK(d[1] == Approx(1.0));
  CHECK(d[2] == kInf);
  CHECK(d[3] == Approx(1.5));
}

TEST_CASE("CrowdingDistance edge cases", "[tune]") {
  // y is constant: it adds nothing, even to the ends. x: span 3, middles (2-0)/3 and (3-1)/3.
  const Points line = {{0, 5}, {1, 5}, {2, 5}, {3, 5}};
  const std::vector<double> d = CrowdingDistance(line, {0, 1, 2, 3});
  CHECK(d[0] == kInf);
  CHECK(d[1] == Approx(2.0 / 3));
  CHECK(d[2] == Approx(2.0 / 3));
  CHECK(d[3] == kInf);
  // Identical points: no span anywhere, so no ends and all zero.
  CHECK(CrowdingDistance(Points{{1, 1}, {1, 1}, {1, 1}}, {0, 1, 2}) ==
        std::vector<double>{0, 0, 0});
  CHECK(CrowdingDistance(line, {2, 1}) == std::vector<double>{kInf, kInf});
  CHECK(CrowdingDistance(line, {2}) == std::vector<double>{kInf});
  CHECK(CrowdingDistance(line, {}).empty());
  // Extreme but finite values: the span overflows a plain subtraction, the ratios do not. The
  // middle point's neighbours are the two ends, so its gap is the whole span: 1.
  const Points wide = {{-1.5e308}, {0}, {1.5e308}};
  CHECK(CrowdingDistance(wide, {0, 1, 2})[1] == Approx(1.0));
  CHECK_THROWS_WITH(CrowdingDistance(line, {0, 4}), Contains("index 4 out of range"));
}

TEST_CASE("RankByParetoAndCrowding orders by front, crowding, then index", "[tune]") {
  const Points points = {
      {0, 10},  // 0 A: front 0, crowding inf
      {1, 6},   // 1 B: front 0, crowding 1.0 (worked out in the CrowdingDistance test)
      {3, 3},   // 2 C: front 0, crowding 1.5
      {10, 0},  // 3 D: front 0, crowding inf
      {5, 5},   // 4: front 1 (dominated by C), a front of two: inf
      {0, 0},   // 5: infeasible, last despite the best objectives
      {2, 7},   // 6: front 1 (dominated by B), inf
  };
  const std::vector<double> violations = {0, 0, 0, 0, 0, 1, 0};
  const std::vector<size_t> want = {0, 3, 2, 1, 4, 6, 5};
  CHECK(RankByParetoAndCrowding(points, violations) == want);
  CHECK(RankByParetoAndCrowding(points, violations) == want);  // no hidden state
  // Ties everywhere: index order.
  CHECK(RankByParetoAndCrowding(Points{{1, 1}, {1, 1}, {1, 1}, {1, 1}}, {0, 0, 0, 0}) ==
        std::vector<size_t>{0, 1, 2, 3});
  CHECK(RankByParetoAndCrowding(Points{}, {}).empty());
}

TEST_CASE("Hypervolume in two dimensions by hand", "[tune]") {
  // Reference (4,4). Swept by x: (1,3) adds 3*1, (2,2) adds 2*1, (3,1) adds 1*1 = 6.
  const std::vector<double> ref = {4, 4};
  CHECK(Hypervolume({{1, 3}, {2, 2}, {3, 1}}, ref) == 6);
  CHECK(Hypervolume({{3, 1}, {1, 3}, {2, 2}}, ref) == 6);
  // A dominated point and a duplicate change nothing.
  CHECK(Hypervolume({{1, 3}, {2, 2}, {3, 1}, {3, 3}, {2, 2}}, ref) == 6);
  // Points not strictly inside the reference add nothing: past it, or on its boundary.
  CHECK(Hypervolume({{1, 3}, {2, 2}, {3, 1}, {5, 0}, {0, 4}, {0, 9}}, ref) == 6);
  CHECK(Hypervolume({{4, 0}, {5, 5}}, ref) == 0);
  CHECK(Hypervolume({}, ref) == 0);
  // One dimension: the reference minus the best point.
  CHECK(Hypervolume({{3}, {1}, {5}}, {4}) == 3);
}

TEST_CASE("Hypervolume in three dimensions by hand", "[tune]") {
  const std::vector<double> ref = {4, 4, 4};
  // One point: its box, 3 * 2 * 1.
  CHECK(Hypervolume({{1, 2, 3}}, ref) == 6);
  // a=(1,2,3): 3*2*1 = 6. b=(2,1,1): 2*3*3 = 18. a and b overlap in the box of (2,2,3):
  // 2*2*1 = 4. Union: 6 + 18 - 4 = 20.
  CHECK(Hypervolume({{1, 2, 3}, {2, 1, 1}}, ref) == 20);
  // With c=(3,3,0): 1*1*4 = 4; a^c at (3,3,3): 1; b^c at (3,3,1): 3; a^b^c at (3,3,3): 1.
  // Union: 6 + 18 + 4 - 4 - 1 - 3 + 1 = 21.
  CHECK(Hypervolume({{1, 2, 3}, {2, 1, 1}, {3, 3, 0}}, ref) == 21);
  CHECK(Hypervolume({{1, 2, 3}, {2, 1, 1}, {3, 3, 4}}, ref) == 20);  // c on the boundary
}

TEST_CASE("Hypervolume in four dimensions agrees with inclusion-exclusion", "[tune]") {
  // a=(1,2,3,0): 3*2*1*4 = 24. b=(2,1,1,2): 2*3*3*2 = 36. Overlap at (2,2,3,2): 2*2*1*2 = 8.
  // Union: 24 + 36 - 8 = 52.
  const std::vector<double> ref = {4, 4, 4, 4};
  CHECK(Hypervolume({{1, 2, 3, 0}, {2, 1, 1, 2}}, ref) == 52);
  CHECK(Hypervolume({{1, 2, 3, 0}, {2, 1, 1, 2}, {1, 2, 3, 1}}, ref) == 52);  // dominated
}

TEST_CASE("Hypervolume matches inclusion-exclusion on random small sets", "[tune]") {
  for (size_t dims = 2; dims <= 5; ++dims) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      const Points points = IntegerPoints(8, dims, seed * 31 + static_cast<uint32_t>(dims));
      const std::vector<double> ref(dims, 10);
      INFO("dims " << dims << " seed " << seed);
      CHECK(Hypervolume(points, ref) == InclusionExclusion(points, ref));
    }
  }
}

TEST_CASE("Hypervolume in three dimensions equals four with a flat extra axis", "[tune]") {
  // A fourth coordinate 0 under a reference of 1 is a slab of thickness 1: the same volume.
  // Put it last (the routine slices it first) and first (it ends in the 2-D sweep).
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    const Points points = IntegerPoints(40, 3, seed);
    Points last, first;
    for (const auto& p : points) {
      last.push_back({p[0], p[1], p[2], 0});
      first.push_back({0, p[0], p[1], p[2]});
    }
    const double v3 = Hypervolume(points, {10, 10, 10});
    INFO("seed " << seed);
    CHECK(v3 > 0);
    CHECK(Hypervolume(last, {10, 10, 10, 1}) == v3);
    CHECK(Hypervolume(first, {1, 10, 10, 10}) == v3);
  }
}

TEST_CASE("Hypervolume rejects mismatched dimensions", "[tune]") {
  CHECK_THROWS_WITH(Hypervolume({{1, 2, 3}}, {4, 4}),
                    Contains("point 0 has 3 coordinates, the reference 2"));
  CHECK_THROWS_WITH(Hypervolume({{1, 2}, {1}}, {4, 4}), Contains("point 1 has 1 coordinates"));
  CHECK_THROWS_WITH(Hypervolume({}, {}), Contains("no coordinates"));
  CHECK_THROWS_WITH(Hypervolume({{1, 1}}, {kInf, 4}), Contains("not finite"));
  CHECK_THROWS_WITH(Hypervolume({{1, kNaN}}, {4, 4}), Contains("non-finite"));
}
