// `rayd request-resources [--cpus N] [--bundles JSON] [--name NAME] [--clear]`: a floor the
// autoscaler keeps room for, whatever runs now (Ray's `request_resources`). Stored in the
// GCS's KV store under AutoscalerRequestKey(NAME) (rayd/runtime/autoscaler_kv.h), which the
// head's autoscaler reads; the same name's next request
// replaces it, and --clear withdraws it.

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "rayd/runtime/autoscaler_kv.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"
#include "rayd/scheduler/resources.h"

namespace rayd::cli {
namespace {

// The bundles asked for: --cpus N as N {CPU: 1}, then --bundles' own.
Result<nlohmann::json> Bundles(const RequestResourcesArgs& args) {
  nlohmann::json out = nlohmann::json::array();
  if (args.cpus) {
    const double n = *args.cpus;
    if (n != static_cast<double>(static_cast<int64_t>(n)) || n > 100000) {
      return Status::InvalidArgument("--cpus: expected a whole number of CPUs up to 100000");
    }
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out.push_back({{"CPU", 1}});
  }
  if (!args.bundles.empty()) {
    auto list = nlohmann::json::parse(args.bundles, nullptr, false);
    if (list.is_discarded() || !list.is_array()) {
      return Status::InvalidArgument(
          R"(--bundles: expected a JSON list of resource maps, e.g. '[{"CPU": 2}]')");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      auto set = scheduler::ResourceSet::FromJson(list[i].dump());
      if (!set.ok() || set->IsEmpty()) {
        return Status::InvalidArgument("--bundles: bundle " + std::to_string(i) + " (" +
                                       list[i].dump() + "): " +
                                       (set.ok() ? "asks for nothing" : set.status().message()));
      }
      out.push_back(nlohmann::json::parse(set->ToJson()));
    }
  }
  return out;
}

}  // namespace

int RunRequestResources(const RequestResourcesArgs& args) {
  const std::string command = "request-resources";
  if (args.name.empty() || args.name.find_first_of(" /:") != std::string::npos) {
    return Fail(command, "--name: a non-empty name without spaces, '/' or ':'");
  }
  auto bundles = Bundles(args);
  if (!bundles.ok()) return Fail(command, bundles.status().message());
  if (args.clear == !bundles->empty()) {
    return Fail(command, args.clear ? "--clear withdraws a request: give no --cpus or --bundles"
                                    : "nothing requested: give --cpus N or --bundles JSON (or "
                                      "--clear to withdraw)");
  }
  auto target = FindCluster(args.address, args.token, session::ResolveTempRoot(args.temp_dir));
  if (!target.ok()) return Fail(command, target.status().message());
  auto cluster = ClusterClient::Connect(target->address, target->token, Millis(5000));
  if (!cluster.ok()) {
    return Fail(command, "cannot reach the cluster at " + target->address + ": " +
                             cluster.status().message());
  }
  const std::string key = AutoscalerRequestKey(args.name);
  Status s = args.clear ? (*cluster)->KvDel(kAutoscalerKvNamespace, key)
                        : (*cluster)->KvPut(kAutoscalerKvNamespace, key,
                                            nlohmann::json{{"bundles", *bundles}}.dump());
  if (!s.ok()) return Fail(command, s.message());
  if (args.clear) {
    std::cout << "request '" << args.name << "' withdrawn\n";
  } else {
    std::cout << "requested " << bundles->size() << " bundle(s) as '" << args.name
              << "': the autoscaler keeps room for them until `rayd request-resources --name "
              << args.name << " --clear`\n";
  }
  return 0;
}

}  // namespace rayd::cli
