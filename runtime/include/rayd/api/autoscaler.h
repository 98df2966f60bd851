#pragma once
// Talking to the cluster's autoscaler (a head started with `rayd start --head --autoscaler`),
// as Ray's `ray.autoscaler.sdk`:
//
//   rayd::RequestResources(8);                          // room for 8 {CPU: 1} bundles
//   rayd::RequestResources(std::nullopt, {{{"CPU", 2}, {"GPU", 1}}});
//   rayd::RequestResources(0);                          // withdraw the request
//
// Without an autoscaler a request is stored and does nothing.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rayd {

// A floor: the autoscaler keeps the cluster able to hold these bundles (placed on its nodes'
// totals, whatever runs on them now), launching nodes if it must. `num_cpus` adds that many
// {CPU: 1} bundles. Each call replaces the previous one (from any driver); an empty request
// withdraws it. Throws RaydError for a negative or fractional num_cpus, a bundle with a
// negative amount or none at all, or when the head cannot be reached.
void RequestResources(std::optional<double> num_cpus,
                      const std::vector<std::map<std::string, double>>& bundles = {});

// What the cluster may grow to: ClusterResources() plus what its autoscaler may still launch
// (each node type up to its max_nodes, the cluster up to its max_nodes, in the config's
// order). Equal to ClusterResources() without an autoscaler.
std::map<std::string, double> MaxClusterResources();

}  // namespace rayd
