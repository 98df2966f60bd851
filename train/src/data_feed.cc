// DataFeed: a rank's datasets on the dashboard, on /metrics and in rank 0's rows (data_feed.h).
#include "data_feed.h"

#include <rayd/api/kv.h>
#include <rayd/base/event_loop.h>
#include <rayd/runtime/cluster.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace rayd::train::internal {
namespace {

using Clock = std::chrono::steady_clock;

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

constexpr Family kWait{"rayd_data_wait_seconds_total", "counter",
                       "Seconds a rank's loop waited for a dataset's blocks not made yet."};
constexpr Family kRows{"rayd_data_rows_total", "counter", "Rows of a dataset a rank has taken."};
constexpr Family kBytes{"rayd_data_bytes_total", "counter",
                        "Bytes of a dataset's blocks a rank has taken."};
constexpr Family kBlocks{"rayd_data_blocks_total", "counter",
                         "Blocks of a dataset a rank has taken."};
constexpr Family kRate{"rayd_data_rows_per_second", "gauge",
                       "Rows of a dataset a rank took per second, between its last two "
                       "publications."};
constexpr Family kHeld{"rayd_data_blocks_in_flight", "gauge",
                       "Blocks of a dataset made or being made that a rank has not taken yet."};
constexpr Family kCacheHits{"rayd_data_cache_hits_total", "counter",
                            "Chunks of a dataset's node cache (cache: node) a rank's blocks found "
                            "already made, by another rank or trial or an earlier epoch."};
constexpr Family kCacheMade{"rayd_data_cache_made_total", "counter",
                            "Chunks of a dataset's node cache made for a rank's blocks."};
constexpr Family kHeldBytes{"rayd_data_held_bytes", "gauge",
                            "Estimated bytes of those blocks (under the node's ingest budget)."};

nlohmann::json Sample(const Family& f, const nlohmann::json& labels, double value) {
  return {{"name", f.name}, {"type", f.type}, {"help", f.help}, {"labels", labels},
          {"value", value}};
}

}  // namespace

std::string ShardFeedPrefix(const std::string& run) { return FeedKey(kShardFeedKind, run + ".rank"); }

std::string ShardFeedName(const std::string& run, int rank) {
  return run + ".rank" + std::to_string(rank);
}

DataFeed::DataFeed(std::string run, int rank, int world_size)
    : run_(std::move(run)), rank_(rank), world_size_(world_size) {}

nlohmann::json DataFeed::Summary(const std::string& run, int rank,
                                 const std::map<std::string, data::ShardStats>& stats,
                                 const std::map<std::string, double>& rows_per_s) {
  nlohmann::json datasets = nlohmann::json::object();
  nlohmann::json metrics = nlohmann::json::array();
  double wait_s = 0;
  for (const auto& [name, s] : stats) {
    const auto rate = rows_per_s.find(name);
    const double rows_per_second = rate != rows_per_s.end() ? rate->second : 0;
    datasets[name] = {{"rows", s.rows},
                      {"bytes", s.bytes},
                      {"blocks", s.blocks},
                      {"wait_s", s.wait_seconds},
                      {"rows_per_s", rows_per_second},
                      {"blocks_in_flight", s.held_blocks},
                      {"held_bytes", s.held_bytes},
                      {"peak_held_bytes", s.peak_held_bytes},
                      {"skipped_rows", s.skipped_rows},
                      {"cache_chunks_made", s.cache_chunks_made},
                      {"cache_chunks_hit", s.cache_chunks_hit}};
    wait_s += s.wait_seconds;
    const nlohmann::json labels{{"run", run}, {"rank", std::to_string(rank)}, {"dataset", name}};
    metrics.push_back(Sample(kWait, labels, s.wait_seconds));
    metrics.push_back(Sample(kRows, labels, static_cast<double>(s.rows)));
    metrics.push_back(Sample(kBytes, labels, static_cast<double>(s.bytes)));
    metrics.push_back(Sample(kBlocks, labels, static_cast<double>(s.blocks)));
    metrics.push_back(Sample(kRate, labels, rows_per_second));
    metrics.push_back(Sample(kHeld, labels, static_cast<double>(s.held_blocks)));
    metrics.push_back(Sample(kHeldBytes, labels, static_cast<double>(s.held_bytes)));
    if (s.cache_chunks_made + s.cache_chunks_hit > 0) {
      metrics.push_back(Sample(kCacheHits, labels, static_cast<double>(s.cache_chunks_hit)));
      metrics.push_back(Sample(kCacheMade, labels, static_cast<double>(s.cache_chunks_made)));
    }
  }
  return {{"name", ShardFeedName(run, rank)},
          {"run", run},
          {"rank", rank},
          {"wait_s", wait_s},
          {"datasets", std::move(datasets)},
          {"updated_ms", NowUnixMs()},
          {"metrics", std::move(metrics)}};
}

std::map<std::string, double> DataFeed::CacheColumns(const Shards& shards) {
  int64_t made = 0, hit = 0;
  for (const auto& [name, shard] : shards) {
    const data::ShardStats s = shard->stats();
    made += s.cache_chunks_made;
    hit += s.cache_chunks_hit;
  }
  if (made + hit == 0) return {};
  return {{"data_cache_chunks_made", static_cast<double>(made)},
          {"data_cache_chunks_hit", static_cast<double>(hit)}};
}

void DataFeed::Publish(const Shards& shards) {
  std::lock_guard lock(mu_);
  PublishLocked(shards);
}

void DataFeed::Touch(const std::function<Shards()>& shards) {
  std::lock_guard lock(mu_);
  if (Clock::now() - published_at_ < std::chrono::duration<double>(kEverySeconds)) return;
  PublishLocked(shards());
}

void DataFeed::PublishLocked(const Shards& shards) {
  if (disabled_ || shards.empty()) return;
  const Clock::time_point now = Clock::now();
  const double since = std::chrono::duration<double>(now - published_at_).count();
  const bool first = published_at_ == Clock::time_point{};
  std::map<std::string, data::ShardStats> stats;
  std::map<std::string, double> rows_per_s;
  for (const auto& [name, shard] : shards) {
    const data::ShardStats s = shard->stats();
    auto [seen, added] = rows_at_publish_.try_emplace(name, 0);
    if (!first && since > 0) rows_per_s[name] = static_cast<double>(s.rows - seen->second) / since;
    seen->second = s.rows;
    stats.emplace(name, s);
  }
  try {
    KvPut(kFeedKvNamespace, FeedKey(kShardFeedKind, ShardFeedName(run_, rank_)),
          Summary(run_, rank_, stats, rows_per_s).dump());
  } catch (const std::exception& e) {
    spdlog::warn("{} rank {}: its datasets will not show on the dashboard: {}", run_, rank_,
                 e.what());
    disabled_ = true;
  }
  published_at_ = now;
}

std::map<std::string, double> DataFeed::RankWaitColumns(double own_wait_s) {
  std::lock_guard lock(mu_);
  std::map<int, double> totals{{rank_, own_wait_s}};
  if (!disabled_) {
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      std::optional<std::string> value;
      try {
        value = KvGet(kFeedKvNamespace, FeedKey(kShardFeedKind, ShardFeedName(run_, r)));
      } catch (const std::exception& e) {
        spdlog::warn("{}: the other ranks' data waits: {}", run_, e.what());
        break;
      }
      if (!value) continue;
      const nlohmann::json feed = nlohmann::json::parse(*value, nullptr, false);
      if (feed.is_object() && feed.value("wait_s", nlohmann::json()).is_number()) {
        totals[r] = feed["wait_s"].get<double>();
      }
    }
  }
  std::map<std::string, double> columns;
  double most = -1;
  int most_rank = rank_;
  for (const auto& [r, total] : totals) {
    auto [seen, added] = waits_seen_.try_emplace(r, 0);
    // A restarted rank starts its count again: its total since then.
    const double waited = total >= seen->second ? total - seen->second : total;
    seen->second = total;
    columns["data_wait_s_rank_" + std::to_string(r)] = waited;
    if (waited > most) {
      most = waited;
      most_rank = r;
    }
  }
  columns["data_wait_s_max"] = most;
  columns["data_wait_max_rank"] = most_rank;
  return columns;
}

void DeleteShardFeeds(const std::string& run) {
  try {
    KvDel(kFeedKvNamespace, ShardFeedPrefix(run), /*by_prefix=*/true);
  } catch (const std::exception& e) {
    spdlog::warn("{}: its ranks' dataset feeds stay on the dashboard: {}", run, e.what());
  }
}

}  // namespace rayd::train::internal
