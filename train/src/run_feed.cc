// A training run's feed: its size and attempts for `rayd status` and the dashboard (run_feed.h).
#include "run_feed.h"

#include <rayd/api/kv.h>
#include <rayd/runtime/cluster.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace rayd::train::internal {

nlohmann::json RunFeedSummary(const RunFeedState& s) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json workers = {{"name", "rayd_train_workers"},
                            {"type", "gauge"},
                            {"help", "Workers (ranks) of each training run or trial now."},
                            {"labels", {{"run", s.name}}},
                            {"value", s.world_size}};
  nlohmann::json summary = {
      {"name", s.name},
      {"run_dir", s.run_dir},
      {"state", s.running ? "RUNNING" : "RESERVING"},
      {"world_size", s.world_size},
      {"min_workers", s.min_workers},
      {"max_workers", s.max_workers},
      {"mesh", {s.mesh[0], s.mesh[1], s.mesh[2]}},
      {"placement_group", s.placement_group},
      {"attempt", s.attempt},
      {"restarts", s.restarts},
      {"resizes", s.resizes},
      {"preemptions", s.preemptions},
      {"updated_ms", std::chrono::duration_cast<std::chrono::milliseconds>(now).count()},
      {"metrics", nlohmann::json::array({std::move(workers)})}};
  if (!s.trial_id.empty()) summary["trial_id"] = s.trial_id;
  return summary;
}

void PublishRunFeed(const RunFeedState& state, bool* disabled) {
  if (*disabled) return;
  try {
    KvPut(kFeedKvNamespace, FeedKey(kRunFeedKind, state.name), RunFeedSummary(state).dump());
  } catch (const std::exception& e) {
    spdlog::warn("{}: `rayd status` and the dashboard will not list this run: {}", state.name,
                 e.what());
    *disabled = true;
  }
}

void DeleteRunFeed(const std::string& name) {
  try {
    KvDel(kFeedKvNamespace, FeedKey(kRunFeedKind, name));
  } catch (const std::exception& e) {
    spdlog::warn("{}: its feed stays on the dashboard: {}", name, e.what());
  }
}

}  // namespace rayd::train::internal
