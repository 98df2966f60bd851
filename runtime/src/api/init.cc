// rayd::Init / Shutdown: make this process a driver (of an embedded or a running cluster), or,
// when a node daemon started it as a worker, serve tasks until the node lets it go.

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>

#include "core/core_worker.h"
#include "head/embedded_cluster.h"
#include "core/local_mode_runtime.h"
#include "rayd/api.h"
#include "rayd/base/logging.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"

namespace rayd {
namespace {

struct Driver {
  std::unique_ptr<head::EmbeddedCluster> cluster;  // null when joined to a running cluster
  std::unique_ptr<core::CoreWorker> worker;        // null in local mode...
  std::unique_ptr<core::LocalModeRuntime> local;   // ...which runs everything in here
  std::string gcs_address;
  std::string token;
};

std::mutex g_mu;
Driver* g_driver = nullptr;  // guarded by g_mu

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// dlopens every library named on the search path (files, or directories of *.so), so that
// their RAYD_REMOTE registrations land in this process's registry.
void LoadLibraries(const std::string& search_path) {
  size_t start = 0;
  while (start <= search_path.size()) {
    size_t end = search_path.find(':', start);
    if (end == std::string::npos) end = search_path.size();
    std::string entry = search_path.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    std::vector<std::string> files;
    if (DIR* dir = opendir(entry.c_str())) {
      while (dirent* e = readdir(dir)) {
        std::string name = e->d_name;
        if (name.size() > 3 && name.ends_with(".so")) files.push_back(entry + "/" + name);
      }
      closedir(dir);
    } else {
      files.push_back(entry);
    }
    for (const auto& f : files) {
      if (dlopen(f.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        spdlog::error("cannot load {}: {}", f, dlerror());
      }
    }
  }
}

// This process's argv as the kernel has it: how a worker was started, and so how it starts the
// workers of the tasks and actors it submits.
std::vector<std::string> OwnCommandLine() {
  std::vector<std::string> argv;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  if (argv.empty()) argv.push_back(SelfExecutable());
  return argv;
}

// The launch environment a worker was started with: the variables its node listed in
// RAYD_LAUNCH_ENV_KEYS (the job's code search path, runtime env, namespace, ...).
std::map<std::string, std::string> OwnLaunchEnv() {
  std::map<std::string, std::string> env;
  const std::string keys = Env("RAYD_LAUNCH_ENV_KEYS");
  size_t start = 0;
  while (start < keys.size()) {
    size_t end = keys.find(',', start);
    if (end == std::string::npos) end = keys.size();
    const std::string key = keys.substr(start, end - start);
    if (const char* value = std::getenv(key.c_str()); value != nullptr && !key.empty()) {
      env[key] = value;
    }
    start = end + 1;
  }
  return env;
}

[[noreturn]] void RunWorker() {
  // Ctrl-C in the driver's terminal reaches its whole process group, workers included; they
  // belong to their node, which ends them, so the driver alone decides what Ctrl-C means.
  std::signal(SIGINT, SIG_IGN);
  InitLogging("worker", "");
  LoadLibraries(Env("RAYD_CODE_SEARCH_PATH"));
  core::CoreWorkerOptions options;
  options.is_driver = false;
  options.gcs_address = Env("RAYD_GCS_ADDRESS");
  options.node_address = Env("RAYD_NODE_ADDRESS");
  options.token = Env("RAYD_TOKEN");
  if (!Env("RAYD_NODE_IP").empty()) options.node_ip = Env("RAYD_NODE_IP");
  auto job = JobId::FromHex(Env("RAYD_JOB_ID"));
  auto worker = WorkerId::FromHex(Env("RAYD_WORKER_ID"));
  if (!job.ok() || !worker.ok()) {
    spdlog::critical("RAYD_WORKER_MODE is set without a valid RAYD_JOB_ID / RAYD_WORKER_ID");
    _exit(2);
  }
  options.job_id = *job;
  options.worker_id = *worker;
  // A worker submits tasks and creates actors exactly as its driver does: its own workers run
  // the same command with the same launch environment.
  options.launch_argv = OwnCommandLine();
  options.launch_env = OwnLaunchEnv();
  options.ray_namespace = Env("RAYD_NAMESPACE").empty() ? job->Hex() : Env("RAYD_NAMESPACE");
  options.default_detached = Env("RAYD_DEFAULT_ACTOR_LIFETIME") == "detached";
  auto cw = core::CoreWorker::Start(options);
  if (!cw.ok()) {
    spdlog::critical("worker could not start: {}", cw.status().ToString());
    _exit(1);
  }
  // (CoreWorker::Start installed itself as the current runtime before registering.)
  (*cw)->WaitForDisconnect();
  // The node is gone: leave without running the user's static destructors mid-task.
  _exit(0);
}

std::string FindToken(const RaydConfig& config, const std::string& temp_root) {
  if (!config.token.empty()) return config.token;
  if (!Env("RAYD_TOKEN").empty()) return Env("RAYD_TOKEN");
  std::string latest = session::LatestHeadSession(temp_root);
  if (latest.empty()) return "";
  auto token = session::ReadTrimmed(latest + "/token");
  return token.ok() ? *token : "";
}

}  // namespace

void Init(RaydConfig config, int argc, char** argv) {
  if (!Env("RAYD_WORKER_MODE").empty()) RunWorker();
  std::lock_guard lock(g_mu);
  if (g_driver != nullptr) return;  // as in Ray, a second Init does nothing
  std::signal(SIGPIPE, SIG_IGN);
  // Until we know where the session's logs go, only problems reach stderr.
  InitLogging("driver", "");
  if (Env("RAYD_LOG_LEVEL").empty()) spdlog::set_level(spdlog::level::warn);
  const std::string temp_root = session::ResolveTempRoot(config.temp_dir);
  auto driver = std::make_unique<Driver>();

  core::CoreWorkerOptions options;
  options.is_driver = true;
  options.job_id = JobId::FromRandom();
  options.ray_namespace = config.ray_namespace.empty() ? options.job_id.Hex()
                                                       : config.ray_namespace;
  options.default_detached = config.default_actor_lifetime == ActorLifetime::DETACHED;
  if (config.local_mode) {
    driver->local = std::make_unique<core::LocalModeRuntime>(options.ray_namespace);
    internal::SetCurrentRuntime(driver->local.get());
    g_driver = driver.release();
    return;
  }
  // What every worker of the job starts with (and passes on to the workers it starts): the
  // job's runtime env, its namespace and its actors' default lifetime.
  options.launch_env = internal::EnvVarsOf(config.runtime_env);
  options.launch_env["RAYD_NAMESPACE"] = options.ray_namespace;
  if (options.default_detached) options.launch_env["RAYD_DEFAULT_ACTOR_LIFETIME"] = "detached";
  options.entrypoint = argc > 0 && argv ? argv[0] : SelfExecutable();
  options.launch_argv = {SelfExecutable()};
  std::string search_path;
  for (const auto& p : config.code_search_path) {
    // Checked here so that a wrong path is an error at Init, not a worker that can't find a
    // function later.
    if (access(p.c_str(), R_OK) != 0) {
      throw RaydError("rayd::Init: code search path entry '" + p + "' cannot be read");
    }
    // Workers start in the node daemon's directory: pass absolute paths.
    char resolved[PATH_MAX];
    std::string absolute = realpath(p.c_str(), resolved) ? std::string(resolved) : p;
    search_path += (search_path.empty() ? "" : ":") + absolute;
  }
  if (!search_path.empty()) options.launch_env["RAYD_CODE_SEARCH_PATH"] = search_path;

  std::string address = config.address.empty() ? Env("RAYD_ADDRESS") : config.address;
  if (address.empty()) {
    head::EmbeddedClusterOptions embedded;
    NodeResourceOptions& resources = embedded.resources;
    if (config.num_cpus >= 0) resources.num_cpus = config.num_cpus;
    if (config.num_gpus >= 0) resources.num_gpus = config.num_gpus;
    if (config.object_store_memory >= 0) {
      resources.object_store_memory = config.object_store_memory;
    }
    for (const auto& [name, amount] : config.resources) {
      resources.custom.Set(name, scheduler::FixedPoint::FromDouble(amount));
    }
    if (config.infeasible_timeout_s < 0) {
      throw RaydError("rayd::Init: RaydConfig::infeasible_timeout_s must be >= 0, got " +
                      std::to_string(config.infeasible_timeout_s));
    }
    embedded.infeasible_timeout = Millis(int64_t{config.infeasible_timeout_s} * 1000);
    embedded.dashboard_port = config.dashboard_port;
    internal::ThrowIfError(head::ApplyHeadArgs(config.head_args, &embedded));
    auto cluster = head::EmbeddedCluster::Start(embedded, temp_root);
    if (!cluster.ok()) throw RaydError("rayd::Init: " + cluster.status().message());
    driver->cluster = std::move(*cluster);
    if (embedded.dashboard_port >= 0) {
      auto url = driver->cluster->StartDashboard(embedded.dashboard_port);
      if (url.ok()) {
        std::cerr << "rayd: dashboard at " << *url << "\n";
      } else {
        std::cerr << "rayd: no dashboard: " << url.status().message() << "\n";
      }
    }
    // The program's own output stays clean: the runtime logs into the session directory.
    InitLogging("driver", driver->cluster->session_dir() + "/logs/driver.log");
    options.gcs_address = driver->cluster->gcs_address();
    options.node_address = driver->cluster->node_address();
    options.token = driver->cluster->token();
  } else {
    options.gcs_address = address;
    // A driver of a remote cluster listens on the interface that reaches the head, so that
    // workers on other machines can reach it (the owner of its objects).
    options.node_ip = Env("RAYD_NODE_IP").empty() ? GetNodeIpAddressFromPerspective(address)
                                                  : Env("RAYD_NODE_IP");
    options.token = FindToken(config, temp_root);
    if (options.token.empty()) {
      throw RaydError("rayd::Init: no cluster token for " + address +
                      ": set RaydConfig::token or RAYD_TOKEN");
    }
  }
  auto worker = core::CoreWorker::Start(options);
  if (!worker.ok()) throw RaydError("rayd::Init: " + worker.status().message());
  driver->worker = std::move(*worker);
  driver->gcs_address = options.gcs_address;
  driver->token = options.token;
  internal::SetCurrentRuntime(driver->worker.get());
  g_driver = driver.release();
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit([] { Shutdown(); }); });
}

void Init(RaydConfig config) { Init(std::move(config), 0, nullptr); }

void Shutdown() {
  std::unique_ptr<Driver> driver;
  {
    std::lock_guard lock(g_mu);
    if (g_driver == nullptr) return;
    driver.reset(g_driver);
    g_driver = nullptr;
  }
  internal::SetCurrentRuntime(nullptr);
  if (driver->worker) driver->worker->Shutdown();
  driver->worker.reset();
  driver->local.reset();
  driver->cluster.reset();
}

namespace internal {
ClusterEndpoint DriverClusterEndpoint() {
  std::lock_guard lock(g_mu);
  if (g_driver == nullptr || g_driver->worker == nullptr) return {};
  return {g_driver->gcs_address, g_driver->token};
}
}  // namespace internal

// True in drivers after Init and in workers (whose runtime is installed before their first
// task).
bool IsInitialized() { return internal::CurrentRuntime() != nullptr; }

bool IsLocalMode() {
  internal::Runtime* runtime = internal::CurrentRuntime();
  return runtime != nullptr && runtime->IsLocalMode();
}

std::string GetNamespace() { return internal::RequireRuntime().GetNamespace(); }

bool WasCurrentActorRestarted() { return internal::RequireRuntime().WasCurrentActorRestarted(); }

void ExitActor() {
  if (!internal::InActorCall()) {
    throw RaydError("rayd::ExitActor: called outside an actor's method");
  }
  throw internal::ActorExitRequest{};
}

namespace {
// Sums `pick(node)` over the alive nodes of the driver's cluster (those `rayd drain` is taking
// away too, unless `skip_draining`).
std::map<std::string, double> SumOverNodes(
    const std::function<const scheduler::ResourceSet&(const NodeInfo&)>& pick, bool skip_draining) {
  internal::ClusterEndpoint endpoint = internal::DriverClusterEndpoint();
  if (endpoint.gcs_address.empty()) throw RaydError("rayd is not initialised as a driver");
  Result<ClusterView> view = FetchClusterView(endpoint.gcs_address, endpoint.token);
  if (!view.ok()) throw RaydError("reading the cluster's resources: " + view.status().message());
  std::map<std::string, double> sum;
  for (const NodeInfo& node : view->nodes) {
    if (!node.alive || (skip_draining && node.draining())) continue;
    for (const auto& [name, amount] : pick(node)) sum[name] += amount.ToDouble();
  }
  return sum;
}
}  // namespace

std::map<std::string, double> ClusterResources() {
  return SumOverNodes([](const NodeInfo& n) -> const scheduler::ResourceSet& { return n.total; },
                      /*skip_draining=*/false);
}

std::map<std::string, double> AvailableResources() {
  return SumOverNodes(
      [](const NodeInfo& n) -> const scheduler::ResourceSet& { return n.available; },
      /*skip_draining=*/true);
}

}  // namespace rayd
