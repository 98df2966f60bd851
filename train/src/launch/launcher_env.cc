// Each launcher's variables, as its own launcher sets them:
// - torch: torchrun (torch.distributed.run) with one agent per node: MASTER_ADDR/PORT name the
//   c10d store the script's init_process_group("env://") hosts on rank 0; GROUP_* count nodes,
//   ROLE_* ranks of the single role; TORCHELASTIC_* the run and its restarts.
// - deepspeed: torch's, plus the MPI-style names its launcher adds (CROSS_RANK/CROSS_SIZE are
//   the node's place, LOCAL_SIZE the ranks on it) and the --local_rank argument.
// - tensorflow: TF_CONFIG for MultiWorkerMirroredStrategy, every rank a "worker".
// - jax: the coordinator (rank 0's endpoint) and this process's place, for
//   jax.distributed.initialize.
// - horovod: horovodrun's Gloo mode: HOROVOD_RANK/SIZE and the LOCAL_ and CROSS_ pairs
//   (horovod_rendezvous.h), HOROVOD_HOSTNAME, the interface Gloo binds, and the HTTP rendezvous
//   rank 0's actor serves on rank 0's endpoint for the attempt.

#include "launcher_env.h"

#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>

#include "horovod_rendezvous.h"

extern char** environ;

namespace rayd::train::internal {
namespace {

// glibc malloc, left to itself, hands a training process's freed tensors back to the kernel
// (heap tops trimmed past ~2x the largest freed block, blocks over ~1 MiB mmapped) and faults
// them in again at the next step: in a small CNN's Python rank, 3,500 page faults and ~25% of
// each step (docs/performance.md). The limits glibc's own adaptive tuning stops at (32 MiB
// mmapped, 64 MiB kept at the heap's top) end that, as PyTorch's run_cpu launcher does with
// jemalloc. Set unless the rank's environment or the trainable's tunes malloc itself.
void KeepFreedMemory(Environment& env, const Environment& command_env) {
  for (const Environment* e : {static_cast<const Environment*>(&env), &command_env}) {
    for (const char* key : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
      if (e->count(key)) return;
    }
    auto tunables = e->find("GLIBC_TUNABLES");
    if (tunables != e->end() && tunables->second.find("glibc.malloc.") != std::string::npos) {
      return;
    }
  }
  env["MALLOC_MMAP_THRESHOLD_"] = "33554432";
  env["MALLOC_TRIM_THRESHOLD_"] = "67108864";
}

// What makes a process a worker of this node; a command started by a rank must not inherit
// it (a rayd program it runs would try to serve as a worker, or hold the cluster's token).
constexpr std::string_view kWorkerOnly[] = {
    "RAYD_WORKER_MODE",     "RAYD_WORKER_ID",      "RAYD_JOB_ID", "RAYD_NODE_ID",
    "RAYD_NODE_ADDRESS",    "RAYD_GCS_ADDRESS",    "RAYD_TOKEN",  "RAYD_SESSION_DIR",
    "RAYD_LAUNCH_ENV_KEYS", "RAYD_WORKER_TEMP_DIR"};

bool SplitEndpoint(const std::string& endpoint, std::string* host, std::string* port) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) return false;
  *host = endpoint.substr(0, colon);
  *port = endpoint.substr(colon + 1);
  return port->find_first_not_of("0123456789") == std::string::npos;
}

void TorchVariables(const RankLaunch& r, const std::string& master_host,
                    const std::string& master_port, Environment& env) {
  env["MASTER_ADDR"] = master_host;
  env["MASTER_PORT"] = master_port;
  env["RANK"] = std::to_string(r.world_rank);
  env["WORLD_SIZE"] = std::to_string(r.world_size);
  env["LOCAL_RANK"] = std::to_string(r.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(r.local_world_size);
  env["NODE_RANK"] = std::to_string(r.node_rank);
  env["GROUP_RANK"] = std::to_string(r.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(r.num_nodes);
  env["ROLE_NAME"] = "default";
  env["ROLE_RANK"] = std::to_string(r.world_rank);
  env["ROLE_WORLD_SIZE"] = std::to_string(r.world_size);
  env["TORCHELASTIC_RUN_ID"] = r.trial_id;
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(r.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(r.max_restarts);
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
}

}  // namespace

std::string HostOf(const std::string& endpoint) { return endpoint.substr(0, endpoint.rfind(':')); }

Environment InheritedEnvironment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  for (std::string_view key : kWorkerOnly) env.erase(std::string(key));
  return env;
}

Result<LaunchEnv> ComposeLaunchEnv(const RankLaunch& r, const Environment& inherited,
                                   const Environment& command_env) {
  if (r.endpoints.size() != static_cast<size_t>(r.world_size) || r.world_size < 1) {
    return Status::InvalidArgument(
        "need one endpoint per rank: " + std::to_string(r.endpoints.size()) + " for " +
        std::to_string(r.world_size) + " ranks");
  }
  std::string master_host;
  std::string master_port;
  for (const std::string& endpoint : r.endpoints) {
    std::string host;
    std::string port;
    if (!SplitEndpoint(endpoint, &host, &port)) {
      return Status::InvalidArgument("endpoint '" + endpoint + "' is not host:port");
    }
    if (master_host.empty()) {
      master_host = host;
      master_port = port;
    }
  }

  LaunchEnv out;
  Environment& env = out.env;
  env = inherited;
  if (r.launcher == "torch" || r.launcher == "deepspeed") {
    TorchVariables(r, master_host, master_port, env);
    if (r.launcher == "deepspeed") {
      env["CROSS_RANK"] = std::to_string(r.node_rank);
      env["CROSS_SIZE"] = std::to_string(r.num_nodes);
      env["LOCAL_SIZE"] = std::to_string(r.local_world_size);
      out.extra_args.push_back("--local_rank=" + std::to_string(r.local_rank));
    }
  } else if (r.launcher == "tensorflow") {
    nlohmann::json config = {{"cluster", {{"worker", r.endpoints}}},
                             {"task", {{"type", "worker"}, {"index", r.world_rank}}}};
    env["TF_CONFIG"] = config.dump();
  } else if (r.launcher == "jax") {
    env["JAX_COORDINATOR_ADDRESS"] = r.endpoints[0];
    env["JAX_NUM_PROCESSES"] = std::to_string(r.world_size);
    env["JAX_PROCESS_ID"] = std::to_string(r.world_rank);
    env["JAX_LOCAL_DEVICE_IDS"] = r.gpus;
  } else if (r.launcher == "horovod") {
    if (r.rank_nodes.size() != r.endpoints.size()) {
      return Status::InvalidArgument(
          "horovod: need each rank's node: " + std::to_string(r.rank_nodes.size()) + " for " +
          std::to_string(r.world_size) + " ranks");
    }
    const HorovodPlace place = HorovodLayout(r.rank_nodes, r.endpoints)[r.world_rank];
    env["HOROVOD_RANK"] = std::to_string(r.world_rank);
    env["HOROVOD_SIZE"] = std::to_string(r.world_size);
    env["HOROVOD_LOCAL_RANK"] = std::to_string(place.local_rank);
    env["HOROVOD_LOCAL_SIZE"] = std::to_string(place.local_size);
    env["HOROVOD_CROSS_RANK"] = std::to_string(place.cross_rank);
    env["HOROVOD_CROSS_SIZE"] = std::to_string(place.cross_size);
    env["HOROVOD_HOSTNAME"] = place.hostname;
    env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = master_host;
    env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = master_port;
    env["HOROVOD_CONTROLLER"] = "gloo";
    env["HOROVOD_CPU_OPERATIONS"] = "gloo";
    if (!r.gloo_iface.empty()) env["HOROVOD_GLOO_IFACE"] = r.gloo_iface;
  } else if (r.launcher != "none") {
    return Status::InvalidArgument("unknown launcher '" + r.launcher +
                                   "' (torch, deepspeed, tensorflow, jax, horovod or none)");
  }

  env["RAYD_TRIAL_ID"] = r.trial_id;
  env["RAYD_TRIAL_DIR"] = r.trial_dir;
  env["RAYD_WORLD_RANK"] = std::to_string(r.world_rank);
  env["RAYD_WORLD_SIZE"] = std::to_string(r.world_size);
  env["RAYD_LOCAL_RANK"] = std::to_string(r.local_rank);
  env["RAYD_LOCAL_WORLD_SIZE"] = std::to_string(r.local_world_size);
  env["RAYD_NODE_RANK"] = std::to_string(r.node_rank);
  env["RAYD_REPORT_ADDR"] = r.report_address;
  env["RAYD_REPORT_TOKEN"] = r.report_token;
  env["RAYD_CONFIG_FILE"] = r.config_file;
  if (!r.drain_file.empty()) env["RAYD_DRAIN_FILE"] = r.drain_file;
  if (r.data_socket.empty()) {
    env.erase("RAYD_DATA_SOCKET");
  } else {
    env["RAYD_DATA_SOCKET"] = r.data_socket;
  }
  if (r.checkpoint_dir.empty()) {
    env.erase("RAYD_CHECKPOINT_DIR");
  } else {
    env["RAYD_CHECKPOINT_DIR"] = r.checkpoint_dir;
  }
  env["CUDA_VISIBLE_DEVICES"] = r.gpus;
  env["OMP_NUM_THREADS"] = std::to_string(std::max(1, static_cast<int>(std::floor(r.cpus + 1e-9))));
  KeepFreedMemory(env, command_env);
  for (const auto& [key, value] : command_env) env[key] = value;
  // The client first, before the trainable's own PYTHONPATH (or, without one, the inherited
  // one): a trainable adding its packages still imports rayd.train.
  if (!r.python_dir.empty()) {
    auto path = env.find("PYTHONPATH");
    env["PYTHONPATH"] = path == env.end() || path->second.empty()
                            ? r.python_dir
                            : r.python_dir + ":" + path->second;
  }
  return out;
}

}  // namespace rayd::train::internal
