#include "dashboard_feed.h"

#include <rayd/api/kv.h>
#include <rayd/base/event_loop.h>
#include <rayd/runtime/cluster.h>

#include <algorithm>
#include <iostream>

namespace rayd::tune::internal {
namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kMinInterval = std::chrono::seconds(1);
// Wait this many times as long as the last publish took before the next one.
constexpr int kBackoffFactor = 20;
}  // namespace

DashboardFeed::DashboardFeed(std::string name, std::string metric, std::string mode,
                             std::string scheduler)
    : name_(std::move(name)),
      metric_(std::move(metric)),
      mode_(std::move(mode)),
      scheduler_(std::move(scheduler)),
      started_ms_(NowUnixMs()) {}

void DashboardFeed::OnResult(const Trial& trial, const Metrics& result) {
  ++results_;
  auto value = result.find(metric_);
  if (value == result.end()) return;
  // Kept as results arrive: a thinned curve may no longer hold the best point.
  auto [best, first] = best_.emplace(trial.id, value->second);
  if (!first && (mode_ == "max" ? value->second > best->second : value->second < best->second)) {
    best->second = value->second;
  }
  Curve& curve = curves_[trial.id];
  auto iteration = result.find("training_iteration");
  curve.emplace_back(iteration != result.end() ? iteration->second
                                               : static_cast<double>(curve.size() + 1),
                     value->second);
  if (curve.size() > kMaxCurvePoints) {
    Curve thinned;
    for (size_t i = 0; i < curve.size(); i += 2) thinned.push_back(curve[i]);
    if (thinned.back() != curve.back()) thinned.push_back(curve.back());
    curve = std::move(thinned);
  }
  changed_curves_.insert(trial.id);
}

nlohmann::json DashboardFeed::Summary(const std::vector<Trial>& trials, bool finished) const {
  std::map<std::string, int> counts{{"PENDING", 0}, {"RUNNING", 0}, {"PAUSED", 0},
                                    {"TERMINATED", 0}, {"ERROR", 0}};
  nlohmann::json table = nlohmann::json::array();
  for (const Trial& t : trials) {
    ++counts[ToString(t.status)];
    nlohmann::json row{{"trial_id", t.id},
                       {"status", ToString(t.status)},
                       {"config", t.config},
                       {"iterations", t.history.size()},
                       {"last", t.last_result}};
    if (auto best = best_.find(t.id); best != best_.end()) row["best"] = best->second;
    if (!t.error.empty()) row["error"] = t.error;
    table.push_back(std::move(row));
  }
  return {{"name", name_},
          {"state", finished ? "FINISHED" : "RUNNING"},
          {"metric", metric_},
          {"mode", mode_},
          {"scheduler", scheduler_},
          {"num_trials", trials.size()},
          {"trial_counts", counts},
          {"results", results_},
          {"started_ms", started_ms_},
          {"updated_ms", NowUnixMs()},
          {"trials", std::move(table)}};
}

void DashboardFeed::Publish(const std::vector<Trial>& trials, bool finished) {
  if (disabled_ || (!finished && Clock::now() < next_publish_)) return;
  const auto start = Clock::now();
  try {
    for (const std::string& id : changed_curves_) {
      nlohmann::json points = nlohmann::json::array();
      for (const auto& [iteration, value] : curves_.at(id)) points.push_back({iteration, value});
      KvPut(kTuneKvNamespace, std::string(kCurveKeyPrefix) + name_ + "/" + id, points.dump());
    }
    changed_curves_.clear();
    KvPut(kTuneKvNamespace, std::string(kSweepKeyPrefix) + name_, Summary(trials, finished).dump());
  } catch (const std::exception& e) {
    std::cerr << "rayd tune: the dashboard will not show this sweep: " << e.what() << "\n";
    disabled_ = true;
    return;
  }
  next_publish_ = Clock::now() + std::max<Clock::duration>(kMinInterval,
                                                           (Clock::now() - start) * kBackoffFactor);
}

}  // namespace rayd::tune::internal
