#pragma once
// The JSON shapes of the cluster's tables, as `rayd list --json`, `rayd status --json` and the
// dashboard show them (implemented in runtime/src/common/cluster_json.cc).

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rayd/internal/runtime.h"
#include "rayd/runtime/cluster.h"

namespace rayd {

// {"CPU": 2, "memory": 1.2e10}: amounts as plain numbers (memory in bytes).
nlohmann::json Amounts(const scheduler::ResourceSet& set);
nlohmann::json DemandsJson(const std::vector<ResourceDemand>& demands);
nlohmann::json NodeJson(const NodeInfo& n);
nlohmann::json PlacementGroupJson(const internal::PlacementGroupInfo& g);
nlohmann::json ActorJson(const ActorSummary& a);
nlohmann::json JobJson(const JobSummary& j);
nlohmann::json WorkerJson(const WorkerSummary& w);
nlohmann::json JobSubmissionJson(const JobSubmissionInfo& j);
// The inverse of JobSubmissionJson (missing fields keep their defaults).
JobSubmissionInfo JobSubmissionFromJson(const nlohmann::json& j);

// A bundle's amounts as the GCS reports them, as a ResourceSet.
scheduler::ResourceSet BundleResources(const std::map<std::string, double>& amounts);
// "PACK", "SPREAD", ...
std::string StrategyName(const internal::PlacementGroupInfo& g);

}  // namespace rayd
