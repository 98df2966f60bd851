#include "core/metrics_reporter.h"

#include "common/node_info.h"
#include "core/metric_registry.h"
#include "rayd/protocol/core.capnp.h"

namespace rayd::core {

MetricsReporter::MetricsReporter(EventLoop& loop, ClientPool& clients, std::string node_address,
                                 std::string process, Millis period)
    : clients_(clients),
      node_address_(std::move(node_address)),
      process_(std::move(process)),
      timer_(loop) {
  timer_.Start(period, period, [this] { Report(); });
}

void MetricsReporter::Report() {
  const uint64_t version = internal::MetricsVersion();
  if (version == reported_version_) return;
  reported_version_ = version;
  const std::vector<internal::MetricSeriesState> all = internal::SnapshotMetrics();
  auto fill = [&](proto::ReportMetricsRequest::Builder r) {
    r.setWorkerId(process_);
    auto list = r.initSeries(static_cast<unsigned>(all.size()));
    for (unsigned i = 0; i < all.size(); ++i) {
      const internal::MetricSeriesState& m = all[i];
      auto out = list[i];
      out.setName(m.name);
      out.setDescription(m.description);
      out.setUnit(m.unit);
      out.setKind(static_cast<uint8_t>(m.kind));
      runtime::FillLabels(m.tags, [&](unsigned n) { return out.initTags(n); });
      out.setValue(m.value);
      out.setCount(m.count);
      auto bounds = out.initBoundaries(static_cast<unsigned>(m.boundaries.size()));
      for (unsigned j = 0; j < m.boundaries.size(); ++j) bounds.set(j, m.boundaries[j]);
      auto buckets = out.initBuckets(static_cast<unsigned>(m.buckets.size()));
      for (unsigned j = 0; j < m.buckets.size(); ++j) buckets.set(j, m.buckets[j]);
      out.setUpdatedMs(m.updated_ms);
    }
  };
  clients_.Get(node_address_)
      .Call<proto::Method::REPORT_METRICS>(fill, Millis(10000), guard_([this](const Status& s) {
        if (!s.ok()) reported_version_ = 0;  // send again next time
      }));
}

}  // namespace rayd::core
