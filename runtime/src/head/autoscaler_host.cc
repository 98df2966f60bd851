#include "head/autoscaler_host.h"

#include <spdlog/spdlog.h>

#include "rayd/runtime/cluster.h"

namespace rayd::head {
namespace {

using autoscaler::DemandUnit;

constexpr char kRecordTable[] = "autoscaler";
// How long tasks queue for room on a node before they count as demand.
constexpr int64_t kQueuedGraceMs = 2000;

std::string KvTable(const std::string& ns) { return "kv:" + ns; }

// A list of bundles, each a JSON object of resource amounts.
Result<std::vector<scheduler::Bundle>> ParseBundles(const nlohmann::json& list) {
  if (!list.is_array() || list.empty()) {
    return Status::InvalidArgument("\"bundles\" must be a non-empty list");
  }
  std::vector<scheduler::Bundle> out;
  for (const auto& b : list) {
    RAYD_ASSIGN_OR_RETURN(auto resources, scheduler::ResourceSet::FromJson(b.dump()));
    if (resources.IsEmpty()) return Status::InvalidArgument("a bundle asks for nothing");
    out.push_back({std::move(resources), {}});
  }
  return out;
}

Result<scheduler::GroupStrategy> ParseStrategy(const std::string& name) {
  for (auto s : {scheduler::GroupStrategy::kPack, scheduler::GroupStrategy::kSpread,
                 scheduler::GroupStrategy::kStrictPack, scheduler::GroupStrategy::kStrictSpread}) {
    if (name == scheduler::GroupStrategyName(s)) return s;
  }
  return Status::InvalidArgument("unknown strategy \"" + name + "\"");
}

// "request:<name>": every bundle a unit of its own (identical ones counted).
Result<std::vector<DemandUnit>> ParseRequest(const std::string& name, const nlohmann::json& j) {
  RAYD_ASSIGN_OR_RETURN(auto bundles, ParseBundles(j.value("bundles", nlohmann::json())));
  std::vector<DemandUnit> out;
  for (auto& b : bundles) {
    if (!out.empty() && out.back().bundles[0].demand == b.demand) {
      ++out.back().count;
      continue;
    }
    DemandUnit u;
    u.source = "requested resources (" + name + ")";
    u.bundles.push_back(std::move(b));
    out.push_back(std::move(u));
  }
  return out;
}

// "tune:<name>": a sweep's next trials, gangs.
Result<std::vector<DemandUnit>> ParseSweep(const std::string& name, const nlohmann::json& j) {
  const nlohmann::json gangs = j.value("gangs", nlohmann::json::array());
  if (!gangs.is_array()) return Status::InvalidArgument("\"gangs\" must be a list");
  std::vector<DemandUnit> out;
  for (const auto& g : gangs) {
    if (!g.is_object()) return Status::InvalidArgument("a gang must be an object");
    DemandUnit u;
    RAYD_ASSIGN_OR_RETURN(u.bundles, ParseBundles(g.value("bundles", nlohmann::json())));
    RAYD_ASSIGN_OR_RETURN(u.strategy, ParseStrategy(g.value("strategy", "PACK")));
    u.count = g.value("count", 1);
    if (u.count < 1) continue;
    u.source = j.value("source", "sweep " + name);
    out.push_back(std::move(u));
  }
  return out;
}

nlohmann::json Sample(const std::string& name, const char* type, const std::string& help,
                      nlohmann::json labels, double value) {
  return {{"name", name}, {"type", type}, {"help", help}, {"labels", labels}, {"value", value}};
}

}  // namespace

std::vector<DemandUnit> GcsAutoscalerHost::TableDemand() const {
  std::vector<DemandUnit> out;
  for (const auto& g : gcs_.placement_group_manager().WaitingGroups()) {
    DemandUnit u;
    u.bundles = g.request.bundles;
    u.strategy = g.request.strategy;
    u.source = "placement group " + g.id.substr(0, 8) + (g.name.empty() ? "" : " '" + g.name + "'");
    out.push_back(std::move(u));
  }
  for (const auto& a : gcs_.actor_manager().WaitingActors()) {
    DemandUnit u;
    u.bundles.push_back(a.bundle);
    u.source = "actor " + (a.name.empty() ? a.class_name : a.name) + " " + a.id.substr(0, 8);
    out.push_back(std::move(u));
  }
  const int64_t now = NowUnixMs();
  for (const auto& [id, node] : gcs_.node_manager().nodes()) {
    if (!node.alive) continue;
    auto add = [&](const ResourceDemand& d, const std::string& what) {
      DemandUnit u;
      u.bundles.push_back({d.resources, {}});
      u.count = std::max(1, d.count);
      u.source = std::to_string(u.count) + " task(s) " + what + " on node " + id.Hex().substr(0, 8);
      out.push_back(std::move(u));
    };
    for (const ResourceDemand& d : node.infeasible) add(d, "no node can hold, waiting");
    // Queued for room: only once they have waited a while, so that the churn of short tasks
    // (queued a moment while others finish) launches nothing.
    for (const ResourceDemand& d : node.queued) {
      if (now - d.waiting_since_ms >= kQueuedGraceMs) add(d, "queued for room");
    }
  }
  return out;
}

void GcsAutoscalerHost::KvDemand(const std::map<std::string, std::string>& entries,
                                 autoscaler::ClusterReading* reading) {
  const int64_t now = NowUnixMs();
  for (const auto& [key, value] : entries) {
    const bool request = key.rfind(kAutoscalerRequestPrefix, 0) == 0;
    const bool sweep = key.rfind(kAutoscalerSweepPrefix, 0) == 0;
    if (!request && !sweep) continue;
    const std::string name = key.substr(key.find(':') + 1);
    auto j = nlohmann::json::parse(value, nullptr, false);
    Result<std::vector<DemandUnit>> units =
        j.is_object() ? (request ? ParseRequest(name, j) : ParseSweep(name, j))
                      : Result<std::vector<DemandUnit>>(
                            Status::InvalidArgument("not a JSON object"));
    if (!units.ok()) {
      if (warned_.insert(key + value).second) {
        spdlog::warn("autoscaler: ignoring KV {}/{}: {}", kAutoscalerKvNamespace, key,
                     units.status().message());
      }
      continue;
    }
    if (sweep && j.value("expires_ms", int64_t{0}) > 0 && j.value("expires_ms", int64_t{0}) < now) {
      continue;
    }
    auto& into = request ? reading->requested : reading->waiting;
    for (auto& u : *units) into.push_back(std::move(u));
  }
}

void GcsAutoscalerHost::Read(std::function<void(Result<autoscaler::ClusterReading>)> done) {
  store_.GetAll(KvTable(kAutoscalerKvNamespace),
                [this, done = std::move(done)](Result<std::map<std::string, std::string>> kv) {
                  autoscaler::ClusterReading reading;
                  for (const auto& [id, node] : gcs_.node_manager().nodes()) {
                    if (node.alive) reading.nodes.push_back(node);
                  }
                  reading.waiting = TableDemand();
                  if (kv.ok()) {
                    KvDemand(*kv, &reading);
                  } else {
                    spdlog::warn("autoscaler: cannot read requested resources: {}",
                                 kv.status().message());
                  }
                  done(std::move(reading));
                });
}

Status GcsAutoscalerHost::Drain(const std::string& node_id, int64_t deadline_ms,
                                const std::string& reason) {
  RAYD_ASSIGN_OR_RETURN(NodeId id, NodeId::FromHex(node_id));
  return gcs_.mutable_node_manager().Drain(id, deadline_ms, reason);
}

void GcsAutoscalerHost::SaveRecord(const std::string& key, const std::string& value) {
  store_.Put(kRecordTable, key, value, true, [key](Result<bool> r) {
    if (!r.ok()) spdlog::warn("autoscaler: storing {}: {}", key, r.status().message());
  });
}

void GcsAutoscalerHost::DeleteRecord(const std::string& key) {
  store_.Delete(kRecordTable, key, [key](Result<bool> r) {
    if (!r.ok()) spdlog::warn("autoscaler: deleting {}: {}", key, r.status().message());
  });
}

void GcsAutoscalerHost::LoadRecords(
    std::function<void(Result<std::map<std::string, std::string>>)> done) {
  store_.GetAll(kRecordTable, std::move(done));
}

void GcsAutoscalerHost::Publish(const nlohmann::json& state) {
  nlohmann::json feed = state;
  feed["name"] = kAutoscalerFeedName;
  feed["metrics"] = AutoscalerMetrics(state);
  feed["detail_only"] = {"events", "instances"};
  store_.Put(KvTable(kFeedKvNamespace), FeedKey(kAutoscalerFeedKind, kAutoscalerFeedName),
             feed.dump(), true, [](Result<bool> r) {
               if (!r.ok()) spdlog::warn("autoscaler: publishing its state: {}", r.status().message());
             });
}

nlohmann::json AutoscalerMetrics(const nlohmann::json& state) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& type : state.value("node_types", nlohmann::json::array())) {
    for (const char* phase : {"launching", "running", "draining"}) {
      out.push_back(Sample("rayd_autoscaler_nodes", "gauge",
                           "Nodes the autoscaler launched, by type and state.",
                           {{"node_type", type.value("name", "")}, {"state", phase}},
                           type.value(phase, 0)));
    }
  }
  out.push_back(Sample("rayd_autoscaler_waiting_demand", "gauge",
                       "Units of demand (gangs, actors, task shapes) waiting for room.", nlohmann::json::object(),
                       static_cast<double>(state.value("waiting", nlohmann::json::array()).size())));
  out.push_back(Sample("rayd_autoscaler_unmet_demand", "gauge",
                       "Units of demand that launch nothing (infeasible, or a limit reached).",
                       nlohmann::json::object(),
                       static_cast<double>(state.value("unmet", nlohmann::json::array()).size())));
  const nlohmann::json counters = state.value("counters", nlohmann::json::object());
  for (const auto& [name, value] : counters.items()) {
    out.push_back(Sample("rayd_autoscaler_" + name + "_total", "counter",
                         "Autoscaler " + name + " (instances), since the head started.",
                         nlohmann::json::object(), value.get<double>()));
  }
  return out;
}

}  // namespace rayd::head
