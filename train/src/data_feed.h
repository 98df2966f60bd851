#pragma once
// A rank's datasets seen from outside the rank: on the head's dashboard and /metrics, and in
// rank 0's result rows.
//
// Each rank with datasets publishes a dashboard feed (rayd/runtime/cluster.h) of kind "shard"
// named "<run>.rank<r>" (served at /api/shards): for each dataset the rows, bytes and blocks its
// loop has taken, the seconds it waited for blocks not made yet, its rows per second since its
// previous publication, and the blocks (and estimated bytes) made or in flight that the loop has
// not taken yet. /metrics exports them as rayd_data_* {run, rank, dataset}. A rank publishes at
// each of its reports and, while it takes batches, at most every kEverySeconds (Touch).
//
// Rank 0 reads its run's feeds at each report (RankWaitColumns) to put every rank's wait since
// the previous row in the row (data_wait_s_rank_<r>), with the largest (data_wait_s_max) and
// whose it was (data_wait_max_rank): a data-parallel step waits for its slowest rank. A rank's
// figure is as of its latest publication, so a rank that publishes after rank 0 has read counts
// in the next row; over the rows, nothing is counted twice or lost.
//
// Threading: every member may be called from any thread.

#include <rayd/data/shard.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace rayd::train::internal {

inline constexpr char kShardFeedKind[] = "shard";

class DataFeed {
 public:
  static constexpr double kEverySeconds = 5;

  DataFeed(std::string run, int rank, int world_size);

  using Shards = std::map<std::string, const data::DatasetShard*>;
  // Publishes `shards`' counts now.
  void Publish(const Shards& shards);
  // Publishes `shards()` when kEverySeconds have passed since the last publication (called per
  // batch: the shards are listed only then).
  void Touch(const std::function<Shards()>& shards);
  // Rank 0: each rank's wait since the previous call, from the ranks' feeds (this rank's from
  // `own_wait_s`, its shards' total wait), as result columns. Ranks that have published nothing
  // yet are left out.
  std::map<std::string, double> RankWaitColumns(double own_wait_s);

  // With `{cache: node}`: the node cache's chunks `shards` needed that were made for them, and
  // that were found made (data_cache_chunks_made, data_cache_chunks_hit: this attempt's), as
  // result columns; none without a cache.
  static std::map<std::string, double> CacheColumns(const Shards& shards);

  // The feed's summary (what Publish puts), for tests.
  static nlohmann::json Summary(const std::string& run, int rank,
                                const std::map<std::string, data::ShardStats>& stats,
                                const std::map<std::string, double>& rows_per_s);

 private:
  void PublishLocked(const Shards& shards);

  const std::string run_;
  const int rank_, world_size_;
  std::mutex mu_;
  bool disabled_ = false;  // the head refused once: not tried again
  std::chrono::steady_clock::time_point published_at_{};
  std::map<std::string, int64_t> rows_at_publish_;  // by dataset
  std::map<int, double> waits_seen_;                // by rank: total wait at the last read
};

// The feed name of rank `rank` of run `run`; the prefix of all of a run's.
std::string ShardFeedName(const std::string& run, int rank);
std::string ShardFeedPrefix(const std::string& run);

// The driver, when a run ends: its ranks' feeds go (the head keeps no dead runs' rows).
void DeleteShardFeeds(const std::string& run);

}  // namespace rayd::train::internal
