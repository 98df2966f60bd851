#include "head/head_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>

namespace rayd::head {

Status ApplyHeadArgs(const std::vector<std::string>& args, EmbeddedClusterOptions* options) {
  if (args.empty()) return Status::Ok();
  CLI::App app("rayd embedded head");
  app.allow_extras(false);
  std::optional<double> num_cpus, num_gpus;
  std::optional<std::string> memory, object_store_memory, resources, labels;
  std::optional<int64_t> infeasible_timeout_ms;
  std::optional<int> dashboard_port;
  app.add_option("--num-cpus", num_cpus)->check(CLI::NonNegativeNumber);
  app.add_option("--num-gpus", num_gpus)->check(CLI::NonNegativeNumber);
  app.add_option("--memory", memory);
  app.add_option("--object-store-memory", object_store_memory);
  app.add_option("--resources", resources);
  app.add_option("--labels", labels);
  app.add_option("--infeasible-timeout-ms", infeasible_timeout_ms)->check(CLI::Range(0, 86400000));
  app.add_option("--dashboard-port", dashboard_port)->check(CLI::Range(0, 65535));
  // Flags of a real head that mean nothing for a cluster inside the program.
  for (const char* flag : {"--port", "--node-ip-address", "--redis-address", "--redis-password",
                           "--token", "--temp-dir", "--block", "--metrics-port"}) {
    if (std::any_of(args.begin(), args.end(), [&](const std::string& a) {
          return a == flag || a.rfind(std::string(flag) + "=", 0) == 0;
        })) {
      return Status::InvalidArgument(std::string("RaydConfig::head_args: ") + flag +
                                     " is for `rayd start --head`; an embedded cluster cannot "
                                     "take it (set RaydConfig::address to use such a head)");
    }
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(std::string("RaydConfig::head_args: ") + e.what());
  }
  NodeResourceOptions& r = options->resources;
  if (num_cpus) r.num_cpus = *num_cpus;
  if (num_gpus) r.num_gpus = *num_gpus;
  auto bytes = [](const std::optional<std::string>& text, const char* flag,
                  std::optional<int64_t>* out) -> Status {
    if (!text) return Status::Ok();
    Result<int64_t> parsed = scheduler::ParseByteSize(*text);
    if (!parsed.ok()) {
      return Status::InvalidArgument(std::string("RaydConfig::head_args: ") + flag + ": " +
                                     parsed.status().message());
    }
    *out = *parsed;
    return Status::Ok();
  };
  RAYD_RETURN_IF_ERROR(bytes(memory, "--memory", &r.memory));
  RAYD_RETURN_IF_ERROR(bytes(object_store_memory, "--object-store-memory", &r.object_store_memory));
  if (resources) {
    Result<scheduler::ResourceSet> custom = scheduler::ParseResourcesJson(*resources);
    if (!custom.ok()) {
      return Status::InvalidArgument("RaydConfig::head_args: --resources: " +
                                     custom.status().message());
    }
    for (const auto& [name, amount] : *custom) r.custom.Set(name, amount);
  }
  if (labels) {
    Result<scheduler::Labels> parsed = scheduler::ParseLabels(*labels);
    if (!parsed.ok()) {
      return Status::InvalidArgument("RaydConfig::head_args: --labels: " +
                                     parsed.status().message());
    }
    for (const auto& [k, v] : *parsed) r.labels[k] = v;
  }
  if (infeasible_timeout_ms) options->infeasible_timeout = Millis(*infeasible_timeout_ms);
  if (dashboard_port) options->dashboard_port = *dashboard_port;
  return Status::Ok();
}

}  // namespace rayd::head
