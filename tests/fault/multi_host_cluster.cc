#include "multi_host_cluster.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "rayd_sandbox.h"

namespace rayd::testing {

using namespace std::chrono_literals;
using nlohmann::json;

std::string SelfExe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

MultiHostCluster::~MultiHostCluster() {
  const char* keep = std::getenv("RAYD_FAULT_KEEP_LOGS");
  if (keep == nullptr) return;
  namespace fs = std::filesystem;
  for (int host = 0; host < bed_.size(); ++host) {
    const fs::path from = bed_.root(host);
    const fs::path to = fs::path(keep) / ("host" + std::to_string(host));
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
      if (!it->is_regular_file()) continue;  // sockets, and session_latest's links
      const fs::path target = to / fs::relative(it->path(), from);
      fs::create_directories(target.parent_path(), ec);
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing, ec);
      ec.clear();
    }
  }
}

std::string MultiHostCluster::head_address() const {
  return bed_.ip(0) + ":" + std::to_string(kHeadPort);
}

std::map<std::string, std::string> MultiHostCluster::Env(int host) const {
  std::map<std::string, std::string> env = {{"RAYD_TOKEN", kFaultToken},
                                            {"RAYD_TEMP_DIR", bed_.root(host)}};
  if (scratch_dirs_) env["TMPDIR"] = bed_.root(host) + "/tmp";
  return env;
}

void MultiHostCluster::UseHostScratchDirs() {
  for (int host = 0; host < bed_.size(); ++host) {
    std::filesystem::create_directories(bed_.root(host) + "/tmp");
  }
  scratch_dirs_ = true;
}

std::vector<std::string> MultiHostCluster::ScratchLeftovers(int host) const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(bed_.root(host) + "/tmp", ec)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

int MultiHostCluster::Rayd(int host, std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), RAYD_BINARY);
  args.insert(args.end(), {"--temp-dir", bed_.root(host)});
  return bed_.Run(host, args, out, Env(host), 60s);
}

std::string MultiHostCluster::StartHead(const std::vector<std::string>& extra) {
  head_flags_ = {"start",    "--head",   "--node-ip-address",
                 bed_.ip(0), "--port",   std::to_string(kHeadPort),
                 "--token",  kFaultToken};
  head_flags_.insert(head_flags_.end(), {"--heartbeat-period-ms", "250", "--missed-heartbeats",
                                         "12", "--object-store-memory", "200000000"});
  head_flags_.insert(head_flags_.end(), extra.begin(), extra.end());
  return Start(0, head_flags_);
}

std::string MultiHostCluster::RestartHead() { return Start(0, head_flags_); }

std::string MultiHostCluster::StartNode(int host, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"start",       "--address", head_address(), "--node-ip-address",
                                   bed_.ip(host), "--token",   kFaultToken};
  args.insert(args.end(), {"--object-store-memory", "200000000"});
  args.insert(args.end(), extra.begin(), extra.end());
  return Start(host, args);
}

json MultiHostCluster::Status() {
  auto status = TryStatus();
  REQUIRE(status);
  return *status;
}

std::optional<json> MultiHostCluster::TryJson(std::vector<std::string> args) {
  args.insert(args.end(), {"--format", "json", "--address", head_address()});
  if (Rayd(0, args, &last_output_) != 0) return std::nullopt;
  json parsed = json::parse(last_output_, nullptr, false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

std::string MultiHostCluster::NodeState(const std::string& node_id) {
  auto status = TryStatus();
  if (!status) return "UNKNOWN";
  for (const auto& n : status->at("nodes")) {
    if (n.at("node_id") == node_id) return n.at("state");
  }
  return "MISSING";
}

double MultiHostCluster::Available(const std::string& node_id, const std::string& resource) {
  auto status = TryStatus();
  if (!status) return -1;
  for (const auto& n : status->at("nodes")) {
    if (n.at("node_id") != node_id) continue;
    const json& available = n.at("available");
    return available.contains(resource) ? available.at(resource).get<double>() : 0.0;
  }
  return -1;
}

int MultiHostCluster::HostRunningATrial(const std::map<std::string, int>& host_of_node) {
  auto actors = TryJson({"list", "actors"});
  if (!actors) return -1;
  for (const auto& a : *actors) {
    if (a.at("state") != "ALIVE") continue;
    auto it = host_of_node.find(a.at("node_id"));
    if (it != host_of_node.end()) return it->second;
  }
  return -1;
}

std::string MultiHostCluster::Start(int host, const std::vector<std::string>& args) {
  std::string out;
  const int rc = Rayd(host, args, &out);
  INFO("rayd start on host " << host << ":\n" << out);
  REQUIRE(rc == 0);
  const std::string id = StartedNodeId(out);
  REQUIRE(id.size() == 32);
  return id;
}

// ---- Sweeps ------------------------------------------------------------------------------------

std::string WriteSweep(const std::string& dir, const std::string& name, int epochs,
                       int max_failures) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "name: " << name << R"(
trainable: mlp_classifier
scaling: {num_workers: 2, use_gpu: false, resources_per_worker: {CPU: 1}}
param_space:
  lr: {grid_search: [0.01, 0.02, 0.05]}
  hidden: 64
  batch_size: 32
  momentum: 0.9
  epochs: )" << epochs << R"(
tune: {metric: loss, mode: min, max_concurrent_trials: 3}
run:
  storage_path: )" << dir
                      << R"(/results
  failure: {max_failures: )"
                      << max_failures << R"(}
  checkpoint: {num_to_keep: 2}
)";
  return path;
}

std::vector<TrialRecord> ReadTrials(const std::string& experiment) {
  std::vector<TrialRecord> out;
  json state = json::parse(ReadFile(experiment + "/experiment_state.json"), nullptr, false);
  if (state.is_discarded() || !state.contains("trials")) return out;
  for (const auto& t : state.at("trials")) {
    TrialRecord r;
    r.id = t.at("id");
    r.status = t.at("status");
    r.num_failures = t.value("num_failures", 0);
    std::istringstream lines(
        ReadFile(experiment + "/" + t.at("dir_name").get<std::string>() + "/result.json"));
    for (std::string line; std::getline(lines, line);) {
      json result = json::parse(line, nullptr, false);
      if (result.is_discarded() || !result.contains("epoch")) continue;  // a line being written
      r.epochs.push_back(static_cast<int>(result.at("epoch").get<double>()));
      r.iterations.push_back(static_cast<int>(result.value("training_iteration", -1.0)));
      r.timestamps.push_back(result.at("timestamp").get<double>());
    }
    out.push_back(std::move(r));
  }
  return out;
}

void CheckSweepComplete(const std::string& experiment, int trials, int epochs) {
  std::vector<int> all(epochs);
  for (int e = 0; e < epochs; ++e) all[e] = e;
  const auto records = ReadTrials(experiment);
  REQUIRE(records.size() == static_cast<size_t>(trials));
  for (const auto& r : records) {
    INFO("trial " << r.id);
    CHECK(r.status == "TERMINATED");
    CHECK(r.epochs == all);
  }
}

std::optional<double> RecoveredAfter(const std::string& experiment, double fault_at,
                                     double dead_at) {
  for (const auto& r : ReadTrials(experiment)) {
    if (r.num_failures == 0) continue;
    for (double ts : r.timestamps) {
      if (ts > dead_at) return ts - fault_at;
    }
  }
  return std::nullopt;
}

bool AnyTrialHas(const std::string& experiment, size_t results) {
  for (const auto& r : ReadTrials(experiment)) {
    if (r.epochs.size() >= results) return true;
  }
  return false;
}

std::unique_ptr<ChildProcess> StartSweep(MultiHostCluster& cluster, int host,
                                         const std::string& yaml, bool resume) {
  std::vector<std::string> argv = {
      RAYD_BINARY, "tune", yaml, "--address", cluster.head_address(), "--progress-interval", "5"};
  if (resume) argv.push_back("--resume");
  return std::make_unique<ChildProcess>(cluster.bed().In(host, argv), cluster.Env(host));
}

void RequireSweepSucceeded(ChildProcess& driver) {
  const bool ended = driver.WaitExit(kSweepTimeout);
  INFO("rayd tune output:\n" << driver.output());
  REQUIRE(ended);
  REQUIRE(driver.exit_code() == 0);
}

int TotalFailures(const std::string& experiment) {
  int n = 0;
  for (const auto& r : ReadTrials(experiment)) n += r.num_failures;
  return n;
}

std::map<std::string, int> StartTrainingCluster(MultiHostCluster& cluster, int nodes,
                                                const std::vector<std::string>& head_extra) {
  std::vector<std::string> head = {"--num-cpus", "0"};
  head.insert(head.end(), head_extra.begin(), head_extra.end());
  cluster.StartHead(head);
  std::map<std::string, int> host_of_node;
  for (int host = 1; host <= nodes; ++host) {
    host_of_node[cluster.StartNode(host, {"--num-cpus", "2"})] = host;
  }
  return host_of_node;
}

}  // namespace rayd::testing
