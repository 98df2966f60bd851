#include "autoscaler/autoscaler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>

namespace rayd::autoscaler {
namespace {

constexpr size_t kMaxEvents = 50;
constexpr int64_t kFirstBackoffMs = 10'000;
constexpr int64_t kMaxBackoffMs = 300'000;
// A drained node leaves as soon as nothing runs on it; this is how long it may take at most.
constexpr int64_t kDrainDeadlineMs = 60'000;
constexpr char kRecordPrefix[] = "instance:";

const char* PhaseName(int phase) {
  static const char* kNames[] = {"launching", "running", "draining"};
  return kNames[phase];
}

// Nothing runs there (no lease, bundle or actor holds its resources) and its store holds no
// primary object copy, which its owner counts on finding there.
bool Idle(const NodeInfo& node) {
  return node.available == node.total && node.primary_objects == 0;
}

std::string Short(const std::string& id) { return id.substr(0, 8); }

}  // namespace

Autoscaler::Autoscaler(EventLoop& loop, AutoscalerConfig config,
                       std::unique_ptr<NodeProvider> provider, AutoscalerHost& host)
    : loop_(loop),
      config_(std::move(config)),
      provider_(std::move(provider)),
      host_(host),
      timer_(loop) {}

Autoscaler::~Autoscaler() { guard_.Invalidate(); }

void Autoscaler::Start(std::function<void(Status)> done) {
  host_.LoadRecords(guard_([this, done = std::move(done)](auto records) {
    if (!records.ok()) return done(records.status().WithContext("loading the autoscaler's instances"));
    std::vector<Instance> adopted;
    for (const auto& [key, value] : *records) {
      if (key.rfind(kRecordPrefix, 0) != 0) continue;
      auto j = nlohmann::json::parse(value, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      Tracked t;
      t.instance.id = j.value("id", "");
      t.instance.node_type = j.value("node_type", "");
      t.instance.handle = j.value("handle", "");
      t.launched_ms = j.value("launched_ms", int64_t{0});
      t.reason = j.value("reason", "");
      t.node_id = j.value("node_id", "");
      t.phase = static_cast<Tracked::Phase>(std::clamp(j.value("phase", 0), 0, 2));
      if (t.instance.id.empty() || config_.FindType(t.instance.node_type) == nullptr) continue;
      adopted.push_back(t.instance);
      tracked_[t.instance.id] = std::move(t);
    }
    provider_->Adopt(adopted);
    if (!adopted.empty()) {
      Event("adopted " + std::to_string(adopted.size()) + " instance(s) launched before the "
            "head restarted");
    }
    Schedule();
    done(Status::Ok());
  }));
}

void Autoscaler::Schedule() {
  const auto period = Millis(static_cast<int64_t>(config_.update_interval_s * 1000));
  timer_.Start(Millis(0), period, [this] { Update(nullptr); });
}

void Autoscaler::UpdateNow(std::function<void()> done) { Update(std::move(done)); }

void Autoscaler::Shutdown(std::function<void()> done) {
  timer_.Stop();
  auto left = std::make_shared<size_t>(tracked_.size() + 1);  // co-owned by the callbacks
  auto one_done = [left, done = std::move(done)] {
    if (--*left == 0 && done) done();
  };
  for (auto& [id, t] : tracked_) {
    provider_->Terminate(t.instance, guard_([id, one_done](Status s) {
      if (!s.ok()) spdlog::warn("autoscaler: terminating instance {}: {}", id, s.message());
      one_done();
    }));
    host_.DeleteRecord(kRecordPrefix + id);
  }
  spdlog::info("autoscaler: terminating the {} instance(s) it launched", tracked_.size());
  tracked_.clear();
  one_done();
}

void Autoscaler::Update(std::function<void()> done) {
  if (updating_) {
    if (done) loop_.Post(std::move(done));
    return;
  }
  updating_ = true;
  // Both reads in flight at once; the update runs when both have answered.
  struct Pending {
    std::optional<Result<ClusterReading>> reading;
    std::optional<Result<std::vector<Instance>>> listed;
  };
  auto pending = std::make_shared<Pending>();  // co-owned by the two callbacks
  auto maybe_run = [this, pending, done = std::move(done)]() mutable {
    if (!pending->reading || !pending->listed) return;
    OnRead(std::move(*pending->reading), std::move(*pending->listed), std::move(done));
  };
  auto shared_run = std::make_shared<decltype(maybe_run)>(std::move(maybe_run));
  host_.Read(guard_([pending, shared_run](Result<ClusterReading> r) {
    pending->reading.emplace(std::move(r));
    (*shared_run)();
  }));
  provider_->List(guard_([pending, shared_run](Result<std::vector<Instance>> r) {
    pending->listed.emplace(std::move(r));
    (*shared_run)();
  }));
}

void Autoscaler::OnRead(Result<ClusterReading> reading, Result<std::vector<Instance>> listed,
                        std::function<void()> done) {
  updating_ = false;
  if (!reading.ok()) {
    spdlog::warn("autoscaler: cannot read the cluster: {}", reading.status().message());
    if (done) done();
    return;
  }
  if (!listed.ok()) {
    // Decide anyway from what the cluster shows; report the provider's trouble once per change.
    const std::string error = "the " + provider_->type() + " provider cannot list its "
                              "instances: " + listed.status().message();
    if (events_.empty() || events_.back().value("text", "") != error) Event(error);
  }
  Reconcile(*reading, listed.ok() ? &*listed : nullptr);
  Decision decision = Decide(config_, MakeInput(*reading));
  Carry(decision);
  host_.Publish(State(*reading, decision));
  if (done) done();
}

void Autoscaler::Reconcile(const ClusterReading& reading, const std::vector<Instance>* listed) {
  const int64_t now = NowUnixMs();
  std::map<std::string, const NodeInfo*> by_instance;
  for (const NodeInfo& node : reading.nodes) {
    auto it = node.labels.find(kInstanceLabel);
    if (node.alive && it != node.labels.end()) by_instance[it->second] = &node;
  }
  std::map<std::string, const Instance*> in_provider;
  if (listed != nullptr) {
    for (const Instance& i : *listed) in_provider[i.id] = &i;
  }
  std::vector<std::pair<std::string, std::string>> to_end;  // id, why
  for (auto& [id, t] : tracked_) {
    if (auto p = in_provider.find(id); p != in_provider.end()) {
      t.listed = true;
      t.instance.state = p->second->state;
      t.instance.detail = p->second->detail;
      t.instance.seconds_left = p->second->seconds_left;
      // launch_timeout_s counts from when the provider starts it: a queued Slurm job is coming.
      if (p->second->state == Instance::State::kPending) t.launched_ms = now;
      if (!p->second->handle.empty()) t.instance.handle = p->second->handle;
    } else if (listed != nullptr && (t.listed || t.phase != Tracked::Phase::kLaunching)) {
      to_end.emplace_back(id, t.phase == Tracked::Phase::kDraining
                                  ? "its node was drained (and its instance has ended)"
                                  : "its provider no longer lists it");
      continue;
    }
    auto n = by_instance.find(id);
    if (n == by_instance.end()) {
      if (t.phase == Tracked::Phase::kLaunching) {
        const double waited_s = static_cast<double>(now - t.launched_ms) / 1000;
        if (waited_s > config_.launch_timeout_s) {
          const std::string why = "did not join within launch_timeout_s " +
                                  std::to_string(static_cast<int>(config_.launch_timeout_s)) +
                                  " s" + (t.instance.detail.empty() ? "" : ": " + t.instance.detail);
          Fail(t.instance.node_type, "instance " + id + " " + why);
          to_end.emplace_back(id, why);
        }
      } else {
        to_end.emplace_back(id, t.phase == Tracked::Phase::kDraining ? "its node was drained"
                                                                    : "its node left the cluster");
      }
      continue;
    }
    const NodeInfo& node = *n->second;
    if (t.phase == Tracked::Phase::kLaunching) {
      t.phase = Tracked::Phase::kRunning;
      t.node_id = node.node_id.Hex();
      backoff_.erase(t.instance.node_type);
      Event("node " + Short(t.node_id) + " (" + t.instance.node_type + ", instance " + id +
            ") joined after " + std::to_string((now - t.launched_ms) / 1000) + " s");
      Save(t);
    }
    if (node.draining() && t.phase == Tracked::Phase::kRunning) {
      t.phase = Tracked::Phase::kDraining;  // drained by someone else (`rayd drain`)
      Save(t);
    }
    t.idle_since_ms = Idle(node) ? (t.idle_since_ms ? t.idle_since_ms : now) : 0;
    // A provider that ends the instance soon (a Slurm time limit): drain it before that.
    const double margin = config_.provider.value("drain_before_limit_s", 120.0);
    if (t.phase == Tracked::Phase::kRunning && t.instance.seconds_left &&
        *t.instance.seconds_left < margin) {
      const std::string why = "its " + provider_->type() + " instance ends in " +
                              std::to_string(static_cast<int>(*t.instance.seconds_left)) + " s";
      Status s = host_.Drain(t.node_id, now + static_cast<int64_t>(*t.instance.seconds_left * 1000),
                             "autoscaler: " + why);
      if (s.ok()) {
        t.phase = Tracked::Phase::kDraining;
        ++counters_["drained"];
        Event("draining node " + Short(t.node_id) + ": " + why);
        Save(t);
      }
    }
  }
  for (const auto& [id, why] : to_end) TerminateTracked(id, why);
}

PolicyInput Autoscaler::MakeInput(const ClusterReading& reading) const {
  PolicyInput in;
  const int64_t now = NowUnixMs();
  std::map<std::string, const Tracked*> by_node;
  for (const auto& [id, t] : tracked_) {
    if (!t.node_id.empty()) by_node[t.node_id] = &t;
  }
  for (const NodeInfo& node : reading.nodes) {
    if (!node.alive) continue;
    NodeView v;
    v.node_id = node.node_id.Hex();
    v.resources = scheduler::NodeResources(node.total, node.available, node.labels);
    v.status = node.draining() ? NodeView::Status::kDraining : NodeView::Status::kRunning;
    if (auto it = by_node.find(v.node_id); it != by_node.end()) {
      const Tracked& t = *it->second;
      v.instance_id = t.instance.id;
      v.node_type = t.instance.node_type;
      if (t.phase == Tracked::Phase::kDraining) v.status = NodeView::Status::kDraining;
      v.idle_s = t.idle_since_ms ? static_cast<double>(now - t.idle_since_ms) / 1000 : 0;
    }
    in.nodes.push_back(std::move(v));
  }
  // Launches not joined yet, and creates still in flight, as empty nodes of their type.
  auto add_launching = [&](const std::string& type_name, const std::string& id) {
    const NodeTypeConfig* type = config_.FindType(type_name);
    if (type == nullptr) return;
    NodeView v;
    v.instance_id = id;
    v.node_type = type_name;
    v.status = NodeView::Status::kLaunching;
    v.resources = scheduler::NodeResources(type->resources, type->resources, TypeLabels(*type));
    in.nodes.push_back(std::move(v));
  };
  for (const auto& [id, t] : tracked_) {
    if (t.phase == Tracked::Phase::kLaunching) add_launching(t.instance.node_type, id);
  }
  for (const auto& [type, count] : creating_) {
    for (int i = 0; i < count; ++i) add_launching(type, "creating:" + type + ":" + std::to_string(i));
  }
  in.waiting = reading.waiting;
  in.requested = reading.requested;
  return in;
}

void Autoscaler::Carry(const Decision& decision) {
  const int64_t now = NowUnixMs();
  for (const Launch& launch : decision.launches) {
    const NodeTypeConfig* type = config_.FindType(launch.node_type);
    if (type == nullptr) continue;
    if (auto b = backoff_.find(type->name); b != backoff_.end() && b->second.until_ms > now) {
      continue;  // State() says why
    }
    CreateNodes(*type, launch.count, launch.reason);
  }
  for (const Drain& drain : decision.drains) {
    auto it = tracked_.find(drain.instance_id);
    if (it == tracked_.end()) continue;
    Status s = host_.Drain(drain.node_id, now + kDrainDeadlineMs, "autoscaler: " + drain.reason);
    if (!s.ok()) {
      spdlog::warn("autoscaler: cannot drain node {}: {}", drain.node_id, s.message());
      continue;
    }
    it->second.phase = Tracked::Phase::kDraining;
    ++counters_["drained"];
    Event("draining node " + Short(drain.node_id) + " (" + it->second.instance.node_type +
          "): " + drain.reason);
    Save(it->second);
  }
}

void Autoscaler::CreateNodes(const NodeTypeConfig& type, int count, const std::string& reason) {
  creating_[type.name] += count;
  Event("launching " + std::to_string(count) + " " + type.name + " node(s) for " + reason);
  provider_->Create(type, count, guard_([this, name = type.name, count, reason](
                                            Result<std::vector<Instance>> created) {
    creating_[name] -= count;
    if (creating_[name] <= 0) creating_.erase(name);
    if (!created.ok()) {
      Fail(name, "creating " + std::to_string(count) + " " + name +
                     " node(s) failed: " + created.status().message());
      return;
    }
    for (const Instance& instance : *created) {
      Tracked t;
      t.instance = instance;
      t.instance.node_type = name;
      t.launched_ms = NowUnixMs();
      t.reason = reason;
      ++counters_["launched"];
      Save(t);
      tracked_[instance.id] = std::move(t);
    }
  }));
}

void Autoscaler::TerminateTracked(const std::string& id, const std::string& why) {
  auto it = tracked_.find(id);
  if (it == tracked_.end()) return;
  Instance instance = it->second.instance;
  tracked_.erase(it);
  host_.DeleteRecord(kRecordPrefix + id);
  ++counters_["terminated"];
  Event("terminating instance " + id + " (" + instance.node_type + "): " + why);
  provider_->Terminate(instance, guard_([this, id](Status s) {
    if (!s.ok()) Event("terminating instance " + id + " failed: " + s.message());
  }));
}

void Autoscaler::Fail(const std::string& type, const std::string& error) {
  Backoff& b = backoff_[type];
  const int64_t delay =
      std::min(kMaxBackoffMs, kFirstBackoffMs << std::min(b.failures, 10));
  ++b.failures;
  b.until_ms = NowUnixMs() + delay;
  b.last_error = error;
  ++counters_["launch_failures"];
  Event(error + "; " + type + " launches again in " + std::to_string(delay / 1000) + " s");
  spdlog::warn("autoscaler: {}", error);
}

void Autoscaler::Save(const Tracked& t) {
  nlohmann::json j = {{"id", t.instance.id},         {"node_type", t.instance.node_type},
                      {"handle", t.instance.handle}, {"launched_ms", t.launched_ms},
                      {"reason", t.reason},          {"node_id", t.node_id},
                      {"phase", static_cast<int>(t.phase)}};
  host_.SaveRecord(kRecordPrefix + t.instance.id, j.dump());
}

void Autoscaler::Event(std::string text) {
  spdlog::info("autoscaler: {}", text);
  events_.push_back({{"time_ms", NowUnixMs()}, {"text", std::move(text)}});
  while (events_.size() > kMaxEvents) events_.pop_front();
}

nlohmann::json Autoscaler::State(const ClusterReading& reading, const Decision& decision) const {
  const int64_t now = NowUnixMs();
  nlohmann::json types = nlohmann::json::array();
  for (const NodeTypeConfig& type : config_.node_types) {
    int phases[3] = {0, 0, 0};
    for (const auto& [id, t] : tracked_) {
      if (t.instance.node_type == type.name) ++phases[static_cast<int>(t.phase)];
    }
    auto creating = creating_.find(type.name);
    nlohmann::json entry = {{"name", type.name},
                            {"resources", type.resources.ToString()},
                            {"resources_json", nlohmann::json::parse(type.resources.ToJson())},
                            {"min_nodes", type.min_nodes},
                            {"max_nodes", type.max_nodes},
                            {"launching", phases[0] + (creating == creating_.end() ? 0 : creating->second)},
                            {"running", phases[1]},
                            {"draining", phases[2]}};
    if (auto b = backoff_.find(type.name); b != backoff_.end() && b->second.until_ms > now) {
      entry["paused_s"] = (b->second.until_ms - now + 999) / 1000;
      entry["last_error"] = b->second.last_error;
    }
    types.push_back(std::move(entry));
  }
  nlohmann::json instances = nlohmann::json::array();
  for (const auto& [id, t] : tracked_) {
    const int phase = static_cast<int>(t.phase);
    nlohmann::json i = {{"id", id},
                        {"node_type", t.instance.node_type},
                        {"phase", PhaseName(phase)},
                        {"node_id", t.node_id},
                        {"age_s", (now - t.launched_ms) / 1000},
                        {"reason", t.reason},
                        {"detail", t.instance.detail}};
    if (t.idle_since_ms) i["idle_s"] = (now - t.idle_since_ms) / 1000;
    if (t.instance.seconds_left) i["seconds_left"] = *t.instance.seconds_left;
    instances.push_back(std::move(i));
  }
  nlohmann::json waiting = nlohmann::json::array();
  for (const DemandUnit& unit : reading.waiting) {
    waiting.push_back({{"source", unit.source}, {"shape", DescribeBundles(unit)}, {"count", unit.count}});
  }
  nlohmann::json requested = nlohmann::json::array();
  for (const DemandUnit& unit : reading.requested) {
    requested.push_back({{"source", unit.source}, {"shape", DescribeBundles(unit)}, {"count", unit.count}});
  }
  nlohmann::json unmet = nlohmann::json::array();
  for (const Unmet& u : decision.unmet) {
    unmet.push_back({{"source", u.source}, {"reason", u.reason}, {"infeasible", u.infeasible}});
  }
  nlohmann::json counters = nlohmann::json::object();
  for (const char* name : {"launched", "terminated", "launch_failures", "drained"}) {
    auto it = counters_.find(name);
    counters[name] = it == counters_.end() ? 0 : it->second;
  }
  return {{"updated_ms", now},       {"provider", provider_->type()},
          {"max_nodes", config_.max_nodes}, {"idle_timeout_s", config_.idle_timeout_s},
          {"node_types", types},     {"instances", instances},
          {"waiting", waiting},      {"requested", requested},
          {"unmet", unmet},          {"counters", counters},
          {"events", nlohmann::json(events_)}};
}

}  // namespace rayd::autoscaler
