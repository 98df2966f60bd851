#pragma once
// A training run seen from outside its driver: `rayd status` lists the cluster's runs and
// trials with their sizes, the dashboard serves them at /api/runs, and /metrics exports
// rayd_train_workers {run}. Each run publishes a dashboard feed (rayd/runtime/cluster.h) of
// kind "run" named after the run (RunConfig::name: a trial's directory under a sweep) as each
// attempt reserves its workers and again as it starts them, and removes it when the run ends.
// A driver that dies leaves its feed behind; its placement group goes with its job, which is
// how readers tell (`rayd status` lists only runs whose group is still there).
//
// The summary's members: "name", "run_dir", "trial_id" (under a sweep), "state" (RESERVING or
// RUNNING), "world_size", "min_workers" and "max_workers" (equal unless elastic), "mesh"
// ([data, pipeline, tensor]), "placement_group" (its id, hex), "attempt", "restarts",
// "resizes", "preemptions", "updated_ms", and the dashboard's "metrics".

#include <nlohmann/json.hpp>
#include <string>

namespace rayd::train::internal {

inline constexpr char kRunFeedKind[] = "run";

struct RunFeedState {
  std::string name;
  std::string run_dir;
  std::string trial_id;  // "" outside a sweep
  bool running = false;  // ranks started; else reserving
  int world_size = 0;
  int min_workers = 0;
  int max_workers = 0;
  int mesh[3] = {0, 1, 1};  // data, pipeline, tensor
  std::string placement_group;
  int attempt = 0;
  int restarts = 0;
  int resizes = 0;
  int preemptions = 0;
};

nlohmann::json RunFeedSummary(const RunFeedState& state);
// Puts the run's feed (replacing the last); a head that cannot take it costs one warning in
// the log and turns `disabled` on, so a run does not retry at every attempt.
void PublishRunFeed(const RunFeedState& state, bool* disabled);
void DeleteRunFeed(const std::string& name);

}  // namespace rayd::train::internal
