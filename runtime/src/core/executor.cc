#include "core/executor.h"

#include <spdlog/spdlog.h>

#include "rayd/api/metric.h"
#include "rayd/internal/function_registry.h"
#include "rayd/internal/type_names.h"

namespace rayd::core {

using internal::ErrorKind;
using internal::FunctionKind;
using internal::FunctionRegistry;

namespace {
thread_local bool t_in_normal_task = false;
}  // namespace

bool Executor::InNormalTask() { return t_in_normal_task; }

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] {
      while (true) {
        std::function<void()> work;
        {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
          if (queue_.empty()) return;
          work = std::move(queue_.front());
          queue_.pop_front();
        }
        work();
      }
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Post(std::function<void()> work) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_one();
}

Executor::~Executor() {
  actor_pool_.reset();
  task_pool_.reset();
}

namespace {

// Every task and actor call a worker runs, by function: reported with the process's
// application metrics, so each node's /metrics serves them summed over its workers (Ray's
// per-function task metrics).
void RecordTask(const std::string& function, bool ok, Clock::duration took) {
  static Counter tasks("rayd_tasks_total",
                       "Tasks and actor calls run by this node's workers, by function and "
                       "outcome (ok, or error: it raised or could not run).",
                       "tasks", {"function", "outcome"});
  static Histogram seconds("rayd_task_duration_seconds",
                           "How long tasks and actor calls ran, by function.", "seconds",
                           {0.001, 0.01, 0.1, 1, 10, 100, 1000}, {"function"});
  tasks.Inc(1, {{"function", function}, {"outcome", ok ? "ok" : "error"}});
  seconds.Observe(std::chrono::duration<double>(took).count(), {{"function", function}});
}

}  // namespace

void Executor::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::PUSH_TASK>([this](const auto& call) { HandlePushTask(call); });
}

void Executor::HandlePushTask(const rpc::Incoming<proto::Method::PUSH_TASK>& call) {
  auto parsed = FromProto(call.params().getSpec());
  if (!parsed.ok()) return call.Fail(parsed.status());
  auto spec = std::make_shared<TaskSpec>(std::move(parsed).value());
  auto run = [this, call, spec] {
    const bool is_actor = spec->kind != TaskSpec::Kind::NORMAL;
    hooks_.begin_task();
    internal::SetInActorCall(is_actor);
    t_in_normal_task = !is_actor;
    bool exit_actor = false;
    // After rayd::ExitActor the actor is gone for its callers at once, even before the GCS has
    // its worker killed: calls queued behind (or arriving meanwhile) fail without running.
    const auto started = Clock::now();
    std::shared_ptr<const void> nested_handles;
    ObjectValue value =
        actor_exited_ && spec->kind == TaskSpec::Kind::ACTOR_TASK
            ? ErrorValue(ErrorKind::kActorDied, "the actor exited (rayd::ExitActor)")
            : Execute(*spec, &exit_actor, &nested_handles);
    const bool ok = value.error == ErrorKind::kNone;
    const auto took = Clock::now() - started;
    if (!value.nested.empty() && hooks_.lend_nested) {
      hooks_.lend_nested(value.nested, spec->caller_address);
    }
    nested_handles.reset();
    if (exit_actor) actor_exited_ = true;
    internal::SetInActorCall(false);
    t_in_normal_task = false;
    value = hooks_.store_result(spec->return_id, std::move(value), spec->caller_address);
    hooks_.end_task();
    // The reply goes out from this thread, without waking the loop's: what it lends was
    // registered with the owners above, each acknowledged. If it cannot go at once, the loop
    // gets it before anything posted after, so an actor's exit comes after its reply. The
    // task's metrics are counted once the reply is on its way.
    call.ReplyFromAnyThread(
        [&](proto::PushTaskReply::Builder b) { ToProto(value, b.initValue()); });
    RecordTask(spec->function_name, ok, took);
    if (exit_actor && hooks_.exit_actor) {
      loop_.Post([this, actor = spec->actor_id] { hooks_.exit_actor(actor); });
    }
  };
  switch (spec->kind) {
    case TaskSpec::Kind::NORMAL:
      if (!task_pool_) task_pool_ = std::make_unique<ThreadPool>(1);
      task_pool_->Post(std::move(run));
      break;
    case TaskSpec::Kind::ACTOR_CREATION:
      if (actor_pool_) {
        return call.Fail(Status::AlreadyExists("this worker already holds an actor"));
      }
      actor_id_ = spec->actor_id;
      actor_restarted_ = spec->attempt > 0;
      actor_pool_ = std::make_unique<ThreadPool>(spec->max_concurrency);
      actor_pool_->Post(std::move(run));
      break;
    case TaskSpec::Kind::ACTOR_TASK:
      if (!actor_pool_ || spec->actor_id != actor_id_) {
        return call.Fail(
            Status::NotFound("actor " + spec->actor_id.Hex() + " does not live in this worker"));
      }
      actor_pool_->Post(std::move(run));
      break;
  }
}

ObjectValue Executor::Execute(const TaskSpec& spec, bool* exit_actor,
                             std::shared_ptr<const void>* nested_handles) {
  const auto* entry = FunctionRegistry::Global().Find(spec.function_name);
  if (entry == nullptr) {
    return ErrorValue(ErrorKind::kSystem,
                      "function '" + spec.function_name +
                          "' is not registered in this worker: declare it with RAYD_REMOTE, and "
                          "put its library on the job's code search path");
  }
  std::vector<internal::InvocationArg> args;
  args.reserve(spec.args.size());
  for (const auto& a : spec.args) {
    internal::InvocationArg arg;
    if (a.kind == internal::TaskArg::Kind::kValue) {
      arg.value = a.value;
    } else if (a.kind == internal::TaskArg::Kind::kRef) {
      // A large object the caller left in the object store: read it in place.
      ObjectValue v = hooks_.fetch_arg(a.ref, a.owner_address);
      if (v.error != ErrorKind::kNone) return v;
      arg.shared = std::move(v.shared);
      arg.value = std::move(v.data);
    } else {
      arg.is_ref = true;
      arg.ref = a.ref;
      arg.owner_address = a.owner_address;
      objects_.RegisterBorrowed(a.ref, a.owner_address);
    }
    args.push_back(std::move(arg));
  }
  void* self = nullptr;
  if (entry->kind == FunctionKind::kActorMethod) {
    if (!actor_) {
      return ErrorValue(ErrorKind::kActorDied, "the actor was not constructed in this worker");
    }
    self = actor_.get();
  }
  try {
    internal::InvocationResult result = entry->invoke(self, args);
    if (entry->kind == FunctionKind::kActorFactory) actor_ = std::move(result.actor);
    ObjectValue value;
    value.data = std::move(result.value);
    value.nested = std::move(result.nested);
    *nested_handles = std::move(result.nested_handles);
    return value;
  } catch (const internal::ActorExitRequest&) {
    *exit_actor = true;
    return ErrorValue(ErrorKind::kActorDied,
                      "the actor exited: " + spec.function_name + " called rayd::ExitActor");
  } catch (const internal::ArgumentError& e) {
    return ErrorValue(ErrorKind::kSystem, e.what(), "ArgumentError");
  } catch (const std::exception& e) {
    return ErrorValue(ErrorKind::kRemote, e.what(), internal::DemangledTypeName(e));
  } catch (...) {
    return ErrorValue(ErrorKind::kRemote, "a non-standard exception was thrown", "unknown");
  }
}

}  // namespace rayd::core
