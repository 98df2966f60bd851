#pragma once
// Executor: runs the tasks pushed to this worker. Normal tasks run one at a time on the task
// thread in arrival order; an actor's calls run on its pool (one thread by default, so calls
// from one caller run in submission order; max_concurrency threads when asked).
//
// The loop thread receives PUSH_TASK and hands the call to a pool; the pool runs user code and
// posts the reply back to the loop. User exceptions become error values, never crashes.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/object_manager.h"
#include "common/task_spec.h"
#include "rayd/base/rpc.h"

namespace rayd::core {

// A fixed set of threads taking work from one FIFO queue.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();  // finishes queued work, then joins
  void Post(std::function<void()> work);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;
};

// How the executor reaches the object store; both run on task threads and may block.
struct ExecutorHooks {
  // The value of an argument passed as a ref to a by-value parameter (a large object, read in
  // place), or the error that stops the task.
  std::function<ObjectValue(const ObjectId& id, const std::string& owner)> fetch_arg;
  // A result too large to inline, moved into the node's store for `owner`: its marker.
  std::function<ObjectValue(const ObjectId& id, ObjectValue value, const std::string& owner)>
      store_result;
  // Run around each task on its thread: refs the task received and kept are registered with
  // their owners after it, before its reply.
  std::function<void()> begin_task;
  std::function<void()> end_task;
  // After the reply to a call that ran rayd::ExitActor (loop thread): end the actor for good.
  std::function<void(const ActorId& actor)> exit_actor;
  // The refs inside a result, before its reply (task thread, blocking): lend them to the
  // result's owner `caller` (Borrowing::LendTo) while the task still holds them.
  std::function<void(const std::vector<internal::NestedRef>& nested, const std::string& caller)>
      lend_nested;
};

class Executor {
 public:
  // `loop` and `objects` must outlive the executor.
  Executor(EventLoop& loop, ObjectManager& objects, ExecutorHooks hooks)
      : loop_(loop), objects_(objects), hooks_(std::move(hooks)) {}
  ~Executor();

  void RegisterMethods(rpc::Dispatcher& dispatcher);
  const ActorId& actor_id() const { return actor_id_; }
  // Whether the actor here was created by a restart (its creation's attempt > 0).
  bool actor_restarted() const { return actor_restarted_; }
  // Whether the calling thread runs a normal task (not an actor's call).
  static bool InNormalTask();

 private:
  void HandlePushTask(const rpc::Incoming<proto::Method::PUSH_TASK>& call);
  // Runs on a pool thread. Sets *exit_actor when the call ran rayd::ExitActor; hands back in
  // *nested_handles what keeps the refs inside the result alive (until they are lent).
  ObjectValue Execute(const TaskSpec& spec, bool* exit_actor,
                      std::shared_ptr<const void>* nested_handles);

  EventLoop& loop_;
  ObjectManager& objects_;
  ExecutorHooks hooks_;
  std::unique_ptr<ThreadPool> task_pool_;
  std::unique_ptr<ThreadPool> actor_pool_;
  ActorId actor_id_;
  std::atomic<bool> actor_restarted_{false};
  std::atomic<bool> actor_exited_{false};  // a call ran rayd::ExitActor
  std::shared_ptr<void> actor_;  // the actor instance, once created
};

}  // namespace rayd::core
