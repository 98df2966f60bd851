#include "gcs/gcs_job_manager.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "rayd/base/ids.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {
namespace {

constexpr char kJobTable[] = "jobs";

nlohmann::json JobToJson(proto::JobInfo::Reader job) {
  return {{"job_id", job.getJobId().cStr()},
          {"driver_pid", job.getDriverPid()},
          {"driver_host", job.getDriverHost().cStr()},
          {"entrypoint", job.getEntrypoint().cStr()},
          {"start_time_ms", job.getStartTimeMs()},
          {"end_time_ms", job.getEndTimeMs()},
          {"is_dead", job.getIsDead()}};
}

void JobFromJson(const nlohmann::json& j, proto::JobInfo::Builder out) {
  out.setJobId(j.value("job_id", ""));
  out.setDriverPid(j.value("driver_pid", 0));
  out.setDriverHost(j.value("driver_host", ""));
  out.setEntrypoint(j.value("entrypoint", ""));
  out.setStartTimeMs(j.value("start_time_ms", int64_t{0}));
  out.setEndTimeMs(j.value("end_time_ms", int64_t{0}));
  out.setIsDead(j.value("is_dead", false));
}

void ReplyJobId(const rpc::Incoming<proto::Method::ADD_JOB>& call, const std::string& id) {
  call.Reply([&](proto::AddJobReply::Builder b) { b.setJobId(id); });
}

}  // namespace

void GcsJobManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::ADD_JOB>([this](const auto& c) { HandleAdd(c); });
  dispatcher.Handle<proto::Method::MARK_JOB_FINISHED>([this](const auto& c) { HandleFinished(c); });
  dispatcher.Handle<proto::Method::JOB_DRIVER_EXITED>([this](const auto& c) { HandleFinished(c); });
  dispatcher.Handle<proto::Method::GET_ALL_JOBS>([this](const auto& c) { HandleGetAll(c); });
}

void GcsJobManager::Start(Millis rebind_grace, std::function<void(Status)> done) {
  store_.GetAll(kJobTable, guard_([this, rebind_grace, done](
                                      Result<std::map<std::string, std::string>> rows) {
    if (!rows.ok()) return done(rows.status().WithContext("reading the job table"));
    for (const auto& [id, text] : *rows) {
      auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!json.is_discarded() && !json.value("is_dead", false)) awaiting_driver_.insert(id);
    }
    if (!awaiting_driver_.empty()) {
      spdlog::info("{} job(s) alive in the store: waiting up to {} ms for their drivers",
                   awaiting_driver_.size(), rebind_grace.count());
      rebind_timer_.Start(rebind_grace, Millis(0), [this, rebind_grace] {
        for (const std::string& id : std::exchange(awaiting_driver_, {})) {
          spdlog::info("the driver of job {} did not come back within {} ms of the head's "
                       "restart; ending the job",
                       id, rebind_grace.count());
          FinishJob(id, [id](Status s) {
            if (!s.ok()) spdlog::error("could not end job {}: {}", id, s.ToString());
          });
        }
      });
    }
    done(Status::Ok());
  }));
}

void GcsJobManager::HandleAdd(const AddJobCall& call) {
  auto json = JobToJson(call.params().getJob());
  if (json["job_id"].get<std::string>().empty()) json["job_id"] = JobId::FromRandom().Hex();
  json["start_time_ms"] = NowUnixMs();
  json["is_dead"] = false;
  const std::string id = json["job_id"];
  std::weak_ptr<rpc::Connection> conn;
  if (auto c = call.connection()) conn = c;
  store_.Put(kJobTable, id, json.dump(), /*overwrite=*/false,
             guard_([this, call, id, conn](Result<bool> r) {
               if (!r.ok()) return call.Fail(r.status());
               if (!*r) return AddAgain(call, id, conn);
               BindConnection(id, conn);
               ReplyJobId(call, id);
             }));
}

// A job added again under its id while it is alive (a driver reconnecting to a restarted head)
// is accepted and bound to the new connection; a finished one can't come back.
void GcsJobManager::AddAgain(const AddJobCall& call, const std::string& id,
                             const std::weak_ptr<rpc::Connection>& conn) {
  store_.Get(kJobTable, id, guard_([this, call, id, conn](Result<std::optional<std::string>> r) {
    if (!r.ok()) return call.Fail(r.status());
    auto old = nlohmann::json::parse(r->value_or("{}"), nullptr, /*allow_exceptions=*/false);
    if (old.is_discarded() || old.value("is_dead", false) || finished_.contains(id)) {
      return call.Fail(Status::AlreadyExists("job " + id + " exists and has finished"));
    }
    BindConnection(id, conn);
    ReplyJobId(call, id);
  }));
}

void GcsJobManager::BindConnection(const std::string& job_id,
                                   const std::weak_ptr<rpc::Connection>& conn) {
  auto c = conn.lock();
  if (!c || c->closed()) {
    // The driver went away before its job was stored: it is over already.
    FinishJob(job_id, [](Status) {});
    return;
  }
  jobs_by_connection_[c->id()].push_back(job_id);
  awaiting_driver_.erase(job_id);
}

void GcsJobManager::OnConnectionClosed(uint64_t connection_id) {
  auto node = jobs_by_connection_.extract(connection_id);
  if (node.empty()) return;
  for (const auto& job_id : node.mapped()) {
    spdlog::info("the driver of job {} disconnected; ending the job", job_id);
    FinishJob(job_id, [job_id](Status s) {
      if (!s.ok()) spdlog::error("could not end job {}: {}", job_id, s.ToString());
    });
  }
}

void GcsJobManager::FinishJob(const std::string& job_id, std::function<void(Status)> done) {
  if (finished_.contains(job_id)) return done(Status::Ok());
  store_.Get(kJobTable, job_id, guard_([this, job_id, done](Result<std::optional<std::string>> r) {
    if (!r.ok()) return done(r.status());
    if (!r->has_value()) return done(Status::NotFound("no job " + job_id));
    if (!finished_.insert(job_id).second) return done(Status::Ok());  // ended meanwhile
    auto json = nlohmann::json::parse(**r, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) json = {{"job_id", job_id}};
    const bool was_dead = json.value("is_dead", false);
    if (on_finished_) on_finished_(job_id);
    if (was_dead) return done(Status::Ok());
    json["is_dead"] = true;
    json["end_time_ms"] = NowUnixMs();
    store_.Put(kJobTable, job_id, json.dump(), /*overwrite=*/true,
               [done](Result<bool> w) { done(w.status()); });
  }));
}

// MARK_JOB_FINISHED and JOB_DRIVER_EXITED: the job ends, either way.
template <proto::Method M>
void GcsJobManager::HandleFinished(const rpc::Incoming<M>& call) {
  FinishJob(call.params().getJobId(), [call](Status s) {
    if (s.ok()) {
      call.Reply();
    } else {
      call.Fail(s);
    }
  });
}

void GcsJobManager::HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_JOBS>& call) {
  store_.GetAll(kJobTable, [call](Result<std::map<std::string, std::string>> rows) {
    if (!rows.ok()) return call.Fail(rows.status());
    call.Reply([&](proto::GetAllJobsReply::Builder b) {
      auto list = b.initJobs(static_cast<unsigned>(rows->size()));
      unsigned i = 0;
      for (const auto& [id, text] : *rows) {
        auto json = nlohmann::json::parse(text, nullptr, false);
        if (json.is_discarded()) json = {{"job_id", id}};
        JobFromJson(json, list[i++]);
      }
    });
  });
}

}  // namespace rayd::gcs
