#pragma once
// The benchmark functions of bench/search, as Optuna's and BoTorch's test suites define them
// (bench/search/optuna_peer.py has the same in Python): Branin on [-5, 10] x [0, 15] (minimum
// 0.397887) and Hartmann-6 on [0, 1]^6 (minimum -3.32237).

#include <array>
#include <cmath>
#include <vector>

namespace rayd::bench {

inline double Branin(double x1, double x2) {
  const double a = 1, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6, s = 10,
               t = 1 / (8 * M_PI);
  const double u = x2 - b * x1 * x1 + c * x1 - r;
  return a * u * u + s * (1 - t) * std::cos(x1) + s;
}

inline double Hartmann6(const std::vector<double>& x) {
  static constexpr std::array<double, 4> kAlpha = {1.0, 1.2, 3.0, 3.2};
  static constexpr double kA[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                      {0.05, 10, 17, 0.1, 8, 14},
                                      {3, 3.5, 1.7, 10, 17, 8},
                                      {17, 8, 0.05, 10, 0.1, 14}};
  static constexpr double kP[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                      {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                      {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                      {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += kA[i][j] * (x[j] - kP[i][j]) * (x[j] - kP[i][j]);
    sum += kAlpha[i] * std::exp(-inner);
  }
  return -sum;
}

}  // namespace rayd::bench
