#include "core/core_worker.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "core/metric_registry.h"
#include "common/node_info.h"
#include "rayd/api/errors.h"
#include "rayd/protocol/core.capnp.h"

namespace rayd::core {

using internal::ErrorKind;

namespace {

struct PlacementGroupIdTag {};
using PlacementGroupId = UniqueId<PlacementGroupIdTag>;

// Placement-group calls other than waiting for one.
constexpr Millis kGcsCallTimeout{15000};
// How often a process's application metrics go to its node (when they changed).
constexpr Millis kMetricsReportPeriod{1000};

}  // namespace

CoreWorker::CoreWorker(CoreWorkerOptions options)
    : options_(std::move(options)),
      store_(loop_),
      clients_(loop_, rpc::Options{options_.token, options_.is_driver ? "driver" : "worker"}) {}

Result<std::unique_ptr<CoreWorker>> CoreWorker::Start(CoreWorkerOptions options) {
  std::unique_ptr<CoreWorker> cw(new CoreWorker(std::move(options)));
  RAYD_RETURN_IF_ERROR(cw->Connect());
  return cw;
}

Status CoreWorker::Connect() {
  const std::string role = options_.is_driver ? "driver" : "worker";
  server_ = std::make_unique<rpc::RpcServer>(loop_, rpc::Options{options_.token, role},
                                             dispatcher_);
  RAYD_RETURN_IF_ERROR(server_->Listen(options_.node_ip + ":0"));
  address_ = server_->bound_addresses().front();
  objects_ = std::make_unique<ObjectManager>(store_, clients_, address_);
  objects_->RegisterMethods(dispatcher_);
  InstallStoreHooks();
  executor_ = std::make_unique<Executor>(
      loop_, *objects_,
      ExecutorHooks{[this](const ObjectId& id, const std::string& owner) {
                      return FetchArg(id, owner);
                    },
                    [this](const ObjectId& id, ObjectValue v, const std::string& owner) {
                      return StoreResult(id, std::move(v), owner);
                    },
                    [] { BeginTaskBorrows(); }, [this] { RegisterKeptBorrows(); },
                    [this](const ActorId& actor) {
                      // Ends this actor for good; the GCS has its worker killed.
                      if (!gcs_) return;
                      auto fill = [&](proto::KillActorRequest::Builder r) {
                        r.setActorId(actor.Hex());
                        r.setNoRestart(true);
                      };
                      gcs_->Call<proto::Method::KILL_ACTOR>(fill, Millis(15000),
                                                            [](const Status&) {});
                    }});
  executor_->RegisterMethods(dispatcher_);
  gcs_ = std::make_unique<rpc::RpcClient>(loop_, options_.gcs_address, rpc::Options{options_.token, role},
                                          nullptr, rpc::ReconnectBackoff{Millis(50), Millis(1000)});
  io_thread_ = std::thread([this] { loop_.Run(); });
  loop_.Post([this] { gcs_->Connect(); });

  RAYD_RETURN_IF_ERROR(options_.is_driver ? ChooseNode() : LearnNodeId());
  submit_ctx_ = std::unique_ptr<SubmitterContext>(
      new SubmitterContext{loop_, store_, clients_, *objects_, *gcs_, options_.node_address,
                           options_.job_id, options_.launch_argv, options_.launch_env});
  RAYD_RETURN_IF_ERROR(RunOnLoop([this](auto done) {
    warner_ = std::make_unique<InfeasibleWarner>(*submit_ctx_);
    submit_ctx_->warner = warner_.get();
    tasks_ = std::make_unique<TaskSubmitter>(*submit_ctx_);
    actors_ = std::make_unique<ActorSubmitter>(*submit_ctx_, *gcs_);
    metrics_timer_ = std::make_unique<Timer>(loop_);
    metrics_timer_->Start(kMetricsReportPeriod, kMetricsReportPeriod, [this] { ReportMetrics(); });
    done(Status::Ok());
  }));
  if (options_.is_driver) return RegisterDriver();
  // A worker may get its first task the moment it registers: the API must work by then.
  internal::SetCurrentRuntime(this);
  Status s = RegisterWorker();
  if (!s.ok()) internal::SetCurrentRuntime(nullptr);
  return s;
}

Status CoreWorker::RunOnLoop(const std::function<void(std::function<void(Status)>)>& fn,
                             Millis timeout) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  loop_.Post([fn, promise] {
    auto once = std::make_shared<bool>(false);
    fn([promise, once](Status s) {
      if (*once) return;
      *once = true;
      promise->set_value(std::move(s));
    });
  });
  if (timeout.count() < 0) {
    future.wait();
  } else if (future.wait_for(timeout) != std::future_status::ready) {
    return Status::DeadlineExceeded("no answer from the cluster within " +
                                    std::to_string(timeout.count()) + " ms");
  }
  return future.get();
}

namespace {
// The IPv4 addresses of this host's interfaces (its network namespace's, in a container).
std::set<std::string> LocalAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) out.insert(text);
  }
  freeifaddrs(list);
  return out;
}
}  // namespace

Status CoreWorker::ChooseNode() {
  if (!options_.node_address.empty()) return LearnNodeId();
  // A driver uses the node daemon on its own host if there is one, else the head's. Its own
  // host's node is the one whose IP is an address of this host (as Ray matches the node IP),
  // preferring one with this hostname too; failing that one with this hostname.
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  struct Found {
    std::string by_ip_and_name, by_ip, by_name, head;
  };
  auto found = std::make_shared<Found>();
  Status s = RunOnLoop([this, found, host = std::string(host)](auto done) {
    auto fill = [](proto::GetAllNodesRequest::Builder r) { r.setOnlyAlive(true); };
    gcs_->Call<proto::Method::GET_ALL_NODES>(
        fill, Millis(15000),
        [found, host, done](const Status& st, proto::GetAllNodesReply::Reader r) {
          if (!st.ok()) return done(st);
          const std::set<std::string> local = LocalAddresses();
          auto first = [](std::string& slot, const char* address) {
            if (slot.empty()) slot = address;
          };
          for (auto n : r.getNodes()) {
            const bool same_ip = local.count(n.getIp().cStr()) > 0;
            const bool same_name = n.getHostname() == host;
            if (n.getIsHead()) first(found->head, n.getAddress().cStr());
            if (same_ip && same_name) first(found->by_ip_and_name, n.getAddress().cStr());
            if (same_ip) first(found->by_ip, n.getAddress().cStr());
            if (same_name) first(found->by_name, n.getAddress().cStr());
          }
          done(Status::Ok());
        });
  });
  if (!s.ok()) {
    return Status::Unavailable("cannot reach the cluster at " + options_.gcs_address + ": " +
                               s.message());
  }
  for (const std::string* choice :
       {&found->by_ip_and_name, &found->by_ip, &found->by_name, &found->head}) {
    if (!choice->empty()) {
      options_.node_address = *choice;
      break;
    }
  }
  if (options_.node_address.empty()) {
    return Status::Unavailable("the cluster at " + options_.gcs_address + " has no alive node");
  }
  return LearnNodeId();
}

Status CoreWorker::LearnNodeId() {
  auto node = std::make_shared<Result<NodeInfo>>(Status::Internal("no answer"));
  Status s = RunOnLoop([this, node](auto done) {
    clients_.Get(options_.node_address)
        .Call<proto::Method::GET_NODE_INFO>(
            Millis(15000), [node, done](const Status& st, proto::NodeInfo::Reader r) {
              if (st.ok()) *node = runtime::NodeInfoFromProto(r);
              done(st.ok() ? node->status() : st);
            });
  });
  if (!s.ok()) {
    return Status::Unavailable("cannot reach the node daemon at " + options_.node_address + ": " +
                               s.message());
  }
  node_id_ = (*node)->node_id.Hex();
  ConnectStore(**node);
  return Status::Ok();
}

void CoreWorker::ConnectStore(const NodeInfo& node) {
  auto client = StoreClient::Connect(
      loop_, clients_,
      StoreClient::NodeStore{node.node_id.Hex(), options_.node_address, node.store_socket,
                             node.transfer_address});
  if (!client.ok()) {
    spdlog::info("no shared-memory object store on this host ({}); large values stay inline",
                 client.status().message());
    return;
  }
  store_client_ = std::move(client).value();
}

void CoreWorker::InstallStoreHooks() {
  store_.SetHooks(
      [this](const ObjectId& id, bool in_store) {
        ReleaseArgPins(id);
        if (!in_store) ForgetLineage(id);  // only stored results can be lost
      },
      [this](const ObjectId& id, const ObjectValue& marker) {
        ForgetLineage(id);
        // Only the owner frees; a borrower just forgets its marker.
        if (store_client_ && objects_->OwnerOf(id) == address_) {
          store_client_->Delete(id, marker.locations);
        }
      },
      [this](const ObjectId& id) { OnUnreferenced(id); });
  RegisterBorrowerMethods();
  dispatcher_.Handle<proto::Method::ADD_OBJECT_LOCATION>([this](const auto& call) {
    auto req = call.params();
    auto id = ObjectId::FromHex(req.getObjectId().cStr());
    if (!id.ok()) return call.Fail(id.status());
    auto location = FromProto(req.getLocation());
    if (!store_.AddLocation(*id, location) && store_client_) {
      // Freed meanwhile: the new copy is not wanted either.
      store_client_->Delete(*id, {location});
    }
    call.Reply();
  });
}

Status CoreWorker::RegisterDriver() {
  return RunOnLoop([this](auto done) {
    auto fill = [this](proto::AddJobRequest::Builder r) {
      auto job = r.initJob();
      job.setJobId(options_.job_id.Hex());
      job.setDriverPid(getpid());
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      job.setDriverHost(host);
      job.setEntrypoint(options_.entrypoint);
    };
    gcs_->Call<proto::Method::ADD_JOB>(fill, Millis(15000), [done](const Status& s) {
      done(s.WithContext("registering the job"));
    });
  });
}

Status CoreWorker::RegisterWorker() {
  return RunOnLoop([this](auto done) {
    auto& node = clients_.Get(options_.node_address);
    node.SetOnStateChange([this](const Status& s) {
      // The node daemon owns its workers: when it goes, so do we.
      if (!s.ok() && !shut_down_ && !disconnect_signalled_) {
        spdlog::warn("lost the node daemon ({}); exiting", s.message());
        disconnect_signalled_ = true;
        disconnected_.set_value();
      }
    });
    auto fill = [this](proto::RegisterWorkerRequest::Builder r) {
      r.setWorkerId(options_.worker_id.Hex());
      r.setAddress(address_);
      r.setPid(getpid());
    };
    node.Call<proto::Method::REGISTER_WORKER>(
        fill, Millis(15000), [this, done](const Status& s, proto::RegisterWorkerReply::Reader r) {
          if (s.ok()) node_id_ = r.getNodeId();
          done(s.WithContext("registering with the node daemon"));
        });
  });
}

void CoreWorker::WaitForDisconnect() { disconnected_.get_future().wait(); }

void CoreWorker::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (options_.is_driver) {
    RunOnLoop(
        [this](auto done) {
          if (tasks_) tasks_->ReturnAllLeases();
          auto fill = [this](proto::JobDriverRequest::Builder r) {
            r.setJobId(options_.job_id.Hex());
          };
          gcs_->Call<proto::Method::JOB_DRIVER_EXITED>(fill, Millis(5000),
                                                       [done](const Status& s) { done(s); });
        },
        Millis(6000))
        .IgnoreError();
  }
  // First silence the submitters and drop every connection (queued calls fail with Cancelled
  // and are ignored); then, after the loop has run everything posted meanwhile, destroy them.
  RunOnLoop([this](auto done) {
    if (submit_ctx_) submit_ctx_->stopping = true;
    clients_.Clear();
    gcs_.reset();
    server_->Close();
    done(Status::Ok());
  }).IgnoreError();
  RunOnLoop([this](auto done) {
    metrics_timer_.reset();
    actors_.reset();
    tasks_.reset();
    if (submit_ctx_) submit_ctx_->warner = nullptr;
    warner_.reset();
    done(Status::Ok());
  }).IgnoreError();
  loop_.Stop();
  if (io_thread_.joinable()) io_thread_.join();
  executor_.reset();
}

CoreWorker::~CoreWorker() { Shutdown(); }

TaskSpec CoreWorker::NewSpec(const std::string& function_name,
                             std::vector<internal::TaskArg> args) {
  TaskSpec spec;
  spec.task_id = TaskId::FromRandom();
  spec.job_id = options_.job_id;
  spec.function_name = function_name;
  spec.args = std::move(args);
  spec.return_id = ObjectId::FromRandom();
  spec.caller_address = address_;
  return spec;
}

template <proto::Method M>
Status CoreWorker::CallGcs(const std::function<void(typename rpc::RequestOf<M>::Builder)>& fill,
                           Millis timeout,
                           std::function<void(typename rpc::ReplyOf<M>::Reader)> read) {
  // The call's own deadline answers first; the wait only guards against a stalled loop.
  const Millis wait = timeout.count() > 0 ? timeout + Millis(5000) : Millis(-1);
  return RunOnLoop(
      [this, fill, timeout, read = std::move(read)](auto done) {
        if (!gcs_) return done(Status::Cancelled("rayd is shutting down"));
        auto on_reply = [read, done](const Status& s, typename rpc::ReplyOf<M>::Reader reply) {
          if (s.ok() && read) read(reply);
          done(s);
        };
        if (fill) {
          gcs_->Call<M>(fill, timeout, std::move(on_reply));
        } else {
          gcs_->Call<M>(timeout, std::move(on_reply));
        }
      },
      wait);
}

ObjectId CoreWorker::Put(std::string value) {
  if (store_client_ && value.size() >= internal::kMaxInlineBytes) {
    return PutSerialized(value.size(), [&](uint8_t* dest) {
      std::memcpy(dest, value.data(), value.size());
    });
  }
  ObjectId id = ObjectId::FromRandom();
  internal::ObjectValue v;
  v.data = std::move(value);
  store_.Put(id, std::move(v));
  return id;
}

ObjectId CoreWorker::PutSerialized(size_t size, const std::function<void(uint8_t*)>& write) {
  if (!store_client_ || size < internal::kMaxInlineBytes) {
    return internal::Runtime::PutSerialized(size, write);
  }
  ObjectId id = ObjectId::FromRandom();
  auto marker = store_client_->PutInPlace(id, size, address_, /*caller_is_owner=*/true, write);
  if (!marker.ok()) {
    if (marker.status().code() == StatusCode::kResourceExhausted) {
      throw ObjectStoreFullError("Put: " + marker.status().message());
    }
    throw RaydError("Put: " + marker.status().message());
  }
  store_.Put(id, std::move(marker).value());
  return id;
}

void CoreWorker::PromoteLargeArgs(std::vector<internal::TaskArg>& args) {
  if (!store_client_) return;
  for (auto& a : args) {
    if (a.kind != internal::TaskArg::Kind::kValue || a.value.size() < internal::kMaxInlineBytes) {
      continue;
    }
    a.ref = Put(std::move(a.value));
    a.value.clear();
    a.kind = internal::TaskArg::Kind::kRef;
    a.owner_address = address_;
  }
}

void CoreWorker::PinArgs(const TaskSpec& spec) {
  std::vector<ObjectId> refs;
  for (const auto& a : spec.args) {
    if (a.kind != internal::TaskArg::Kind::kValue) refs.push_back(a.ref);
  }
  if (refs.empty()) return;
  for (const auto& id : refs) store_.AddRef(id);
  std::lock_guard lock(pins_mu_);
  arg_pins_[spec.return_id] = std::move(refs);
}

void CoreWorker::RecordLineage(const TaskSpec& spec) {
  if (spec.max_retries == 0 || !store_client_) return;
  for (const auto& a : spec.args) {
    if (a.kind != internal::TaskArg::Kind::kValue) return;  // refs may be gone by then
  }
  std::lock_guard lock(pins_mu_);
  lineage_[spec.return_id] = Lineage{spec, spec.max_retries < 0 ? INT32_MAX : spec.max_retries};
}

void CoreWorker::ForgetLineage(const ObjectId& return_id) {
  std::lock_guard lock(pins_mu_);
  lineage_.erase(return_id);
}

bool CoreWorker::Reconstruct(const ObjectId& id) {
  TaskSpec spec;
  {
    std::lock_guard lock(pins_mu_);
    auto it = lineage_.find(id);
    if (it == lineage_.end() || it->second.attempts_left <= 0) return false;
    --it->second.attempts_left;
    spec = it->second.spec;
    spec.attempt = ++it->second.spec.attempt;
  }
  spdlog::warn("object {} was lost; running its task {} again (attempt {})", id.Hex(),
               spec.function_name, spec.attempt);
  store_.Reset(id);
  loop_.Post([this, spec = std::move(spec)]() mutable {
    if (tasks_) tasks_->Submit(std::move(spec));
  });
  return true;
}

void CoreWorker::ReleaseArgPins(const ObjectId& return_id) {
  std::vector<ObjectId> refs;
  {
    std::lock_guard lock(pins_mu_);
    auto it = arg_pins_.find(return_id);
    if (it == arg_pins_.end()) return;
    refs = std::move(it->second);
    arg_pins_.erase(it);
  }
  for (const auto& id : refs) store_.RemoveRef(id);
}

internal::ObjectValue CoreWorker::ResolveStored(const ObjectId& id,
                                                const internal::ObjectValue& marker) {
  if (!store_client_) {
    return ErrorValue(ErrorKind::kSystem, "object " + id.Hex() +
                                              " lives in a node's shared memory, and this "
                                              "process has no node daemon on its host");
  }
  auto bytes = store_client_->Get(id, marker, objects_->OwnerOf(id));
  if (!bytes.ok()) {
    const auto code = bytes.status().code();
    const bool lost = code == StatusCode::kNotFound || code == StatusCode::kUnavailable;
    if (lost) return ErrorValue(ErrorKind::kObjectLost, bytes.status().message());
    // No room to read it back into (a spilled object while the store is full and spilling
    // fails): ObjectStoreFullError, and the object stays on disk for a later Get.
    return ErrorValue(
        code == StatusCode::kResourceExhausted ? ErrorKind::kObjectStoreFull : ErrorKind::kSystem,
        "object " + id.Hex() + ": " + bytes.status().message());
  }
  internal::ObjectValue v;
  v.shared = std::move(bytes).value();
  return v;
}

void CoreWorker::ResolveStored(const std::vector<ObjectId>& ids,
                               std::vector<internal::ObjectValue>& values) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (values[i].in_store && values[i].error == ErrorKind::kNone) {
      values[i] = ResolveStored(ids[i], values[i]);
    }
  }
}

internal::ObjectValue CoreWorker::FetchArg(const ObjectId& id, const std::string& owner) {
  objects_->RegisterBorrowed(id, owner);
  store_.AddRef(id);
  internal::ObjectValue v = Get({id}, std::chrono::milliseconds(-1)).front();
  store_.RemoveRef(id);
  return v;
}

internal::ObjectValue CoreWorker::StoreResult(const ObjectId& id, internal::ObjectValue value,
                                              const std::string& owner) {
  if (!store_client_ || value.error != ErrorKind::kNone ||
      value.data.size() < internal::kMaxInlineBytes) {
    return value;
  }
  auto marker = store_client_->PutInPlace(id, value.data.size(), owner,
                                          /*caller_is_owner=*/false, [&](uint8_t* dest) {
    std::memcpy(dest, value.data.data(), value.data.size());
  });
  if (!marker.ok()) {
    const bool full = marker.status().code() == StatusCode::kResourceExhausted;
    return ErrorValue(full ? ErrorKind::kObjectStoreFull : ErrorKind::kSystem,
                      "the task's result could not be stored: " + marker.status().message());
  }
  return std::move(marker).value();
}

ObjectId CoreWorker::SubmitTask(const std::string& function_name,
                                std::vector<internal::TaskArg> args,
                                const internal::TaskOptions& options) {
  PromoteLargeArgs(args);
  TaskSpec spec = NewSpec(function_name, std::move(args));
  PinArgs(spec);
  spec.resources = ToResourceSet(options.resources.empty()
                                     ? std::map<std::string, double>{{"CPU", 1.0}}
                                     : options.resources);
  spec.max_retries = options.max_retries;
  spec.name = options.name;
  spec.scheduling = options.scheduling;
  spec.env = options.env;
  RecordLineage(spec);
  const ObjectId id = spec.return_id;
  loop_.Post([this, spec = std::move(spec)]() mutable {
    if (!tasks_) {
      return store_.Put(spec.return_id, ErrorValue(ErrorKind::kSystem, "rayd is shutting down"));
    }
    std::vector<internal::TaskArg> args = std::move(spec.args);
    objects_->ResolveArgs(std::move(args),
                          [this, spec = std::move(spec)](std::vector<internal::TaskArg> resolved,
                                                         const ObjectValue* error) mutable {
                            if (error) return store_.Put(spec.return_id, *error);
                            spec.args = std::move(resolved);
                            if (tasks_) tasks_->Submit(std::move(spec));
                          });
  });
  return id;
}

Result<ActorId> CoreWorker::CreateActor(const std::string& factory_name,
                                        std::vector<internal::TaskArg> args,
                                        const internal::ActorOptions& options) {
  TaskSpec spec = NewSpec(factory_name, std::move(args));
  spec.kind = TaskSpec::Kind::ACTOR_CREATION;
  spec.actor_id = ActorId::FromRandom();
  spec.resources = ToResourceSet(options.resources);
  spec.max_concurrency = std::max(1, options.max_concurrency);
  spec.scheduling = options.scheduling;  // the GCS places the actor by it
  const ActorId id = spec.actor_id;
  // Shared with the loop: the wait below may give up before the loop is done with them.
  struct Request {
    TaskSpec spec;
    internal::ActorOptions options;
    std::string ray_namespace;
  };
  auto req = std::make_shared<Request>(Request{std::move(spec), options,
                                               options.ray_namespace.empty()
                                                   ? options_.ray_namespace
                                                   : options.ray_namespace});
  Status s = RunOnLoop([this, req, id](auto done) {
    if (!gcs_ || !actors_) return done(Status::Cancelled("rayd is shutting down"));
    actors_->SetMaxTaskRetries(id, req->options.max_task_retries);
    std::vector<internal::TaskArg> args = std::move(req->spec.args);
    objects_->ResolveArgs(std::move(args), [this, req, done](
                                               std::vector<internal::TaskArg> resolved,
                                               const ObjectValue* error) {
      if (error) return done(Status::InvalidArgument(error->error_message));
      req->spec.args = std::move(resolved);
      auto fill = [&](proto::CreateActorRequest::Builder r) {
        ToProto(req->spec, r.initSpec());
        r.setName(req->options.name);
        r.setNamespace(req->ray_namespace);
        r.setMaxRestarts(req->options.max_restarts);
        r.setDetached(req->options.detached.value_or(options_.default_detached));
        FillLaunch(*submit_ctx_, req->options.env, r.initLaunch());
      };
      if (warner_ && req->spec.scheduling.placement_group_id.empty()) {
        warner_->Watch("actor", "actor " + req->spec.function_name, req->spec.resources);
      }
      gcs_->Call<proto::Method::CREATE_ACTOR>(fill, Millis(30000),
                                              [done](const Status& st) { done(st); });
    });
  }, Millis(120000));
  if (!s.ok()) return s;
  return id;
}

ObjectId CoreWorker::SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                     std::vector<internal::TaskArg> args) {
  PromoteLargeArgs(args);
  TaskSpec spec = NewSpec(method_name, std::move(args));
  PinArgs(spec);
  spec.kind = TaskSpec::Kind::ACTOR_TASK;
  spec.actor_id = actor;
  const ObjectId id = spec.return_id;
  loop_.Post([this, spec = std::move(spec)]() mutable {
    if (!actors_) {
      return store_.Put(spec.return_id, ErrorValue(ErrorKind::kSystem, "rayd is shutting down"));
    }
    actors_->Submit(std::move(spec));
  });
  return id;
}

void CoreWorker::FetchMissing(const std::vector<ObjectId>& ids) {
  for (const auto& id : ids) {
    if (store_.Contains(id)) continue;
    std::string owner = objects_->OwnerOf(id);
    if (owner == address_) continue;
    loop_.Post([this, id, owner] {
      objects_->Resolve(id, owner, [](const ObjectValue&) {});
    });
  }
}

// While a worker's task waits for objects that are not here yet, its lease's CPUs go back to
// the node (SET_WORKER_BLOCKED), so that the tasks it waits for can be leased even on a full
// node: what makes nested tasks deadlock-free. Only normal tasks lend: an actor's reservation
// is its own.
class CoreWorker::BlockedScope {
 public:
  BlockedScope(CoreWorker& cw, const std::vector<ObjectId>& ids) : cw_(cw) {
    if (cw_.options_.is_driver || !Executor::InNormalTask()) return;
    if (std::all_of(ids.begin(), ids.end(), [&](const ObjectId& id) {
          return cw_.store_.Contains(id);
        })) {
      return;
    }
    active_ = true;
    cw_.SetBlocked(true);
  }
  ~BlockedScope() {
    if (active_) cw_.SetBlocked(false);
  }
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;

 private:
  CoreWorker& cw_;
  bool active_ = false;
};

void CoreWorker::SetBlocked(bool blocked) {
  loop_.Post([this, blocked] {
    if (shut_down_) return;
    auto fill = [&](proto::SetWorkerBlockedRequest::Builder r) {
      r.setWorkerId(options_.worker_id.Hex());
      r.setBlocked(blocked);
    };
    clients_.Get(options_.node_address)
        .Call<proto::Method::SET_WORKER_BLOCKED>(fill, Millis(10000), [](const Status&) {});
  });
}

std::vector<internal::ObjectValue> CoreWorker::Get(const std::vector<ObjectId>& ids,
                                                   std::chrono::milliseconds timeout) {
  BlockedScope blocked(*this, ids);
  FetchMissing(ids);
  const auto deadline =
      timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
  auto found = store_.Wait(ids, ids.size(), deadline);
  std::vector<internal::ObjectValue> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (found[i]) {
      out.push_back(std::move(*found[i]));
    } else {
      out.push_back(ErrorValue(ErrorKind::kTimeout,
                               "object " + ids[i].Hex() + " was not ready within " +
                                   std::to_string(timeout.count()) + " ms"));
    }
  }
  ResolveStored(ids, out);
  for (size_t i = 0; i < ids.size(); ++i) {
    // A lost result that its task can make again: wait for the new one.
    while (out[i].error == ErrorKind::kObjectLost && Reconstruct(ids[i])) {
      auto again = store_.Wait({ids[i]}, 1, deadline);
      if (!again[0]) {
        out[i] = ErrorValue(ErrorKind::kTimeout, "object " + ids[i].Hex() +
                                                     " was being reconstructed when the time ran "
                                                     "out");
        break;
      }
      out[i] = std::move(*again[0]);
      if (out[i].in_store && out[i].error == ErrorKind::kNone) {
        out[i] = ResolveStored(ids[i], out[i]);
      }
    }
  }
  return out;
}

void CoreWorker::WhenReady(const ObjectId& id, std::function<void()> ready) {
  store_.WhenReady(id, [ready = std::move(ready)](const internal::ObjectValue&) { ready(); });
}

internal::WaitOutcome CoreWorker::Wait(const std::vector<ObjectId>& ids, size_t num_returns,
                                       std::chrono::milliseconds timeout) {
  std::optional<BlockedScope> blocked;
  if (timeout.count() != 0) blocked.emplace(*this, ids);
  FetchMissing(ids);
  const auto deadline =
      timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
  auto found = store_.Wait(ids, std::min(num_returns, ids.size()), deadline);
  internal::WaitOutcome outcome;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (found[i] && outcome.ready.size() < num_returns) {
      outcome.ready.push_back(i);
    } else {
      outcome.not_ready.push_back(i);
    }
  }
  return outcome;
}

std::optional<ActorId> CoreWorker::GetNamedActor(const std::string& name,
                                                 const std::string& ray_namespace) {
  auto result = std::make_shared<std::optional<ActorId>>();
  const std::string ns = ray_namespace.empty() ? options_.ray_namespace : ray_namespace;
  Status s = RunOnLoop([this, result, name, ns](auto done) {
    if (!gcs_ || !actors_) return done(Status::Cancelled("rayd is shutting down"));
    auto fill = [&](proto::GetActorRequest::Builder r) {
      r.setName(name);
      r.setNamespace(ns);
    };
    gcs_->Call<proto::Method::GET_ACTOR>(
        fill, Millis(15000), [result, done](const Status& st, proto::GetActorReply::Reader reply) {
          if (st.ok() && reply.getFound() &&
              reply.getActor().getState() != proto::ActorState::DEAD) {
            auto id = ActorId::FromHex(reply.getActor().getActorId().cStr());
            if (id.ok()) *result = *id;
          }
          done(st);
        });
  });
  if (!s.ok()) spdlog::warn("GetActor({}): {}", name, s.ToString());
  return *result;
}

Status CoreWorker::KillActor(const ActorId& actor, bool no_restart) {
  return RunOnLoop([this, actor, no_restart](auto done) {
    if (!gcs_ || !actors_) return done(Status::Cancelled("rayd is shutting down"));
    if (no_restart && actors_) actors_->MarkDead(actor, "the actor was killed by its handle");
    auto fill = [&](proto::KillActorRequest::Builder r) {
      r.setActorId(actor.Hex());
      r.setNoRestart(no_restart);
    };
    gcs_->Call<proto::Method::KILL_ACTOR>(fill, Millis(15000),
                                          [done](const Status& st) { done(st); });
  });
}

void CoreWorker::AddLocalRef(const ObjectId& id) { store_.AddRef(id); }
void CoreWorker::RemoveLocalRef(const ObjectId& id) { store_.RemoveRef(id); }
std::string CoreWorker::OwnerAddress(const ObjectId& id) { return objects_->OwnerOf(id); }
namespace {
// Refs received by the task running on this thread (executor threads, during a task).
thread_local bool t_in_task = false;
thread_local std::vector<std::pair<ObjectId, std::string>> t_received_refs;
}  // namespace

void CoreWorker::BeginTaskBorrows() {
  t_in_task = true;
  t_received_refs.clear();
}

void CoreWorker::RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) {
  objects_->RegisterBorrowed(id, owner_address);
  if (t_in_task && owner_address != address_) t_received_refs.emplace_back(id, owner_address);
}

void CoreWorker::RegisterKeptBorrows() {
  t_in_task = false;
  std::vector<std::pair<ObjectId, std::string>> received;
  received.swap(t_received_refs);
  std::map<std::string, std::vector<ObjectId>> by_owner;
  {
    std::lock_guard lock(pins_mu_);
    for (const auto& [id, owner] : received) {
      if (owner.empty() || store_.RefCount(id) == 0) continue;  // not kept
      if (registered_borrows_.emplace(id, owner).second) by_owner[owner].push_back(id);
    }
  }
  for (const auto& [owner, ids] : by_owner) {
    Status s = RunOnLoop(
        [this, owner = owner, ids = ids](auto done) {
          auto fill = [&](proto::BorrowerRequest::Builder r) {
            auto list = r.initObjectIds(static_cast<unsigned>(ids.size()));
            for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i].Hex());
            r.setBorrower(address_);
          };
          clients_.Get(owner).Call<proto::Method::ADD_BORROWER>(
              fill, Millis(10000), [done](const Status& st) { done(st); });
        },
        Millis(11000));
    if (!s.ok()) spdlog::warn("could not register as a borrower with {}: {}", owner, s.message());
  }
}

// Any thread: a ref count here reached zero. Cheap unless the id is a registered borrow.
void CoreWorker::OnUnreferenced(const ObjectId& id) {
  std::string owner;
  {
    std::lock_guard lock(pins_mu_);
    auto it = registered_borrows_.find(id);
    if (it == registered_borrows_.end() || store_.RefCount(id) > 0) return;
    owner = it->second;
    registered_borrows_.erase(it);
  }
  loop_.Post([this, id, owner] {
    auto fill = [&](proto::BorrowerRequest::Builder r) {
      r.initObjectIds(1).set(0, id.Hex());
      r.setBorrower(address_);
    };
    clients_.Get(owner).Call<proto::Method::REMOVE_BORROWER>(fill, Millis(10000),
                                                             [](const Status&) {});
  });
}

void CoreWorker::RegisterBorrowerMethods() {
  // Each borrower holds one reference on the owner's entry until it is done.
  dispatcher_.Handle<proto::Method::ADD_BORROWER>([this](const auto& call) {
    auto req = call.params();
    const std::string borrower = req.getBorrower();
    for (auto hex : req.getObjectIds()) {
      auto id = ObjectId::FromHex(hex.cStr());
      if (!id.ok() || !store_.Known(*id)) continue;
      if (borrowers_[*id].insert(borrower).second) store_.AddRef(*id);
    }
    call.Reply();
  });
  dispatcher_.Handle<proto::Method::REMOVE_BORROWER>([this](const auto& call) {
    auto req = call.params();
    const std::string borrower = req.getBorrower();
    for (auto hex : req.getObjectIds()) {
      auto id = ObjectId::FromHex(hex.cStr());
      if (!id.ok()) continue;
      auto it = borrowers_.find(*id);
      if (it == borrowers_.end() || it->second.erase(borrower) == 0) continue;
      if (it->second.empty()) borrowers_.erase(it);
      store_.RemoveRef(*id);
    }
    call.Reply();
  });
}

// ---- Placement groups --------------------------------------------------------------------------
// Fills capture by value: a wait that gives up may return before the loop sends the call.

Result<std::string> CoreWorker::CreatePlacementGroup(
    const internal::PlacementGroupOptions& options) {
  RAYD_RETURN_IF_ERROR(ValidatePlacementGroup(options));
  const std::string id = PlacementGroupId::FromRandom().Hex();
  const std::string ray_namespace =
      options.ray_namespace.empty() ? options_.ray_namespace : options.ray_namespace;
  auto fill = [options, id, ray_namespace,
               job = options_.job_id](proto::CreatePlacementGroupRequest::Builder r) {
    ToProto(options, id, job, ray_namespace, r.initGroup());
  };
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::CREATE_PLACEMENT_GROUP>(fill, kGcsCallTimeout));
  // Each bundle must fit some node; a strictly packed group must fit one node whole.
  std::vector<scheduler::ResourceSet> bundles;
  scheduler::ResourceSet whole;
  for (const auto& bundle : options.bundles) {
    scheduler::ResourceSet set;
    for (const auto& [name, amount] : bundle) {
      set.Set(name, scheduler::FixedPoint::FromDouble(amount));
    }
    whole += set;
    bundles.push_back(std::move(set));
  }
  if (options.strategy == static_cast<int>(proto::PlacementStrategy::STRICT_PACK)) {
    bundles = {whole};
  }
  const std::string what =
      "placement group " + (options.name.empty() ? id : "'" + options.name + "'");
  loop_.Post([this, what, bundles = std::move(bundles)] {
    if (!warner_) return;
    for (size_t i = 0; i < bundles.size(); ++i) {
      const std::string bundle = bundles.size() == 1 ? what : what + " bundle " + std::to_string(i);
      warner_->Watch("placement group", bundle, bundles[i]);
    }
  });
  return id;
}

Status CoreWorker::RemovePlacementGroup(const std::string& id) {
  auto fill = [id](proto::RemovePlacementGroupRequest::Builder r) { r.setPlacementGroupId(id); };
  return CallGcs<proto::Method::REMOVE_PLACEMENT_GROUP>(fill, kGcsCallTimeout);
}

namespace {

void FillGetPlacementGroup(proto::GetPlacementGroupRequest::Builder r, const std::string& id,
                           bool wait) {
  r.setPlacementGroupId(id);
  r.setWaitUntilReady(wait);
}

// What a GET_PLACEMENT_GROUP that waited for the group to be ready answered, as
// WaitPlacementGroupReady returns it.
Result<bool> Readiness(const Status& s, const std::optional<internal::PlacementGroupInfo>& group,
                       const std::string& id) {
  if (s.code() == StatusCode::kDeadlineExceeded) return false;
  if (!s.ok()) return s;
  if (!group) return Status::NotFound("no placement group " + id);
  if (group->state == "CREATED") return true;
  if (group->state == "REMOVED") {
    return Status::Cancelled("placement group " + id + " was removed" +
                             (group->cause.empty() ? "" : ": " + group->cause));
  }
  if (group->state == "FAILED") {
    return Status::ResourceExhausted(group->cause.empty() ? "placement group " + id + " failed"
                                                          : group->cause);
  }
  return false;  // still pending: only when asked not to wait
}

std::optional<internal::PlacementGroupInfo> ReadPlacementGroup(
    proto::GetPlacementGroupReply::Reader reply) {
  if (!reply.getFound()) return std::nullopt;
  return runtime::PlacementGroupFromProto(reply.getGroup());
}

}  // namespace

Result<bool> CoreWorker::WaitPlacementGroupReady(const std::string& id,
                                                 std::chrono::milliseconds timeout) {
  // A zero timeout only looks: as an RPC timeout, zero would mean no deadline.
  const bool wait = timeout.count() != 0;
  std::optional<internal::PlacementGroupInfo> group;
  Status s = CallGcs<proto::Method::GET_PLACEMENT_GROUP>(
      [id, wait](proto::GetPlacementGroupRequest::Builder r) {
        FillGetPlacementGroup(r, id, wait);
      },
      timeout.count() > 0 ? timeout : Millis(0),
      [&group](proto::GetPlacementGroupReply::Reader r) { group = ReadPlacementGroup(r); });
  return Readiness(s, group, id);
}

void CoreWorker::WhenPlacementGroupReady(const std::string& id, std::chrono::milliseconds timeout,
                                         std::function<void(Result<bool>)> ready) {
  loop_.Post([this, id, timeout, ready = std::move(ready)] {
    if (!gcs_) return ready(Status::Cancelled("rayd is shutting down"));
    const bool wait = timeout.count() != 0;
    gcs_->Call<proto::Method::GET_PLACEMENT_GROUP>(
        [id, wait](proto::GetPlacementGroupRequest::Builder r) {
          FillGetPlacementGroup(r, id, wait);
        },
        timeout.count() > 0 ? timeout : Millis(0),
        [id, ready](const Status& s, proto::GetPlacementGroupReply::Reader r) {
          std::optional<internal::PlacementGroupInfo> group;
          if (s.ok()) group = ReadPlacementGroup(r);
          ready(Readiness(s, group, id));
        });
  });
}

Result<std::optional<internal::PlacementGroupInfo>> CoreWorker::GetPlacementGroup(
    const std::string& id, const std::string& name, const std::string& ray_namespace) {
  const std::string ns = ray_namespace.empty() ? options_.ray_namespace : ray_namespace;
  auto group = std::make_shared<std::optional<internal::PlacementGroupInfo>>();
  auto fill = [id, name, ns](proto::GetPlacementGroupRequest::Builder r) {
    r.setPlacementGroupId(id);
    r.setName(name);
    r.setNamespace(ns);
  };
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::GET_PLACEMENT_GROUP>(
      fill, kGcsCallTimeout, [group](proto::GetPlacementGroupReply::Reader reply) {
        if (reply.getFound()) *group = runtime::PlacementGroupFromProto(reply.getGroup());
      }));
  return std::move(*group);
}

Result<std::vector<internal::PlacementGroupInfo>> CoreWorker::GetAllPlacementGroups() {
  auto groups = std::make_shared<std::vector<internal::PlacementGroupInfo>>();
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::GET_ALL_PLACEMENT_GROUPS>(
      nullptr, kGcsCallTimeout, [groups](proto::GetAllPlacementGroupsReply::Reader r) {
        for (auto g : r.getGroups()) {
          groups->push_back(runtime::PlacementGroupFromProto(g));
        }
      }));
  return std::move(*groups);
}

std::vector<int> CoreWorker::GetGpuIds() {
  std::vector<int> ids;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return ids;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) ids.push_back(std::atoi(item.c_str()));
  }
  return ids;
}

std::string CoreWorker::GetNodeId() { return node_id_; }

std::string CoreWorker::GetNamespace() { return options_.ray_namespace; }

bool CoreWorker::WasCurrentActorRestarted() {
  return internal::InActorCall() && executor_ && executor_->actor_restarted();
}

void CoreWorker::ReportMetrics() {
  const uint64_t version = internal::MetricsVersion();
  if (version == reported_metrics_version_ || options_.node_address.empty() || shut_down_) return;
  reported_metrics_version_ = version;
  const std::vector<internal::MetricSeriesState> all = internal::SnapshotMetrics();
  // Drivers have no worker id of their own: they report under their job's.
  const std::string process =
      options_.is_driver ? "driver-" + options_.job_id.Hex() : options_.worker_id.Hex();
  auto fill = [&](proto::ReportMetricsRequest::Builder r) {
    r.setWorkerId(process);
    auto list = r.initSeries(static_cast<unsigned>(all.size()));
    for (unsigned i = 0; i < all.size(); ++i) {
      const internal::MetricSeriesState& m = all[i];
      auto out = list[i];
      out.setName(m.name);
      out.setDescription(m.description);
      out.setUnit(m.unit);
      out.setKind(static_cast<uint8_t>(m.kind));
      runtime::FillLabels(m.tags, [&](unsigned n) { return out.initTags(n); });
      out.setValue(m.value);
      out.setCount(m.count);
      auto bounds = out.initBoundaries(static_cast<unsigned>(m.boundaries.size()));
      for (unsigned j = 0; j < m.boundaries.size(); ++j) bounds.set(j, m.boundaries[j]);
      auto buckets = out.initBuckets(static_cast<unsigned>(m.buckets.size()));
      for (unsigned j = 0; j < m.buckets.size(); ++j) buckets.set(j, m.buckets[j]);
      out.setUpdatedMs(m.updated_ms);
    }
  };
  clients_.Get(options_.node_address)
      .Call<proto::Method::REPORT_METRICS>(fill, Millis(10000), [this](const Status& s) {
        if (!s.ok()) reported_metrics_version_ = 0;  // send again next time
      });
}

Result<bool> CoreWorker::KvPut(const std::string& ns, const std::string& key,
                               const std::string& value, bool overwrite) {
  auto added = std::make_shared<bool>(false);
  auto fill = [ns, key, value, overwrite](proto::KvPutRequest::Builder r) {
    r.setNamespace(ns);
    r.setKey(key);
    r.setValue(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(value.data()),
                                   value.size()));
    r.setOverwrite(overwrite);
  };
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::KV_PUT>(
      fill, kGcsCallTimeout, [added](proto::KvPutReply::Reader r) { *added = r.getAdded(); }));
  return *added;
}

Result<std::optional<std::string>> CoreWorker::KvGet(const std::string& ns,
                                                     const std::string& key) {
  auto value = std::make_shared<std::optional<std::string>>();
  auto fill = [ns, key](proto::KvGetRequest::Builder r) {
    r.setNamespace(ns);
    r.setKey(key);
  };
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::KV_GET>(
      fill, kGcsCallTimeout, [value](proto::KvGetReply::Reader reply) {
        if (!reply.getFound()) return;
        auto data = reply.getValue();
        *value = std::string(reinterpret_cast<const char*>(data.begin()), data.size());
      }));
  return std::move(*value);
}

Result<int> CoreWorker::KvDel(const std::string& ns, const std::string& key, bool by_prefix) {
  auto deleted = std::make_shared<int>(0);
  auto fill = [ns, key, by_prefix](proto::KvDelRequest::Builder r) {
    r.setNamespace(ns);
    r.setKey(key);
    r.setByPrefix(by_prefix);
  };
  RAYD_RETURN_IF_ERROR(CallGcs<proto::Method::KV_DEL>(
      fill, kGcsCallTimeout,
      [deleted](proto::KvDelReply::Reader r) { *deleted = static_cast<int>(r.getDeleted()); }));
  return *deleted;
}

}  // namespace rayd::core
