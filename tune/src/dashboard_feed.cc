#include "dashboard_feed.h"

#include <rayd/api/kv.h>
#include <rayd/base/event_loop.h>
#include <rayd/runtime/cluster.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace rayd::tune::internal {
namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kMinInterval = std::chrono::seconds(1);
// Wait this many times as long as the last publish took before the next one.
constexpr int kBackoffFactor = 20;
// The feed kind sweeps publish as (rayd/runtime/cluster.h: dashboard feeds).
constexpr char kSweepKind[] = "sweep";

nlohmann::json Sample(const char* name, const char* type, const char* help,
                      nlohmann::json labels, double value) {
  return {{"name", name}, {"type", type}, {"help", help}, {"labels", std::move(labels)},
          {"value", value}};
}
}  // namespace

DashboardFeed::DashboardFeed(std::string name, std::string metric, std::string mode,
                             std::string scheduler, std::string experiment_dir,
                             const FrontProgress* front)
    : name_(std::move(name)),
      metric_(std::move(metric)),
      mode_(std::move(mode)),
      scheduler_(std::move(scheduler)),
      experiment_dir_(std::move(experiment_dir)),
      front_(front),
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
    if (!t.searcher.empty()) row["searcher"] = t.searcher;
    table.push_back(std::move(row));
  }
  // What the head's /metrics exports for this sweep.
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& [status, count] : counts) {
    metrics.push_back(Sample("rayd_tune_trials", "gauge", "Trials of each sweep by status.",
                             {{"sweep", name_}, {"status", status}}, count));
  }
  metrics.push_back(Sample("rayd_tune_results_total", "counter",
                           "Results reported by each sweep's trials.", {{"sweep", name_}},
                           static_cast<double>(results_)));
  metrics.push_back(Sample("rayd_tune_sweep_running", "gauge",
                           "1 while the sweep runs, 0 once it ended.", {{"sweep", name_}},
                           finished ? 0 : 1));
  nlohmann::json summary = {{"name", name_},
          {"detail_only", {"trials", "front"}},
          {"metrics", std::move(metrics)},
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
  if (front_ != nullptr) {
    summary["front"] = FrontJson();
    const auto& history = summary["front"]["hypervolume"];
    if (!history.empty()) {
      summary["metrics"].push_back(Sample("rayd_tune_hypervolume", "gauge",
                                          "The hypervolume of each sweep's Pareto front.",
                                          {{"sweep", name_}}, history.back()[1].get<double>()));
    }
  }
  return summary;
}

nlohmann::json DashboardFeed::FrontJson() const {
  nlohmann::json objectives = nlohmann::json::array();
  for (const Objective& o : front_->objectives()) {
    objectives.push_back({{"metric", o.metric}, {"mode", o.maximize ? "max" : "min"}});
  }
  nlohmann::json points = nlohmann::json::array();
  for (const FrontProgress::Point& p : front_->points()) {
    nlohmann::json values = nlohmann::json::array();
    for (double v : p.values) values.push_back(std::isfinite(v) ? nlohmann::json(v) : nullptr);
    points.push_back({{"trial_id", p.trial_id},
                      {"values", std::move(values)},
                      {"feasible", p.feasible},
                      {"on_front", p.on_front}});
  }
  nlohmann::json reference = nlohmann::json::array();
  for (size_t d = 0; d < front_->reference().size(); ++d) {
    const double r = front_->reference()[d];
    reference.push_back(front_->objectives()[d].maximize ? -r : r);
  }
  // At most ~kMaxCurvePoints / 4 rows, evenly spaced, the last always: each costs a hypervolume.
  nlohmann::json history = nlohmann::json::array();
  const auto& rows = front_->rows();
  const size_t step = std::max<size_t>(1, rows.size() / (kMaxCurvePoints / 4));
  for (size_t i = 0; i < rows.size(); i += step) {
    if (i + step >= rows.size()) i = rows.size() - 1;
    history.push_back({rows[i].elapsed_s, front_->Hypervolume(rows[i])});
  }
  return {{"objectives", std::move(objectives)},
          {"points", std::move(points)},
          {"reference", std::move(reference)},
          {"hypervolume", std::move(history)}};
}

void DashboardFeed::Publish(const std::vector<Trial>& trials, bool finished) {
  if (disabled_ || (!finished && Clock::now() < next_publish_)) return;
  const auto start = Clock::now();
  try {
    for (const std::string& id : changed_curves_) {
      nlohmann::json points = nlohmann::json::array();
      for (const auto& [iteration, value] : curves_.at(id)) points.push_back({iteration, value});
      KvPut(kFeedKvNamespace, FeedItemPrefix(kSweepKind, name_, "series") + id, points.dump());
    }
    changed_curves_.clear();
    PublishLogs(trials);
    KvPut(kFeedKvNamespace, FeedKey(kSweepKind, name_), Summary(trials, finished).dump());
  } catch (const std::exception& e) {
    std::cerr << "rayd tune: the dashboard will not show this sweep: " << e.what() << "\n";
    disabled_ = true;
    return;
  }
  next_publish_ = Clock::now() + std::max<Clock::duration>(kMinInterval,
                                                           (Clock::now() - start) * kBackoffFactor);
}

void DashboardFeed::PublishLogs(const std::vector<Trial>& trials) {
  namespace fs = std::filesystem;
  for (const Trial& t : trials) {
    // A trial not running now is published once more after it ends (even if no publication
    // saw it run: a short trial may start and end between two), then left alone until it runs
    // again.
    const bool running = t.status == TrialStatus::kRunning;
    if (running) {
      logs_final_.erase(t.id);
    } else if (logs_final_.contains(t.id)) {
      continue;
    }
    auto seen = log_bytes_.find(t.id);
    std::error_code ec;
    std::map<std::string, fs::path> logs;
    for (const auto& entry : fs::directory_iterator(fs::path(experiment_dir_) / t.dir_name, ec)) {
      const std::string file = entry.path().filename().string();
      if (file.starts_with("rank_") && file.ends_with(".log")) logs[file] = entry.path();
    }
    uintmax_t bytes = 0;
    for (const auto& [file, path] : logs) bytes += fs::file_size(path, ec);
    if (logs.empty()) {
      // None yet. An ended trial will have none (a C++ trial writes no rank logs): it is not
      // looked at again; a pending one is, until it runs.
      if (t.status == TrialStatus::kTerminated || t.status == TrialStatus::kError) {
        logs_final_.insert(t.id);
      }
      continue;
    }
    if (seen != log_bytes_.end() && seen->second == bytes) {
      if (!running) {
        log_bytes_.erase(t.id);
        logs_final_.insert(t.id);
      }
      continue;
    }
    nlohmann::json tails = nlohmann::json::object();
    for (const auto& [file, path] : logs) {
      std::ifstream in(path, std::ios::binary);
      const uintmax_t size = fs::file_size(path, ec);
      if (size > kLogTailBytes) in.seekg(static_cast<std::streamoff>(size - kLogTailBytes));
      std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      tails[file] = std::move(tail);
    }
    // JSON needs UTF-8: a tail cut inside a character, or binary output, is shown with
    // replacement characters rather than refused.
    KvPut(kFeedKvNamespace, FeedItemPrefix(kSweepKind, name_, "logs") + t.id,
          tails.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (t.status == TrialStatus::kRunning) {
      log_bytes_[t.id] = bytes;
    } else {
      log_bytes_.erase(t.id);
      logs_final_.insert(t.id);
    }
  }
}

}  // namespace rayd::tune::internal
