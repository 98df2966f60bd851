// `rayd job submit|status|logs|stop|list`: jobs the head runs for the user (Ray Jobs' habit).
// Each command talks to the head through rayd::ClusterClient; `submit` ships the working
// directory with the request and, unless --no-wait, follows the job's log to its end.

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/cluster_json.h"
#include "rayd/runtime/session.h"

namespace rayd::cli {
namespace {

// How often a followed log is read while nothing new comes: from kLogPollFirst, doubling to
// kLogPoll, so a short job's end shows at once and a long one costs the head 4 reads a second.
constexpr auto kLogPollFirst = std::chrono::milliseconds(10);
constexpr auto kLogPoll = std::chrono::milliseconds(250);

std::string Joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

std::string Clock(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = unix_ms / 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream out;
  out << std::put_time(&tm, "%Y-%m-%d %H:%M:%S");
  return out.str();
}

std::string Describe(const JobSubmissionInfo& job) {
  return "Job '" + job.submission_id + "' " + job.status + ": " + job.message;
}

// Prints the job's log from `offset` as it grows; with `follow`, until the job has ended and
// its log is read to the end. Returns the job as last seen.
Result<JobSubmissionInfo> StreamLogs(ClusterClient& cluster, const std::string& id, bool follow) {
  uint64_t offset = 0;
  auto poll = kLogPollFirst;
  while (true) {
    RAYD_ASSIGN_OR_RETURN(JobLogChunk chunk, cluster.ReadJobLogs(id, offset));
    std::cout << chunk.data << std::flush;
    offset = chunk.next_offset;
    if (!chunk.data.empty()) {  // more may be there already
      poll = kLogPollFirst;
      continue;
    }
    // Read to the end: done unless it still runs and we follow it.
    if (!follow || chunk.job.terminal()) return chunk.job;
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, std::chrono::milliseconds(kLogPoll));
  }
}

int Submit(const JobArgs& args, ClusterClient& cluster) {
  JobSubmitOptions options;
  options.entrypoint = args.command;
  options.working_dir = args.working_dir;
  options.runtime_env_json = args.runtime_env_json;
  options.submission_id = args.submission_id;
  auto job = cluster.SubmitJob(options);
  if (!job.ok()) return Fail("job submit", job.status().message());
  std::cerr << "Job '" << job->submission_id << "' submitted: " << Joined(job->entrypoint)
            << "\n";
  if (args.no_wait) {
    std::cout << job->submission_id << "\n";
    std::cerr << "Follow it with: rayd job logs " << job->submission_id << " --follow\n";
    return 0;
  }
  auto ended = StreamLogs(cluster, job->submission_id, true);
  if (!ended.ok()) return Fail("job submit", "lost the job's logs: " + ended.status().message());
  std::cerr << Describe(*ended) << "\n";
  return ended->status == "SUCCEEDED" ? 0 : 1;
}

int ShowStatus(const JobArgs& args, ClusterClient& cluster) {
  auto job = cluster.GetJobSubmission(args.submission_id);
  if (!job.ok()) return Fail("job status", job.status().message());
  if (args.format == "json") {
    std::cout << JobSubmissionJson(*job).dump(2) << "\n";
  } else {
    std::cout << Describe(*job) << "\n";
  }
  return 0;
}

int Logs(const JobArgs& args, ClusterClient& cluster) {
  auto job = StreamLogs(cluster, args.submission_id, args.follow);
  if (!job.ok()) return Fail("job logs", job.status().message());
  return 0;
}

int Stop(const JobArgs& args, ClusterClient& cluster) {
  auto job = cluster.StopJobSubmission(args.submission_id);
  if (!job.ok()) return Fail("job stop", job.status().message());
  if (args.no_wait) {
    std::cout << Describe(*job) << "\n";
    return 0;
  }
  // The head sends SIGTERM, then SIGKILL after a grace period: wait for the outcome.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!job->terminal() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(kLogPoll);
    job = cluster.GetJobSubmission(args.submission_id);
    if (!job.ok()) return Fail("job stop", job.status().message());
  }
  std::cout << Describe(*job) << "\n";
  return job->terminal() ? 0 : Fail("job stop", "its driver has not ended yet");
}

int List(const JobArgs& args, ClusterClient& cluster) {
  auto jobs = cluster.JobSubmissions();
  if (!jobs.ok()) return Fail("job list", jobs.status().message());
  if (args.format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& j : *jobs) out.push_back(JobSubmissionJson(j));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(28) << "SUBMISSION ID" << std::setw(11) << "STATUS"
            << std::setw(21) << "START" << std::setw(21) << "END" << "ENTRYPOINT\n";
  for (const auto& j : *jobs) {
    std::cout << std::setw(28) << j.submission_id << std::setw(11) << j.status << std::setw(21)
              << Clock(j.start_time_ms) << std::setw(21) << Clock(j.end_time_ms)
              << Joined(j.entrypoint) << "\n";
  }
  if (jobs->empty()) std::cout << "(no jobs submitted)\n";
  return 0;
}

}  // namespace

int RunJob(const JobArgs& args) {
  const std::string command = "job " + args.action;
  if (args.format != "table" && args.format != "json") {
    return Fail(command, "--format must be table or json, not '" + args.format + "'");
  }
  if (args.action != "submit" && args.action != "list" && args.submission_id.empty()) {
    return Fail(command, "give the job's submission id (rayd job list shows them)");
  }
  auto target = FindCluster(args.address, args.token, session::ResolveTempRoot(args.temp_dir));
  if (!target.ok()) return Fail(command, target.status().message());
  auto cluster = ClusterClient::Connect(target->address, target->token, Millis(60000));
  if (!cluster.ok()) {
    return Fail(command, "cannot reach the cluster at " + target->address + ": " +
                             cluster.status().message());
  }
  if (args.action == "submit") return Submit(args, **cluster);
  if (args.action == "status") return ShowStatus(args, **cluster);
  if (args.action == "logs") return Logs(args, **cluster);
  if (args.action == "stop") return Stop(args, **cluster);
  return List(args, **cluster);
}

}  // namespace rayd::cli
