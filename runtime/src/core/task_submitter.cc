#include "core/task_submitter.h"

#include <spdlog/spdlog.h>

#include "common/node_info.h"

namespace rayd::core {
namespace {

using internal::ErrorKind;

// Tasks pushed to one leased worker before waiting for replies: enough to hide the round
// trip, few enough that other leases still get work.
constexpr int kMaxInFlightPerLease = 16;
constexpr int kMaxPendingLeaseRequests = 2;
constexpr Millis kLeaseIdleTimeout{200};

}  // namespace

void FillLaunch(const SubmitterContext& ctx, proto::WorkerLaunch::Builder out) {
  auto argv = out.initArgv(static_cast<unsigned>(ctx.launch_argv.size()));
  for (unsigned i = 0; i < ctx.launch_argv.size(); ++i) argv.set(i, ctx.launch_argv[i]);
  auto env = out.initEnv(static_cast<unsigned>(ctx.launch_env.size()));
  unsigned i = 0;
  for (const auto& [k, v] : ctx.launch_env) {
    env[i].setKey(k);
    env[i].setValue(v);
    ++i;
  }
}

TaskSubmitter::TaskSubmitter(SubmitterContext& ctx) : ctx_(ctx), idle_timer_(ctx.loop) {
  idle_timer_.Start(kLeaseIdleTimeout, kLeaseIdleTimeout, [this] { ReturnIdleLeases(); });
}

TaskSubmitter::~TaskSubmitter() = default;

// The shape of a task for lease reuse: its resources, as a cheap string.
static std::string ShapeKey(const scheduler::ResourceSet& resources) {
  std::string key;
  for (const auto& [name, amount] : resources) {
    key += name;
    key += '=';
    key += std::to_string(amount.units());
    key += ';';
  }
  return key;
}

void TaskSubmitter::Submit(TaskSpec spec) {
  if (ctx_.stopping) {
    return ctx_.store.Put(spec.return_id, ErrorValue(ErrorKind::kSystem, "rayd is shutting down"));
  }
  const std::string key = ShapeKey(spec.resources);
  auto& shape = shapes_[key];
  shape.resources = spec.resources;
  shape.queue.push_back(std::move(spec));
  Pump(key);
}

void TaskSubmitter::Pump(const std::string& key) {
  if (ctx_.stopping) return;
  auto& shape = shapes_[key];
  // Hand queued tasks to leases with room, least loaded first.
  while (!shape.queue.empty()) {
    std::shared_ptr<Lease> best;
    for (auto& lease : shape.leases) {
      if (lease->dead || lease->in_flight >= kMaxInFlightPerLease) continue;
      if (!best || lease->in_flight < best->in_flight) best = lease;
    }
    if (!best) break;
    TaskSpec spec = std::move(shape.queue.front());
    shape.queue.pop_front();
    Push(key, best, std::move(spec));
  }
  // More work than the leases can take: ask for more workers.
  const size_t capacity = shape.leases.size() * kMaxInFlightPerLease;
  if (!shape.queue.empty() && shape.pending_requests < kMaxPendingLeaseRequests &&
      (shape.leases.empty() || shape.queue.size() > capacity / 4)) {
    RequestLease(key, ctx_.node_address, false);
  }
}

void TaskSubmitter::RequestLease(const std::string& key, const std::string& node_address,
                                 bool no_spill) {
  auto& shape = shapes_[key];
  shape.pending_requests++;
  auto fill = [&](capnp::AnyPointer::Builder b) {
    auto r = b.initAs<proto::RequestLeaseRequest>();
    r.setJobId(ctx_.job_id.Hex());
    runtime::FillResources(shape.resources, [&](unsigned n) { return r.initResources(n); });
    FillLaunch(ctx_, r.initLaunch());
    r.setGrantOrReject(no_spill);
  };
  ctx_.clients.Get(node_address)
      .Call(proto::Method::REQUEST_LEASE, fill, Millis(0),
            [this, key, node_address](const Status& s, capnp::AnyPointer::Reader r) {
              if (ctx_.stopping) return;
              auto& shape = shapes_[key];
              shape.pending_requests--;
              if (!s.ok()) return OnLeaseFailed(key, s);
              auto reply = r.getAs<proto::RequestLeaseReply>();
              if (reply.isSpillback()) {
                RequestLease(key, reply.getSpillback().getNodeAddress(), true);
                return;
              }
              auto granted = reply.getGranted();
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
  if (!shape.leases.empty() || shape.pending_requests > 0) {
    Pump(key);  // other leases can still run the queue
    return;
  }
  const bool infeasible = status.code() == StatusCode::kResourceExhausted;
  spdlog::warn("lease for {} failed: {}", shape.resources.ToString(), status.message());
  auto queue = std::move(shape.queue);
  shape.queue.clear();
  for (auto& spec : queue) {
    ctx_.store.Put(spec.return_id,
                   ErrorValue(infeasible ? ErrorKind::kInfeasible : ErrorKind::kSystem,
                              "cannot run " + spec.function_name + ": " + status.message()));
  }
}

void TaskSubmitter::Push(const std::string& key, const std::shared_ptr<Lease>& lease,
                         TaskSpec spec) {
  lease->in_flight++;
  auto shared_spec = std::make_shared<TaskSpec>(std::move(spec));
  auto fill = [&shared_spec](capnp::AnyPointer::Builder b) {
    ToProto(*shared_spec, b.initAs<proto::PushTaskRequest>().initSpec());
  };
  auto& client = ctx_.clients.Get(lease->worker_address);
  // A worker that can't be reached (it died before or between calls) fails over at once
  // instead of leaving calls queued in a reconnecting client.
  client.SetOnStateChange([this, key, weak = std::weak_ptr<Lease>(lease)](const Status& s) {
    auto lease = weak.lock();
    if (s.ok() || ctx_.stopping || !lease) return;
    OnWorkerLost(key, lease);
  });
  client.Call(proto::Method::PUSH_TASK, fill, Millis(0),
            [this, key, lease, shared_spec](const Status& s, capnp::AnyPointer::Reader r) {
              if (ctx_.stopping) return;
              lease->in_flight--;
              if (lease->in_flight == 0) lease->idle_since = Clock::now();
              if (s.ok()) {
                ctx_.store.Put(shared_spec->return_id,
                               FromProto(r.getAs<proto::PushTaskReply>().getValue()));
                Pump(key);
                return;
              }
              const bool worker_lost = s.code() == StatusCode::kUnavailable ||
                                       s.code() == StatusCode::kCancelled;
              if (!worker_lost) {
                ctx_.store.Put(shared_spec->return_id,
                               ErrorValue(ErrorKind::kSystem, s.message()));
                Pump(key);
                return;
              }
              OnWorkerLost(key, lease);
              auto& spec = *shared_spec;
              if (spec.max_retries < 0 || spec.attempt < spec.max_retries) {
                spec.attempt++;
                spdlog::info("retrying {} (attempt {}) after its worker died: {}",
                             spec.function_name, spec.attempt + 1, s.message());
                shapes_[key].queue.push_front(std::move(spec));
              } else {
                ctx_.store.Put(spec.return_id,
                               ErrorValue(ErrorKind::kSystem,
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
  auto fill = [&](capnp::AnyPointer::Builder b) {
    auto r = b.initAs<proto::ReturnLeaseRequest>();
    r.setLeaseId(lease->lease_id);
    r.setKillWorker(kill);
  };
  ctx_.clients.Get(lease->node_address)
      .Call(proto::Method::RETURN_LEASE, fill, Millis(10000),
            [](const Status&, capnp::AnyPointer::Reader) {});
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
