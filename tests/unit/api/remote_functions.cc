#include "remote_functions.h"

namespace othertu {

int Square(int x) { return x * x; }

int SumAll(std::vector<rayd::ObjectRef<int>> refs) {
  int sum = 0;
  for (const auto& v : rayd::Get(refs)) sum += *v;
  return sum;
}

int Deref(rayd::ObjectRef<int> ref) { return *rayd::Get(ref); }

int At(std::vector<int> v, int i) { return v.at(static_cast<size_t>(i)); }

}  // namespace othertu

RAYD_REMOTE(othertu::Square, othertu::SumAll);
RAYD_REMOTE(othertu::Deref);
RAYD_REMOTE(othertu::At);
