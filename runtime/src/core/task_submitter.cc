#include "core/task_submitter.h"

#include <spdlog/spdlog.h>

#include "common/node_info.h"
#include "core/infeasible_warner.h"

namespace rayd::core {
namespace {

using internal::ErrorKind;

// Tasks pushed to one leased worker before waiting for replies: enough to hide the round
// trip, few enough that other leases still get work.
constexpr int kMaxInFlightPerLease = 16;
constexpr int kMaxPendingLeaseRequests = 4;
constexpr Millis kLeaseIdleTimeout{200};
// Tasks that keep a worker busy longer than this never wait behind a busy worker: the wait
// would be long, and a CPU that frees meanwhile could not take them.
constexpr std::chrono::microseconds kPipelineTaskTime{5000};
// After a failed lease request while other leases run, the next request waits this long,
// doubling up to the maximum (reset by a grant).
constexpr Millis kLeaseRetryBackoff{100};
constexpr Millis kMaxLeaseRetryBackoff{5000};

// The shape of a task for lease reuse: its resources and scheduling options, as a cheap string
// (texts are length-prefixed, so different options never make the same key).
std::string ShapeKey(const TaskSpec& spec) {
  std::string key;
  for (const auto& [name, amount] : spec.resources) {
    key += name;
    key += '=';
    key += std::to_string(amount.units());
    key += ';';
  }
  const SchedulingOptions& s = spec.scheduling;
  if (s.empty()) return key;
  auto text = [&key](const std::string& t) { key += std::to_string(t.size()) + ':' + t; };
  key += "|pg";
  text(s.placement_group_id);
  key += std::to_string(s.bundle_index);
  key += "|labels";
  for (const auto& [name, value] : s.label_selector) {
    text(name);
    text(value);
  }
  key += s.affinity_soft ? "|soft" : "|hard";
  text(s.node_affinity);
  return key;
}

std::string ShapeKeyWithEnv(const TaskSpec& spec) {
  std::string key = ShapeKey(spec);
  if (spec.env.empty()) return key;
  key += "|env";
  for (const auto& [name, value] : spec.env) {
    key += std::to_string(name.size()) + ':' + name + std::to_string(value.size()) + ':' + value;
  }
  return key;
}

}  // namespace

void FillLaunch(const SubmitterContext& ctx, const std::map<std::string, std::string>& env,
                proto::WorkerLaunch::Builder out) {
  auto argv = out.initArgv(static_cast<unsigned>(ctx.launch_argv.size()));
  for (unsigned i = 0; i < ctx.launch_argv.size(); ++i) argv.set(i, ctx.launch_argv[i]);
  if (env.empty()) {
    runtime::FillLabels(ctx.launch_env, [&](unsigned n) { return out.initEnv(n); });
    return;
  }
  std::map<std::string, std::string> merged = ctx.launch_env;
  for (const auto& [name, value] : env) merged[name] = value;
  runtime::FillLabels(merged, [&](unsigned n) { return out.initEnv(n); });
}

TaskSubmitter::TaskSubmitter(SubmitterContext& ctx) : ctx_(ctx), idle_timer_(ctx.loop) {
  idle_timer_.Start(kLeaseIdleTimeout, kLeaseIdleTimeout, [this] {
    ReturnIdleLeases();
    // Shapes backing off after a failed request ask again once their back-off is over.
    for (auto& [key, shape] : shapes_) {
      if (!shape.queue.empty() && shape.pending_requests == 0) Pump(key);
    }
  });
}

TaskSubmitter::~TaskSubmitter() = default;

void TaskSubmitter::Submit(TaskSpec spec) {
  if (ctx_.stopping) {
    return ctx_.store.Put(spec.return_id, ErrorValue(ErrorKind::kSystem, "rayd is shutting down"));
  }
  const std::string key = ShapeKeyWithEnv(spec);
  auto [it, fresh] = shapes_.try_emplace(key);
  auto& shape = it->second;
  if (fresh) {  // the key holds all three: later tasks of the shape have the same
    shape.resources = spec.resources;
    shape.scheduling = spec.scheduling;
    shape.env = spec.env;
    // A group's bundles were checked when it was placed; other shapes may fit no node.
    if (ctx_.warner && spec.scheduling.placement_group_id.empty()) {
      ctx_.warner->Watch("task", "task " + spec.function_name, spec.resources);
    }
  }
  shape.queue.push_back(std::move(spec));
  Pump(key);
}

void TaskSubmitter::Pump(const std::string& key) {
  if (ctx_.stopping) return;
  auto& shape = shapes_[key];
  // Hand queued tasks to leases with room, least loaded first: idle ones only, unless no more
  // leases can be had now and the tasks are short (then behind busy workers too).
  const int max_in_flight = MayQueueBehindBusy(shape) ? kMaxInFlightPerLease : 1;
  while (!shape.queue.empty()) {
    std::shared_ptr<Lease> best;
    for (auto& lease : shape.leases) {
      if (lease->dead || lease->in_flight >= max_in_flight) continue;
      if (!best || lease->in_flight < best->in_flight) best = lease;
    }
    if (!best) break;
    TaskSpec spec = std::move(shape.queue.front());
    shape.queue.pop_front();
    Push(key, best, std::move(spec));
  }
  // Tasks wait: keep lease requests pending for them (bounded); the node queues a request that
  // does not fit yet and grants it as soon as room frees.
  const bool backing_off = !shape.leases.empty() && Clock::now() < shape.retry_at;
  const int wanted =
      backing_off
          ? 0
          : static_cast<int>(std::min<size_t>(shape.queue.size(), kMaxPendingLeaseRequests));
  while (shape.pending_requests < wanted) {
    const int before = shape.pending_requests;
    AskForLease(key);
    if (shape.pending_requests == before) break;  // waiting for a group, or failed the queue
  }
}

bool TaskSubmitter::MayQueueBehindBusy(const Shape& shape) const {
  return shape.saturated && shape.service_time.count() > 0 &&
         shape.service_time < kPipelineTaskTime;
}

void TaskSubmitter::RecordServiceTime(Shape& shape, Lease& lease, Clock::time_point pushed) {
  const auto now = Clock::now();
  // A task pushed behind others started when the one before it ended.
  const auto started = std::max(pushed, lease.last_reply);
  lease.last_reply = now;
  const auto sample = std::chrono::duration_cast<std::chrono::microseconds>(now - started);
  shape.service_time =
      shape.service_time.count() == 0 ? sample : (shape.service_time * 7 + sample) / 8;
}

void TaskSubmitter::AskForLease(const std::string& key) {
  const Shape& shape = shapes_[key];
  const std::string& group_id = shape.scheduling.placement_group_id;
  if (group_id.empty()) return RequestLease(key, ctx_.node_address, false);
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return LookUpGroup(group_id);
  Group& group = it->second;
  switch (group.state) {
    case Group::State::kAsking:
      return;  // the answer pumps the shape
    case Group::State::kGone:
      return FailQueue(key, group.error, group.why);
    case Group::State::kReady:
      break;
  }
  Result<std::string> node = BundleNode(group, shape);
  if (!node.ok()) return FailQueue(key, ErrorKind::kSystem, node.status().message());
  RequestLease(key, *node, /*no_spill=*/true);
}

Result<std::string> TaskSubmitter::BundleNode(Group& group, const Shape& shape) {
  const int index = shape.scheduling.bundle_index;
  const std::string& group_id = shape.scheduling.placement_group_id;
  if (index >= 0) {
    if (static_cast<size_t>(index) >= group.bundles.size()) {
      return Status::InvalidArgument("placement group " + group_id + " has no bundle " +
                                     std::to_string(index) + " (it has " +
                                     std::to_string(group.bundles.size()) + ")");
    }
    return group.bundles[index].node_address;
  }
  // Any bundle: the next one that could hold the shape; when none could, any one (its node
  // says why the shape does not fit).
  const size_t n = group.bundles.size();
  if (n == 0) return Status::InvalidArgument("placement group " + group_id + " has no bundles");
  for (size_t step = 0; step < n; ++step) {
    const size_t b = (group.next + step) % n;
    if (shape.resources.IsSubsetOf(group.bundles[b].resources)) {
      group.next = b + 1;
      return group.bundles[b].node_address;
    }
  }
  return group.bundles[group.next++ % n].node_address;
}

void TaskSubmitter::LookUpGroup(const std::string& group_id) {
  groups_[group_id] = Group{};
  auto fill = [&](proto::GetPlacementGroupRequest::Builder r) {
    r.setPlacementGroupId(group_id);
    r.setWaitUntilReady(true);
  };
  ctx_.gcs.Call<proto::Method::GET_PLACEMENT_GROUP>(
      fill, Millis(0), [this, group_id](const Status& s, proto::GetPlacementGroupReply::Reader r) {
        if (ctx_.stopping) return;
        OnGroupAnswer(group_id, s, r);
      });
}

void TaskSubmitter::OnGroupAnswer(const std::string& group_id, const Status& status,
                                  proto::GetPlacementGroupReply::Reader reply) {
  auto pump_group = [&] {
    for (auto& [key, shape] : shapes_) {
      if (shape.scheduling.placement_group_id == group_id) Pump(key);
    }
  };
  if (status.code() == StatusCode::kUnavailable) {
    groups_.erase(group_id);  // the GCS connection broke: ask again (the client reconnects)
    return pump_group();
  }
  Group& group = groups_[group_id];
  group.state = Group::State::kGone;
  const std::string name = "placement group " + group_id;
  if (!status.ok()) {
    group.why = "cannot look up " + name + ": " + status.message();
  } else if (!reply.getFound()) {
    group.why = "there is no " + name;
  } else {
    auto info = reply.getGroup();
    switch (info.getState()) {
      case proto::PlacementGroupState::REMOVED:
        group.why = name + " was removed";
        break;
      case proto::PlacementGroupState::FAILED:
        group.error = ErrorKind::kInfeasible;
        group.why =
            info.getCause().size() > 0 ? std::string(info.getCause().cStr()) : name + " failed";
        break;
      default:  // CREATED: waitUntilReady answers nothing else
        group.state = Group::State::kReady;
        for (auto bundle : info.getBundles()) {
          if (bundle.getIndex() >= group.bundles.size())
            group.bundles.resize(bundle.getIndex() + 1);
          group.bundles[bundle.getIndex()] = {runtime::ResourcesFromProto(bundle.getResources()),
                                              bundle.getNodeAddress()};
        }
        break;
    }
  }
  pump_group();
  if (!status.ok()) groups_.erase(group_id);  // failed the tasks waiting now; later ones ask again
}

void TaskSubmitter::RequestLease(const std::string& key, const std::string& node_address,
                                 bool no_spill) {
  auto& shape = shapes_[key];
  shape.pending_requests++;
  auto fill = [&](proto::RequestLeaseRequest::Builder r) {
    r.setJobId(ctx_.job_id.Hex());
    runtime::FillResources(shape.resources, [&](unsigned n) { return r.initResources(n); });
    FillLaunch(ctx_, shape.env, r.initLaunch());
    r.setGrantOrReject(no_spill);
    ToProto(shape.scheduling, r.initScheduling());
  };
  ctx_.clients.Get(node_address)
      .Call<proto::Method::REQUEST_LEASE>(
          fill, Millis(0),
          [this, key, node_address](const Status& s, proto::RequestLeaseReply::Reader reply) {
            if (ctx_.stopping) return;
            auto& shape = shapes_[key];
            shape.pending_requests--;
            if (!s.ok()) return OnLeaseFailed(key, s);
            if (reply.isSpillback()) {
              RequestLease(key, reply.getSpillback().getNodeAddress(), true);
              return;
            }
            auto granted = reply.getGranted();
            shape.saturated = !granted.getMoreRoom();
            shape.retry_backoff = Millis(0);
            auto lease = std::make_shared<Lease>();
            lease->lease_id = granted.getLeaseId();
            lease->worker_address = granted.getWorkerAddress();
            lease->node_address = node_address;
            lease->idle_since = Clock::now();
            if (shape.queue.empty()) {
              ReturnLease(lease, false);  // the work went elsewhere meanwhile
              return;
            }
            shape.leases.push_back(lease);
            Pump(key);
          });
}

void TaskSubmitter::OnLeaseFailed(const std::string& key, const Status& status) {
  auto& shape = shapes_[key];
  const std::string& group_id = shape.scheduling.placement_group_id;
  if (!group_id.empty() &&
      (status.code() == StatusCode::kNotFound || status.code() == StatusCode::kCancelled)) {
    // The node no longer holds the bundle: learn where the group is now.
    if (auto it = groups_.find(group_id);
        it != groups_.end() && it->second.state == Group::State::kReady) {
      groups_.erase(it);
    }
    Pump(key);
    return;
  }
  if (!shape.leases.empty() || shape.pending_requests > 0) {
    // No asking again in a loop: the other leases run the queue, and a new request waits out
    // a back-off.
    shape.retry_backoff =
        std::min(kMaxLeaseRetryBackoff, std::max(kLeaseRetryBackoff, shape.retry_backoff * 2));
    shape.retry_at = Clock::now() + shape.retry_backoff;
    spdlog::debug("lease for {} failed while others run; asking again in {} ms: {}",
                  shape.resources.ToString(), shape.retry_backoff.count(), status.message());
    Pump(key);
    return;
  }
  const bool infeasible = status.code() == StatusCode::kResourceExhausted;
  spdlog::warn("lease for {} failed: {}", shape.resources.ToString(), status.message());
  FailQueue(key, infeasible ? ErrorKind::kInfeasible : ErrorKind::kSystem, status.message());
}

void TaskSubmitter::FailQueue(const std::string& key, ErrorKind kind, const std::string& why) {
  auto queue = std::move(shapes_[key].queue);
  shapes_[key].queue.clear();
  for (auto& spec : queue) {
    ctx_.store.Put(spec.return_id,
                   ErrorValue(kind, "cannot run " + spec.function_name + ": " + why));
  }
}

void TaskSubmitter::Push(const std::string& key, const std::shared_ptr<Lease>& lease,
                         TaskSpec spec) {
  lease->in_flight++;
  const Clock::time_point pushed = Clock::now();
  auto shared_spec = std::make_shared<TaskSpec>(std::move(spec));
  auto fill = [&shared_spec](proto::PushTaskRequest::Builder r) {
    ToProto(*shared_spec, r.initSpec());
  };
  auto& client = ctx_.clients.Get(lease->worker_address);
  // A worker that can't be reached (it died before or between calls) fails over at once
  // instead of leaving calls queued in a reconnecting client.
  client.SetOnStateChange([this, key, weak = std::weak_ptr<Lease>(lease)](const Status& s) {
    auto lease = weak.lock();
    if (s.ok() || ctx_.stopping || !lease) return;
    OnWorkerLost(key, lease);
  });
  client.Call<proto::Method::PUSH_TASK>(
      fill, Millis(0),
      [this, key, lease, shared_spec, pushed](const Status& s, proto::PushTaskReply::Reader r) {
        if (ctx_.stopping) return;
        lease->in_flight--;
        RecordServiceTime(shapes_[key], *lease, pushed);
        if (lease->in_flight == 0) lease->idle_since = Clock::now();
        if (s.ok()) {
          ObjectValue value = FromProto(r.getValue());
          // Only a result in the object store can be lost, and so needs its lineage: recorded
          // before a waiting Get can see it lost.
          if (value.in_store && shared_spec->reconstructable && ctx_.lineage) {
            ctx_.lineage->RecordLineage(*shared_spec);
          }
          ctx_.store.Put(shared_spec->return_id, std::move(value));
          Pump(key);
          return;
        }
        const bool worker_lost =
            s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kCancelled;
        if (!worker_lost) {
          ctx_.store.Put(shared_spec->return_id, ErrorValue(ErrorKind::kSystem, s.message()));
          Pump(key);
          return;
        }
        OnWorkerLost(key, lease);
        auto& spec = *shared_spec;
        if (spec.max_retries < 0 || spec.attempt < spec.max_retries) {
          spec.attempt++;
          spdlog::info("retrying {} (attempt {}) after its worker died: {}", spec.function_name,
                       spec.attempt + 1, s.message());
          shapes_[key].queue.push_front(std::move(spec));
        } else {
          ctx_.store.Put(spec.return_id, ErrorValue(ErrorKind::kSystem,
                                                    "the worker running " + spec.function_name +
                                                        " died and no retries are left (" +
                                                        std::to_string(spec.max_retries) +
                                                        " allowed): " + s.message(),
                                                    "WorkerCrashedError"));
        }
        Pump(key);
      });
}

void TaskSubmitter::OnWorkerLost(const std::string& key, const std::shared_ptr<Lease>& lease) {
  if (lease->dead) return;
  lease->dead = true;
  ctx_.clients.Drop(lease->worker_address);
  auto& leases = shapes_[key].leases;
  std::erase(leases, lease);
  ReturnLease(lease, true);
}

void TaskSubmitter::ReturnLease(const std::shared_ptr<Lease>& lease, bool kill) {
  // The lease's resources go back to its node: what it said about being full no longer holds.
  for (auto& [key, shape] : shapes_) shape.saturated = false;
  auto fill = [&](proto::ReturnLeaseRequest::Builder r) {
    r.setLeaseId(lease->lease_id);
    r.setKillWorker(kill);
  };
  ctx_.clients.Get(lease->node_address)
      .Call<proto::Method::RETURN_LEASE>(fill, Millis(10000), [](const Status&) {});
}

void TaskSubmitter::ReturnIdleLeases() {
  if (ctx_.stopping) return;
  const auto now = Clock::now();
  for (auto& [key, shape] : shapes_) {
    if (!shape.queue.empty()) continue;
    std::erase_if(shape.leases, [&](const std::shared_ptr<Lease>& lease) {
      if (lease->in_flight > 0 || now - lease->idle_since < kLeaseIdleTimeout) return false;
      ReturnLease(lease, false);
      return true;
    });
  }
}

void TaskSubmitter::ReturnAllLeases() {
  for (auto& [key, shape] : shapes_) {
    for (auto& lease : shape.leases) ReturnLease(lease, false);
    shape.leases.clear();
  }
}

}  // namespace rayd::core
