// The JSON shapes of the cluster's tables, shared by `rayd list --json`, `rayd status --json`
// and the dashboard's API, so a field means the same thing wherever a program reads it.

#include "rayd/runtime/cluster_json.h"

#include "rayd/scheduler/placement.h"

namespace rayd {

nlohmann::json Amounts(const scheduler::ResourceSet& set) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, amount] : set) j[name] = amount.ToDouble();
  return j;
}

nlohmann::json DemandsJson(const std::vector<ResourceDemand>& demands) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : demands) {
    out.push_back({{"resources", Amounts(d.resources)},
                   {"count", d.count},
                   {"waiting_since_ms", d.waiting_since_ms}});
  }
  return out;
}

nlohmann::json NodeJson(const NodeInfo& n) {
  return {{"node_id", n.node_id.Hex()},
          {"state", n.alive ? "ALIVE" : "DEAD"},
          {"address", n.address},
          {"hostname", n.hostname},
          {"ip", n.ip},
          {"is_head", n.is_head},
          {"total", Amounts(n.total)},
          {"available", Amounts(n.available)},
          {"labels", n.labels},
          {"start_time_ms", n.start_time_ms},
          {"end_time_ms", n.end_time_ms},
          {"death_reason", n.death_reason},
          {"drain_deadline_ms", n.drain_deadline_ms},
          {"drain_reason", n.drain_reason},
          {"pid", n.pid},
          {"infeasible", DemandsJson(n.infeasible)},
          {"queued", DemandsJson(n.queued)},
          {"primary_objects", n.primary_objects}};
}

scheduler::ResourceSet BundleResources(const std::map<std::string, double>& amounts) {
  scheduler::ResourceSet set;
  for (const auto& [name, amount] : amounts) set.Set(name, scheduler::FixedPoint::FromDouble(amount));
  return set;
}

std::string StrategyName(const internal::PlacementGroupInfo& g) {
  return scheduler::GroupStrategyName(static_cast<scheduler::GroupStrategy>(g.strategy));
}

nlohmann::json PlacementGroupJson(const internal::PlacementGroupInfo& g) {
  nlohmann::json bundles = nlohmann::json::array();
  for (size_t i = 0; i < g.bundles.size(); ++i) {
    bundles.push_back({{"index", i},
                       {"resources", Amounts(BundleResources(g.bundles[i]))},
                       {"node_id", i < g.bundle_nodes.size() ? g.bundle_nodes[i] : ""}});
  }
  return {{"placement_group_id", g.id}, {"name", g.name},     {"namespace", g.ray_namespace},
          {"job_id", g.job_id},         {"state", g.state},   {"strategy", StrategyName(g)},
          {"detached", g.detached},     {"bundles", bundles}, {"cause", g.cause}};
}

nlohmann::json ActorJson(const ActorSummary& a) {
  return {{"actor_id", a.actor_id},       {"job_id", a.job_id},
          {"name", a.name},               {"namespace", a.ray_namespace},
          {"class_name", a.class_name},   {"state", a.state},
          {"address", a.address},         {"node_id", a.node_id},
          {"worker_id", a.worker_id},     {"num_restarts", a.num_restarts},
          {"max_restarts", a.max_restarts}, {"detached", a.detached},
          {"death_cause", a.death_cause}, {"pid", a.pid}};
}

nlohmann::json JobJson(const JobSummary& j) {
  return {{"job_id", j.job_id},
          {"status", j.is_dead ? "FINISHED" : "RUNNING"},
          {"driver_pid", j.driver_pid},
          {"driver_host", j.driver_host},
          {"entrypoint", j.entrypoint},
          {"start_time_ms", j.start_time_ms},
          {"end_time_ms", j.end_time_ms}};
}

nlohmann::json JobSubmissionJson(const JobSubmissionInfo& j) {
  return {{"submission_id", j.submission_id},
          {"entrypoint", j.entrypoint},
          {"status", j.status},
          {"message", j.message},
          {"pid", j.pid},
          {"exit_code", j.exit_code},
          {"start_time_ms", j.start_time_ms},
          {"end_time_ms", j.end_time_ms},
          {"working_dir", j.working_dir},
          {"log_path", j.log_path},
          {"runtime_env_json", j.runtime_env_json},
          {"driver_start_ticks", j.driver_start_ticks}};
}

JobSubmissionInfo JobSubmissionFromJson(const nlohmann::json& j) {
  JobSubmissionInfo info;
  info.submission_id = j.value("submission_id", "");
  info.entrypoint = j.value("entrypoint", std::vector<std::string>{});
  info.status = j.value("status", "");
  info.message = j.value("message", "");
  info.pid = j.value("pid", 0);
  info.exit_code = j.value("exit_code", -1);
  info.start_time_ms = j.value("start_time_ms", int64_t{0});
  info.end_time_ms = j.value("end_time_ms", int64_t{0});
  info.working_dir = j.value("working_dir", "");
  info.log_path = j.value("log_path", "");
  info.runtime_env_json = j.value("runtime_env_json", "");
  info.driver_start_ticks = j.value("driver_start_ticks", uint64_t{0});
  return info;
}

nlohmann::json WorkerJson(const WorkerSummary& w) {
  return {{"worker_id", w.worker_id}, {"node_id", w.node_id},   {"job_id", w.job_id},
          {"pid", w.pid},             {"state", w.state},       {"actor_id", w.actor_id},
          {"address", w.address},     {"exit_reason", w.exit_reason}};
}

}  // namespace rayd
