#include "exact_number.h"

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace rayd::tune::internal {

std::string ExactNumber(double x) {
  if (std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 1e15) {
    return std::to_string(static_cast<int64_t>(x));
  }
  return nlohmann::json(x).dump();
}

}  // namespace rayd::tune::internal
