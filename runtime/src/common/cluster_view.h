#pragma once
// Reads of the cluster's state for the CLI beyond what the public rayd/runtime/cluster.h offers
// (implemented in cluster_view.cc beside it). Internal: the `rayd` binary includes it from
// runtime/src.

#include <string>
#include <vector>

#include "rayd/internal/runtime.h"
#include "rayd/runtime/cluster.h"

namespace rayd {

// Reads the GCS's placement-group table: every group it knows (recently removed and failed ones
// included), in creation order.
Result<std::vector<internal::PlacementGroupInfo>> FetchPlacementGroups(
    const std::string& address, const std::string& token, Millis timeout = Millis(10000));

}  // namespace rayd
