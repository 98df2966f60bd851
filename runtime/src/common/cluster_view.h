#pragma once
// Reads of the cluster's state for the CLI beyond what the public rayd/runtime/cluster.h offers
// (implemented in cluster_view.cc beside it). Internal: the `rayd` binary includes it from
// runtime/src.

#include <map>
#include <string>
#include <vector>

#include "rayd/internal/runtime.h"
#include "rayd/runtime/cluster.h"

namespace rayd {

// Reads the GCS's placement-group table: every group it knows (recently removed and failed ones
// included), in creation order.
Result<std::vector<internal::PlacementGroupInfo>> FetchPlacementGroups(
    const std::string& address, const std::string& token, Millis timeout = Millis(10000));

// Every key under `prefix` in KV namespace `ns` with its value, read on one connection.
Result<std::map<std::string, std::string>> FetchKvPrefix(const std::string& address,
                                                         const std::string& token,
                                                         const std::string& ns,
                                                         const std::string& prefix,
                                                         Millis timeout = Millis(10000));

}  // namespace rayd
