#include "core/core_worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "core/metrics_reporter.h"
#include "common/node_info.h"
#include "rayd/api/errors.h"
#include "rayd/protocol/core.capnp.h"

namespace rayd::core {

using internal::ErrorKind;

namespace {

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
  borrowing_ = std::make_unique<Borrowing>(loop_, clients_, refs_, address_);
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
                    [] { Borrowing::BeginTask(); }, [this] { borrowing_->EndTask(); },
                    [this](const ActorId& actor) {
                      // Ends this actor for good; the GCS has its worker killed.
                      if (!gcs_) return;
                      auto fill = [&](proto::KillActorRequest::Builder r) {
                        r.setActorId(actor.Hex());
                        r.setNoRestart(true);
                      };
                      gcs_->Call<proto::Method::KILL_ACTOR>(fill, Millis(15000),
                                                            [](const Status&) {});
                    },
                    [this](const std::vector<internal::NestedRef>& nested,
                           const std::string& caller) { borrowing_->LendTo(nested, caller); }});
  executor_->RegisterMethods(dispatcher_);
  gcs_ = std::make_unique<runtime::GcsClient>(loop_, options_.gcs_address,
                                              rpc::Options{options_.token, role}, kGcsCallTimeout,
                                              rpc::ReconnectBackoff{Millis(50), Millis(1000)});
  io_thread_ = std::thread([this] { loop_.Run(); });
  loop_.Post([this] { gcs_->Connect(); });

  RAYD_RETURN_IF_ERROR(options_.is_driver ? ChooseNode() : LearnNodeId());
  submit_ctx_ = std::unique_ptr<SubmitterContext>(
      new SubmitterContext{loop_, store_, clients_, *objects_, *gcs_, options_.node_address,
                           options_.job_id, options_.launch_argv, options_.launch_env});
  RAYD_RETURN_IF_ERROR(RunOnLoop([this](auto done) {
    submit_ctx_->lineage = &refs_;
    warner_ = std::make_unique<InfeasibleWarner>(*submit_ctx_);
    submit_ctx_->warner = warner_.get();
    tasks_ = std::make_unique<TaskSubmitter>(*submit_ctx_);
    actors_ = std::make_unique<ActorSubmitter>(*submit_ctx_, *gcs_);
    if (!options_.node_address.empty()) {
      // Drivers have no worker id of their own: they report under their job's.
      metrics_ = std::make_unique<MetricsReporter>(
          loop_, clients_, options_.node_address,
          options_.is_driver ? "driver-" + options_.job_id.Hex() : options_.worker_id.Hex(),
          kMetricsReportPeriod);
    }
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

Status CoreWorker::ChooseNode() {
  if (!options_.node_address.empty()) return LearnNodeId();
  // A driver uses the node daemon on its own host if there is one, else the head's.
  auto nodes = AskGcs<std::vector<NodeInfo>>(
      [](auto& gcs, auto done) { gcs.GetNodes(/*only_alive=*/true, done); });
  if (!nodes.ok()) {
    return Status::Unavailable("cannot reach the cluster at " + options_.gcs_address + ": " +
                               nodes.status().message());
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  options_.node_address = runtime::ChooseDriverNode(*nodes, host, runtime::LocalAddresses());
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
  auto client = ObjectStoreClient::Connect(
      loop_, clients_,
      ObjectStoreClient::NodeStore{node.node_id.Hex(), options_.node_address, node.store_socket,
                             node.transfer_address});
  if (!client.ok()) {
    spdlog::info("no shared-memory object store on this host ({}); large values stay inline",
                 client.status().message());
    return;
  }
  object_store_ = std::move(client).value();
}

void CoreWorker::InstallStoreHooks() {
  // A task's argument pins go before its result can wake a Get: whoever got the result sees
  // the references the task held released (Ray's reference table says so at once too).
  store_.SetArrivalHook([this](const ObjectId& id) { refs_.ReleaseArgs(id); });
  store_.SetHooks(
      [this](const ObjectId& id, const MemoryStore::PutEvent& event) {
        if (!event.in_store) refs_.ForgetLineage(id);  // only stored results can be lost
        // A result we own with refs inside: its worker registered us as their borrower.
        if (!event.nested.empty() && objects_->OwnerOf(id) == address_) {
          TakeNested(id, event.nested, event.kept);
        }
      },
      [this](const ObjectId& id, const ObjectValue& marker) {
        refs_.ForgetLineage(id);
        // Only the owner frees; a borrower just forgets its marker.
        if (object_store_ && objects_->OwnerOf(id) == address_) {
          object_store_->Delete(id, marker.locations);
        }
      },
      [this](const ObjectId& id) {
        refs_.ReleaseNested(id);
        borrowing_->OnUnreferenced(id);
      });
  borrowing_->RegisterMethods(dispatcher_);
  dispatcher_.Handle<proto::Method::ADD_OBJECT_LOCATION>([this](const auto& call) {
    auto req = call.params();
    auto id = ObjectId::FromHex(req.getObjectId().cStr());
    if (!id.ok()) return call.Fail(id.status());
    auto location = FromProto(req.getLocation());
    if (!store_.AddLocation(*id, location) && object_store_) {
      // Freed meanwhile: the new copy is not wanted either.
      object_store_->Delete(*id, {location});
    }
    call.Reply();
  });
}

void CoreWorker::TakeNested(const ObjectId& result,
                            const std::vector<internal::NestedRef>& nested, bool kept) {
  for (const auto& n : nested) {
    if (n.owner_address.empty() || n.owner_address == address_) continue;
    objects_->RegisterBorrowed(n.id, n.owner_address);
    refs_.AdoptBorrow(n.id, n.owner_address);
  }
  if (kept) {
    refs_.PinNested(result, nested);
    return;
  }
  // Nobody here wants the result: let go of the borrows at once (unless held otherwise).
  for (const auto& n : nested) borrowing_->OnUnreferenced(n.id);
}

Status CoreWorker::RegisterDriver() {
  return RunOnLoop([this](auto done) {
    AddDriverJob([this, done](const Status& s) {
      if (s.ok()) {
        // A head restarted on Redis knows the job but not this driver's new connection: add
        // the job again on every reconnection, so that the head can end it when this driver
        // goes (else it would end the job as one whose driver never came back).
        gcs_->SetOnStateChange([this](const Status& state) {
          if (!state.ok() || shut_down_) return;
          AddDriverJob([this](const Status& again) {
            if (again.ok()) {
              spdlog::info("job {} registered again with the head", options_.job_id.Hex());
            } else {
              spdlog::error("could not register job {} again with the head: {}",
                            options_.job_id.Hex(), again.ToString());
            }
          });
        });
      }
      done(s.WithContext("registering the job"));
    });
  });
}

void CoreWorker::AddDriverJob(std::function<void(const Status&)> done) {
  auto fill = [this](proto::AddJobRequest::Builder r) {
    auto job = r.initJob();
    job.setJobId(options_.job_id.Hex());
    job.setDriverPid(getpid());
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    job.setDriverHost(host);
    job.setEntrypoint(options_.entrypoint);
  };
  gcs_->Call<proto::Method::ADD_JOB>(fill, Millis(15000), std::move(done));
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
    metrics_.reset();
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

template <typename T>
Result<T> CoreWorker::AskGcs(
    std::function<void(runtime::GcsClient&, runtime::Done<T>)> op, Millis wait) {
  // Shared: a wait that gives up returns before the answer, which must land somewhere.
  auto result = std::make_shared<std::optional<Result<T>>>();
  RAYD_RETURN_IF_ERROR(RunOnLoop(
      [this, op = std::move(op), result](auto done) {
        if (!gcs_) return done(Status::Cancelled("rayd is shutting down"));
        op(*gcs_, [result, done](Result<T> r) {
          result->emplace(std::move(r));
          done(Status::Ok());
        });
      },
      wait));
  return std::move(**result);
}

ObjectId CoreWorker::Put(std::string value) {
  if (object_store_ && value.size() >= internal::kMaxInlineBytes) {
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

ObjectId CoreWorker::PutWithRefs(std::string value,
                                 const std::vector<internal::NestedRef>& nested) {
  ObjectId id = Put(std::move(value));
  refs_.PinNested(id, nested);  // released when the value is no longer referenced here
  return id;
}

ObjectId CoreWorker::PutSerialized(size_t size, const std::function<void(uint8_t*)>& write) {
  if (!object_store_ || size < internal::kMaxInlineBytes) {
    return internal::Runtime::PutSerialized(size, write);
  }
  ObjectId id = ObjectId::FromRandom();
  auto marker = object_store_->PutInPlace(id, size, address_, /*caller_is_owner=*/true, write);
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
  if (!object_store_) return;
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

bool CoreWorker::Reconstruct(const ObjectId& id) {
  std::optional<TaskSpec> retry = refs_.TakeRetry(id);
  if (!retry) return false;
  TaskSpec& spec = *retry;
  spdlog::warn("object {} was lost; running its task {} again (attempt {})", id.Hex(),
               spec.function_name, spec.attempt);
  store_.Reset(id);
  loop_.Post([this, spec = std::move(spec)]() mutable {
    if (tasks_) tasks_->Submit(std::move(spec));
  });
  return true;
}

internal::ObjectValue CoreWorker::ResolveStored(const ObjectId& id,
                                                const internal::ObjectValue& marker) {
  if (!object_store_) {
    return ErrorValue(ErrorKind::kSystem, "object " + id.Hex() +
                                              " lives in a node's shared memory, and this "
                                              "process has no node daemon on its host");
  }
  auto bytes = object_store_->Get(id, marker, objects_->OwnerOf(id));
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
  if (!object_store_ || value.error != ErrorKind::kNone ||
      value.data.size() < internal::kMaxInlineBytes) {
    return value;
  }
  auto marker = object_store_->PutInPlace(id, value.data.size(), owner,
                                          /*caller_is_owner=*/false, [&](uint8_t* dest) {
    std::memcpy(dest, value.data.data(), value.data.size());
  });
  if (!marker.ok()) {
    const bool full = marker.status().code() == StatusCode::kResourceExhausted;
    return ErrorValue(full ? ErrorKind::kObjectStoreFull : ErrorKind::kSystem,
                      "the task's result could not be stored: " + marker.status().message());
  }
  internal::ObjectValue stored = std::move(marker).value();
  stored.nested = std::move(value.nested);
  return stored;
}

ObjectId CoreWorker::SubmitTask(const std::string& function_name,
                                std::vector<internal::TaskArg> args,
                                const internal::TaskOptions& options) {
  PromoteLargeArgs(args);
  TaskSpec spec = NewSpec(function_name, std::move(args));
  refs_.PinArgs(spec);
  spec.resources = ToResourceSet(options.resources.empty()
                                     ? std::map<std::string, double>{{"CPU", 1.0}}
                                     : options.resources);
  spec.max_retries = options.max_retries;
  spec.name = options.name;
  spec.scheduling = options.scheduling;
  spec.env = options.env;
  spec.reconstructable = object_store_ && ReferenceCounter::CanReconstruct(spec);
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
  // Its creation may run late, and again at each restart: the refs its arguments hold stay.
  refs_.PinActorArgs(id, spec.args);
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
  if (!s.ok()) {
    refs_.ReleaseActorArgs(id);
    return s;
  }
  return id;
}

ObjectId CoreWorker::SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                     std::vector<internal::TaskArg> args) {
  PromoteLargeArgs(args);
  TaskSpec spec = NewSpec(method_name, std::move(args));
  refs_.PinArgs(spec);
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
    if (no_restart) refs_.ReleaseActorArgs(actor);
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
void CoreWorker::RegisterBorrowedRef(const ObjectId& id, const std::string& owner_address) {
  objects_->RegisterBorrowed(id, owner_address);
  borrowing_->Received(id, owner_address);
}

// ---- Placement groups --------------------------------------------------------------------------
// Operations capture by value: a wait that gives up may return before the loop sends the call.

Result<std::string> CoreWorker::CreatePlacementGroup(
    const internal::PlacementGroupOptions& options) {
  RAYD_RETURN_IF_ERROR(ValidatePlacementGroup(options));
  const std::string id = PlacementGroupId::FromRandom().Hex();
  const std::string ray_namespace =
      options.ray_namespace.empty() ? options_.ray_namespace : options.ray_namespace;
  RAYD_RETURN_IF_ERROR(
      AskGcs<bool>([options, id, ray_namespace, job = options_.job_id](auto& gcs, auto done) {
        gcs.CreatePlacementGroup(options, id, job, ray_namespace, done);
      }).status());
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
  return AskGcs<bool>([id](auto& gcs, auto done) { gcs.RemovePlacementGroup(id, done); })
      .status();
}

Result<bool> CoreWorker::WaitPlacementGroupReady(const std::string& id,
                                                 std::chrono::milliseconds timeout) {
  // The call's own deadline answers first; the wait only guards against a stalled loop.
  const Millis guard = timeout.count() > 0 ? timeout + Millis(5000) : Millis(-1);
  return AskGcs<bool>(
      [id, timeout](auto& gcs, auto done) { gcs.WaitPlacementGroupReady(id, timeout, done); },
      guard);
}

void CoreWorker::WhenPlacementGroupReady(const std::string& id, std::chrono::milliseconds timeout,
                                         std::function<void(Result<bool>)> ready) {
  loop_.Post([this, id, timeout, ready = std::move(ready)] {
    if (!gcs_) return ready(Status::Cancelled("rayd is shutting down"));
    gcs_->WaitPlacementGroupReady(id, timeout, ready);
  });
}

Result<std::optional<internal::PlacementGroupInfo>> CoreWorker::GetPlacementGroup(
    const std::string& id, const std::string& name, const std::string& ray_namespace) {
  const std::string ns = ray_namespace.empty() ? options_.ray_namespace : ray_namespace;
  return AskGcs<std::optional<internal::PlacementGroupInfo>>([id, name, ns](auto& gcs, auto done) {
    gcs.GetPlacementGroup(id, name, ns, false, gcs.timeout(), done);
  });
}

Result<std::vector<internal::PlacementGroupInfo>> CoreWorker::GetAllPlacementGroups() {
  return AskGcs<std::vector<internal::PlacementGroupInfo>>(
      [](auto& gcs, auto done) { gcs.GetPlacementGroups(done); });
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

Result<bool> CoreWorker::KvPut(const std::string& ns, const std::string& key,
                               const std::string& value, bool overwrite) {
  return AskGcs<bool>([ns, key, value, overwrite](auto& gcs, auto done) {
    gcs.KvPut(ns, key, value, overwrite, done);
  });
}

Result<std::optional<std::string>> CoreWorker::KvGet(const std::string& ns,
                                                     const std::string& key) {
  return AskGcs<std::optional<std::string>>(
      [ns, key](auto& gcs, auto done) { gcs.KvGet(ns, key, done); });
}

Result<int> CoreWorker::KvDel(const std::string& ns, const std::string& key, bool by_prefix) {
  return AskGcs<int>(
      [ns, key, by_prefix](auto& gcs, auto done) { gcs.KvDel(ns, key, by_prefix, done); });
}

}  // namespace rayd::core
