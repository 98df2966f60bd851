#pragma once
// What a run's driver reads of the cluster's node table: which of a gang's nodes a drain
// (`rayd drain`) is taking away. A read (a connection to the GCS of its own, as
// rayd::AvailableResources makes) may serve every run of the driver process for a while
// (`max_age`).
//
// Threading: any thread (the cache is locked).

#include <rayd/runtime/cluster.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace rayd::train::internal {

// The cluster's nodes, alive and dead, as of at most `max_age` ago (0: read now). Empty when
// this process is not a driver of a cluster (local mode) or the head does not answer.
std::vector<NodeInfo> DriverNodes(std::chrono::milliseconds max_age);

// Those of `gang_nodes` (node ids in hex) that a drain is taking away: draining now, or gone
// after a drain began.
std::set<std::string> DrainedOf(const std::vector<NodeInfo>& nodes,
                                const std::vector<std::string>& gang_nodes);

}  // namespace rayd::train::internal
