#pragma once
// The rule every resource request of a task, an actor or an actor call meets, checked when it
// is submitted (Ray's CheckTaskOptions, with Ray's rule):
// - a resource has a name;
// - an amount is a finite number above zero; zero only for "CPU" and "GPU", where it means
//   "none" instead of the default (Ray's num_cpus=0), and refused for any other name, where it
//   asks for nothing and is a slip;
// - an amount above 1 is whole: 0.25 of a GPU is a share of one device, 2.5 GPUs is none of
//   them (Ray refuses it for every resource, and so does rayd, so a request means the same
//   on both).
// RaydError names the resource and the amount.

#include <cmath>
#include <sstream>
#include <string>

#include "rayd/api/errors.h"
#include "rayd/api/function_traits.h"

namespace rayd::internal {

template <typename Map>
requires ResourceMap<Map>
void CheckTaskOptions(const Map& resources) {
  for (const auto& [key, value] : resources) {
    const std::string name(key);
    const double amount = static_cast<double>(value);
    std::ostringstream what_stream;
    what_stream << "resource \"" << name << "\" = " << amount << ": ";
    const std::string what = what_stream.str();
    if (name.empty()) throw RaydError(what + "a resource needs a name");
    if (!std::isfinite(amount) || amount < 0) throw RaydError(what + "amounts must be positive");
    if (amount == 0 && name != "CPU" && name != "GPU") {
      throw RaydError(what + "a zero amount asks for nothing; leave the resource out");
    }
    if (amount > 1 && std::floor(amount) != amount) {
      throw RaydError(what + "an amount above 1 must be a whole number");
    }
  }
}

}  // namespace rayd::internal
