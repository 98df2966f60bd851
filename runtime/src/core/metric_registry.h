#pragma once
// The process's application metrics (rayd/api/metric.h), as the core worker reports them to
// its node: every series' whole current state.
//
// Threading: every function may be called from any thread.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rayd::internal {

struct MetricSeriesState {
  std::string name, description, unit;
  int kind = 0;  // Metric::Kind: 0 gauge, 1 counter, 2 sum, 3 histogram
  std::map<std::string, std::string> tags;  // every tag key, "" when not given
  double value = 0;                          // gauge: last; counter, sum: total; histogram: sum
  uint64_t count = 0;                        // histogram
  std::vector<double> boundaries;            // histogram
  std::vector<uint64_t> buckets;             // histogram: boundaries.size() + 1
  int64_t updated_ms = 0;                    // unix ms of its last change
};

// Bumped on every record; lets a reporter skip sending what it sent already.
uint64_t MetricsVersion();
std::vector<MetricSeriesState> SnapshotMetrics();

}  // namespace rayd::internal
