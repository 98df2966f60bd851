#pragma once
// Application metrics (Ray's ray/api/metric.h, under rayd::): record figures from a driver,
// task or actor; each node's /metrics serves them (`rayd start --metrics-port`) in
// Prometheus' text format, summed over the node's workers.
//
//   rayd::Counter requests("app_requests_total", "Requests served.", "requests", {"route"});
//   requests.Inc(1, {{"route", "/predict"}});
//   rayd::Histogram latency("app_latency_ms", "Latency.", "ms", {1, 10, 100}, {"route"});
//   latency.Observe(12.5, {{"route", "/predict"}});
//   rayd::Gauge queue("app_queue_length", "Items waiting.", "items");
//   queue.Set(7, {});
//
// Kinds: Gauge keeps the last value set (the node serves the newest among its workers);
// Counter only goes up; Sum adds up what is recorded (and may go down); Histogram counts
// observations per bucket (`boundaries` are the buckets' upper bounds, ascending).
//
// A series is one metric with one set of tag values; tags not given are empty. A name must be
// a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*); a second metric of the same name must
// be of the same kind, with the same tag keys (and boundaries): both record into one family.
// Tags outside the metric's tag keys, a bad name, a mismatched second definition, a
// negative Counter increment and unsorted boundaries throw RaydError.
//
// Recording is cheap (a lock and a map lookup), safe from any thread, and works before Init
// too; a process's figures reach its node once a second while rayd is initialised. Metric
// objects are handles: destroying one does not drop its figures.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace rayd {

namespace internal {
struct MetricFamily;
}

class Metric {
 public:
  virtual ~Metric();
  std::string GetName() const;
  // What the kind does with a value: Gauge sets, Counter and Sum add, Histogram observes.
  void Record(double value, const std::unordered_map<std::string, std::string>& tags = {});

 protected:
  enum class Kind { kGauge = 0, kCounter = 1, kSum = 2, kHistogram = 3 };
  Metric(Kind kind, const std::string& name, const std::string& description,
         const std::string& unit, std::vector<double> boundaries,
         const std::vector<std::string>& tag_keys);

 private:
  std::shared_ptr<internal::MetricFamily> family_;  // co-owned by the process's registry
};

class Gauge : public Metric {
 public:
  Gauge(const std::string& name, const std::string& description, const std::string& unit,
        const std::vector<std::string>& tag_keys = {});
  void Set(double value, const std::unordered_map<std::string, std::string>& tags = {});
};

class Counter : public Metric {
 public:
  Counter(const std::string& name, const std::string& description, const std::string& unit,
          const std::vector<std::string>& tag_keys = {});
  // `value` must not be negative.
  void Inc(double value = 1, const std::unordered_map<std::string, std::string>& tags = {});
};

class Sum : public Metric {
 public:
  Sum(const std::string& name, const std::string& description, const std::string& unit,
      const std::vector<std::string>& tag_keys = {});
};

class Histogram : public Metric {
 public:
  Histogram(const std::string& name, const std::string& description, const std::string& unit,
            const std::vector<double>& boundaries, const std::vector<std::string>& tag_keys = {});
  void Observe(double value, const std::unordered_map<std::string, std::string>& tags = {});
};

}  // namespace rayd
