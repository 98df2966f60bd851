#pragma once
// GcsClient: one persistent, authenticated connection to the GCS (an rpc::RpcClient, which
// reconnects with backoff) with the GCS's tables as typed operations on plain values. The core
// worker, the dashboard and the CLI (through rayd::ClusterClient) all read and write the
// cluster through it; each keeps one for as long as it runs instead of a connection per read.
//
// Every operation calls back exactly once, on the loop's thread, with the outcome; `timeout`
// bounds each call (0: no deadline). Calls made while disconnected wait for the connection
// until their deadline (RpcClient). Methods without an operation here are called with the
// typed RpcClient::Call<M>.
//
// Threading: the loop's thread only.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/job_submission.h"
#include "rayd/base/rpc.h"
#include "rayd/internal/runtime.h"
#include "rayd/runtime/cluster.h"

namespace rayd::runtime {

template <typename T>
using Done = std::function<void(Result<T>)>;

class GcsClient : public rpc::RpcClient {
 public:
  GcsClient(EventLoop& loop, std::string address, rpc::Options options,
            Millis timeout = Millis(15000), Backoff backoff = Backoff());

  Millis timeout() const { return timeout_; }

  // The cluster: its identity (ClusterView without nodes) and its node table.
  void GetClusterInfo(Done<ClusterView> done);
  void GetNodes(bool only_alive, Done<std::vector<NodeInfo>> done);
  // The cluster identity and every node, alive and dead (what `rayd status` shows).
  void GetClusterView(Done<ClusterView> done);
  // `rayd drain`: the node takes no new work and leaves at `deadline_ms` (unix ms).
  void DrainNode(const NodeId& node, int64_t deadline_ms, const std::string& reason,
                 Done<bool> done);
  void GetActors(Done<std::vector<ActorSummary>> done);
  void GetJobs(Done<std::vector<JobSummary>> done);

  // Placement groups. CreatePlacementGroup stores `options` as group `id` of `job`; Get finds
  // one by id, or by name in `ray_namespace` (nothing when there is none), waiting until it is
  // ready (or `timeout`) when `wait_until_ready`.
  void CreatePlacementGroup(const internal::PlacementGroupOptions& options,
                            const std::string& id, const JobId& job,
                            const std::string& ray_namespace, Done<bool> done);
  void RemovePlacementGroup(const std::string& id, Done<bool> done);
  void GetPlacementGroup(const std::string& id, const std::string& name,
                         const std::string& ray_namespace, bool wait_until_ready,
                         Millis timeout, Done<std::optional<internal::PlacementGroupInfo>> done);
  void GetPlacementGroups(Done<std::vector<internal::PlacementGroupInfo>> done);
  // Whether group `id` is ready (CREATED), waiting up to `timeout` for it (0: only looks;
  // negative: as long as it takes): false while pending; NotFound, Cancelled (removed) or
  // ResourceExhausted (failed) with the GCS's reason.
  void WaitPlacementGroupReady(const std::string& id, Millis timeout, Done<bool> done);

  // The namespaced key-value store. Put: whether the key was added (not there before); Del: how
  // many keys went; Prefix: every key under `prefix` with its value, the gets in flight at once.
  void KvPut(const std::string& ns, const std::string& key, const std::string& value,
             bool overwrite, Done<bool> done);
  void KvGet(const std::string& ns, const std::string& key,
             Done<std::optional<std::string>> done);
  void KvDel(const std::string& ns, const std::string& key, bool by_prefix, Done<int> done);
  void KvKeys(const std::string& ns, const std::string& prefix,
              Done<std::vector<std::string>> done);
  void KvPrefix(const std::string& ns, const std::string& prefix,
                Done<std::map<std::string, std::string>> done);

  // Jobs the head runs (`rayd job`; served by the head, not the GCS proper). SubmitJob ships
  // `files` (ReadWorkingDir's entries) as the job's working directory.
  void SubmitJob(const JobSubmitOptions& options, const std::vector<PackedEntry>& files,
                 Done<JobSubmissionInfo> done);
  void GetJobSubmission(const std::string& id, Done<JobSubmissionInfo> done);
  void ListJobSubmissions(Done<std::vector<JobSubmissionInfo>> done);
  void StopJobSubmission(const std::string& id, Done<JobSubmissionInfo> done);
  // At most `max_bytes` of the job's log from `offset`, or its last `max_bytes` (`from_end`).
  void ReadJobLogs(const std::string& id, uint64_t offset, uint32_t max_bytes, bool from_end,
                   Done<JobLogChunk> done);

 private:
  // A failed call that timed out while the client never connected says why it could not.
  Status Explain(const Status& status) const;

  Millis timeout_;
};

}  // namespace rayd::runtime
