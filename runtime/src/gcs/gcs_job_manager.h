#pragma once
// The GCS job table: one entry per driver (a program that called rayd::Init, or `rayd tune`).
//
// A job ends once: on MARK_JOB_FINISHED, on JOB_DRIVER_EXITED, or when the connection that
// added it closes (the driver died). Ending stores the job as dead and then runs the
// on-finished hook (the GCS uses it to clean up the job's actors and workers). Later endings
// of the same job only answer ok.
//
// A restarted head (tables in Redis) finds jobs alive that no connection of its own added:
// their drivers add them again when they reconnect (ADD_JOB under the same id). A job whose
// driver has not come back within the rebind grace is ended: its driver died while the head
// was away, and nothing else would end it.
//
// Threading: the GCS event loop only.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "gcs/table_store.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

class GcsJobManager {
 public:
  using OnJobFinished = std::function<void(const std::string& job_id)>;

  // `loop` and `store` must outlive the manager.
  GcsJobManager(EventLoop& loop, TableStore& store) : store_(store), rebind_timer_(loop) {}
  ~GcsJobManager() { guard_.Invalidate(); }
  // Reads the jobs an earlier head left alive and gives their drivers `rebind_grace` to add
  // them again before they are ended.
  void Start(Millis rebind_grace, std::function<void(Status)> done);
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // Set once, before serving.
  void SetOnJobFinished(OnJobFinished hook) { on_finished_ = std::move(hook); }

  // A client connection closed: ends every job it added.
  void OnConnectionClosed(uint64_t connection_id);

  // Ends `job_id` (see above). `done` gets NotFound for a job the table doesn't hold.
  void FinishJob(const std::string& job_id, std::function<void(Status)> done);

 private:
  using AddJobCall = rpc::Incoming<proto::Method::ADD_JOB>;
  void HandleAdd(const AddJobCall& call);
  void AddAgain(const AddJobCall& call, const std::string& id,
                const std::weak_ptr<rpc::Connection>& conn);
  template <proto::Method M>
  void HandleFinished(const rpc::Incoming<M>& call);
  void HandleGetAll(const rpc::Incoming<proto::Method::GET_ALL_JOBS>& call);
  void BindConnection(const std::string& job_id, const std::weak_ptr<rpc::Connection>& conn);

  TableStore& store_;
  OnJobFinished on_finished_;
  // Jobs ended by this GCS (the hook ran or is running).
  std::set<std::string> finished_;
  // Which driver connection added which jobs, to end them when it closes.
  std::unordered_map<uint64_t, std::vector<std::string>> jobs_by_connection_;
  // Jobs alive at Start that no driver has added again yet.
  std::set<std::string> awaiting_driver_;
  Timer rebind_timer_;
  // False once destroyed: store callbacks that arrive later do nothing.
  LifetimeGuard guard_;  // for late store callbacks
};

}  // namespace rayd::gcs
