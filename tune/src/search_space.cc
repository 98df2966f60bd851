// Domains and the variant generator. Every draw goes through the helpers below, which turn the
// raw 64-bit output of the one std::mt19937_64 into numbers with explicit arithmetic instead of
// <random>'s distributions (whose algorithms the standard leaves to each library), so a seed
// gives the same configs wherever rayd is built.

#include <rayd/tune/search_space.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <utility>

#include "exact_number.h"

namespace rayd::tune {
namespace {

using internal::ExactNumber;

// A double in [0, 1) from the top 53 bits of one draw.
double Uniform01(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double UniformReal(Rng& rng, double lower, double upper) {
  double x = lower + Uniform01(rng) * (upper - lower);
  // lower + u * (upper - lower) can round up to upper when u is within an ulp of 1.
  return x < upper ? x : std::nextafter(upper, lower);
}

// An integer in [0, n), n > 0, without modulo bias: reject the first 2^64 mod n raw values.
uint64_t UniformIndex(Rng& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

// A standard normal draw (Box-Muller; the second value of the pair is dropped so every draw
// consumes exactly two raw values).
double StandardNormal(Rng& rng) {
  double u1 = 1.0 - Uniform01(rng);  // (0, 1]: log(u1) is finite
  double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// numpy's np.round (half to even), which Ray's Quantized uses.
double RoundHalfEven(double x) { return std::nearbyint(x); }

// Rounds `x` to a multiple of q, then moves it back inside [lower, upper] (Validate ensures a
// multiple lies there). The final clamp only absorbs floating-point error of k * q.
double Quantize(double x, double q, double lower, double upper) {
  double r = RoundHalfEven(x / q) * q;
  const double eps = 1e-9 * q;
  if (r < lower - eps) r += q;
  if (r > upper + eps) r -= q;
  return std::clamp(r, lower, upper);
}

bool IsMultiple(double v, double q) {
  double k = std::round(v / q);
  return std::fabs(v - k * q) <= 1e-9 * std::max(std::fabs(v), q);
}

double LogUniformDraw(Rng& rng, double lower, double upper) {
  double x = std::pow(10.0, UniformReal(rng, std::log10(lower), std::log10(upper)));
  // pow may round onto either bound; keep [lower, upper).
  if (x >= upper) x = std::nextafter(upper, lower);
  return std::max(x, lower);
}

}  // namespace

Domain Domain::GridSearch(std::vector<nlohmann::json> values) {
  Domain d;
  d.kind_ = Kind::kGridSearch;
  d.values_ = std::move(values);
  return d;
}

Domain Domain::Choice(std::vector<nlohmann::json> values) {
  Domain d;
  d.kind_ = Kind::kChoice;
  d.values_ = std::move(values);
  return d;
}

Domain Domain::Uniform(double lower, double upper) {
  Domain d;
  d.kind_ = Kind::kUniform;
  d.lower_ = lower;
  d.upper_ = upper;
  return d;
}

Domain Domain::QUniform(double lower, double upper, double q) {
  Domain d = Uniform(lower, upper);
  d.kind_ = Kind::kQUniform;
  d.q_ = q;
  return d;
}

Domain Domain::LogUniform(double lower, double upper) {
  Domain d = Uniform(lower, upper);
  d.kind_ = Kind::kLogUniform;
  return d;
}

Domain Domain::QLogUniform(double lower, double upper, double q) {
  Domain d = Uniform(lower, upper);
  d.kind_ = Kind::kQLogUniform;
  d.q_ = q;
  return d;
}

Domain Domain::RandInt(int64_t lower, int64_t upper) {
  Domain d = Uniform(static_cast<double>(lower), static_cast<double>(upper));
  d.kind_ = Kind::kRandInt;
  return d;
}

Domain Domain::QRandInt(int64_t lower, int64_t upper, int64_t q) {
  Domain d = Uniform(static_cast<double>(lower), static_cast<double>(upper));
  d.kind_ = Kind::kQRandInt;
  d.q_ = static_cast<double>(q);
  return d;
}

Domain Domain::Randn(double mean, double sd) {
  Domain d = Uniform(mean, sd);
  d.kind_ = Kind::kRandn;
  return d;
}

const char* Domain::name() const {
  switch (kind_) {
    case Kind::kGridSearch:
      return "grid_search";
    case Kind::kChoice:
      return "choice";
    case Kind::kUniform:
      return "uniform";
    case Kind::kQUniform:
      return "quniform";
    case Kind::kLogUniform:
      return "loguniform";
    case Kind::kQLogUniform:
      return "qloguniform";
    case Kind::kRandInt:
      return "randint";
    case Kind::kQRandInt:
      return "qrandint";
    case Kind::kRandn:
      return "randn";
  }
  return "unknown";
}

nlohmann::json Domain::Sample(Rng& rng) const {
  switch (kind_) {
    case Kind::kGridSearch:
    case Kind::kChoice:
      if (values_.empty()) throw std::invalid_argument(std::string(name()) + ": no values");
      return values_[UniformIndex(rng, values_.size())];
    case Kind::kUniform:
      return UniformReal(rng, lower_, upper_);
    case Kind::kQUniform:
      return Quantize(UniformReal(rng, lower_, upper_), q_, lower_, upper_);
    case Kind::kLogUniform:
      return LogUniformDraw(rng, lower_, upper_);
    case Kind::kQLogUniform:
      return Quantize(LogUniformDraw(rng, lower_, upper_), q_, lower_, upper_);
    case Kind::kRandInt: {
      auto lo = static_cast<int64_t>(lower_);
      auto span = static_cast<uint64_t>(static_cast<int64_t>(upper_) - lo);
      return lo + static_cast<int64_t>(UniformIndex(rng, span));
    }
    case Kind::kQRandInt: {
      auto lo = static_cast<int64_t>(lower_);
      auto hi = static_cast<int64_t>(upper_);
      auto q = static_cast<int64_t>(q_);
      int64_t x = lo + static_cast<int64_t>(UniformIndex(rng, static_cast<uint64_t>(hi - lo) + 1));
      auto v = static_cast<int64_t>(RoundHalfEven(static_cast<double>(x) / q_)) * q;
      if (v < lo) v += q;
      if (v > hi) v -= q;
      return v;
    }
    case Kind::kRandn:
      return lower_ + upper_ * StandardNormal(rng);
  }
  return nullptr;
}

bool Domain::Contains(const nlohmann::json& value) const {
  switch (kind_) {
    case Kind::kGridSearch:
    case Kind::kChoice:
      return std::find(values_.begin(), values_.end(), value) != values_.end();
    case Kind::kRandInt:
    case Kind::kQRandInt: {
      if (!value.is_number_integer()) return false;
      // Bounds as doubles are exact for |x| < 2^53, far past any sensible hyperparameter.
      auto v = static_cast<double>(value.get<int64_t>());
      if (kind_ == Kind::kRandInt) return v >= lower_ && v < upper_;
      return v >= lower_ && v <= upper_ && value.get<int64_t>() % static_cast<int64_t>(q_) == 0;
    }
    default:
      break;
  }
  if (!value.is_number()) return false;
  double v = value.get<double>();
  if (!std::isfinite(v)) return false;
  switch (kind_) {
    case Kind::kUniform:
    case Kind::kLogUniform:
      return v >= lower_ && v < upper_;
    case Kind::kQUniform:
    case Kind::kQLogUniform:
      // Rounding to q can land on upper itself (Ray's Quantized does the same).
      return v >= lower_ && v <= upper_ && IsMultiple(v, q_);
    case Kind::kRandn:
      return true;
    default:
      return false;
  }
}

nlohmann::json Domain::ToJson() const {
  nlohmann::json args;
  switch (kind_) {
    case Kind::kGridSearch:
    case Kind::kChoice:
      args = values_;
      break;
    case Kind::kUniform:
    case Kind::kLogUniform:
    case Kind::kRandn:
      args = {lower_, upper_};
      break;
    case Kind::kQUniform:
    case Kind::kQLogUniform:
      args = {lower_, upper_, q_};
      break;
    case Kind::kRandInt:
      args = {static_cast<int64_t>(lower_), static_cast<int64_t>(upper_)};
      break;
    case Kind::kQRandInt:
      args = {static_cast<int64_t>(lower_), static_cast<int64_t>(upper_), static_cast<int64_t>(q_)};
      break;
  }
  return {{name(), std::move(args)}};
}

void Domain::Validate() const {
  const std::string kind = name();
  auto fail = [&](const std::string& reason) { throw std::invalid_argument(kind + ": " + reason); };
  if (!is_numeric()) {
    if (values_.empty()) fail("needs at least one value");
    return;
  }
  if (kind_ == Kind::kRandn) {
    if (!std::isfinite(lower_) || !std::isfinite(upper_)) fail("mean and sd must be finite");
    if (upper_ <= 0) fail("sd must be positive, got " + ExactNumber(upper_));
    return;
  }
  if (!std::isfinite(lower_) || !std::isfinite(upper_)) fail("bounds must be finite");
  if (lower_ >= upper_) {
    fail("lower bound " + ExactNumber(lower_) + " must be below upper bound " +
         ExactNumber(upper_));
  }
  if ((kind_ == Kind::kLogUniform || kind_ == Kind::kQLogUniform) && lower_ <= 0) {
    fail("bounds must be positive, got lower bound " + ExactNumber(lower_));
  }
  if (kind_ == Kind::kQUniform || kind_ == Kind::kQLogUniform || kind_ == Kind::kQRandInt) {
    if (!std::isfinite(q_)) fail("q must be finite");
    if (q_ <= 0) fail("q must be positive, got " + ExactNumber(q_));
    // Sampling rounds to a multiple of q inside the bounds, so one must exist.
    double first = std::ceil(lower_ / q_ - 1e-9) * q_;
    if (first > upper_ + 1e-9 * q_) {
      fail("no multiple of q " + ExactNumber(q_) + " lies in [" + ExactNumber(lower_) + ", " +
           ExactNumber(upper_) + "]");
    }
  }
}

void SetPath(nlohmann::json& config, const std::vector<std::string>& path, nlohmann::json value) {
  nlohmann::json* node = &config;
  for (const std::string& key : path) {
    if (!node->is_object()) *node = nlohmann::json::object();
    node = &(*node)[key];
  }
  *node = std::move(value);
}

nlohmann::json GetPath(const nlohmann::json& config, const std::vector<std::string>& path) {
  const nlohmann::json* node = &config;
  for (const std::string& key : path) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return *node;
}

std::string JoinPath(const std::vector<std::string>& path) {
  std::string out;
  for (const std::string& key : path) {
    if (!out.empty()) out += '/';
    out += key;
  }
  return out;
}

std::vector<nlohmann::json> GenerateVariants(const ParamSpace& space, int num_samples,
                                             uint64_t seed) {
  if (num_samples < 1) {
    throw std::invalid_argument("num_samples must be at least 1, got " +
                                std::to_string(num_samples));
  }
  // The grid parameters, in space order; the combination index is a mixed-radix number over
  // their sizes with the last one as the least significant digit.
  std::vector<const Param*> grids;
  size_t combinations = 1;
  for (const Param& param : space) {
    const auto* domain = std::get_if<Domain>(&param.value);
    if (domain == nullptr) continue;
    try {
      domain->Validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(JoinPath(param.path) + ": " + e.what());
    }
    if (domain->kind() == Domain::Kind::kGridSearch) {
      grids.push_back(&param);
      combinations *= domain->values().size();
    }
  }

  Rng rng(seed);
  std::vector<nlohmann::json> configs;
  configs.reserve(static_cast<size_t>(num_samples) * combinations);
  std::vector<size_t> digits(grids.size());
  for (int sample = 0; sample < num_samples; ++sample) {
    for (size_t combination = 0; combination < combinations; ++combination) {
      size_t rest = combination;
      for (size_t i = grids.size(); i-- > 0;) {
        size_t radix = std::get<Domain>(grids[i]->value).values().size();
        digits[i] = rest % radix;
        rest /= radix;
      }
      nlohmann::json config = nlohmann::json::object();
      size_t grid_index = 0;
      for (const Param& param : space) {
        if (const auto* constant = std::get_if<nlohmann::json>(&param.value)) {
          SetPath(config, param.path, *constant);
          continue;
        }
        const Domain& domain = std::get<Domain>(param.value);
        if (domain.kind() == Domain::Kind::kGridSearch) {
          SetPath(config, param.path, domain.values()[digits[grid_index++]]);
        } else {
          SetPath(config, param.path, domain.Sample(rng));
        }
      }
      configs.push_back(std::move(config));
    }
  }
  return configs;
}

}  // namespace rayd::tune
