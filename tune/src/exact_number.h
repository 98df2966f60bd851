#pragma once
// How tune's error messages print a number (a bound, a step, a value from a file).

#include <string>

namespace rayd::tune::internal {

// Integral values without a fraction, others in the shortest form that reads back the same.
std::string ExactNumber(double x);

}  // namespace rayd::tune::internal
