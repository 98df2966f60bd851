#pragma once
// JobManager: the jobs users submit with `rayd job submit` (Ray Jobs' model). The head runs
// each job's driver command itself, in a directory of its own under the session directory
// (jobs/<id>/working_dir, holding the working directory shipped with the submission), with its
// stdout and stderr in jobs/<id>/driver.log, and RAYD_ADDRESS, RAYD_TOKEN and
// RAYD_JOB_SUBMISSION_ID set so that `rayd tune`, `rayd train` and C++ drivers attach to this
// cluster.
//
// Each driver runs in a process group of its own under a small /bin/sh wrapper that writes the
// command's exit status to jobs/<id>/exit_code, so that a head restarted on Redis, which finds
// a job's driver still running but not its child any more, adopts it, watches it, and still
// learns how it ended. Records live in the store's "job_submissions" table: finished jobs and
// their logs outlive the head that ran them.
//
// Stopping (`rayd job stop`, and the head's shutdown) sends SIGTERM to the driver's group and
// SIGKILL after a grace period; when a driver exits, whatever it left in its group is killed.
//
// Threading: the loop's thread only.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gcs/table_store.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/rpc.h"
#include "rayd/runtime/cluster.h"

namespace rayd::head {

struct JobManagerConfig {
  std::string session_dir;
  std::string gcs_address;  // what the drivers get as RAYD_ADDRESS
  std::string token;
  Millis stop_grace{3000};   // SIGTERM to SIGKILL
  Millis adopted_poll{500};  // how often a driver the head did not start is looked for
};

class JobManager {
 public:
  // `loop` and `store` must outlive the manager.
  JobManager(EventLoop& loop, gcs::TableStore& store, JobManagerConfig config);
  ~JobManager();  // SIGKILLs every driver still running

  // Loads the jobs an earlier head recorded: running ones whose driver is still alive are
  // adopted, the others get the outcome their exit file tells.
  void Recover(std::function<void(Status)> done);
  void RegisterMethods(rpc::Dispatcher& dispatcher);
  // The address drivers get, once the head knows the port it bound.
  void set_gcs_address(const std::string& address) { config_.gcs_address = address; }
  // Stops every running driver, recording it STOPPED with `reason`, then runs `done` (after
  // the grace period at most, and the store's answers).
  void StopAll(const std::string& reason, std::function<void()> done);

 private:
  struct Job;

  void HandleSubmit(const rpc::Incoming<proto::Method::SUBMIT_JOB>& call);
  void HandleGet(const rpc::Incoming<proto::Method::GET_JOB_SUBMISSION>& call);
  void HandleList(const rpc::Incoming<proto::Method::LIST_JOB_SUBMISSIONS>& call);
  void HandleStop(const rpc::Incoming<proto::Method::STOP_JOB_SUBMISSION>& call);
  void HandleReadLogs(const rpc::Incoming<proto::Method::READ_JOB_LOGS>& call);

  // Starts `job`'s driver; the reason when it could not.
  Status Spawn(Job& job, const std::map<std::string, std::string>& env_vars);
  void Adopt(Job& job);
  // The driver ended: records its outcome and kills what is left of its group.
  void Finish(Job& job, int64_t exit_status, int term_signal);
  void FinishAdopted(Job& job);
  void RequestStop(Job& job, const std::string& reason);
  void Persist(const Job& job, std::function<void(Status)> done = nullptr);
  Job* Find(const std::string& id);
  static void OnProcessExit(uv_process_t* process, int64_t exit_status, int term_signal);

  EventLoop& loop_;
  gcs::TableStore& store_;
  JobManagerConfig config_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  Timer adopted_timer_;
  std::unique_ptr<Timer> stop_all_timer_;
  int pending_writes_ = 0;
};

}  // namespace rayd::head
