#include "core/actor_submitter.h"

#include <spdlog/spdlog.h>

#include "core/object_manager.h"

namespace rayd::core {

using internal::ErrorKind;

constexpr Millis kWatchPeriod{1000};

// How calls of a dead actor fail: an actor that died because no node could ever hold it fails
// them as infeasible (InfeasibleError, like tasks and placement groups), any other as died.
ObjectValue DeadActorValue(const std::string& why) {
  const bool infeasible = why.rfind("infeasible:", 0) == 0;
  return ErrorValue(infeasible ? ErrorKind::kInfeasible : ErrorKind::kActorDied, why);
}

void ActorSubmitter::SetMaxTaskRetries(const ActorId& actor, int max_task_retries) {
  actors_[actor].max_task_retries = max_task_retries;
}

void ActorSubmitter::MarkDead(const ActorId& id, const std::string& why) {
  auto& actor = actors_[id];
  if (!actor.address.empty()) ctx_.clients.Drop(actor.address);
  actor.address.clear();
  actor.state = Actor::State::kDead;
  actor.death_cause = why;
  FailAll(actor, why);
}

void ActorSubmitter::Submit(TaskSpec spec) {
  if (ctx_.stopping) {
    return ctx_.store.Put(spec.return_id, ErrorValue(ErrorKind::kSystem, "rayd is shutting down"));
  }
  auto& actor = actors_[spec.actor_id];
  const ActorId id = spec.actor_id;
  if (actor.state == Actor::State::kDead) {
    ctx_.store.Put(spec.return_id, DeadActorValue(actor.death_cause));
    return;
  }
  const TaskId task_id = spec.task_id;
  std::vector<TaskArg> args = std::move(spec.args);
  actor.unresolved.insert(task_id);
  actor.queue.push_back(std::move(spec));
  ctx_.objects.ResolveArgs(std::move(args), [this, id, task_id](std::vector<TaskArg> resolved,
                                                                const ObjectValue* error) {
    if (ctx_.stopping) return;
    auto& actor = actors_[id];
    actor.unresolved.erase(task_id);
    for (auto it = actor.queue.begin(); it != actor.queue.end(); ++it) {
      if (it->task_id != task_id) continue;
      if (error) {
        ctx_.store.Put(it->return_id, *error);
        actor.queue.erase(it);
      } else {
        it->args = std::move(resolved);
      }
      break;
    }
    Pump(id);
  });
}

void ActorSubmitter::Pump(const ActorId& id) {
  if (ctx_.stopping) return;
  auto& actor = actors_[id];
  if (actor.state == Actor::State::kUnresolved) return Resolve(id);
  if (actor.state != Actor::State::kAlive) return;
  auto& client = ctx_.clients.Get(actor.address);
  // The actor's worker going away (even between calls) sends us back to the GCS.
  client.SetOnStateChange([this, id, address = actor.address](const Status& s) {
    if (s.ok() || ctx_.stopping) return;
    if (actors_[id].address == address) OnDisconnected(id, s.message());
  });
  if (!actor.queue.empty() && !watch_timer_) {
    watch_timer_ = std::make_unique<Timer>(ctx_.loop);
    watch_timer_->Start(kWatchPeriod, kWatchPeriod, [this] { WatchInFlight(); });
  }
  while (!actor.queue.empty() && !actor.unresolved.contains(actor.queue.front().task_id)) {
    const uint64_t seq = actor.next_seq++;
    auto [it, inserted] = actor.in_flight.emplace(seq, std::move(actor.queue.front()));
    actor.queue.pop_front();
    const TaskSpec& spec = it->second;
    auto fill = [&spec](proto::PushTaskRequest::Builder r) { ToProto(spec, r.initSpec()); };
    const std::string address = actor.address;
    client.Call<proto::Method::PUSH_TASK>(
        fill, Millis(0), [this, id, seq, address](const Status& s, proto::PushTaskReply::Reader r) {
          if (ctx_.stopping) return;
          auto& actor = actors_[id];
          auto it = actor.in_flight.find(seq);
          if (it == actor.in_flight.end()) return;  // already failed over
          if (s.ok()) {
            ctx_.store.Put(it->second.return_id, FromProto(r.getValue()));
            actor.in_flight.erase(it);
            return;
          }
          if (actor.address == address) OnDisconnected(id, s.message());
        });
  }
}

void ActorSubmitter::Resolve(const ActorId& id) {
  actors_[id].state = Actor::State::kResolving;
  auto fill = [id](proto::GetActorRequest::Builder r) {
    r.setActorId(id.Hex());
    r.setWaitUntilSettled(true);
  };
  gcs_.Call<proto::Method::GET_ACTOR>(
      fill, Millis(0), [this, id](const Status& s, proto::GetActorReply::Reader reply) {
        if (ctx_.stopping) return;
        auto& actor = actors_[id];
        if (!s.ok()) {
          // The GCS is unreachable for now: try again shortly.
          spdlog::warn("looking up actor {}: {}", id.Hex(), s.message());
          return ResolveLater(id);
        }
        if (!reply.getFound()) {
          actor.state = Actor::State::kDead;
          actor.death_cause = "actor " + id.Hex() + " does not exist";
        } else if (reply.getActor().getState() == proto::ActorState::ALIVE) {
          std::string address = reply.getActor().getAddress();
          // The GCS may not have heard of the worker's death yet: ask again shortly.
          if (address == actor.failed_address) return ResolveLater(id);
          actor.state = Actor::State::kAlive;
          actor.address = std::move(address);
          actor.failed_address.clear();
        } else {
          actor.state = Actor::State::kDead;
          actor.death_cause = reply.getActor().getDeathCause();
          if (actor.death_cause.empty()) actor.death_cause = "the actor is dead";
        }
        if (actor.state == Actor::State::kDead) return FailAll(actor, actor.death_cause);
        Pump(id);
      });
}

void ActorSubmitter::OnDisconnected(const ActorId& id, const std::string& why) {
  auto& actor = actors_[id];
  ctx_.clients.Drop(actor.address);
  actor.failed_address = actor.address;
  actor.address.clear();
  actor.state = Actor::State::kUnresolved;
  // Calls in flight, in order: retried ones go back to the front of the queue.
  std::deque<TaskSpec> retry;
  for (auto& [seq, spec] : actor.in_flight) {
    const bool may_retry =
        actor.max_task_retries < 0 || spec.attempt < actor.max_task_retries;
    if (may_retry) {
      spec.attempt++;
      retry.push_back(std::move(spec));
    } else {
      ctx_.store.Put(spec.return_id,
                     ErrorValue(ErrorKind::kActorDied,
                                "the actor died while running " + spec.function_name + " (" +
                                    why + ")"));
    }
  }
  actor.in_flight.clear();
  for (auto it = retry.rbegin(); it != retry.rend(); ++it) actor.queue.push_front(std::move(*it));
  if (!actor.queue.empty()) Resolve(id);
}

void ActorSubmitter::FailAll(Actor& actor, const std::string& why) {
  for (auto& spec : actor.queue) ctx_.store.Put(spec.return_id, DeadActorValue(why));
  actor.queue.clear();
  for (auto& [seq, spec] : actor.in_flight) ctx_.store.Put(spec.return_id, DeadActorValue(why));
  actor.in_flight.clear();
}

}  // namespace rayd::core

namespace rayd::core {

void ActorSubmitter::ResolveLater(const ActorId& id) {
  auto& actor = actors_[id];
  actor.state = Actor::State::kUnresolved;
  if (!actor.retry_timer) actor.retry_timer = std::make_unique<Timer>(ctx_.loop);
  actor.retry_timer->Start(Millis(100), Millis(0), [this, id] { Pump(id); });
}

void ActorSubmitter::WatchInFlight() {
  if (ctx_.stopping) return;
  for (auto& [id, actor] : actors_) {
    if (actor.in_flight.empty() || actor.state != Actor::State::kAlive) continue;
    auto fill = [id = id](proto::GetActorRequest::Builder r) {
      r.setActorId(id.Hex());
      r.setWaitUntilSettled(false);
    };
    gcs_.Call<proto::Method::GET_ACTOR>(
        fill, kWatchPeriod,
        [this, id = id, address = actor.address](const Status& s,
                                                 proto::GetActorReply::Reader reply) {
          if (!s.ok() || ctx_.stopping) return;  // no word: TCP's timeout still guards
          auto it = actors_.find(id);
          if (it == actors_.end() || it->second.address != address ||
              it->second.in_flight.empty()) {
            return;
          }
          const bool there = reply.getFound() &&
                             reply.getActor().getState() == proto::ActorState::ALIVE &&
                             reply.getActor().getAddress() == address;
          if (there) return;
          std::string why = "the GCS reports actor " + id.Hex() + " ";
          if (!reply.getFound()) {
            why += "gone";
          } else if (reply.getActor().getState() == proto::ActorState::ALIVE) {
            why += "restarted elsewhere";
          } else {
            const std::string cause = reply.getActor().getDeathCause();
            why += cause.empty() ? std::string("dead") : "dead: " + cause;
          }
          spdlog::info("{}; failing over its calls to {}", why, address);
          OnDisconnected(id, why);
        });
  }
}

}  // namespace rayd::core
