#pragma once
// The `rayd` subcommands. Each returns the process exit code.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rayd/base/status.h"

namespace rayd::cli {

struct StartArgs {
  bool head = false;
  std::string address;
  int port = 6380;
  std::string node_ip;
  std::optional<double> num_cpus;
  std::optional<double> num_gpus;
  std::string memory;
  std::string object_store_memory;
  std::string resources;
  std::string labels;
  std::string redis_address;
  std::string redis_password;
  std::string token;
  std::string temp_dir;
  bool block = false;
  int heartbeat_period_ms = 1000;
  int missed_heartbeats = 5;
  int join_timeout_ms = 15000;
  std::optional<int> infeasible_timeout_ms;  // unset: 60 s, 10 min with --autoscaler
  std::optional<int> dashboard_port;  // unset: 8265 if free
  std::string dashboard_host = "127.0.0.1";
  bool include_dashboard = true;
  int metrics_port = -1;  // -1: no /metrics on this daemon's own port
  std::string autoscaler;  // head: an autoscaler config file
};
int RunStart(const StartArgs& args);

struct StopArgs {
  bool force = false;
  std::string temp_dir;
  int grace_ms = 15000;
};
int RunStop(const StopArgs& args);

struct StatusArgs {
  std::string address;
  std::string token;
  std::string temp_dir;
  std::string format = "table";
  std::string what = "status";  // "status" or a `rayd list` table: "nodes"
};
int RunStatus(const StatusArgs& args);

struct DrainArgs {
  std::string node;  // an alive node's id, or a unique prefix of it
  std::string deadline = "30s";
  std::string reason;
  std::string address;
  std::string token;
  std::string temp_dir;
};
int RunDrain(const DrainArgs& args);

// `rayd request-resources`: a floor the autoscaler keeps room for (Ray's request_resources).
struct RequestResourcesArgs {
  std::optional<double> cpus;  // that many {CPU: 1} bundles
  std::string bundles;         // JSON list of resource maps
  std::string name = "cli";    // each name's request replaces its previous one
  bool clear = false;
  std::string address;
  std::string token;
  std::string temp_dir;
};
int RunRequestResources(const RequestResourcesArgs& args);
// The "Autoscaler:" section of `rayd status`, from the state the head's autoscaler publishes.
void PrintAutoscalerStatus(const nlohmann::json& state);
// "30s", "2m", "500ms", "1h" or plain seconds, as milliseconds; InvalidArgument naming --deadline.
Result<int64_t> ParseDrainDeadline(const std::string& text);

}  // namespace rayd::cli

namespace rayd::cli {

struct MicrobenchmarkArgs {
  bool json = false;
  int runs = 3;
  double seconds = 1.0;
  int num_cpus = -1;
  std::string temp_dir;
};
int RunMicrobenchmark(const MicrobenchmarkArgs& args);

}  // namespace rayd::cli

namespace rayd::cli {

struct TuneArgs {
  std::string file;
  std::string address;  // empty: RAYD_ADDRESS, else an embedded cluster
  bool resume = false;
  bool overwrite = false;
  bool allow_failed_trials = false;  // exit 0 with failed trials, if one reported the metric
  double progress_interval_s = 5;
  std::string simulate;  // recorded curves to replay instead of training (rayd/tune/simulator.h)
};
int RunTune(const TuneArgs& args);

struct TrainArgs {
  std::string file;     // a train.yaml, or:
  std::vector<std::string> command;  // `rayd train [options] -- CMD ARGS`: a command job
  std::string address;
  // For a command job (a train.yaml says these itself):
  int num_workers = 1;
  int min_workers = 0;  // `--num-workers MIN:MAX`: an elastic job (ScalingConfig::min_workers)
  bool use_gpu = false;
  bool local_mode = false;
  double cpus_per_worker = 1;
  std::string launcher = "torch";
  std::string name;  // default: train_<date>_<time>
  std::string storage_path = "./rayd_results";
  int max_failures = 0;
  int max_preemptions = -1;  // restarts after a drained node (`rayd drain`); -1: unlimited
  int num_to_keep = 0;       // checkpoints kept (the newest); 0: every one, as train.yaml's
  // A run whose directory holds an earlier run: go on from its checkpoint, or replace it
  // (neither: this run goes to <name>_<start time>, as `rayd tune`'s sweeps do).
  bool resume = false;
  bool overwrite = false;
  std::string config_json = "{}";
  // The options above given on the command line (by their first name, e.g. "--num-workers"):
  // with a train.yaml they override its keys (never ignored in silence).
  std::vector<std::string> given;
};
int RunTrain(const TrainArgs& args);

}  // namespace rayd::cli

namespace rayd::cli {

// `rayd job submit|status|logs|stop|list`.
struct JobArgs {
  std::string action;  // submit, status, logs, stop or list
  std::string submission_id;
  std::vector<std::string> command;  // submit: what follows `--`
  std::string address;
  std::string token;
  std::string temp_dir;
  std::string working_dir;
  std::string runtime_env_json;
  bool no_wait = false;
  bool follow = false;
  std::string format = "table";
};
int RunJob(const JobArgs& args);

}  // namespace rayd::cli
