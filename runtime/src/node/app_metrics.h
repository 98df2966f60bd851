#pragma once
// AppMetrics: the application metrics (rayd/api/metric.h) that this node's workers and drivers
// report (REPORT_METRICS, each report the whole state of its process's series), served on the
// node's /metrics summed over processes: counters, sums and histograms add up, a gauge shows
// the value set most recently in any process. Reports of processes that ended are kept (their
// counts stay counted), the oldest dropped beyond kMaxProcesses.
//
// Threading: the node daemon's loop thread only.

#include <list>
#include <map>
#include <string>
#include <vector>

#include "common/prometheus.h"
#include "rayd/base/rpc.h"

namespace rayd::node {

class AppMetrics {
 public:
  static constexpr size_t kMaxProcesses = 4096;

  void RegisterMethods(rpc::Dispatcher& dispatcher);
  // Appends every family, each sample labelled with the node id and its tags.
  void Render(prometheus::Text& text, const std::string& node_id) const;

 private:
  struct Series {
    std::string name, description, unit;
    int kind = 0;
    std::vector<std::pair<std::string, std::string>> tags;
    double value = 0;
    uint64_t count = 0;
    std::vector<double> boundaries;
    std::vector<uint64_t> buckets;
    int64_t updated_ms = 0;
  };
  void HandleReport(const rpc::Incoming<proto::Method::REPORT_METRICS>& call);

  std::map<std::string, std::vector<Series>> by_process_;  // by worker id hex
  std::list<std::string> order_;                            // first report first
};

}  // namespace rayd::node
