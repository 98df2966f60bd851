#include "node/node_daemon.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "common/node_info.h"
#include "rayd/api/placement_group.h"
#include "rayd/base/files.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::node {
namespace {
std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

WorkerPoolConfig PoolConfig(const NodeDaemonConfig& config) {
  WorkerPoolConfig pool;
  pool.session_dir = config.session_dir;
  pool.node_ip = config.node_ip;
  pool.gcs_address = config.gcs_address;
  pool.token = config.token;
  pool.max_idle_per_job = static_cast<size_t>(std::max<int64_t>(
      1, config.total.Get(scheduler::kCPU).units() / scheduler::FixedPoint::kScale));
  // Four starting workers per core, at least eight: a worker's start is mostly CPU (exec,
  // loading, its runtime's set-up), whatever the node's logical CPUs say. On 2 cores, 1,000
  // actors start as fast with 8 at a time as with all at once (5.8-6.0 s), and 25-35% slower
  // with 4; all at once, beside other work, the node missed its heartbeats.
  pool.max_starting =
      config.worker_max_starting > 0
          ? config.worker_max_starting
          : std::max<size_t>(8, 4 * std::max(1u, std::thread::hardware_concurrency()));
  pool.start_timeout = config.worker_start_timeout;
  pool.idle_timeout = config.worker_idle_timeout;
  return pool;
}
// A node's labels: those it was started with plus its own id under kNodeIdLabel, so that
// bundles and work can be pinned to it by label.
scheduler::Labels WithNodeIdLabel(scheduler::Labels labels, const NodeId& id) {
  labels[kNodeIdLabel] = id.Hex();
  return labels;
}
}  // namespace

NodeDaemon::NodeDaemon(EventLoop& loop, NodeDaemonConfig config)
    : loop_(loop),
      config_(std::move(config)),
      node_id_(NodeId::FromRandom()),
      start_time_ms_(NowUnixMs()),
      server_(loop, rpc::Options{config_.token, "node"}, dispatcher_),
      gcs_(loop, config_.gcs_address, rpc::Options{config_.token, "node"}, nullptr,
           rpc::RpcClient::Backoff{Millis(100), Millis(2000)}),
      pool_(loop, PoolConfig(config_), node_id_),
      lease_manager_(pool_, node_id_,
                     LeaseManagerConfig{.total = config_.total,
                                        .labels = WithNodeIdLabel(config_.labels, node_id_),
                                        .prestart_workers = config_.prestart_workers,
                                        .infeasible_timeout = config_.infeasible_timeout,
                                        .on_freed = [this] { ReportSoon(); }},
                     [this](auto done) { ListAliveNodes(gcs_, std::move(done)); }),
      heartbeat_timer_(loop),
      join_timer_(loop),
      retry_timer_(loop),
      drain_timer_(loop),
      report_timer_(loop) {
  dispatcher_.Handle<proto::Method::PING>([](const auto& c) { c.Reply(); });
  dispatcher_.Handle<proto::Method::GET_NODE_INFO>([this](const auto& c) {
    c.Reply([this](proto::NodeInfo::Builder b) { runtime::NodeInfoToProto(SelfInfo(), b); });
  });
  pool_.RegisterMethods(dispatcher_);
  lease_manager_.RegisterMethods(dispatcher_);
  app_metrics_.RegisterMethods(dispatcher_);
  pool_.SetOnExit([this](Worker& w, WorkerState previous) { OnWorkerExit(w, previous); });
}

// The pool's destructor kills and reaps the workers that are still alive. The server outlives
// the object service: it must not report closing connections to it.
NodeDaemon::~NodeDaemon() { server_.SetOnConnectionClosed(nullptr); }

void NodeDaemon::ListAliveNodes(rpc::RpcClient& gcs,
                                std::function<void(Result<std::vector<NodeInfo>>)> done) {
  // The reply may come while the daemon is being destroyed: touch nothing but `done`.
  gcs.Call<proto::Method::GET_ALL_NODES>(
      [](proto::GetAllNodesRequest::Builder r) { r.setOnlyAlive(true); }, Millis(2000),
      [done = std::move(done)](const Status& s, proto::GetAllNodesReply::Reader reply) {
        if (!s.ok()) return done(s);
        std::vector<NodeInfo> nodes;
        for (auto n : reply.getNodes()) {
          auto info = runtime::NodeInfoFromProto(n);
          if (info.ok()) nodes.push_back(std::move(*info));
        }
        done(std::move(nodes));
      });
}

void NodeDaemon::OnWorkerExit(Worker& worker, WorkerState previous) {
  lease_manager_.OnWorkerExit(worker);
  // The GCS hears of workers someone may depend on: leased ones, and registered ones that died
  // on their own (not idle workers this node retired).
  const bool report =
      previous == WorkerState::kLeased || (worker.registered && worker.kill_reason.empty());
  if (!report || shutting_down_) return;
  auto fill = [&](proto::WorkerFailedRequest::Builder r) {
    r.setWorkerId(worker.id.Hex());
    r.setNodeId(node_id_.Hex());
    r.setJobId(worker.job_id.Hex());
    r.setReason(worker.exit_reason);
  };
  gcs_.Call<proto::Method::WORKER_FAILED>(
      fill, Millis(10000), [id = worker.id.Hex()](const Status& s) {
        if (!s.ok()) spdlog::warn("reporting worker {} failed: {}", id, s.ToString());
      });
}

void NodeDaemon::Start(std::function<void(Status)> on_joined) {
  on_joined_ = std::move(on_joined);
  ObjectServiceConfig store;
  store.capacity = static_cast<size_t>(config_.total.Get(scheduler::kObjectStoreMemory).units() /
                                       scheduler::FixedPoint::kScale);
  store.session_dir = config_.session_dir;
  store.node_ip = config_.node_ip;
  store.token = config_.token;
  store.node_id = node_id_;
  if (store.capacity > 0) {  // a node may have no object store (object_store_memory 0)
    auto objects = ObjectService::Start(loop_, store);
    if (!objects.ok()) {
      return FinishJoin(objects.status().WithContext("starting the object store"));
    }
    objects_ = std::move(objects).value();
    objects_->RegisterMethods(dispatcher_);
    server_.SetOnConnectionClosed(
        [this](rpc::Connection& c, const Status&) { objects_->OnConnectionClosed(c); });
  }
  Status s = server_.Listen(config_.node_ip + ":0");
  if (s.ok()) s = server_.Listen("unix:" + config_.session_dir + "/node.sock");
  if (!s.ok()) return FinishJoin(s);
  address_ = server_.bound_addresses().front();
  if (objects_) objects_->set_node_address(address_);
  join_timer_.Start(config_.join_timeout, Millis(0), [this] {
    FinishJoin(Status::Unavailable("could not join the cluster at " + config_.gcs_address +
                                   " within " + std::to_string(config_.join_timeout.count()) +
                                   " ms: " + gcs_.last_error().message()));
  });
  gcs_.SetOnStateChange([this](const Status& st) { OnGcsStateChange(st); });
  gcs_.Connect();
}

void NodeDaemon::FinishJoin(const Status& status) {
  join_timer_.Stop();
  if (on_joined_) {
    auto fn = std::move(on_joined_);
    on_joined_ = nullptr;
    fn(status);
  }
}

void NodeDaemon::OnGcsStateChange(const Status& status) {
  if (status.ok()) {
    spdlog::info("connected to the GCS at {}", config_.gcs_address);
    Register();
    return;
  }
  if (status.code() == StatusCode::kPermissionDenied) {
    spdlog::error("the GCS refused this node: {}", status.message());
    FinishJoin(status);
    return;
  }
  if (registered_) spdlog::warn("GCS unreachable ({}); reconnecting", status.message());
}

NodeInfo NodeDaemon::SelfInfo() const {
  NodeInfo info;
  info.node_id = node_id_;
  info.address = address_;
  info.hostname = Hostname();
  info.ip = config_.node_ip;
  info.is_head = config_.is_head;
  info.total = config_.total;
  info.available = lease_manager_.available();
  info.labels = WithNodeIdLabel(config_.labels, node_id_);
  info.start_time_ms = start_time_ms_;
  info.drain_deadline_ms = drain_deadline_ms_;
  info.drain_reason = drain_reason_;
  info.pid = getpid();
  info.session_dir = config_.session_dir;
  if (objects_) {
    info.store_socket = objects_->store_socket();
    info.transfer_address = objects_->transfer_address();
    info.object_store_bytes = objects_->capacity();
  }
  return info;
}

void NodeDaemon::Register() {
  if (shutting_down_) return;
  // The incarnation this registers. A rejoin while it is under way starts a registration of its
  // own, under a new id: this one then stops (two would both register the newest id).
  const NodeId as = node_id_;
  // Learn the head's heartbeat period first, then register.
  gcs_.Call<proto::Method::GET_CLUSTER_INFO>(
      Millis(5000), [this, as](const Status& s, proto::ClusterInfo::Reader info) {
        if (as != node_id_) return;
        if (!s.ok()) {
          retry_timer_.Start(Millis(500), Millis(0), [this] { Register(); });
          return;
        }
        if (info.getHeartbeatPeriodMs() > 0) {
          config_.heartbeat_period = Millis(info.getHeartbeatPeriodMs());
        }
        auto fill = [this](proto::RegisterNodeRequest::Builder r) {
          runtime::NodeInfoToProto(SelfInfo(), r.initNode());
        };
        gcs_.Call<proto::Method::REGISTER_NODE>(fill, Millis(5000), [this, as](const Status& r) {
          if (as != node_id_) return;
          if (r.code() == StatusCode::kAlreadyExists) {
            RejoinAsNewNode(r.message());
            return;
          }
          if (!r.ok()) {
            spdlog::warn("registration failed: {}; retrying", r.ToString());
            retry_timer_.Start(Millis(500), Millis(0), [this] { Register(); });
            return;
          }
          registered_ = true;
          spdlog::info("registered as node {}", node_id_.Hex());
          heartbeat_timer_.Start(config_.heartbeat_period, config_.heartbeat_period,
                                 [this] { SendHeartbeat(); });
          FinishJoin(Status::Ok());
        });
      });
}

void NodeDaemon::ReportSoon() {
  if (!registered_ || shutting_down_ || report_timer_.active()) return;
  // A burst of frees (a gang's leases, a busy task stream) makes one report: at most one per
  // kMinReportGap beyond the heartbeats.
  const auto due = last_report_ + kMinReportGap;
  const auto now = Clock::now();
  const Millis delay = due > now ? std::chrono::ceil<Millis>(due - now) : Millis(0);
  report_timer_.Start(delay, Millis(0), [this] { SendHeartbeat(); });
}

void NodeDaemon::SendHeartbeat() {
  if (!gcs_.connected()) return;  // reconnecting; registration follows the reconnection
  last_report_ = Clock::now();
  auto fill = [this](proto::HeartbeatRequest::Builder hb) {
    hb.setNodeId(node_id_.Hex());
    runtime::FillResources(lease_manager_.available(),
                           [&](unsigned n) { return hb.initAvailable(n); });
    const auto infeasible = lease_manager_.InfeasibleDemands();
    runtime::DemandsToProto(infeasible,
                            hb.initInfeasible(static_cast<unsigned>(infeasible.size())));
    const auto queued = lease_manager_.QueuedDemands();
    runtime::DemandsToProto(queued, hb.initQueued(static_cast<unsigned>(queued.size())));
    if (objects_) hb.setPrimaryObjects(static_cast<uint32_t>(objects_->NumPrimary()));
  };
  lease_manager_.RecheckInfeasible();
  // A reply is about the incarnation that sent the heartbeat: one that comes after the node has
  // rejoined under a new id (a link cut leaves several in flight) says nothing about the new one,
  // and acting on its DEAD would end the new incarnation's work and rejoin once more.
  gcs_.Call<proto::Method::HEARTBEAT>(
      fill, config_.heartbeat_period,
      [this, sent_as = node_id_](const Status& s, proto::HeartbeatReply::Reader reply) {
        if (!s.ok() || sent_as != node_id_) return;
        switch (reply.getStatus()) {
          case proto::HeartbeatReply::Status::OK:
            NoteDrain(reply.getDrainDeadlineMs(), reply.getDrainReason());
            break;
          case proto::HeartbeatReply::Status::UNKNOWN:
            spdlog::warn("the GCS does not know node {}; registering again", node_id_.Hex());
            heartbeat_timer_.Stop();
            report_timer_.Stop();
            Register();
            break;
          case proto::HeartbeatReply::Status::DEAD:
            RejoinAsNewNode("the GCS declared node " + node_id_.Hex() + " dead");
            break;
        }
      });
}

void NodeDaemon::NoteDrain(int64_t deadline_ms, const std::string& reason) {
  if (deadline_ms == 0 || shutting_down_) return;
  if (deadline_ms != drain_deadline_ms_ || reason != drain_reason_) {
    drain_deadline_ms_ = deadline_ms;
    drain_reason_ = reason;
    lease_manager_.SetDraining(true);
    const std::string path = DrainNoticePath(config_.session_dir, node_id_.Hex());
    if (Status written = WriteFileAtomically(path, DrainNoticeJson({deadline_ms, reason}), false);
        !written.ok()) {
      spdlog::error("cannot write the drain notice {}: {}", path, written.ToString());
    }
    const int64_t left_ms = std::max<int64_t>(0, deadline_ms - NowUnixMs());
    spdlog::warn("this node is draining ({}): it takes no new work and leaves in {} ms",
                 reason.empty() ? "no reason given" : reason, left_ms);
    drain_timer_.Start(Millis(left_ms), Millis(0), [this] { Drained("its deadline came"); });
  }
  // Checked at each heartbeat: gone as soon as nothing runs here any more.
  if (lease_manager_.num_leases() == 0 && lease_manager_.num_bundles() == 0) {
    Drained("nothing runs on it any more");
  }
}

void NodeDaemon::Drained(const std::string& why) {
  if (shutting_down_ || drain_deadline_ms_ == 0) return;
  drain_timer_.Stop();
  spdlog::warn("drained: {}; leaving the cluster", why);
  const std::string reason =
      "drained" + (drain_reason_.empty() ? std::string() : " (" + drain_reason_ + ")");
  if (on_drained_) {
    on_drained_(reason);
  } else {
    Shutdown(reason, [] {});
  }
}

void NodeDaemon::RejoinAsNewNode(const std::string& why) {
  // A drained node that lost the cluster does not come back as a new one: it was leaving.
  if (drain_deadline_ms_ > 0) return Drained(why);
  // The cluster has given up on this incarnation: its actors restarted and its bundles were
  // re-reserved elsewhere, so whatever still runs here would run twice. End it, then join as a
  // new, empty node.
  const std::string reason = "its node was declared dead (" + why + ")";
  heartbeat_timer_.Stop();
  report_timer_.Stop();
  registered_ = false;
  pool_.KillAll(reason);
  lease_manager_.Abandon(Status::Unavailable(reason));
  node_id_ = NodeId::FromRandom();
  spdlog::warn("{}: ended its workers, leases and bundles; rejoining as node {}", why,
               node_id_.Hex());
  Register();
}

void NodeDaemon::Shutdown(const std::string& reason, std::function<void()> done) {
  shutting_down_ = true;
  drain_timer_.Stop();
  if (drain_deadline_ms_ > 0) {
    std::error_code ignored;
    std::filesystem::remove(DrainNoticePath(config_.session_dir, node_id_.Hex()), ignored);
  }
  pool_.KillAll("the node is shutting down");
  lease_manager_.CancelQueued(Status::Unavailable("node " + node_id_.Hex() + " is shutting down"));
  heartbeat_timer_.Stop();
  report_timer_.Stop();
  retry_timer_.Stop();
  server_.Close();
  if (!registered_ || !gcs_.connected()) return done();
  auto fill = [this, reason](proto::UnregisterNodeRequest::Builder r) {
    r.setNodeId(node_id_.Hex());
    r.setReason(reason);
  };
  gcs_.Call<proto::Method::UNREGISTER_NODE>(fill, Millis(2000), [done](const Status&) { done(); });
}

}  // namespace rayd::node
