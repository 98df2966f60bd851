// Application metrics: one registry per process, families by name, series by tag values.

#include "rayd/api/metric.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <regex>

#include "core/metric_registry.h"
#include "rayd/api/errors.h"

namespace rayd {
namespace internal {

struct MetricFamily {
  std::string name, description, unit;
  int kind = 0;
  std::vector<double> boundaries;
  std::vector<std::string> tag_keys;  // sorted
  struct Series {
    double value = 0;
    uint64_t count = 0;
    std::vector<uint64_t> buckets;
    int64_t updated_ms = 0;
  };
  std::map<std::map<std::string, std::string>, Series> series;  // guarded by the registry's mutex
};

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<MetricFamily>> families;
  std::atomic<uint64_t> version{0};
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: metrics may outlive statics
  return *registry;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* KindName(int kind) {
  static const char* const kNames[] = {"Gauge", "Counter", "Sum", "Histogram"};
  return kNames[kind];
}

}  // namespace

uint64_t MetricsVersion() { return TheRegistry().version.load(std::memory_order_acquire); }

std::vector<MetricSeriesState> SnapshotMetrics() {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mu);
  std::vector<MetricSeriesState> out;
  for (const auto& [name, family] : r.families) {
    for (const auto& [tags, series] : family->series) {
      out.push_back({family->name, family->description, family->unit, family->kind, tags,
                     series.value, series.count, family->boundaries, series.buckets,
                     series.updated_ms});
    }
  }
  return out;
}

}  // namespace internal

Metric::Metric(Kind kind, const std::string& name, const std::string& description,
               const std::string& unit, std::vector<double> boundaries,
               const std::vector<std::string>& tag_keys) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  if (!std::regex_match(name, kName)) {
    throw RaydError("metric name '" + name + "' is not a Prometheus metric name " +
                    "([a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  if (!std::is_sorted(boundaries.begin(), boundaries.end()) ||
      std::adjacent_find(boundaries.begin(), boundaries.end()) != boundaries.end()) {
    throw RaydError("histogram " + name + ": boundaries must be strictly ascending");
  }
  std::vector<std::string> keys = tag_keys;
  std::sort(keys.begin(), keys.end());
  for (const auto& key : keys) {
    if (!std::regex_match(key, kName) || key == "node_id") {
      throw RaydError("metric " + name + ": '" + key + "' cannot be a tag key");
    }
  }
  internal::Registry& r = internal::TheRegistry();
  std::lock_guard lock(r.mu);
  auto& family = r.families[name];
  if (family) {
    if (family->kind != static_cast<int>(kind) || family->tag_keys != keys ||
        family->boundaries != boundaries) {
      throw RaydError("metric " + name + " is already defined as a " +
                      internal::KindName(family->kind) +
                      " with other tag keys or boundaries; a second definition must match it");
    }
  } else {
    family = std::make_shared<internal::MetricFamily>();
    family->name = name;
    family->description = description;
    family->unit = unit;
    family->kind = static_cast<int>(kind);
    family->boundaries = std::move(boundaries);
    family->tag_keys = std::move(keys);
  }
  family_ = family;
}

Metric::~Metric() = default;

std::string Metric::GetName() const { return family_->name; }

void Metric::Record(double value, const std::unordered_map<std::string, std::string>& tags) {
  internal::MetricFamily& f = *family_;
  std::map<std::string, std::string> key;
  for (const auto& k : f.tag_keys) key[k] = "";
  for (const auto& [k, v] : tags) {
    auto it = key.find(k);
    if (it == key.end()) throw RaydError("metric " + f.name + " has no tag key '" + k + "'");
    it->second = v;
  }
  const auto kind = static_cast<Kind>(f.kind);
  if (kind == Kind::kCounter && value < 0) {
    throw RaydError("counter " + f.name + " cannot go down (Inc by " + std::to_string(value) +
                    ")");
  }
  internal::Registry& r = internal::TheRegistry();
  std::lock_guard lock(r.mu);
  auto& series = f.series[key];
  switch (kind) {
    case Kind::kGauge:
      series.value = value;
      break;
    case Kind::kCounter:
    case Kind::kSum:
      series.value += value;
      break;
    case Kind::kHistogram: {
      series.buckets.resize(f.boundaries.size() + 1);
      const size_t bucket =
          std::lower_bound(f.boundaries.begin(), f.boundaries.end(), value) - f.boundaries.begin();
      series.buckets[bucket]++;
      series.count++;
      series.value += value;
      break;
    }
  }
  series.updated_ms = internal::NowMs();
  r.version.fetch_add(1, std::memory_order_acq_rel);
}

Gauge::Gauge(const std::string& name, const std::string& description, const std::string& unit,
             const std::vector<std::string>& tag_keys)
    : Metric(Kind::kGauge, name, description, unit, {}, tag_keys) {}
void Gauge::Set(double value, const std::unordered_map<std::string, std::string>& tags) {
  Record(value, tags);
}

Counter::Counter(const std::string& name, const std::string& description,
                 const std::string& unit, const std::vector<std::string>& tag_keys)
    : Metric(Kind::kCounter, name, description, unit, {}, tag_keys) {}
void Counter::Inc(double value, const std::unordered_map<std::string, std::string>& tags) {
  Record(value, tags);
}

Sum::Sum(const std::string& name, const std::string& description, const std::string& unit,
         const std::vector<std::string>& tag_keys)
    : Metric(Kind::kSum, name, description, unit, {}, tag_keys) {}

Histogram::Histogram(const std::string& name, const std::string& description,
                     const std::string& unit, const std::vector<double>& boundaries,
                     const std::vector<std::string>& tag_keys)
    : Metric(Kind::kHistogram, name, description, unit, boundaries, tag_keys) {}
void Histogram::Observe(double value, const std::unordered_map<std::string, std::string>& tags) {
  Record(value, tags);
}

}  // namespace rayd
