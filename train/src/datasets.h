#pragma once
// A run's datasets as a rank opens them: one lookup and one budget for a C++ loop's
// GetDatasetShard (data.cc) and a command rank's data server (launch/data_server.cc).

#include <rayd/base/status.h>
#include <rayd/data/shard.h>

#include <map>
#include <memory>
#include <string>

namespace rayd::train::internal {

// This rank's shard of dataset `name` in `datasets_json` (RunSpec::datasets_json): rank `rank`
// of `world` data-parallel ranks, the node's byte budget split among its `local_world_size`
// ranks. NotFound naming the datasets the run has; the reader's error otherwise.
Result<std::unique_ptr<data::DatasetShard>> OpenRankShard(const std::string& datasets_json,
                                                          const std::string& name, int world,
                                                          int rank, int local_world_size);

// Where each shard stood, in a checkpoint: {NAME: {"epoch": E, "cursor": C, "pending": [ROW, ...]}}
// (ShardPosition; "pending" only when a local shuffle buffer held rows),
// written by rank 0 into every checkpoint it reports, read back by the attempt that resumes from
// it, so that each dataset goes on with the next sample at any world size.
inline constexpr char kDataPositionsFile[] = ".rayd_data_positions.json";

// Writes `positions` (by dataset) into checkpoint directory `dir`.
Status WriteDataPositions(const std::map<std::string, data::ShardPosition>& positions,
                          const std::string& dir);
// Resumes `shard` (dataset `name`) where checkpoint directory `dir` recorded it; nothing when
// `dir` recorded no position for it (a checkpoint from before rayd recorded them, or of a run
// without that dataset).
void ResumeShard(data::DatasetShard& shard, const std::string& name, const std::string& dir);

}  // namespace rayd::train::internal
