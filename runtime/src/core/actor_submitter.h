#pragma once
// ActorSubmitter: sends actor method calls straight to the actor's worker, in submission order
// per caller. The actor's address comes from the GCS (GET_ACTOR, waiting while it is being
// created or restarted). When the worker dies, calls in flight are retried on the restarted
// actor if max_task_retries allows, else fail with ActorDiedError; calls to a dead actor fail.
//
// Loop thread only.

#include <deque>
#include <map>
#include <set>
#include <memory>
#include <string>

#include "core/task_submitter.h"

namespace rayd::core {

class ActorSubmitter {
 public:
  // `ctx` and `gcs` must outlive the submitter.
  ActorSubmitter(SubmitterContext& ctx, rpc::RpcClient& gcs) : ctx_(ctx), gcs_(gcs) {}

  // Remembers the retry policy of an actor this process created.
  void SetMaxTaskRetries(const ActorId& actor, int max_task_retries);
  // The caller killed the actor for good: later calls fail at once, without asking the GCS.
  void MarkDead(const ActorId& actor, const std::string& why);
  // Queues a call; its kRef arguments are resolved here, and calls are sent in the order
  // Submit sees them even when a later call's arguments resolve first.
  void Submit(TaskSpec spec);

 private:
  struct Actor {
    enum class State { kUnresolved, kResolving, kAlive, kDead };
    State state = State::kUnresolved;
    std::string address;
    std::string death_cause;
    std::string failed_address;  // the address whose connection just broke
    int max_task_retries = 0;
    std::deque<TaskSpec> queue;                // not sent yet, in order
    std::set<TaskId> unresolved;               // queued calls still waiting for arguments
    std::map<uint64_t, TaskSpec> in_flight;    // by send sequence
    uint64_t next_seq = 0;
    std::unique_ptr<Timer> retry_timer;
  };

  void Pump(const ActorId& id);
  void Resolve(const ActorId& id);
  void OnDisconnected(const ActorId& id, const std::string& why);
  void FailAll(Actor& actor, const std::string& why);
  void ResolveLater(const ActorId& id);
  // Asks the GCS about every actor with calls in flight; fails over those that are not alive
  // at the address the calls went to. Runs on watch_timer_ while any call is in flight.
  void WatchInFlight();

  SubmitterContext& ctx_;
  rpc::RpcClient& gcs_;
  std::map<ActorId, Actor> actors_;
  std::unique_ptr<Timer> watch_timer_;
};

}  // namespace rayd::core
