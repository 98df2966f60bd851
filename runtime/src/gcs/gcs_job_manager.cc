#include "gcs/gcs_job_manager.h"

#include <nlohmann/json.hpp>

#include "rayd/base/ids.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {
namespace {

constexpr char kJobTable[] = "jobs";

nlohmann::json JobToJson(proto::JobInfo::Reader job) {
  return {{"job_id", job.getJobId().cStr()},         {"driver_pid", job.getDriverPid()},
          {"driver_host", job.getDriverHost().cStr()}, {"entrypoint", job.getEntrypoint().cStr()},
          {"start_time_ms", job.getStartTimeMs()},   {"end_time_ms", job.getEndTimeMs()},
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

}  // namespace

void GcsJobManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Register(proto::Method::ADD_JOB, [this](auto& c) { HandleAdd(c); });
  dispatcher.Register(proto::Method::MARK_JOB_FINISHED, [this](auto& c) { HandleFinished(c); });
  dispatcher.Register(proto::Method::GET_ALL_JOBS, [this](auto& c) { HandleGetAll(c); });
}

void GcsJobManager::HandleAdd(const rpc::CallPtr& call) {
  auto json = JobToJson(call->Params<proto::AddJobRequest>().getJob());
  if (json["job_id"].get<std::string>().empty()) json["job_id"] = JobId::FromRandom().Hex();
  json["start_time_ms"] = NowUnixMs();
  json["is_dead"] = false;
  const std::string id = json["job_id"];
  store_.Put(kJobTable, id, json.dump(), /*overwrite=*/false, [call, id](Result<bool> r) {
    if (!r.ok()) return call->Fail(r.status());
    if (!*r) return call->Fail(Status::AlreadyExists("job " + id + " exists"));
    call->Reply([&](capnp::AnyPointer::Builder b) {
      b.initAs<proto::AddJobReply>().setJobId(id);
    });
  });
}

void GcsJobManager::HandleFinished(const rpc::CallPtr& call) {
  std::string id = call->Params<proto::MarkJobFinishedRequest>().getJobId();
  store_.Get(kJobTable, id, [this, call, id](Result<std::optional<std::string>> r) {
    if (!r.ok()) return call->Fail(r.status());
    if (!r->has_value()) return call->Fail(Status::NotFound("no job " + id));
    auto json = nlohmann::json::parse(**r, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return call->Fail(Status::Internal("corrupt job record " + id));
    json["is_dead"] = true;
    json["end_time_ms"] = NowUnixMs();
    store_.Put(kJobTable, id, json.dump(), true, [call](Result<bool> w) {
      if (!w.ok()) return call->Fail(w.status());
      call->Reply();
    });
  });
}

void GcsJobManager::HandleGetAll(const rpc::CallPtr& call) {
  store_.GetAll(kJobTable, [call](Result<std::map<std::string, std::string>> rows) {
    if (!rows.ok()) return call->Fail(rows.status());
    call->Reply([&](capnp::AnyPointer::Builder b) {
      auto list = b.initAs<proto::GetAllJobsReply>().initJobs(static_cast<unsigned>(rows->size()));
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
