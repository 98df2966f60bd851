#include "head/dashboard.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "rayd/runtime/cluster_json.h"
#include "common/prometheus.h"
#include "rayd/base/auth.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/http.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"

namespace rayd::head {

extern const char kDashboardHtml[];  // generated from dashboard/index.html

namespace {

constexpr const char* kCookie = "rayd_token";
constexpr Millis kReadTimeout{5000};

http::Response Error(int status, const std::string& message) {
  return http::Response::Json(status, nlohmann::json{{"error", message}}.dump());
}

http::Response Unauthorized() {
  http::Response r;
  r.status = 401;
  r.content_type = "text/html; charset=utf-8";
  r.body =
      "<!doctype html><title>rayd: sign in</title><p>This rayd dashboard needs the cluster "
      "token: open the URL that <code>rayd start --head</code> printed (it ends in "
      "<code>?token=</code>), or send <code>Authorization: Bearer TOKEN</code>.</p>\n";
  return r;
}

// A sweep's published summary without its trial table (what /api/sweeps lists).
nlohmann::json SweepSummary(const nlohmann::json& sweep) {
  nlohmann::json summary = sweep;
  summary.erase("trials");
  return summary;
}

}  // namespace

class Dashboard::Impl {
 public:
  explicit Impl(const DashboardOptions& options)
      : options_(options), server_(loop_, [this](const http::Request& request, http::Respond respond) {
          respond(Handle(request));
        }) {}

  EventLoop& loop() { return loop_; }
  http::HttpServer& server() { return server_; }

 private:
  http::Response Handle(const http::Request& request) {
    // Opening the printed URL: the token moves into a cookie and out of the address bar.
    if (auto it = request.query.find("token"); it != request.query.end()) {
      if (!ConstantTimeEquals(it->second, options_.token)) {
        spdlog::warn("dashboard: wrong token from {}", request.peer);
        return Unauthorized();
      }
      http::Response r = http::Response::Text(302, "");
      r.headers.emplace_back("Location", request.path);
      r.headers.emplace_back("Set-Cookie", std::string(kCookie) + "=" + options_.token +
                                               "; Path=/; HttpOnly; SameSite=Strict");
      return r;
    }
    if (!http::CarriesToken(request, kCookie, options_.token)) return Unauthorized();
    const std::string& path = request.path;
    if (path == "/" || path == "/index.html") {
      http::Response r;
      r.content_type = "text/html; charset=utf-8";
      r.body = kDashboardHtml;
      return r;
    }
    if (path == "/api/cluster") return Cluster();
    if (path == "/api/sweeps") return Sweeps();
    if (path.rfind("/api/sweeps/", 0) == 0) return Sweep(path.substr(std::strlen("/api/sweeps/")));
    if (path == "/metrics") return Metrics();
    return Error(404, "no such page: " + path);
  }

  http::Response Cluster() const {
    const std::string& gcs = options_.gcs_address;
    auto view = FetchClusterView(gcs, options_.token, kReadTimeout);
    if (!view.ok()) return Error(503, view.status().message());
    auto actors = FetchActors(gcs, options_.token, kReadTimeout);
    auto groups = FetchPlacementGroups(gcs, options_.token, kReadTimeout);
    auto jobs = FetchJobs(gcs, options_.token, kReadTimeout);
    for (const Status& s : {actors.status(), groups.status(), jobs.status()}) {
      if (!s.ok()) return Error(503, s.message());
    }
    nlohmann::json out;
    out["cluster"] = {{"cluster_id", view->cluster_id},
                      {"gcs_address", view->gcs_address},
                      {"storage", view->storage},
                      {"start_time_ms", view->start_time_ms},
                      {"now_ms", NowUnixMs()}};
    out["nodes"] = nlohmann::json::array();
    for (const NodeInfo& node : view->nodes) {
      nlohmann::json j = NodeJson(node);
      j["alive"] = node.alive;
      j["last_heartbeat_ms"] = node.last_heartbeat_ms;
      out["nodes"].push_back(std::move(j));
    }
    out["actors"] = nlohmann::json::array();
    for (const ActorSummary& actor : *actors) out["actors"].push_back(ActorJson(actor));
    out["placement_groups"] = nlohmann::json::array();
    for (const auto& group : *groups) out["placement_groups"].push_back(PlacementGroupJson(group));
    out["jobs"] = nlohmann::json::array();
    for (const JobSummary& job : *jobs) {
      nlohmann::json j = JobJson(job);
      j["state"] = j["status"];
      out["jobs"].push_back(std::move(j));
    }
    return http::Response::Json(200, out.dump());
  }

  // Every published sweep, parsed; values that do not parse are skipped with a warning.
  Result<std::map<std::string, nlohmann::json>> ReadSweeps() const {
    RAYD_ASSIGN_OR_RETURN(auto values, FetchKvPrefix(options_.gcs_address, options_.token,
                                                     kTuneKvNamespace, kSweepKeyPrefix,
                                                     kReadTimeout));
    std::map<std::string, nlohmann::json> sweeps;
    for (auto& [key, value] : values) {
      auto sweep = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (sweep.is_discarded() || !sweep.is_object()) {
        spdlog::warn("dashboard: {} in KV namespace {} is not a JSON object", key,
                     kTuneKvNamespace);
        continue;
      }
      sweeps.emplace(key.substr(std::strlen(kSweepKeyPrefix)), std::move(sweep));
    }
    return sweeps;
  }

  http::Response Sweeps() const {
    auto sweeps = ReadSweeps();
    if (!sweeps.ok()) return Error(503, sweeps.status().message());
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, sweep] : *sweeps) list.push_back(SweepSummary(sweep));
    return http::Response::Json(200, nlohmann::json{{"sweeps", list}}.dump());
  }

  http::Response Sweep(const std::string& name) const {
    auto sweep_value = FetchKvPrefix(options_.gcs_address, options_.token, kTuneKvNamespace,
                                     kSweepKeyPrefix + name, kReadTimeout);
    if (!sweep_value.ok()) return Error(503, sweep_value.status().message());
    auto it = sweep_value->find(kSweepKeyPrefix + name);
    if (it == sweep_value->end()) return Error(404, "no sweep named '" + name + "'");
    nlohmann::json sweep = nlohmann::json::parse(it->second, nullptr, false);
    if (sweep.is_discarded()) return Error(500, "sweep '" + name + "' is not valid JSON");
    const std::string curve_prefix = kCurveKeyPrefix + name + "/";
    auto curves = FetchKvPrefix(options_.gcs_address, options_.token, kTuneKvNamespace,
                                curve_prefix, kReadTimeout);
    if (!curves.ok()) return Error(503, curves.status().message());
    nlohmann::json by_trial = nlohmann::json::object();
    for (const auto& [key, value] : *curves) {
      nlohmann::json points = nlohmann::json::parse(value, nullptr, false);
      if (!points.is_discarded()) by_trial[key.substr(curve_prefix.size())] = std::move(points);
    }
    sweep["curves"] = std::move(by_trial);
    const std::string log_prefix = kLogKeyPrefix + name + "/";
    auto logs = FetchKvPrefix(options_.gcs_address, options_.token, kTuneKvNamespace, log_prefix,
                              kReadTimeout);
    if (!logs.ok()) return Error(503, logs.status().message());
    nlohmann::json logs_by_trial = nlohmann::json::object();
    for (const auto& [key, value] : *logs) {
      nlohmann::json tails = nlohmann::json::parse(value, nullptr, false);
      if (!tails.is_discarded()) logs_by_trial[key.substr(log_prefix.size())] = std::move(tails);
    }
    sweep["logs"] = std::move(logs_by_trial);
    return http::Response::Json(200, sweep.dump());
  }

  http::Response Metrics() const {
    const std::string& gcs = options_.gcs_address;
    auto view = FetchClusterView(gcs, options_.token, kReadTimeout);
    if (!view.ok()) return http::Response::Text(503, view.status().message() + "\n");
    prometheus::Text text;

    std::map<std::string, int> nodes{{"ALIVE", 0}, {"DEAD", 0}};
    std::map<std::string, double> total;
    std::map<std::string, double> available;
    for (const NodeInfo& node : view->nodes) {
      ++nodes[node.alive ? "ALIVE" : "DEAD"];
      if (!node.alive) continue;
      for (const auto& [name, amount] : node.total) total[name] += amount.ToDouble();
      for (const auto& [name, amount] : node.available) available[name] += amount.ToDouble();
    }
    text.Family("rayd_cluster_nodes", "gauge", "Nodes known to the head, by state.");
    for (const auto& [state, count] : nodes) text.Sample("rayd_cluster_nodes", {{"state", state}}, count);
    text.Family("rayd_cluster_resource_total", "gauge",
                "Resources of the alive nodes (memory in bytes).");
    for (const auto& [name, amount] : total) {
      text.Sample("rayd_cluster_resource_total", {{"resource", name}}, amount);
    }
    text.Family("rayd_cluster_resource_available", "gauge",
                "Resources of the alive nodes that are free, as their last heartbeats said.");
    for (const auto& [name, amount] : total) {
      text.Sample("rayd_cluster_resource_available", {{"resource", name}}, available[name]);
    }
    text.Family("rayd_cluster_node_resource_available", "gauge",
                "Free resources per alive node, as its last heartbeat said.");
    for (const NodeInfo& node : view->nodes) {
      if (!node.alive) continue;
      for (const auto& [name, amount] : node.total) {
        text.Sample("rayd_cluster_node_resource_available",
                    {{"node_id", node.node_id.Hex()}, {"resource", name}},
                    node.available.Get(name).ToDouble());
      }
    }

    auto by_state = [&](const char* name, const char* help, std::map<std::string, int> counts) {
      text.Family(name, "gauge", help);
      for (const auto& [state, count] : counts) text.Sample(name, {{"state", state}}, count);
    };
    if (auto actors = FetchActors(gcs, options_.token, kReadTimeout); actors.ok()) {
      std::map<std::string, int> counts{{"ALIVE", 0}, {"DEAD", 0}};
      for (const ActorSummary& a : *actors) ++counts[a.state];
      by_state("rayd_actors", "Actors by state.", counts);
    }
    if (auto groups = FetchPlacementGroups(gcs, options_.token, kReadTimeout); groups.ok()) {
      std::map<std::string, int> counts{{"CREATED", 0}, {"PENDING", 0}};
      for (const auto& g : *groups) ++counts[g.state];
      by_state("rayd_placement_groups", "Placement groups by state.", counts);
    }
    if (auto jobs = FetchJobs(gcs, options_.token, kReadTimeout); jobs.ok()) {
      std::map<std::string, int> counts{{"RUNNING", 0}, {"FINISHED", 0}};
      for (const JobSummary& j : *jobs) ++counts[j.is_dead ? "FINISHED" : "RUNNING"];
      by_state("rayd_jobs", "Jobs (drivers) by state.", counts);
    }
    if (auto objects = FetchObjects(gcs, options_.token, kReadTimeout); objects.ok()) {
      auto per_node = [&](const char* name, const char* type, const char* help, auto field) {
        text.Family(name, type, help);
        for (const NodeStoreSummary& s : objects->stores) {
          text.Sample(name, {{"node_id", s.node_id}}, static_cast<double>(field(s)));
        }
      };
      per_node("rayd_cluster_object_store_capacity_bytes", "gauge", "Object store size per node.",
               [](const NodeStoreSummary& s) { return s.capacity; });
      per_node("rayd_cluster_object_store_used_bytes", "gauge", "Object store bytes in use per node.",
               [](const NodeStoreSummary& s) { return s.used; });
      per_node("rayd_cluster_object_store_spilled_bytes", "gauge", "Bytes in spill files per node.",
               [](const NodeStoreSummary& s) { return s.spilled_bytes; });
      per_node("rayd_cluster_object_store_spilled_total", "counter", "Objects spilled per node.",
               [](const NodeStoreSummary& s) { return s.total_spilled; });
      per_node("rayd_cluster_object_store_restored_total", "counter", "Objects restored per node.",
               [](const NodeStoreSummary& s) { return s.total_restored; });
    }
    if (auto sweeps = ReadSweeps(); sweeps.ok()) {
      text.Family("rayd_tune_trials", "gauge", "Trials of each sweep by status.");
      for (const auto& [name, sweep] : *sweeps) {
        const nlohmann::json counts = sweep.value("trial_counts", nlohmann::json::object());
        for (const auto& [status, count] : counts.items()) {
          if (!count.is_number()) continue;
          text.Sample("rayd_tune_trials", {{"sweep", name}, {"status", status}},
                      count.get<double>());
        }
      }
      text.Family("rayd_tune_results_total", "counter", "Results reported by each sweep's trials.");
      for (const auto& [name, sweep] : *sweeps) {
        text.Sample("rayd_tune_results_total", {{"sweep", name}}, sweep.value("results", 0.0));
      }
      text.Family("rayd_tune_sweep_running", "gauge", "1 while the sweep runs, 0 once it ended.");
      for (const auto& [name, sweep] : *sweeps) {
        text.Sample("rayd_tune_sweep_running", {{"sweep", name}},
                    sweep.value("state", "") == "RUNNING" ? 1 : 0);
      }
    }
    http::Response r;
    r.content_type = prometheus::kContentType;
    r.body = text.str();
    return r;
  }

  DashboardOptions options_;
  EventLoop loop_;
  http::HttpServer server_;
};

Result<std::unique_ptr<Dashboard>> Dashboard::Start(DashboardOptions options) {
  std::unique_ptr<Dashboard> dashboard(new Dashboard());
  dashboard->options_ = options;
  std::promise<Result<int>> listening;
  auto* self = dashboard.get();
  dashboard->thread_ = std::thread([self, &listening] {
    auto impl = std::make_unique<Impl>(self->options_);
    Status s = impl->server().Listen(self->options_.host, self->options_.port);
    if (!s.ok()) {
      listening.set_value(s);
      return;
    }
    self->impl_ = std::move(impl);
    listening.set_value(self->impl_->server().port());
    self->impl_->loop().Run();
    self->impl_->server().Close();
  });
  Result<int> port = listening.get_future().get();
  if (!port.ok()) {
    dashboard->thread_.join();
    return port.status().WithContext("starting the dashboard");
  }
  dashboard->port_ = *port;
  if (!options.session_dir.empty()) {
    RAYD_RETURN_IF_ERROR(session::WriteFileWithMode(options.session_dir + "/dashboard_url",
                                                    dashboard->url() + "\n", 0600));
  }
  return dashboard;
}

Dashboard::~Dashboard() {
  if (!thread_.joinable()) return;
  if (impl_) impl_->loop().Stop();
  thread_.join();
  impl_.reset();
}

std::string Dashboard::url() const {
  return "http://" + options_.host + ":" + std::to_string(port_) + "/?token=" + options_.token;
}

}  // namespace rayd::head
