// rayd::ClusterClient and the one-shot Fetch* reads (rayd/runtime/cluster.h): a ClusterReader
// on a private event loop, run until each answer arrives.

#include <memory>
#include <optional>

#include "common/cluster_reader.h"
#include "rayd/runtime/cluster.h"

namespace rayd {

struct ClusterClient::Impl {
  Impl(const std::string& address, const std::string& token, Millis timeout)
      : timeout(timeout), reader(loop, address, token, "cli", timeout) {}

  // Runs `read` (an operation of the reader, given its completion) and the loop until it
  // answers; the call's own deadline answers first. An answer that comes after we gave up (it
  // is failed when the connection closes, at the latest) lands in memory that is still there.
  template <typename T, typename Read>
  Result<T> Wait(Read read) {
    auto result = std::make_shared<std::optional<Result<T>>>();
    read(reader, [result](Result<T> r) { result->emplace(std::move(r)); });
    loop.RunUntil([&] { return result->has_value(); }, timeout + Millis(1000));
    if (!result->has_value()) {
      return Status::DeadlineExceeded("no answer from " + reader.gcs().address());
    }
    return std::move(**result);
  }

  Millis timeout;
  EventLoop loop;  // before the reader, which runs on it
  runtime::ClusterReader reader;
};

Result<std::unique_ptr<ClusterClient>> ClusterClient::Connect(const std::string& address,
                                                              const std::string& token,
                                                              Millis timeout) {
  auto impl = std::make_unique<Impl>(address, token, timeout);
  // A one-shot command should say at once that nothing listens there, not retry until its
  // deadline: the first outcome of connecting is the answer.
  std::optional<Status> first;
  runtime::GcsClient& gcs = impl->reader.gcs();
  gcs.SetOnStateChange([&first](const Status& s) {
    if (!first) first = s;
  });
  gcs.Connect();
  impl->loop.RunUntil([&] { return first.has_value(); }, timeout);
  gcs.SetOnStateChange(nullptr);
  RAYD_RETURN_IF_ERROR(first.value_or(Status::DeadlineExceeded("no answer from " + address)));
  return std::unique_ptr<ClusterClient>(new ClusterClient(std::move(impl)));
}

ClusterClient::ClusterClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterClient::~ClusterClient() = default;

Result<ClusterView> ClusterClient::Nodes() {
  return impl_->Wait<ClusterView>([](auto& r, auto done) { r.gcs().GetClusterView(done); });
}

Result<std::vector<ActorSummary>> ClusterClient::Actors() {
  return impl_->Wait<std::vector<ActorSummary>>(
      [](auto& r, auto done) { r.gcs().GetActors(done); });
}

Result<std::vector<JobSummary>> ClusterClient::Jobs() {
  return impl_->Wait<std::vector<JobSummary>>([](auto& r, auto done) { r.gcs().GetJobs(done); });
}

Result<std::vector<internal::PlacementGroupInfo>> ClusterClient::PlacementGroups() {
  return impl_->Wait<std::vector<internal::PlacementGroupInfo>>(
      [](auto& r, auto done) { r.gcs().GetPlacementGroups(done); });
}

Result<WorkersView> ClusterClient::Workers() {
  return impl_->Wait<WorkersView>([](auto& r, auto done) { r.GetWorkers(done); });
}

Result<ObjectsView> ClusterClient::Objects() {
  return impl_->Wait<ObjectsView>([](auto& r, auto done) { r.GetObjects(done); });
}

Result<std::map<std::string, std::string>> ClusterClient::KvPrefix(const std::string& ns,
                                                                   const std::string& prefix) {
  return impl_->Wait<std::map<std::string, std::string>>(
      [&](auto& r, auto done) { r.gcs().KvPrefix(ns, prefix, done); });
}

Status ClusterClient::KvPut(const std::string& ns, const std::string& key,
                            const std::string& value) {
  return impl_
      ->Wait<bool>([&](auto& r, auto done) { r.gcs().KvPut(ns, key, value, true, done); })
      .status();
}

Status ClusterClient::KvDel(const std::string& ns, const std::string& key) {
  return impl_->Wait<int>([&](auto& r, auto done) { r.gcs().KvDel(ns, key, false, done); })
      .status();
}

Result<JobSubmissionInfo> ClusterClient::SubmitJob(const JobSubmitOptions& options) {
  if (options.entrypoint.empty() || options.entrypoint.front().empty()) {
    return Status::InvalidArgument("no command to run: give it after `--`");
  }
  // Checked here too, before a large directory is read and shipped. The working directory:
  // the flag, else the runtime environment's, as Ray's.
  RAYD_ASSIGN_OR_RETURN(runtime::JobRuntimeEnv env,
                        runtime::ParseJobRuntimeEnv(options.runtime_env_json));
  const std::string working_dir =
      options.working_dir.empty() ? env.working_dir : options.working_dir;
  std::vector<runtime::PackedEntry> files;
  if (!working_dir.empty()) {
    RAYD_ASSIGN_OR_RETURN(files, runtime::ReadWorkingDir(working_dir, kMaxWorkingDirBytes));
  }
  return impl_->Wait<JobSubmissionInfo>(
      [&](auto& r, auto done) { r.gcs().SubmitJob(options, files, done); });
}

Result<JobSubmissionInfo> ClusterClient::GetJobSubmission(const std::string& submission_id) {
  return impl_->Wait<JobSubmissionInfo>(
      [&](auto& r, auto done) { r.gcs().GetJobSubmission(submission_id, done); });
}

Result<std::vector<JobSubmissionInfo>> ClusterClient::JobSubmissions() {
  return impl_->Wait<std::vector<JobSubmissionInfo>>(
      [](auto& r, auto done) { r.gcs().ListJobSubmissions(done); });
}

Status ClusterClient::DrainNode(const NodeId& node, int64_t deadline_ms,
                                const std::string& reason) {
  return impl_
      ->Wait<bool>([&](auto& r, auto done) { r.gcs().DrainNode(node, deadline_ms, reason, done); })
      .status();
}

Result<JobSubmissionInfo> ClusterClient::StopJobSubmission(const std::string& submission_id) {
  return impl_->Wait<JobSubmissionInfo>(
      [&](auto& r, auto done) { r.gcs().StopJobSubmission(submission_id, done); });
}

Result<JobLogChunk> ClusterClient::ReadJobLogs(const std::string& submission_id, uint64_t offset,
                                              uint32_t max_bytes) {
  return impl_->Wait<JobLogChunk>([&](auto& r, auto done) {
    r.gcs().ReadJobLogs(submission_id, offset, max_bytes, false, done);
  });
}

namespace {
// Connects, reads once with `read`, and disconnects.
template <typename Read>
auto ReadOnce(const std::string& address, const std::string& token, Millis timeout, Read read)
    -> decltype(read(std::declval<ClusterClient&>())) {
  RAYD_ASSIGN_OR_RETURN(auto client, ClusterClient::Connect(address, token, timeout));
  return read(*client);
}
}  // namespace

Result<ClusterView> FetchClusterView(const std::string& address, const std::string& token,
                                     Millis timeout) {
  return ReadOnce(address, token, timeout, [](ClusterClient& c) { return c.Nodes(); });
}

Result<std::vector<ActorSummary>> FetchActors(const std::string& address,
                                              const std::string& token, Millis timeout) {
  return ReadOnce(address, token, timeout, [](ClusterClient& c) { return c.Actors(); });
}

Result<std::vector<JobSummary>> FetchJobs(const std::string& address, const std::string& token,
                                          Millis timeout) {
  return ReadOnce(address, token, timeout, [](ClusterClient& c) { return c.Jobs(); });
}

Result<std::vector<internal::PlacementGroupInfo>> FetchPlacementGroups(
    const std::string& address, const std::string& token, Millis timeout) {
  return ReadOnce(address, token, timeout, [](ClusterClient& c) { return c.PlacementGroups(); });
}

Result<WorkersView> FetchWorkers(const std::string& address, const std::string& token,
                                 Millis timeout) {
  return ReadOnce(address, token, timeout, [](ClusterClient& c) { return c.Workers(); });
}

Result<ObjectsView> FetchObjects(const std::string& address, const std::string& token,
                                 Millis timeout) {
  return ReadOnce(address, token, timeout, [](ClusterClient& c) { return c.Objects(); });
}

Result<std::map<std::string, std::string>> FetchKvPrefix(const std::string& address,
                                                         const std::string& token,
                                                         const std::string& ns,
                                                         const std::string& prefix,
                                                         Millis timeout) {
  return ReadOnce(address, token, timeout,
                  [&](ClusterClient& c) { return c.KvPrefix(ns, prefix); });
}

}  // namespace rayd
