#pragma once
// The resource model: named amounts in fixed point, sets of them, and what one node has.
//
// How it works: every amount is an integer count of 1/10000ths (FixedPoint), so adding and
// subtracting fractional GPUs is exact and never drifts. A ResourceSet maps names ("CPU", "GPU",
// "memory", "object_store_memory", or any custom name) to positive amounts; absent means zero.
// NodeResources pairs a node's total with what is still available, plus its labels.
//
// All types here are plain copyable values with no I/O and no threads of their own; like any
// std container they are not safe for concurrent mutation. Parsing functions report bad input
// as Status::InvalidArgument with a one-line message that names the offending key or text.

#include <compare>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "rayd/base/status.h"

namespace rayd::scheduler {

// Predefined resource names. The node daemon sets these from --num-cpus, --num-gpus, --memory
// and --object-store-memory (or detection); --resources may not name them.
inline constexpr std::string_view kCPU = "CPU";
inline constexpr std::string_view kGPU = "GPU";
inline constexpr std::string_view kMemory = "memory";                          // bytes
inline constexpr std::string_view kObjectStoreMemory = "object_store_memory";  // bytes

// True for the resources whose amounts are byte counts (memory, object_store_memory).
bool IsMemoryResource(std::string_view name);

// An amount in units of 1/kScale, stored as int64. Negative values are representable (a
// difference may be negative) but never stored in a ResourceSet. + and - saturate at the int64
// limits instead of wrapping; inputs accepted by the parsers are at most kMaxWhole, so sums over
// thousands of nodes stay far from saturation.
class FixedPoint {
 public:
  static constexpr int64_t kScale = 10000;
  // Largest whole amount the parsers accept (1e14: ~90 TiB when the amount is bytes).
  static constexpr int64_t kMaxWhole = 100'000'000'000'000;

  constexpr FixedPoint() = default;
  static constexpr FixedPoint FromUnits(int64_t units) { return FixedPoint(units); }
  // Saturates when whole * kScale does not fit in int64.
  static FixedPoint FromWhole(int64_t whole);
  // Rounds to the nearest unit, halves away from zero: FromDouble(1.0 / 3).units() == 3333 and
  // FromDouble(0.00005).units() == 1. NaN gives zero; out-of-range values saturate. Does not
  // reject anything: validation belongs to the parsers below.
  static FixedPoint FromDouble(double value);

  constexpr int64_t units() const { return units_; }
  double ToDouble() const { return static_cast<double>(units_) / kScale; }
  // Shortest exact decimal form: "1", "0.5", "0.0001", "2.25", "-3".
  std::string ToString() const;

  FixedPoint& operator+=(FixedPoint other);
  FixedPoint& operator-=(FixedPoint other);
  friend FixedPoint operator+(FixedPoint a, FixedPoint b) { return a += b; }
  friend FixedPoint operator-(FixedPoint a, FixedPoint b) { return a -= b; }
  friend constexpr auto operator<=>(const FixedPoint&, const FixedPoint&) = default;

 private:
  constexpr explicit FixedPoint(int64_t units) : units_(units) {}
  int64_t units_ = 0;
};

// A map from resource name to amount. Invariant: every stored amount is > 0 (zero entries are
// dropped), so two sets that mean the same thing compare equal. Iterates in name order.
class ResourceSet {
 public:
  using Map = std::map<std::string, FixedPoint, std::less<>>;
  using const_iterator = Map::const_iterator;

  ResourceSet() = default;
  // ResourceSet{{"CPU", 4}, {"GPU", 0.5}}: amounts go through FixedPoint::FromDouble, then Set.
  ResourceSet(std::initializer_list<std::pair<std::string_view, double>> amounts);

  // Zero when `name` is absent.
  FixedPoint Get(std::string_view name) const;
  // Setting an amount <= 0 removes the entry.
  void Set(std::string_view name, FixedPoint amount);

  bool IsEmpty() const { return amounts_.empty(); }
  size_t size() const { return amounts_.size(); }
  const_iterator begin() const { return amounts_.begin(); }
  const_iterator end() const { return amounts_.end(); }

  // True when every amount here is <= the same amount in `available` ("fits in").
  bool IsSubsetOf(const ResourceSet& available) const;

  ResourceSet& operator+=(const ResourceSet& other);
  // Precondition: other.IsSubsetOf(*this); callers check first (NodeResources::TryAllocate
  // does). If it is violated anyway the affected entries clamp at zero: no abort, no negatives.
  ResourceSet& operator-=(const ResourceSet& other);
  friend ResourceSet operator+(ResourceSet a, const ResourceSet& b) { return a += b; }
  friend ResourceSet operator-(ResourceSet a, const ResourceSet& b) { return a -= b; }
  friend bool operator==(const ResourceSet&, const ResourceSet&) = default;

  // For people: "{CPU: 4, GPU: 0.5, memory: 2.00GiB}" (amounts via FormatResourceAmount);
  // "{}" when empty. Not parseable; use ToJson for that.
  std::string ToString() const;
  // Lossless JSON object text: {"CPU":4,"GPU":0.5}. Whole amounts are JSON integers.
  std::string ToJson() const;
  // Parses ToJson's output (or any JSON object of non-negative numbers). Accepts every name,
  // including the predefined ones. Errors as for ParseResourcesJson.
  static Result<ResourceSet> FromJson(std::string_view json_text);

 private:
  Map amounts_;
};

// Parses the --resources flag: a JSON object of custom resources, e.g. {"tpu":1,"custom":0.5}.
// InvalidArgument, naming the problem, when the text is not JSON (with the parser's byte
// position), not an object, has a duplicate or empty key, has a value that is not a
// non-negative number, has an amount finer than 0.0001 or above FixedPoint::kMaxWhole, or names
// a predefined resource (those have their own flags).
Result<ResourceSet> ParseResourcesJson(std::string_view json_text);

// How `rayd status` prints an amount: bytes in binary units with two decimals for memory
// resources ("512B", "512.00MiB", "10.00GiB"), FixedPoint::ToString otherwise.
std::string FormatResourceAmount(std::string_view name, FixedPoint amount);

// Parses a byte count: "1073741824", "1GiB", "512MiB", "2GB", "100KiB", "1.5 GiB". Units are
// case-insensitive: B; KB, MB, GB, TB (powers of 1000); KiB, MiB, GiB, TiB (powers of 1024).
// Fractions are rounded to the nearest byte. The result is at most FixedPoint::kMaxWhole, so it
// always fits in a resource amount.
Result<int64_t> ParseByteSize(std::string_view text);

using Labels = std::map<std::string, std::string>;

// Parses node labels "k=v,k2=v2". Whitespace around items, keys and values is trimmed; the
// empty string gives no labels; a value may be empty or contain '='. InvalidArgument for an
// empty item, an item without '=', an empty key, or a key given twice.
Result<Labels> ParseLabels(std::string_view text);

// One node's resources. Invariant: available.IsSubsetOf(total).
class NodeResources {
 public:
  NodeResources() = default;
  // Everything available.
  explicit NodeResources(ResourceSet total, Labels labels = {});
  // A snapshot as a node reports it. Amounts in `available` above `total` are clamped to total.
  NodeResources(ResourceSet total, ResourceSet available, Labels labels);

  const ResourceSet& total() const { return total_; }
  const ResourceSet& available() const { return available_; }
  const Labels& labels() const { return labels_; }

  // Could this node ever run `demand`? (Otherwise the request is infeasible here.)
  bool IsFeasible(const ResourceSet& demand) const { return demand.IsSubsetOf(total_); }
  // Could it run `demand` now?
  bool IsAvailable(const ResourceSet& demand) const { return demand.IsSubsetOf(available_); }
  // Takes `demand` from available and returns true, or changes nothing and returns false.
  bool TryAllocate(const ResourceSet& demand);
  // Gives `amounts` back; each amount is capped at the total, so a double release cannot
  // create resources.
  void Release(const ResourceSet& amounts);

  friend bool operator==(const NodeResources&, const NodeResources&) = default;

 private:
  ResourceSet total_;
  ResourceSet available_;
  Labels labels_;
};

}  // namespace rayd::scheduler
