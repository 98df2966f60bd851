#pragma once
// RaydConfig: what rayd::Init needs to know. Every field has a working default, so
// `rayd::Init()` alone starts an embedded single-node cluster. The names follow Ray's
// ray::RayConfig.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rayd/api/runtime_env.h"

namespace rayd {

// Whether actors outlive the driver that created them (Ray's ray::ActorLifetime).
enum class ActorLifetime { NON_DETACHED, DETACHED };

struct RaydConfig {
  // "HOST:PORT" of a running head. Empty: RAYD_ADDRESS when set, else an embedded local
  // cluster that lives as long as the program.
  std::string address;
  // Every task and actor runs inside this process, synchronously, with no cluster at all (Ray's
  // local mode, for debugging): Remote() runs the call before it returns.
  bool local_mode = false;
  // Cluster token. Empty: RAYD_TOKEN, else the session directory of a head on this machine.
  std::string token;
  // Resources of the embedded cluster's node (-1: detect).
  int num_cpus = -1;
  int num_gpus = -1;
  // The job's namespace for named actors and placement groups. Empty: an anonymous namespace
  // of its own.
  std::string ray_namespace;
  // Shared libraries (or directories of them) that workers dlopen to find the functions
  // registered with RAYD_REMOTE. Empty: workers re-run the driver's own executable.
  std::vector<std::string> code_search_path;
  // Root of session directories. Empty: RAYD_TEMP_DIR, else /tmp/rayd.
  std::string temp_dir;
  // Custom resources of the embedded cluster's node.
  std::map<std::string, double> resources;
  // Size of the embedded cluster's shared-memory object store in bytes (-1: 30% of RAM).
  int64_t object_store_memory = -1;
  // The embedded cluster's web dashboard (docs/observability.md) on 127.0.0.1:port; its URL is
  // printed on stderr. -1: none; 0: any free port. A port that is taken costs a warning only.
  int dashboard_port = -1;
  // The job's runtime environment: every worker of the job gets its env_vars. Tasks and actors
  // may add their own (SetRuntimeEnv), which win over these.
  RuntimeEnv runtime_env;
  // Lifetime of actors created without ActorCreator::SetDetached.
  ActorLifetime default_actor_lifetime = ActorLifetime::NON_DETACHED;
  // Flags for the embedded cluster's head, as `rayd start --head` takes them ("--num-cpus=4",
  // "--resources", "{\"tpu\": 1}", ...); they win over the fields above. A flag an embedded
  // head cannot take is an error at Init naming it.
  std::vector<std::string> head_args;
  // How long a task, actor or placement group that no node can ever hold waits for such a node
  // to join before it fails with InfeasibleError (embedded cluster; `rayd start` takes
  // --infeasible-timeout-ms).
  int infeasible_timeout_s = 60;
};

}  // namespace rayd
