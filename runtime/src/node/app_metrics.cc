#include "node/app_metrics.h"

#include <algorithm>
#include <charconv>

#include "rayd/protocol/core.capnp.h"

namespace rayd::node {
namespace {

const char* TypeName(int kind) {
  switch (kind) {
    case 0:
      return "gauge";
    case 1:
      return "counter";
    case 3:
      return "histogram";
    default:
      return "gauge";  // a Sum may go down: Prometheus calls that a gauge
  }
}

// HELP text is one line.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// The shortest form that reads back as the same double ("0.1", not "0.10000000000000001").
std::string FormatBound(double bound) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), bound);
  return std::string(buf, end);
}

}  // namespace

void AppMetrics::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::REPORT_METRICS>(
      [this](const auto& call) { HandleReport(call); });
}

void AppMetrics::HandleReport(const rpc::Incoming<proto::Method::REPORT_METRICS>& call) {
  auto params = call.params();
  const std::string process = params.getWorkerId();
  std::vector<Series> series;
  for (auto s : params.getSeries()) {
    Series out;
    out.name = s.getName();
    out.description = s.getDescription();
    out.unit = s.getUnit();
    out.kind = s.getKind();
    if (out.kind > 3) return call.Fail(Status::InvalidArgument("unknown metric kind"));
    for (auto tag : s.getTags()) out.tags.emplace_back(tag.getKey(), tag.getValue());
    out.value = s.getValue();
    out.count = s.getCount();
    for (double b : s.getBoundaries()) out.boundaries.push_back(b);
    for (uint64_t b : s.getBuckets()) out.buckets.push_back(b);
    if (out.kind == 3 && out.buckets.size() != out.boundaries.size() + 1) {
      return call.Fail(Status::InvalidArgument("histogram " + out.name +
                                               ": buckets do not match its boundaries"));
    }
    out.updated_ms = s.getUpdatedMs();
    series.push_back(std::move(out));
  }
  if (by_process_.find(process) == by_process_.end()) {
    order_.push_back(process);
    if (order_.size() > kMaxProcesses) {
      by_process_.erase(order_.front());
      order_.pop_front();
    }
  }
  by_process_[process] = std::move(series);
  call.Reply();
}

void AppMetrics::Render(prometheus::Text& text, const std::string& node_id) const {
  using Tags = std::vector<std::pair<std::string, std::string>>;
  // Families by name, their series by tags, summed over processes.
  std::map<std::string, std::map<Tags, Series>> families;
  for (const auto& [process, all] : by_process_) {
    for (const Series& s : all) {
      auto& family = families[s.name];
      // A family keeps the first kind it was reported with; a process that disagrees is skipped.
      if (!family.empty() && family.begin()->second.kind != s.kind) continue;
      auto [it, fresh] = family.try_emplace(s.tags, s);
      if (fresh) continue;
      Series& sum = it->second;
      if (s.kind == 0) {
        if (s.updated_ms > sum.updated_ms) sum = s;
        continue;
      }
      sum.value += s.value;
      sum.count += s.count;
      if (sum.buckets.size() == s.buckets.size()) {
        for (size_t i = 0; i < s.buckets.size(); ++i) sum.buckets[i] += s.buckets[i];
      }
    }
  }
  for (const auto& [name, series] : families) {
    const Series& first = series.begin()->second;
    std::string help = first.description.empty() ? name : first.description;
    if (!first.unit.empty()) help += " (" + first.unit + ")";
    text.Family(name, TypeName(first.kind), OneLine(help));
    for (const auto& [tags, s] : series) {
      prometheus::Labels labels{{"node_id", node_id}};
      labels.insert(labels.end(), tags.begin(), tags.end());
      if (s.kind != 3) {
        text.Sample(name, labels, s.value);
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < s.buckets.size(); ++i) {
        cumulative += s.buckets[i];
        prometheus::Labels bucket = labels;
        bucket.emplace_back("le", i < s.boundaries.size() ? FormatBound(s.boundaries[i]) : "+Inf");
        text.Sample(name + "_bucket", bucket, static_cast<double>(cumulative));
      }
      text.Sample(name + "_sum", labels, s.value);
      text.Sample(name + "_count", labels, static_cast<double>(s.count));
    }
  }
}

}  // namespace rayd::node
