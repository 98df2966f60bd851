#pragma once
// Remote functions defined and registered in another translation unit (remote_functions.cc),
// to show that RAYD_REMOTE registrations are found across translation units.

#include <string>
#include <vector>

#include "rayd/api.h"

namespace othertu {

int Square(int x);
// Sums the values of refs carried inside a value (nested refs, fetched with Get in the task).
int SumAll(std::vector<rayd::ObjectRef<int>> refs);
// Reads a ref passed as a ref (kRefAsRef) and fetches it in the task.
int Deref(rayd::ObjectRef<int> ref);
// Throws std::out_of_range.
int At(std::vector<int> v, int i);

}  // namespace othertu
