#pragma once
// AutoscalerHost over the GCS: what the head's autoscaler reads and does.
//
// Demand it reads, as autoscaler::DemandUnit:
//   - placement groups waiting for room or for a node that fits (a gang each);
//   - actors waiting outside placement groups (their resources and label selector);
//   - tasks no node can hold, and tasks queued for room on a node for 2 s or more, from the
//     nodes' heartbeats (one unit per shape, counted);
//   - the KV entries rayd/runtime/autoscaler_kv.h names:
//       AutoscalerRequestKey  a floor (rayd::RequestResources, `rayd request-resources`); each
//                             bundle placed on its own;
//       AutoscalerSweepKey    work a sweep starts next, each gang a unit (rayd tune publishes
//                             its elastic trials' room to grow, as single-worker gangs);
//                             ignored once expired.
//     An entry that does not parse is skipped with a warning naming its key.
// Records go to store table "autoscaler"; the state is published as the dashboard feed
// (kAutoscalerFeedKind, kAutoscalerFeedName), with samples for /metrics, which `rayd status` reads too.
//
// Threading: the loop's thread only. `gcs` and `store` must outlive the host.

#include <set>

#include "autoscaler/autoscaler.h"
#include "gcs/gcs_server.h"
#include "gcs/table_store.h"
#include "rayd/runtime/autoscaler_kv.h"

namespace rayd::head {


class GcsAutoscalerHost : public autoscaler::AutoscalerHost {
 public:
  GcsAutoscalerHost(gcs::GcsServer& gcs, gcs::TableStore& store) : gcs_(gcs), store_(store) {}

  void Read(std::function<void(Result<autoscaler::ClusterReading>)> done) override;
  Status Drain(const std::string& node_id, int64_t deadline_ms,
               const std::string& reason) override;
  void SaveRecord(const std::string& key, const std::string& value) override;
  void DeleteRecord(const std::string& key) override;
  void LoadRecords(std::function<void(Result<std::map<std::string, std::string>>)> done) override;
  void Publish(const nlohmann::json& state) override;

 private:
  // The demand the GCS's own tables show (groups, actors, infeasible tasks).
  std::vector<autoscaler::DemandUnit> TableDemand() const;
  // The KV entries' demand, into `reading`.
  void KvDemand(const std::map<std::string, std::string>& entries,
                autoscaler::ClusterReading* reading);

  gcs::GcsServer& gcs_;
  gcs::TableStore& store_;
  std::set<std::string> warned_;  // KV keys already warned about
};

// The /metrics samples of an autoscaler state (rayd_autoscaler_nodes{node_type,state}, ...).
nlohmann::json AutoscalerMetrics(const nlohmann::json& state);

}  // namespace rayd::head
