#pragma once
// The environment a command rank is started with: what its framework's launcher would set
// (torchrun's variables, DeepSpeed's, TF_CONFIG, JAX's coordinator) and rayd's own. A pure
// function of where the rank sits, so unit tests check every profile
// (tests/unit/train/command_rank_test.cc, horovod_test.cc); command_rank.cc starts the process
// with it.

#include <rayd/base/status.h>

#include <map>
#include <string>
#include <vector>

namespace rayd::train::internal {

using Environment = std::map<std::string, std::string>;

struct RankLaunch {
  std::string launcher;  // Command::launcher
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  // A port reserved on each rank's node, "host:port", by rank: rank 0's is the rendezvous
  // (MASTER_ADDR/PORT, JAX's coordinator, Horovod's HTTP rendezvous); TF_CONFIG lists them all.
  std::vector<std::string> endpoints;
  // Each rank's node (0.., by first appearance), by rank: Horovod's local and cross places.
  std::vector<int> rank_nodes;
  std::string gloo_iface;  // the interface holding this rank's node address (HOROVOD_GLOO_IFACE)
  std::string trial_id;   // TORCHELASTIC_RUN_ID, RAYD_TRIAL_ID
  std::string trial_dir;  // RAYD_TRIAL_DIR
  int restart_count = 0;  // attempts before this one that failed
  int max_restarts = 0;   // FailureConfig::max_failures
  // rayd's report wire and the trial's files on this node (docs/command-trainables.md).
  std::string report_address;  // "127.0.0.1:port"
  std::string report_token;
  std::string config_file;
  std::string checkpoint_dir;  // empty: nothing to resume from
  std::string python_dir;      // the rayd Python client's directory, put first on PYTHONPATH
  std::string gpus;            // CUDA_VISIBLE_DEVICES: the bundle's devices, "" for none
  std::string drain_file;      // RAYD_DRAIN_FILE: where the node posts a `rayd drain` notice
  std::string data_socket;     // RAYD_DATA_SOCKET: the run's datasets (data_server.h), if any
  double cpus = 1;             // the bundle's CPUs: OMP_NUM_THREADS unless the command sets it
};

struct LaunchEnv {
  Environment env;
  std::vector<std::string> extra_args;  // appended to the command (DeepSpeed's --local_rank)
};

// `inherited` (the rank actor's own environment, rayd's worker-internal variables removed)
// plus the launcher's variables, rayd's, and last `command_env` (the user's, which wins, but
// for PYTHONPATH: rayd's Python client goes first on the user's).
// Fails for an unknown launcher or an endpoint that is not host:port.
Result<LaunchEnv> ComposeLaunchEnv(const RankLaunch& rank, const Environment& inherited,
                                   const Environment& command_env);

// The host of a "host:port" endpoint (all of it when it has no ':').
std::string HostOf(const std::string& endpoint);

// This process's environment, without the variables that make a process a rayd worker of this
// node (RAYD_WORKER_MODE, the node's socket, the cluster token, ...).
Environment InheritedEnvironment();

}  // namespace rayd::train::internal
