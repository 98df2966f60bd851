// `rayd status` and `rayd list nodes|actors|placement-groups|jobs|workers|objects`: the cluster's
// state, as a table for people or JSON for programs.

#include <algorithm>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "rayd/base/event_loop.h"
#include "rayd/runtime/autoscaler_kv.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/cluster_json.h"
#include "rayd/runtime/session.h"
#include "rayd/scheduler/placement.h"

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




using internal::PlacementGroupInfo;



// The groups `rayd status` lists among its demands: waiting for room, or for a node that fits.
std::vector<PlacementGroupInfo> GroupDemands(const std::vector<PlacementGroupInfo>& groups) {
  std::vector<PlacementGroupInfo> waiting;
  for (const auto& g : groups) {
    if (g.state == "PENDING" || g.state == "RESCHEDULING") waiting.push_back(g);
  }
  return waiting;
}

// The training runs and trials on the cluster: each run's feed (train/src/run_feed.h) whose
// placement group is still there (a dead driver's feed outlives its group), by name.
std::vector<nlohmann::json> LiveRuns(const std::map<std::string, std::string>& feeds,
                                     const std::vector<PlacementGroupInfo>& groups) {
  std::set<std::string> live;
  for (const auto& g : groups) {
    if (g.state != "REMOVED" && g.state != "FAILED") live.insert(g.id);
  }
  std::vector<nlohmann::json> runs;
  for (const auto& [key, value] : feeds) {
    nlohmann::json run = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!run.is_object() || !live.contains(run.value("placement_group", ""))) continue;
    run.erase("metrics");
    runs.push_back(std::move(run));
  }
  return runs;
}

// "2 workers (elastic 1-4, mesh 2x1x1), attempt 2: 1 restart"
std::string RunLine(const nlohmann::json& run) {
  const int world = run.value("world_size", 0);
  const int least = run.value("min_workers", world);
  const int most = run.value("max_workers", world);
  std::string line = std::to_string(world) + (world == 1 ? " worker" : " workers");
  std::vector<std::string> shape;
  if (least != most)
    shape.push_back("elastic " + std::to_string(least) + "-" + std::to_string(most));
  const nlohmann::json mesh = run.value("mesh", nlohmann::json::array());
  if (mesh.is_array() && mesh.size() == 3 && (mesh[1] != 1 || mesh[2] != 1)) {
    shape.push_back("mesh " + mesh[0].dump() + "x" + mesh[1].dump() + "x" + mesh[2].dump() +
                    " (data x pipeline x tensor)");
  }
  for (size_t i = 0; i < shape.size(); ++i) line += (i == 0 ? " (" : ", ") + shape[i];
  if (!shape.empty()) line += ")";
  line += ", " + run.value("state", std::string("?")) + ", attempt " +
          std::to_string(run.value("attempt", 0));
  for (const char* counted : {"restarts", "resizes", "preemptions"}) {
    if (const int n = run.value(counted, 0); n > 0)
      line += ", " + std::to_string(n) + " " + counted;
  }
  return line;
}

bool IsInfeasible(const PlacementGroupInfo& g) { return g.cause.rfind("infeasible:", 0) == 0; }


// "{CPU: 1} x2, {GPU: 1}": a group's bundles, equal neighbours counted.
std::string BundlesSummary(const PlacementGroupInfo& g) {
  std::string out;
  for (size_t i = 0; i < g.bundles.size();) {
    size_t same = 1;
    while (i + same < g.bundles.size() && g.bundles[i + same] == g.bundles[i]) ++same;
    if (!out.empty()) out += ", ";
    out += BundleResources(g.bundles[i]).ToString() + (same > 1 ? " x" + std::to_string(same) : "");
    i += same;
  }
  return out;
}

void PrintStatusTable(const ClusterView& view, const std::vector<PlacementGroupInfo>& groups) {
  const std::string rule(64, '-');
  std::cout << "======== Cluster status: " << FormatTime(std::time(nullptr) * 1000LL)
            << " ========\n"
            << "Cluster " << view.cluster_id.substr(0, 8) << " at " << view.gcs_address
            << " (tables: " << view.storage << ", up since " << FormatTime(view.start_time_ms)
            << ")\n"
            << (view.dashboard_url.empty() ? "" : "Dashboard: " + view.dashboard_url + "\n")
            << "\nNode status\n"
            << rule << "\nActive:\n";
  ResourceSet total, available;
  size_t alive = 0, dead = 0;
  for (const auto& n : view.nodes) {
    if (!n.alive) continue;
    ++alive;
    total += n.total;
    available += n.available;
    std::cout << " 1 node_" << n.node_id.Hex() << (n.is_head ? " (head)" : "") << "  " << n.address
              << "  " << n.hostname;
    if (n.draining()) {
      std::cout << "  DRAINING, leaves by " << FormatTime(n.drain_deadline_ms)
                << (n.drain_reason.empty() ? "" : ": " + n.drain_reason);
    }
    std::cout << "\n";
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
  // Like `ray status`: what waits for a node that could ever run it.
  std::cout << "\nDemands:\n";
  bool any = false;
  for (const auto& n : view.nodes) {
    if (!n.alive) continue;
    for (const auto& d : n.infeasible) {
      any = true;
      const int64_t waited_s = std::max<int64_t>(0, (NowUnixMs() - d.waiting_since_ms) / 1000);
      std::cout << " " << d.resources.ToString() << ": " << d.count
                << "+ pending tasks/actors (infeasible: no node can ever satisfy it; waiting "
                << waited_s << " s at node_" << n.node_id.Short() << ")\n";
    }
  }
  for (const auto& g : GroupDemands(groups)) {
    any = true;
    std::cout << " " << BundlesSummary(g) << ": placement group " << g.id.substr(0, 8)
              << (g.name.empty() ? "" : " '" + g.name + "'") << " (" << StrategyName(g) << ", "
              << g.state << ")" << (g.cause.empty() ? "" : ": " + g.cause) << "\n";
  }
  if (!any) std::cout << " (no resource demands)\n";
}

void PrintNodesTable(const ClusterView& view) {
  std::cout << std::left << std::setw(34) << "NODE_ID" << std::setw(10) << "STATE" << std::setw(22)
            << "ADDRESS" << std::setw(6) << "HEAD"
            << "RESOURCES\n";
  for (const auto& n : view.nodes) {
    std::cout << std::left << std::setw(34) << n.node_id.Hex() << std::setw(10)
              << (n.draining() ? "DRAINING"
                  : n.alive    ? "ALIVE"
                               : "DEAD")
              << std::setw(22) << n.address << std::setw(6) << (n.is_head ? "yes" : "")
              << n.total.ToString() << "\n";
  }
}


// Prints rows under a header, each column as wide as its widest cell; the last one unpadded.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  };
  print(header);
  for (const auto& row : rows) print(row);
}

std::string Short(const std::string& id) { return id.empty() ? "-" : id.substr(0, 8); }
std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }


void PrintActorsTable(const std::vector<ActorSummary>& actors) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : actors) {
    rows.push_back({a.actor_id, a.class_name, a.state, OrDash(a.name), OrDash(a.address),
                    Short(a.node_id), Short(a.job_id),
                    std::to_string(a.num_restarts) + "/" +
                        (a.max_restarts < 0 ? "inf" : std::to_string(a.max_restarts)),
                    a.detached ? "yes" : "", OrDash(a.death_cause)});
  }
  PrintTable({"ACTOR_ID", "CLASS_NAME", "STATE", "NAME", "ADDRESS", "NODE", "JOB", "RESTARTS",
              "DETACHED", "DEATH_CAUSE"},
             rows);
}

void PrintPlacementGroupsTable(const std::vector<PlacementGroupInfo>& groups) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : groups) {
    std::string bundles;
    for (size_t i = 0; i < g.bundles.size(); ++i) {
      const std::string node = i < g.bundle_nodes.size() ? g.bundle_nodes[i] : "";
      bundles += (i > 0 ? " " : "") + std::to_string(i) + ":" +
                 BundleResources(g.bundles[i]).ToString() + "@" + Short(node);
    }
    rows.push_back({g.id, OrDash(g.name), g.state, StrategyName(g), Short(g.job_id),
                    g.detached ? "yes" : "", bundles, OrDash(g.cause)});
  }
  PrintTable({"PLACEMENT_GROUP_ID", "NAME", "STATE", "STRATEGY", "JOB", "DETACHED",
              "BUNDLES (index:resources@node)", "CAUSE"},
             rows);
}


void PrintJobsTable(const std::vector<JobSummary>& jobs) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& j : jobs) {
    rows.push_back({j.job_id, j.is_dead ? "FINISHED" : "RUNNING", std::to_string(j.driver_pid),
                    OrDash(j.driver_host), FormatTime(j.start_time_ms),
                    FormatTime(j.end_time_ms), OrDash(j.entrypoint)});
  }
  PrintTable({"JOB_ID", "STATUS", "DRIVER_PID", "DRIVER_HOST", "START_TIME", "END_TIME",
              "ENTRYPOINT"},
             rows);
}


void PrintWorkersTable(const std::vector<WorkerSummary>& workers) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : workers) {
    rows.push_back({w.worker_id, Short(w.node_id), Short(w.job_id), std::to_string(w.pid),
                    w.state, OrDash(w.actor_id), OrDash(w.address), OrDash(w.exit_reason)});
  }
  PrintTable({"WORKER_ID", "NODE", "JOB", "PID", "STATE", "ACTOR_ID", "ADDRESS", "EXIT_REASON"},
             rows);
}

std::string FormatBytes(uint64_t bytes) {
  return scheduler::FormatResourceAmount(scheduler::kMemory,
                                         FixedPoint::FromWhole(static_cast<int64_t>(bytes)));
}

nlohmann::json ObjectJson(const ObjectSummary& o) {
  return {{"object_id", o.object_id}, {"node_id", o.node_id}, {"size", o.size},
          {"state", o.state},         {"primary", o.primary}, {"pins", o.pins},
          {"owner", o.owner},         {"spill_path", o.spill_path}};
}

// Like `ray memory`: every object in a node's shared-memory store, then each store's totals.
void PrintObjectsTable(const ObjectsView& view) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& o : view.objects) {
    rows.push_back({o.object_id, Short(o.node_id), FormatBytes(o.size), o.state,
                    o.primary ? "primary" : "copy", std::to_string(o.pins), OrDash(o.owner)});
  }
  PrintTable({"OBJECT_ID", "NODE", "SIZE", "STATE", "COPY", "PINS", "OWNER"}, rows);
  std::cout << "\nObject stores:\n";
  for (const auto& st : view.stores) {
    std::cout << " " << Short(st.node_id) << ": " << FormatBytes(st.used) << "/"
              << FormatBytes(st.capacity) << " used, " << FormatBytes(st.spilled_bytes)
              << " spilled (since start: " << st.total_evicted << " evicted, "
              << st.total_spilled << " spilled, " << st.total_restored << " restored)\n";
  }
}

// `rayd list actors|placement-groups|jobs|workers|objects`.
int RunListTable(const StatusArgs& args, const ClusterTarget& target) {
  const std::string command = "list " + args.what;
  const bool json = args.format == "json";
  auto unreachable = [&](const Status& s) {
    return Fail(command, "cannot reach the cluster at " + target.address + ": " + s.message());
  };
  auto cluster = ClusterClient::Connect(target.address, target.token, Millis(5000));
  if (!cluster.ok()) return unreachable(cluster.status());
  if (args.what == "actors") {
    auto actors = (*cluster)->Actors();
    if (!actors.ok()) return unreachable(actors.status());
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& a : *actors) out.push_back(ActorJson(a));
      std::cout << out.dump(2) << "\n";
    } else {
      PrintActorsTable(*actors);
    }
  } else if (args.what == "placement-groups") {
    auto groups = (*cluster)->PlacementGroups();
    if (!groups.ok()) return unreachable(groups.status());
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& g : *groups) out.push_back(PlacementGroupJson(g));
      std::cout << out.dump(2) << "\n";
    } else {
      PrintPlacementGroupsTable(*groups);
    }
  } else if (args.what == "jobs") {
    auto jobs = (*cluster)->Jobs();
    if (!jobs.ok()) return unreachable(jobs.status());
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& j : *jobs) out.push_back(JobJson(j));
      std::cout << out.dump(2) << "\n";
    } else {
      PrintJobsTable(*jobs);
    }
  } else if (args.what == "objects") {
    auto view = (*cluster)->Objects();
    if (!view.ok()) return unreachable(view.status());
    for (const auto& why : view->unreachable) {
      std::cerr << "rayd " << command << ": warning: no answer from " << why << "\n";
    }
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& o : view->objects) out.push_back(ObjectJson(o));
      std::cout << out.dump(2) << "\n";
    } else {
      PrintObjectsTable(*view);
    }
  } else {
    auto view = (*cluster)->Workers();
    if (!view.ok()) return unreachable(view.status());
    for (const auto& why : view->unreachable) {
      std::cerr << "rayd " << command << ": warning: no answer from " << why << "\n";
    }
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& w : view->workers) out.push_back(WorkerJson(w));
      std::cout << out.dump(2) << "\n";
    } else {
      PrintWorkersTable(view->workers);
    }
  }
  return 0;
}

}  // namespace

int RunStatus(const StatusArgs& args) {
  const std::string command = args.what == "status" ? "status" : "list " + args.what;
  if (args.format != "table" && args.format != "json") {
    return Fail(command, "--format must be table or json, not '" + args.format + "'");
  }
  const bool table_of_runtime = args.what == "actors" || args.what == "placement-groups" ||
                                args.what == "jobs" || args.what == "workers" ||
                                args.what == "objects";
  if (args.what != "status" && args.what != "nodes" && !table_of_runtime) {
    return Fail(command, "unknown table '" + args.what +
                             "': expected nodes, actors, jobs, workers, placement-groups or "
                             "objects");
  }
  auto target = FindCluster(args.address, args.token, session::ResolveTempRoot(args.temp_dir));
  if (!target.ok()) return Fail(command, target.status().message());
  if (table_of_runtime) return RunListTable(args, *target);
  auto cluster = ClusterClient::Connect(target->address, target->token, Millis(5000));
  auto view = cluster.ok() ? (*cluster)->Nodes() : Result<ClusterView>(cluster.status());
  if (!view.ok()) {
    return Fail(command, "cannot reach the cluster at " + target->address + ": " +
                             view.status().message());
  }
  // Actor counts by state and waiting placement groups for `rayd status`; left out if the head
  // can't say.
  std::optional<std::map<std::string, int>> actor_counts;
  std::vector<PlacementGroupInfo> groups;
  std::vector<nlohmann::json> runs;
  std::optional<nlohmann::json> autoscaler;  // a head with --autoscaler publishes its state
  if (args.what == "status") {
    auto actors = (*cluster)->Actors();
    if (actors.ok()) {
      actor_counts.emplace();
      for (const auto& a : *actors) ++(*actor_counts)[a.state];
    }
    if (auto all = (*cluster)->PlacementGroups(); all.ok()) {
      groups = std::move(*all);
    }
    if (auto feeds = (*cluster)->KvPrefix(kFeedKvNamespace, FeedPrefix("run")); feeds.ok()) {
      runs = LiveRuns(*feeds, groups);
    }
    if (auto feeds = (*cluster)->KvPrefix(kFeedKvNamespace, FeedPrefix(kAutoscalerFeedKind));
        feeds.ok() && !feeds->empty()) {
      auto state = nlohmann::json::parse(feeds->begin()->second, nullptr, false);
      if (state.is_object()) autoscaler = std::move(state);
    }
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
      nlohmann::json j = {{"cluster_id", view->cluster_id},
                          {"address", view->gcs_address},
                          {"storage", view->storage},
                          {"nodes", nodes},
                          {"dashboard_url", view->dashboard_url},
                          {"total", Amounts(total)},
                          {"available", Amounts(available)}};
      if (actor_counts) j["actors"] = *actor_counts;
      nlohmann::json demands = nlohmann::json::array();
      for (const auto& g : GroupDemands(groups)) {
        nlohmann::json d = PlacementGroupJson(g);
        d["infeasible"] = IsInfeasible(g);
        demands.push_back(std::move(d));
      }
      j["placement_group_demands"] = std::move(demands);
      j["training_runs"] = runs;
      if (autoscaler) {
        autoscaler->erase("metrics");
        autoscaler->erase("detail_only");
        j["autoscaler"] = *autoscaler;
      }
      std::cout << j.dump(2) << "\n";
    }
    return 0;
  }
  if (args.what == "nodes") {
    PrintNodesTable(*view);
  } else {
    PrintStatusTable(*view, groups);
    if (actor_counts) {
      std::cout << "\nActors:\n";
      if (actor_counts->empty()) std::cout << " (no actors)\n";
      for (const char* state : {"ALIVE", "PENDING_CREATION", "RESTARTING", "DEAD"}) {
        if (auto it = actor_counts->find(state); it != actor_counts->end()) {
          std::cout << " " << it->second << " " << state << "\n";
        }
      }
    }
    // What the actors are: each training run and sweep trial with its size.
    std::cout << "\nTraining runs:\n";
    if (runs.empty()) std::cout << " (none)\n";
    for (const nlohmann::json& run : runs) {
      const std::string trial = run.value("trial_id", "");
      std::cout << " " << run.value("name", std::string("?"))
                << (trial.empty() ? "" : " (trial " + trial + ")") << ": " << RunLine(run)
                << "\n    " << run.value("run_dir", std::string()) << "\n";
    }
    if (autoscaler) PrintAutoscalerStatus(*autoscaler);
  }
  return 0;
}

}  // namespace rayd::cli
