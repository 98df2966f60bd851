#pragma once
// AutoscalerConfig: what `rayd start --head --autoscaler FILE` reads. The file's shape:
//
//   provider: {type: local}            # local | slurm | command, plus that provider's keys
//   max_nodes: 4                       # nodes the autoscaler may run at once, all types
//   idle_timeout_s: 60                 # an idle node is drained, then terminated, after this
//   upscaling_speed: 1.0               # launches in flight <= max(5, speed x nodes running)
//   update_interval_s: 5               # how often demand is read and decisions made
//   launch_timeout_s: 300              # a node that has not joined by then is terminated
//   node_types:
//     cpu2:
//       resources: {CPU: 2}            # what one node of the type has (GPU, memory, custom)
//       labels: {zone: a}              # given to its nodes (with rayd.io/node-type: cpu2)
//       min_nodes: 0                   # kept running even when idle
//       max_nodes: 4                   # of this type (default: the cluster's max_nodes)
//       cost: 1.0                      # relative price of one node; demand goes to the
//                                      # cheapest type that fits it (ties: fewer resources)
//       provider: {partition: cpu}     # this type's own provider keys (slurm: partition,
//                                      # time_limit, sbatch_args, rayd_binary)
//
// Provider keys (all optional):
//   local:   rayd_binary (default: this rayd), object_store_memory (e.g. "512MiB")
//   slurm:   partition, time_limit ("HH:MM:SS"), sbatch_args [..], rayd_binary,
//            drain_before_limit_s (default 120: a node whose job's time left falls below this
//            is drained before Slurm ends it)
//   command: create, terminate, list: each an executable path, or a list [exe, arg, ...], to
//            which rayd appends its own arguments (see node_provider.h); timeout_s (default
//            120: a command still running then is killed and reported)
//
// Every error names the key and its line ("autoscaler.yaml:7: node_types.cpu2.min_nodes: ...").

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rayd/base/status.h"
#include "rayd/scheduler/resources.h"

namespace rayd::autoscaler {

struct NodeTypeConfig {
  std::string name;
  scheduler::ResourceSet resources;  // memory as bytes (the file may say "4GiB")
  scheduler::Labels labels;
  int min_nodes = 0;
  int max_nodes = 0;  // resolved: the type's own, else the cluster's max_nodes
  double cost = 1.0;
  nlohmann::json provider = nlohmann::json::object();  // this type's provider keys, as written
};

struct AutoscalerConfig {
  std::string provider_type;                             // "local", "slurm" or "command"
  nlohmann::json provider = nlohmann::json::object();    // the provider map, `type` left out
  int max_nodes = 0;  // resolved: as given, else the sum of the types' max_nodes
  double idle_timeout_s = 60;
  double upscaling_speed = 1.0;
  double update_interval_s = 5;
  double launch_timeout_s = 300;
  std::vector<NodeTypeConfig> node_types;  // in the file's order

  const NodeTypeConfig* FindType(const std::string& name) const;
};

// Parses the text of an autoscaler file; `source` names it in errors. InvalidArgument naming
// the file, line and key for: malformed YAML, an unknown key (with the keys it could be), a
// missing provider or node_types, an unknown provider type, a negative or non-numeric amount,
// min_nodes > max_nodes, a type's max_nodes above the cluster's, no node type at all, a sum of
// min_nodes above max_nodes, an idle timeout or interval <= 0, a command provider without its
// three commands.
Result<AutoscalerConfig> ParseAutoscalerConfig(const std::string& text, const std::string& source);
// Reads and parses `path` (NotFound naming it when it cannot be read).
Result<AutoscalerConfig> LoadAutoscalerConfig(const std::string& path);

}  // namespace rayd::autoscaler
