#pragma once
// The flags of `rayd start --head` that an embedded cluster can take (RaydConfig::head_args).

#include <string>
#include <vector>

#include "rayd/base/status.h"
#include "rayd/runtime/cluster.h"

namespace rayd::head {

// What an embedded cluster is started with.
struct EmbeddedClusterOptions {
  NodeResourceOptions resources;
  Millis infeasible_timeout{60000};
  int dashboard_port = -1;  // -1: none
};

// Applies `args` ("--num-cpus=4", or "--num-cpus", "4") on top of `options`: --num-cpus,
// --num-gpus, --memory, --object-store-memory, --resources JSON, --labels k=v,...,
// --infeasible-timeout-ms, --dashboard-port. InvalidArgument naming the flag for anything else
// (a flag only a real head has, such as --port or --redis-address, says so) or a bad value.
Status ApplyHeadArgs(const std::vector<std::string>& args, EmbeddedClusterOptions* options);

}  // namespace rayd::head
