// Drives the autoscaler's Slurm provider for slurm_provider_test.sh, one call per run:
//
//   slurm_provider_driver HEAD_ADDRESS LOG_DIR RAYD_BIN TIME_LIMIT create TYPE CPUS
//       submits one node of TYPE (CPUS CPUs, label zone=slurm); prints "ID STATE"
//   slurm_provider_driver ... list ID...
//       adopts the jobs ID... (as a restarted head would), then prints one line per instance
//       the provider lists: "ID STATE SECONDS_LEFT|none DETAIL"
//   slurm_provider_driver ... terminate ID
//       prints "terminated ID"
//
// The cluster token comes from RAYD_TOKEN. Exits 1 with the provider's error on stderr.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "autoscaler/node_provider.h"
#include "rayd/base/event_loop.h"

namespace {

using rayd::autoscaler::Instance;

const char* StateName(Instance::State state) {
  return state == Instance::State::kPending ? "pending" : "running";
}

int Fail(const std::string& why) {
  std::cerr << "slurm_provider_driver: " << why << std::endl;
  return 1;
}

// Runs the loop until `result` is set (the provider's commands have a time limit of their own).
template <typename T>
bool Wait(rayd::EventLoop& loop, const std::optional<T>& result) {
  return loop.RunUntil([&] { return result.has_value(); }, rayd::Millis(120000));
}

rayd::autoscaler::NodeTypeConfig Type(const std::string& name, double cpus) {
  rayd::autoscaler::NodeTypeConfig type;
  type.name = name;
  type.resources = rayd::scheduler::ResourceSet{{"CPU", cpus}};
  type.labels = {{"zone", "slurm"}};
  type.max_nodes = 1;
  return type;
}

using Args = std::vector<std::string>;  // HEAD_ADDRESS LOG_DIR RAYD_BIN TIME_LIMIT CMD ARGS...
using rayd::autoscaler::NodeProvider;

int Create(rayd::EventLoop& loop, NodeProvider& provider, const Args& args) {
  std::optional<rayd::Result<std::vector<Instance>>> created;
  provider.Create(Type(args[5], std::atof(args[6].c_str())), 1,
                  [&](auto r) { created.emplace(std::move(r)); });
  if (!Wait(loop, created)) return Fail("create did not answer");
  if (!created->ok()) return Fail(created->status().ToString());
  for (const auto& i : created->value()) std::cout << i.id << " " << StateName(i.state) << "\n";
  return 0;
}

int List(rayd::EventLoop& loop, NodeProvider& provider, const Args& args) {
  std::vector<Instance> adopted;
  for (size_t i = 5; i < args.size(); ++i) {
    Instance instance;
    instance.id = args[i];
    instance.node_type = "cpu1";
    adopted.push_back(instance);
  }
  provider.Adopt(adopted);
  std::optional<rayd::Result<std::vector<Instance>>> listed;
  provider.List([&](auto r) { listed.emplace(std::move(r)); });
  if (!Wait(loop, listed)) return Fail("list did not answer");
  if (!listed->ok()) return Fail(listed->status().ToString());
  for (const auto& i : listed->value()) {
    std::cout << i.id << " " << StateName(i.state) << " "
              << (i.seconds_left ? std::to_string(static_cast<int64_t>(*i.seconds_left))
                                 : std::string("none"))
              << " " << i.detail << "\n";
  }
  return 0;
}

int Terminate(rayd::EventLoop& loop, NodeProvider& provider, const Args& args) {
  Instance instance;
  instance.id = args[5];
  std::optional<rayd::Status> terminated;
  provider.Terminate(instance, [&](rayd::Status s) { terminated.emplace(std::move(s)); });
  if (!Wait(loop, terminated)) return Fail("terminate did not answer");
  if (!terminated->ok()) return Fail(terminated->ToString());
  std::cout << "terminated " << instance.id << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_st("driver"));  // stdout: the results
  const Args args(argv + 1, argv + argc);
  if (args.size() < 6) return Fail("usage: HEAD_ADDRESS LOG_DIR RAYD_BIN TIME_LIMIT CMD ARGS...");
  const char* token = std::getenv("RAYD_TOKEN");
  if (token == nullptr) return Fail("RAYD_TOKEN is not set");
  rayd::EventLoop loop;
  rayd::autoscaler::AutoscalerConfig config;
  config.provider_type = "slurm";
  config.provider = {{"time_limit", args[3]}};
  config.max_nodes = 1;
  const rayd::autoscaler::ProviderContext context{&loop, args[0], token, args[2], args[1], ""};
  auto made = rayd::autoscaler::MakeNodeProvider(config, context);
  if (!made.ok()) return Fail(made.status().ToString());
  const std::string& command = args[4];
  if (command == "create" && args.size() == 7) return Create(loop, **made, args);
  if (command == "list") return List(loop, **made, args);
  if (command == "terminate" && args.size() == 6) return Terminate(loop, **made, args);
  return Fail("unknown command or wrong arguments: " + command);
}
