#include "head/dashboard.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <future>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/cluster_reader.h"
#include "common/prometheus.h"
#include "head/feeds.h"
#include "rayd/runtime/cluster_json.h"
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
constexpr uint32_t kJobLogTail = 64u << 10;  // of a submitted job's log, on its page

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

// Answers of reads made at once: each completion stores its result and the last one runs
// `then` (on the loop).
class Countdown {
 public:
  Countdown(int reads, std::function<void()> then) : left_(reads), then_(std::move(then)) {}

  template <typename T>
  static runtime::Done<T> Into(const std::shared_ptr<Countdown>& countdown,
                               std::optional<Result<T>>* slot) {
    return [countdown, slot](Result<T> r) {
      slot->emplace(std::move(r));
      if (--countdown->left_ == 0) countdown->then_();
    };
  }

 private:
  int left_;
  std::function<void()> then_;
};

}  // namespace

// Serves on its own loop and thread. Every page reads the cluster through one ClusterReader
// (one persistent GCS connection) without blocking: the reads a page needs are made at once,
// and the page is answered when the last arrives, so a slow read holds up no other request.
class Dashboard::Impl {
 public:
  using Respond = http::Respond;

  explicit Impl(const DashboardOptions& options)
      : options_(options),
        server_(loop_,
                [this](const http::Request& request, Respond respond) {
                  Handle(request, std::move(respond));
                }),
        reader_(loop_, options.gcs_address, options.token, "dashboard", kReadTimeout) {
    reader_.gcs().Connect();
  }

  EventLoop& loop() { return loop_; }
  http::HttpServer& server() { return server_; }

 private:
  void Handle(const http::Request& request, Respond respond) {
    // Opening the printed URL: the token moves into a cookie and out of the address bar.
    if (auto it = request.query.find("token"); it != request.query.end()) {
      if (!ConstantTimeEquals(it->second, options_.token)) {
        spdlog::warn("dashboard: wrong token from {}", request.peer);
        return respond(Unauthorized());
      }
      http::Response r = http::Response::Text(302, "");
      r.headers.emplace_back("Location", request.path);
      r.headers.emplace_back("Set-Cookie", std::string(kCookie) + "=" + options_.token +
                                               "; Path=/; HttpOnly; SameSite=Strict");
      return respond(std::move(r));
    }
    if (!http::CarriesToken(request, kCookie, options_.token)) return respond(Unauthorized());
    const std::string& path = request.path;
    if (path == "/" || path == "/index.html") {
      http::Response r;
      r.content_type = "text/html; charset=utf-8";
      r.body = kDashboardHtml;
      return respond(std::move(r));
    }
    if (path == "/api/cluster") return Cluster(std::move(respond));
    // Submitted jobs (`rayd job`): the list, and one job with the tail of its log.
    if (path == "/api/jobs") return SubmittedJobs(std::move(respond));
    if (path.rfind("/api/jobs/", 0) == 0) {
      return SubmittedJob(path.substr(std::strlen("/api/jobs/")), std::move(respond));
    }
    // /api/<kind>s and /api/<kind>s/<name>: dashboard feeds (rayd/runtime/cluster.h).
    if (path.rfind("/api/", 0) == 0) {
      const std::string rest = path.substr(std::strlen("/api/"));
      const size_t slash = rest.find('/');
      const std::string plural = rest.substr(0, slash);
      if (plural.size() > 1 && plural.back() == 's') {
        const std::string kind = plural.substr(0, plural.size() - 1);
        if (slash == std::string::npos) return Feeds(kind, std::move(respond));
        return Feed(kind, rest.substr(slash + 1), std::move(respond));
      }
    }
    if (path == "/metrics") return Metrics(std::move(respond));
    respond(Error(404, "no such page: " + path));
  }

  void Cluster(Respond respond) {
    struct Answers {
      std::optional<Result<ClusterView>> view;
      std::optional<Result<std::vector<ActorSummary>>> actors;
      std::optional<Result<std::vector<internal::PlacementGroupInfo>>> groups;
      std::optional<Result<std::vector<JobSummary>>> jobs;
    };
    auto a = std::make_shared<Answers>();
    auto countdown = std::make_shared<Countdown>(4, [a, respond] {
      for (const Status& s : {a->view->status(), a->actors->status(), a->groups->status(),
                              a->jobs->status()}) {
        if (!s.ok()) return respond(Error(503, s.message()));
      }
      respond(http::Response::Json(200, ClusterJson(**a->view, **a->actors, **a->groups,
                                                    **a->jobs).dump()));
    });
    runtime::GcsClient& gcs = reader_.gcs();
    gcs.GetClusterView(Countdown::Into(countdown, &a->view));
    gcs.GetActors(Countdown::Into(countdown, &a->actors));
    gcs.GetPlacementGroups(Countdown::Into(countdown, &a->groups));
    gcs.GetJobs(Countdown::Into(countdown, &a->jobs));
  }

  static nlohmann::json ClusterJson(const ClusterView& view, const std::vector<ActorSummary>& actors,
                                    const std::vector<internal::PlacementGroupInfo>& groups,
                                    const std::vector<JobSummary>& jobs) {
    nlohmann::json out;
    out["cluster"] = {{"cluster_id", view.cluster_id},
                      {"gcs_address", view.gcs_address},
                      {"storage", view.storage},
                      {"start_time_ms", view.start_time_ms},
                      {"now_ms", NowUnixMs()}};
    out["nodes"] = nlohmann::json::array();
    for (const NodeInfo& node : view.nodes) {
      nlohmann::json j = NodeJson(node);
      j["alive"] = node.alive;
      j["last_heartbeat_ms"] = node.last_heartbeat_ms;
      out["nodes"].push_back(std::move(j));
    }
    out["actors"] = nlohmann::json::array();
    for (const ActorSummary& actor : actors) out["actors"].push_back(ActorJson(actor));
    out["placement_groups"] = nlohmann::json::array();
    for (const auto& group : groups) out["placement_groups"].push_back(PlacementGroupJson(group));
    out["jobs"] = nlohmann::json::array();
    for (const JobSummary& job : jobs) {
      nlohmann::json j = JobJson(job);
      j["state"] = j["status"];
      out["jobs"].push_back(std::move(j));
    }
    return out;
  }

  void SubmittedJobs(Respond respond) {
    reader_.gcs().ListJobSubmissions([respond](Result<std::vector<JobSubmissionInfo>> jobs) {
      if (!jobs.ok()) return respond(Error(503, jobs.status().message()));
      nlohmann::json list = nlohmann::json::array();
      for (const auto& job : *jobs) list.push_back(JobSubmissionJson(job));
      respond(http::Response::Json(200, nlohmann::json{{"jobs", list}}.dump()));
    });
  }

  void SubmittedJob(const std::string& id, Respond respond) {
    reader_.gcs().ReadJobLogs(id, 0, kJobLogTail, true, [respond, id](Result<JobLogChunk> chunk) {
      if (!chunk.ok()) {
        const bool missing = chunk.status().code() == StatusCode::kNotFound;
        return respond(Error(missing ? 404 : 503, chunk.status().message()));
      }
      nlohmann::json job = JobSubmissionJson(chunk->job);
      job["logs"] = chunk->data;
      // Log bytes need not be UTF-8 (nor cut at a character boundary): U+FFFD stands in.
      respond(http::Response::Json(
          200, job.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    });
  }

  void Feeds(const std::string& kind, Respond respond) {
    const std::string prefix = FeedPrefix(kind);
    reader_.gcs().KvPrefix(
        kFeedKvNamespace, prefix,
        [respond, kind, prefix](Result<std::map<std::string, std::string>> values) {
          if (!values.ok()) return respond(Error(503, values.status().message()));
          nlohmann::json list = nlohmann::json::array();
          for (const auto& [name, summary] : ParseFeeds(*values, prefix)) {
            list.push_back(ListedSummary(summary));
          }
          respond(http::Response::Json(200, nlohmann::json{{kind + "s", list}}.dump()));
        });
  }

  void Feed(const std::string& kind, const std::string& name, Respond respond) {
    using Values = std::map<std::string, std::string>;
    struct Answers {
      std::optional<Result<std::optional<std::string>>> summary;
      std::optional<Result<Values>> series, logs;
    };
    const std::string series_prefix = FeedItemPrefix(kind, name, "series");
    const std::string logs_prefix = FeedItemPrefix(kind, name, "logs");
    auto a = std::make_shared<Answers>();
    auto countdown =
        std::make_shared<Countdown>(3, [a, respond, kind, name, series_prefix, logs_prefix] {
          for (const Status& s : {a->summary->status(), a->series->status(), a->logs->status()}) {
            if (!s.ok()) return respond(Error(503, s.message()));
          }
          if (!**a->summary) return respond(Error(404, "no " + kind + " named '" + name + "'"));
          nlohmann::json feed = nlohmann::json::parse(***a->summary, nullptr, false);
          if (!feed.is_object()) {
            return respond(Error(500, kind + " '" + name + "' is not a JSON object"));
          }
          feed["series"] = ParsedByKey(**a->series, series_prefix);
          feed["logs"] = ParsedByKey(**a->logs, logs_prefix);
          respond(http::Response::Json(200, feed.dump()));
        });
    runtime::GcsClient& gcs = reader_.gcs();
    gcs.KvGet(kFeedKvNamespace, FeedKey(kind, name), Countdown::Into(countdown, &a->summary));
    gcs.KvPrefix(kFeedKvNamespace, series_prefix, Countdown::Into(countdown, &a->series));
    gcs.KvPrefix(kFeedKvNamespace, logs_prefix, Countdown::Into(countdown, &a->logs));
  }

  void Metrics(Respond respond) {
    struct Answers {
      std::optional<Result<ClusterView>> view;
      std::optional<Result<std::vector<ActorSummary>>> actors;
      std::optional<Result<std::vector<internal::PlacementGroupInfo>>> groups;
      std::optional<Result<std::vector<JobSummary>>> jobs;
      std::optional<Result<ObjectsView>> objects;
      std::optional<Result<std::map<std::string, std::string>>> feeds;
    };
    auto a = std::make_shared<Answers>();
    auto countdown = std::make_shared<Countdown>(6, [a, respond] {
      if (!a->view->ok()) return respond(http::Response::Text(503, a->view->status().message() + "\n"));
      http::Response r;
      r.content_type = prometheus::kContentType;
      r.body = MetricsText(*a->view, *a->actors, *a->groups, *a->jobs, *a->objects, *a->feeds);
      respond(std::move(r));
    });
    runtime::GcsClient& gcs = reader_.gcs();
    gcs.GetClusterView(Countdown::Into(countdown, &a->view));
    gcs.GetActors(Countdown::Into(countdown, &a->actors));
    gcs.GetPlacementGroups(Countdown::Into(countdown, &a->groups));
    gcs.GetJobs(Countdown::Into(countdown, &a->jobs));
    reader_.GetObjects(Countdown::Into(countdown, &a->objects));
    gcs.KvPrefix(kFeedKvNamespace, "feed/", Countdown::Into(countdown, &a->feeds));
  }

  // The cluster's Prometheus text. Tables that could not be read are left out.
  static std::string MetricsText(const Result<ClusterView>& view,
                                 const Result<std::vector<ActorSummary>>& actors,
                                 const Result<std::vector<internal::PlacementGroupInfo>>& groups,
                                 const Result<std::vector<JobSummary>>& jobs,
                                 const Result<ObjectsView>& objects,
                                 const Result<std::map<std::string, std::string>>& feed_values) {
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
    text.Family("rayd_cluster_resource_capacity", "gauge",
                "Resources of the alive nodes (memory in bytes).");
    for (const auto& [name, amount] : total) {
      text.Sample("rayd_cluster_resource_capacity", {{"resource", name}}, amount);
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
    if (actors.ok()) {
      std::map<std::string, int> counts{{"ALIVE", 0}, {"DEAD", 0}};
      for (const ActorSummary& a : *actors) ++counts[a.state];
      by_state("rayd_actors", "Actors by state.", counts);
    }
    if (groups.ok()) {
      std::map<std::string, int> counts{{"CREATED", 0}, {"PENDING", 0}};
      for (const auto& g : *groups) ++counts[g.state];
      by_state("rayd_placement_groups", "Placement groups by state.", counts);
    }
    if (jobs.ok()) {
      std::map<std::string, int> counts{{"RUNNING", 0}, {"FINISHED", 0}};
      for (const JobSummary& j : *jobs) ++counts[j.is_dead ? "FINISHED" : "RUNNING"];
      by_state("rayd_jobs", "Jobs (drivers) by state.", counts);
    }
    if (objects.ok()) {
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
    // Every feed's own samples ("feed/<kind>/<name>" keys: names unique across kinds).
    if (feed_values.ok()) AddFeedMetrics(ParseFeeds(*feed_values, "feed/"), text);
    return text.str();
  }

  DashboardOptions options_;
  EventLoop loop_;
  http::HttpServer server_;
  runtime::ClusterReader reader_;  // destroyed first: its pending reads answer while the server
                                   // is still there
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
