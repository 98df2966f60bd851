#include "common/gcs_client.h"

#include <memory>

#include "common/node_info.h"
#include "common/task_spec.h"
#include "rayd/base/capnp_bytes.h"

namespace rayd::runtime {
namespace {

ActorSummary ActorFromProto(proto::ActorInfo::Reader a) {
  ActorSummary s;
  s.actor_id = a.getActorId();
  s.job_id = a.getJobId();
  s.name = a.getName();
  s.ray_namespace = a.getNamespace();
  s.class_name = a.getClassName();
  s.state = ActorStateName(a.getState());
  s.address = a.getAddress();
  s.node_id = a.getNodeId();
  s.worker_id = a.getWorkerId();
  s.num_restarts = a.getNumRestarts();
  s.max_restarts = a.getMaxRestarts();
  s.detached = a.getDetached();
  s.death_cause = a.getDeathCause();
  s.pid = a.getPid();
  return s;
}

JobSummary JobFromProto(proto::JobInfo::Reader j) {
  JobSummary s;
  s.job_id = j.getJobId();
  s.driver_pid = j.getDriverPid();
  s.driver_host = j.getDriverHost();
  s.entrypoint = j.getEntrypoint();
  s.start_time_ms = j.getStartTimeMs();
  s.end_time_ms = j.getEndTimeMs();
  s.is_dead = j.getIsDead();
  return s;
}

// What a GET_PLACEMENT_GROUP that waited for the group to be ready answered.
Result<bool> Readiness(const Result<std::optional<internal::PlacementGroupInfo>>& answer,
                       const std::string& id) {
  if (answer.status().code() == StatusCode::kDeadlineExceeded) return false;
  if (!answer.ok()) return answer.status();
  const auto& group = *answer;
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

}  // namespace

GcsClient::GcsClient(EventLoop& loop, std::string address, rpc::Options options, Millis timeout,
                     Backoff backoff)
    : RpcClient(loop, std::move(address), std::move(options), nullptr, backoff),
      timeout_(timeout) {}

Status GcsClient::Explain(const Status& status) const {
  if (status.code() == StatusCode::kDeadlineExceeded && !last_error().ok()) return last_error();
  return status;
}

void GcsClient::GetClusterInfo(Done<ClusterView> done) {
  Call<proto::Method::GET_CLUSTER_INFO>(
      timeout_, [this, done](const Status& s, proto::ClusterInfo::Reader info) {
        if (!s.ok()) return done(Explain(s));
        ClusterView view;
        view.cluster_id = info.getClusterId();
        view.gcs_address = info.getGcsAddress();
        view.storage = info.getStorage();
        view.start_time_ms = info.getStartTimeMs();
        view.dashboard_url = info.getDashboardUrl();
        done(std::move(view));
      });
}

void GcsClient::GetNodes(bool only_alive, Done<std::vector<NodeInfo>> done) {
  Call<proto::Method::GET_ALL_NODES>(
      [only_alive](proto::GetAllNodesRequest::Builder r) { r.setOnlyAlive(only_alive); },
      timeout_, [this, done](const Status& s, proto::GetAllNodesReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::vector<NodeInfo> nodes;
        for (auto n : r.getNodes()) {
          auto info = NodeInfoFromProto(n);
          if (info.ok()) nodes.push_back(std::move(*info));
        }
        done(std::move(nodes));
      });
}

void GcsClient::GetClusterView(Done<ClusterView> done) {
  GetClusterInfo([this, done](Result<ClusterView> view) {
    if (!view.ok()) return done(view.status());
    GetNodes(false, [view = std::move(*view), done](Result<std::vector<NodeInfo>> nodes) mutable {
      if (!nodes.ok()) return done(nodes.status());
      view.nodes = std::move(*nodes);
      done(std::move(view));
    });
  });
}

void GcsClient::DrainNode(const NodeId& node, int64_t deadline_ms, const std::string& reason,
                          Done<bool> done) {
  Call<proto::Method::DRAIN_NODE>(
      [&](proto::DrainNodeRequest::Builder r) {
        r.setNodeId(node.Hex());
        r.setDeadlineMs(deadline_ms);
        r.setReason(reason);
      },
      timeout_,
      [this, done](const Status& s) {
        if (!s.ok()) return done(Explain(s));
        done(true);
      });
}

void GcsClient::GetActors(Done<std::vector<ActorSummary>> done) {
  Call<proto::Method::GET_ALL_ACTORS>(
      timeout_, [this, done](const Status& s, proto::GetAllActorsReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::vector<ActorSummary> actors;
        for (auto a : r.getActors()) actors.push_back(ActorFromProto(a));
        done(std::move(actors));
      });
}

void GcsClient::GetJobs(Done<std::vector<JobSummary>> done) {
  Call<proto::Method::GET_ALL_JOBS>(
      timeout_, [this, done](const Status& s, proto::GetAllJobsReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::vector<JobSummary> jobs;
        for (auto j : r.getJobs()) jobs.push_back(JobFromProto(j));
        done(std::move(jobs));
      });
}

void GcsClient::CreatePlacementGroup(const internal::PlacementGroupOptions& options,
                                     const std::string& id, const JobId& job,
                                     const std::string& ray_namespace, Done<bool> done) {
  Call<proto::Method::CREATE_PLACEMENT_GROUP>(
      [&](proto::CreatePlacementGroupRequest::Builder r) {
        core::ToProto(options, id, job, ray_namespace, r.initGroup());
      },
      timeout_, [this, done](const Status& s) {
        if (!s.ok()) return done(Explain(s));
        done(true);
      });
}

void GcsClient::RemovePlacementGroup(const std::string& id, Done<bool> done) {
  Call<proto::Method::REMOVE_PLACEMENT_GROUP>(
      [&](proto::RemovePlacementGroupRequest::Builder r) { r.setPlacementGroupId(id); },
      timeout_, [this, done](const Status& s) {
        if (!s.ok()) return done(Explain(s));
        done(true);
      });
}

void GcsClient::GetPlacementGroup(const std::string& id, const std::string& name,
                                  const std::string& ray_namespace, bool wait_until_ready,
                                  Millis timeout,
                                  Done<std::optional<internal::PlacementGroupInfo>> done) {
  Call<proto::Method::GET_PLACEMENT_GROUP>(
      [&](proto::GetPlacementGroupRequest::Builder r) {
        r.setPlacementGroupId(id);
        r.setName(name);
        r.setNamespace(ray_namespace);
        r.setWaitUntilReady(wait_until_ready);
      },
      timeout, [done](const Status& s, proto::GetPlacementGroupReply::Reader reply) {
        // Not explained: a wait for readiness that runs out is an answer ("not ready yet").
        if (!s.ok()) return done(s);
        std::optional<internal::PlacementGroupInfo> group;
        if (reply.getFound()) group = PlacementGroupFromProto(reply.getGroup());
        done(std::move(group));
      });
}

void GcsClient::GetPlacementGroups(Done<std::vector<internal::PlacementGroupInfo>> done) {
  Call<proto::Method::GET_ALL_PLACEMENT_GROUPS>(
      timeout_, [this, done](const Status& s, proto::GetAllPlacementGroupsReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::vector<internal::PlacementGroupInfo> groups;
        for (auto g : r.getGroups()) groups.push_back(PlacementGroupFromProto(g));
        done(std::move(groups));
      });
}

void GcsClient::WaitPlacementGroupReady(const std::string& id, Millis timeout,
                                        Done<bool> done) {
  // A zero timeout only looks: as an RPC timeout, zero would mean no deadline.
  GetPlacementGroup(id, "", "", timeout.count() != 0,
                    timeout.count() > 0 ? timeout : Millis(0),
                    [id, done](Result<std::optional<internal::PlacementGroupInfo>> answer) {
                      done(Readiness(answer, id));
                    });
}

void GcsClient::KvPut(const std::string& ns, const std::string& key, const std::string& value,
                      bool overwrite, Done<bool> done) {
  Call<proto::Method::KV_PUT>(
      [&](proto::KvPutRequest::Builder r) {
        r.setNamespace(ns);
        r.setKey(key);
        r.setValue(AsData(value));
        r.setOverwrite(overwrite);
      },
      timeout_, [this, done](const Status& s, proto::KvPutReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        done(r.getAdded());
      });
}

void GcsClient::KvGet(const std::string& ns, const std::string& key,
                      Done<std::optional<std::string>> done) {
  Call<proto::Method::KV_GET>(
      [&](proto::KvGetRequest::Builder r) {
        r.setNamespace(ns);
        r.setKey(key);
      },
      timeout_, [this, done](const Status& s, proto::KvGetReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::optional<std::string> value;
        if (r.getFound()) value = FromData(r.getValue());
        done(std::move(value));
      });
}

void GcsClient::KvDel(const std::string& ns, const std::string& key, bool by_prefix,
                      Done<int> done) {
  Call<proto::Method::KV_DEL>(
      [&](proto::KvDelRequest::Builder r) {
        r.setNamespace(ns);
        r.setKey(key);
        r.setByPrefix(by_prefix);
      },
      timeout_, [this, done](const Status& s, proto::KvDelReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        done(static_cast<int>(r.getDeleted()));
      });
}

void GcsClient::KvKeys(const std::string& ns, const std::string& prefix,
                       Done<std::vector<std::string>> done) {
  Call<proto::Method::KV_KEYS>(
      [&](proto::KvKeysRequest::Builder r) {
        r.setNamespace(ns);
        r.setPrefix(prefix);
      },
      timeout_, [this, done](const Status& s, proto::KvKeysReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::vector<std::string> keys;
        for (auto key : r.getKeys()) keys.emplace_back(key);
        done(std::move(keys));
      });
}

void GcsClient::KvPrefix(const std::string& ns, const std::string& prefix,
                         Done<std::map<std::string, std::string>> done) {
  KvKeys(ns, prefix, [this, ns, done](Result<std::vector<std::string>> keys) {
    if (!keys.ok()) return done(keys.status());
    if (keys->empty()) return done(std::map<std::string, std::string>());
    struct Gather {
      std::map<std::string, std::string> values;
      size_t pending = 0;
      Status failed;
    };
    auto gather = std::make_shared<Gather>();
    gather->pending = keys->size();
    for (const std::string& key : *keys) {
      KvGet(ns, key, [gather, key, done](Result<std::optional<std::string>> value) {
        if (!value.ok()) {
          gather->failed = value.status();
        } else if (*value) {  // else deleted since the listing
          gather->values.emplace(key, std::move(**value));
        }
        if (--gather->pending > 0) return;
        if (!gather->failed.ok()) return done(gather->failed);
        done(std::move(gather->values));
      });
    }
  });
}

void GcsClient::SubmitJob(const JobSubmitOptions& options, const std::vector<PackedEntry>& files,
                          Done<JobSubmissionInfo> done) {
  Call<proto::Method::SUBMIT_JOB>(
      [&](proto::SubmitJobRequest::Builder r) {
        r.setSubmissionId(options.submission_id);
        auto argv = r.initEntrypoint(static_cast<unsigned>(options.entrypoint.size()));
        for (size_t i = 0; i < options.entrypoint.size(); ++i) {
          argv.set(static_cast<unsigned>(i), options.entrypoint[i]);
        }
        r.setRuntimeEnvJson(options.runtime_env_json);
        PackWorkingDir(files, r.initFiles(static_cast<unsigned>(files.size())));
      },
      timeout_, [this, done](const Status& s, proto::JobSubmissionReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        done(FromWire(r.getJob()));
      });
}

void GcsClient::GetJobSubmission(const std::string& id, Done<JobSubmissionInfo> done) {
  Call<proto::Method::GET_JOB_SUBMISSION>(
      [&](proto::JobSubmissionRequest::Builder r) { r.setSubmissionId(id); }, timeout_,
      [this, done](const Status& s, proto::JobSubmissionReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        done(FromWire(r.getJob()));
      });
}

void GcsClient::ListJobSubmissions(Done<std::vector<JobSubmissionInfo>> done) {
  Call<proto::Method::LIST_JOB_SUBMISSIONS>(
      timeout_, [this, done](const Status& s, proto::ListJobSubmissionsReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        std::vector<JobSubmissionInfo> jobs;
        for (auto j : r.getJobs()) jobs.push_back(FromWire(j));
        done(std::move(jobs));
      });
}

void GcsClient::StopJobSubmission(const std::string& id, Done<JobSubmissionInfo> done) {
  Call<proto::Method::STOP_JOB_SUBMISSION>(
      [&](proto::JobSubmissionRequest::Builder r) { r.setSubmissionId(id); }, timeout_,
      [this, done](const Status& s, proto::JobSubmissionReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        done(FromWire(r.getJob()));
      });
}

void GcsClient::ReadJobLogs(const std::string& id, uint64_t offset, uint32_t max_bytes,
                            bool from_end, Done<JobLogChunk> done) {
  Call<proto::Method::READ_JOB_LOGS>(
      [&](proto::ReadJobLogsRequest::Builder r) {
        r.setSubmissionId(id);
        r.setOffset(offset);
        r.setMaxBytes(max_bytes);
        r.setFromEnd(from_end);
      },
      timeout_, [this, done](const Status& s, proto::ReadJobLogsReply::Reader r) {
        if (!s.ok()) return done(Explain(s));
        JobLogChunk chunk;
        chunk.data = FromData(r.getData());
        chunk.next_offset = r.getNextOffset();
        chunk.job = FromWire(r.getJob());
        done(std::move(chunk));
      });
}

}  // namespace rayd::runtime
