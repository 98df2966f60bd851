#pragma once
// A run's datasets as a rank opens them: one lookup and one budget for a C++ loop's
// GetDatasetShard (data.cc) and a command rank's data server (launch/data_server.cc).

#include <rayd/base/status.h>
#include <rayd/data/shard.h>

#include <memory>
#include <string>

namespace rayd::train::internal {

// This rank's shard of dataset `name` in `datasets_json` (RunSpec::datasets_json): rank `rank`
// of `world` data-parallel ranks, the node's byte budget split among its `local_world_size`
// ranks. NotFound naming the datasets the run has; the reader's error otherwise.
Result<std::unique_ptr<data::DatasetShard>> OpenRankShard(const std::string& datasets_json,
                                                          const std::string& name, int world,
                                                          int rank, int local_world_size);

}  // namespace rayd::train::internal
