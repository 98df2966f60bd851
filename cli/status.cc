// `rayd status` and `rayd list nodes`: the cluster's nodes and resources, as a table for
// people or JSON for programs.

#include <ctime>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"

namespace rayd::cli {
namespace {

using scheduler::FixedPoint;
using scheduler::ResourceSet;

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = unix_ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// "used/total name" per resource, as `ray status` prints usage.
std::vector<std::string> UsageLines(const ResourceSet& total, const ResourceSet& available) {
  std::vector<std::string> lines;
  for (const auto& [name, amount] : total) {
    FixedPoint used = amount - available.Get(name);
    lines.push_back(scheduler::FormatResourceAmount(name, used) + "/" +
                    scheduler::FormatResourceAmount(name, amount) + " " + name);
  }
  return lines;
}

nlohmann::json Amounts(const ResourceSet& set) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, amount] : set) j[name] = amount.ToDouble();
  return j;
}

nlohmann::json NodeJson(const NodeInfo& n) {
  return {{"node_id", n.node_id.Hex()},   {"state", n.alive ? "ALIVE" : "DEAD"},
          {"address", n.address},         {"hostname", n.hostname},
          {"ip", n.ip},                   {"is_head", n.is_head},
          {"total", Amounts(n.total)},    {"available", Amounts(n.available)},
          {"labels", n.labels},           {"start_time_ms", n.start_time_ms},
          {"end_time_ms", n.end_time_ms}, {"death_reason", n.death_reason},
          {"pid", n.pid}};
}

void PrintStatusTable(const ClusterView& view) {
  const std::string rule(64, '-');
  std::cout << "======== Cluster status: " << FormatTime(std::time(nullptr) * 1000LL)
            << " ========\n"
            << "Cluster " << view.cluster_id.substr(0, 8) << " at " << view.gcs_address
            << " (tables: " << view.storage << ", up since " << FormatTime(view.start_time_ms)
            << ")\n\nNode status\n"
            << rule << "\nActive:\n";
  ResourceSet total, available;
  size_t alive = 0, dead = 0;
  for (const auto& n : view.nodes) {
    if (!n.alive) continue;
    ++alive;
    total += n.total;
    available += n.available;
    std::cout << " 1 node_" << n.node_id.Hex() << (n.is_head ? " (head)" : "") << "  "
              << n.address << "  " << n.hostname << "\n";
  }
  if (alive == 0) std::cout << " (no active nodes)\n";
  std::cout << "Dead:\n";
  for (const auto& n : view.nodes) {
    if (n.alive) continue;
    ++dead;
    std::cout << " 1 node_" << n.node_id.Hex() << (n.is_head ? " (head)" : "") << "  "
              << n.address << "  since " << FormatTime(n.end_time_ms) << ": " << n.death_reason
              << "\n";
  }
  if (dead == 0) std::cout << " (no dead nodes)\n";
  std::cout << "\nResources\n" << rule << "\nTotal Usage:\n";
  for (const auto& line : UsageLines(total, available)) std::cout << " " << line << "\n";
  std::cout << "\nPer node:\n";
  for (const auto& n : view.nodes) {
    if (!n.alive) continue;
    std::cout << " node_" << n.node_id.Short() << (n.is_head ? " (head)" : "") << ":";
    for (const auto& line : UsageLines(n.total, n.available)) std::cout << "  " << line << ";";
    if (!n.labels.empty()) {
      std::cout << "  labels:";
      for (const auto& [k, v] : n.labels) std::cout << " " << k << "=" << v;
    }
    std::cout << "\n";
  }
  std::cout << "\nDemands:\n (no resource demands)\n";
}

void PrintNodesTable(const ClusterView& view) {
  std::cout << std::left << std::setw(34) << "NODE_ID" << std::setw(7) << "STATE"
            << std::setw(22) << "ADDRESS" << std::setw(6) << "HEAD"
            << "RESOURCES\n";
  for (const auto& n : view.nodes) {
    std::cout << std::left << std::setw(34) << n.node_id.Hex() << std::setw(7)
              << (n.alive ? "ALIVE" : "DEAD") << std::setw(22) << n.address << std::setw(6)
              << (n.is_head ? "yes" : "") << n.total.ToString() << "\n";
  }
}

}  // namespace

int RunStatus(const StatusArgs& args) {
  const std::string command = args.what == "status" ? "status" : "list " + args.what;
  if (args.format != "table" && args.format != "json") {
    return Fail(command, "--format must be table or json, not '" + args.format + "'");
  }
  if (args.what != "status" && args.what != "nodes") {
    return Fail(command, "'" + args.what +
                             "' is not listed yet: this build lists nodes (actors, "
                             "placement-groups, jobs, workers and objects come with the runtime)");
  }
  auto target = FindCluster(args.address, args.token, session::ResolveTempRoot(args.temp_dir));
  if (!target.ok()) return Fail(command, target.status().message());
  auto view = FetchClusterView(target->address, target->token, Millis(5000));
  if (!view.ok()) {
    return Fail(command, "cannot reach the cluster at " + target->address + ": " +
                             view.status().message());
  }
  if (args.format == "json") {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : view->nodes) nodes.push_back(NodeJson(n));
    if (args.what == "nodes") {
      std::cout << nodes.dump(2) << "\n";
    } else {
      ResourceSet total, available;
      for (const auto& n : view->nodes) {
        if (!n.alive) continue;
        total += n.total;
        available += n.available;
      }
      nlohmann::json j = {{"cluster_id", view->cluster_id}, {"address", view->gcs_address},
                          {"storage", view->storage},       {"nodes", nodes},
                          {"total", Amounts(total)},        {"available", Amounts(available)}};
      std::cout << j.dump(2) << "\n";
    }
    return 0;
  }
  if (args.what == "nodes") {
    PrintNodesTable(*view);
  } else {
    PrintStatusTable(*view);
  }
  return 0;
}

}  // namespace rayd::cli
