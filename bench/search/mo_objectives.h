#pragma once
// The multi-objective test problems of bench/search (mo_search_bench; optuna_mo_peer.py has the
// same in Python), as Zitzler, Deb and Thiele (2000) and Deb et al. (2002) define them, every
// objective minimised and every variable in [0, 1]:
//   ZDT1  f1 = x0, g = 1 + 9 * mean(x1..), f2 = g (1 - sqrt(f1 / g))     front f2 = 1 - sqrt(f1)
//   ZDT2  the same with f2 = g (1 - (f1 / g)^2)                          front f2 = 1 - f1^2
//   ZDT3  the same with f2 = g (1 - sqrt(f1 / g) - f1 / g sin(10 pi f1))  five disjoint pieces
//   DTLZ2 three objectives, g = sum over x2.. of (x - 1/2)^2, f = (1 + g) times the unit
//         sphere's point at angles x0 pi/2, x1 pi/2                      front: the unit sphere
// The fronts lie at g = 1 (ZDT) and g = 0 (DTLZ2). Reference points, as BoTorch's test problems
// set them for small budgets: (11, 11) for ZDT, (1.1, 1.1, 1.1) for DTLZ2. The evolutionary
// papers' (1.1, 1.1) for ZDT tells nothing apart at n = 30 within 400 evaluations: nearly every
// search's hypervolume there is 0 (a ZDT1 point counts only once g < 1.1, a mean over 29
// variables below 0.011).

#include <cmath>
#include <string>
#include <vector>

namespace rayd::bench {

inline double ZdtG(const std::vector<double>& x) {
  double sum = 0;
  for (size_t i = 1; i < x.size(); ++i) sum += x[i];
  return 1 + 9 * sum / static_cast<double>(x.size() - 1);
}

inline std::vector<double> Zdt1(const std::vector<double>& x) {
  const double f1 = x[0], g = ZdtG(x);
  return {f1, g * (1 - std::sqrt(f1 / g))};
}

inline std::vector<double> Zdt2(const std::vector<double>& x) {
  const double f1 = x[0], g = ZdtG(x);
  return {f1, g * (1 - (f1 / g) * (f1 / g))};
}

inline std::vector<double> Zdt3(const std::vector<double>& x) {
  const double f1 = x[0], g = ZdtG(x);
  return {f1, g * (1 - std::sqrt(f1 / g) - f1 / g * std::sin(10 * M_PI * f1))};
}

inline std::vector<double> Dtlz2(const std::vector<double>& x) {
  double g = 0;
  for (size_t i = 2; i < x.size(); ++i) g += (x[i] - 0.5) * (x[i] - 0.5);
  const double a = x[0] * M_PI / 2, b = x[1] * M_PI / 2;
  return {(1 + g) * std::cos(a) * std::cos(b), (1 + g) * std::cos(a) * std::sin(b),
          (1 + g) * std::sin(a)};
}

struct MoProblem {
  std::string name;
  int num_vars;
  std::vector<double> (*f)(const std::vector<double>&);
  std::vector<double> reference;
};

// The problems at the sizes the bench runs them: ZDT at n = 30 as the papers do, DTLZ2 at
// n = 12 (k = 10 distance variables).
inline std::vector<MoProblem> MoProblems(int zdt_vars = 30, int dtlz_vars = 12) {
  return {{"zdt1", zdt_vars, Zdt1, {11, 11}},
          {"zdt2", zdt_vars, Zdt2, {11, 11}},
          {"zdt3", zdt_vars, Zdt3, {11, 11}},
          {"dtlz2", dtlz_vars, Dtlz2, {1.1, 1.1, 1.1}}};
}

}  // namespace rayd::bench
