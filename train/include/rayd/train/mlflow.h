#pragma once
// A writer of MLflow's file store (what `mlflow ui --backend-store-uri ./mlruns` reads), for the
// drivers of the Trainer and the Tuner. No MLflow client is involved: the files are written the
// way mlflow/store/tracking/file_store.py writes them.
//
//   <root>/0/meta.yaml                    the "Default" experiment, made with the store
//   <root>/.trash/                        where MLflow moves deleted experiments
//   <root>/<experiment id>/meta.yaml      artifact_location, creation_time, experiment_id,
//                                         last_update_time, lifecycle_stage, name
//   <root>/<experiment id>/<run id>/      run id: 32 lower-case hex digits (uuid4().hex)
//       meta.yaml                         artifact_uri, end_time, entry_point_name, experiment_id,
//                                         lifecycle_stage, run_id, run_name, run_uuid,
//                                         source_name, source_type, source_version, start_time,
//                                         status (RUNNING=1 ... KILLED=5), tags: [], user_id
//       params/<key>                      the value, no newline (a key with '/' nests dirs)
//       metrics/<key>                     one "<timestamp ms> <value> <step>" line per value
//       tags/<key>                        the value, no newline
//       artifacts/
// meta.yaml files are YAML maps with sorted keys in PyYAML's block style; experiment ids are
// numeric strings (the next free one), found by name in their meta.yaml.
//
// An MlflowStore and its runs are used by one thread at a time (the Fit thread, or the Tuner's
// controller). Two processes creating the same experiment name at once may each make one: the
// id directory is claimed atomically, the name is not.

#include <rayd/base/status.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace rayd::train {

// mlflow.entities.RunStatus, as meta.yaml stores it.
enum class MlflowRunStatus { kRunning = 1, kScheduled = 2, kFinished = 3, kFailed = 4, kKilled = 5 };

// A key as MLflow accepts it: alphanumerics, '_', '-', '.', ' ' and '/' kept, anything else
// replaced by '_'; a leading '/' or a ".." path part (which MLflow rejects as escaping the run
// directory) become '_' too; at most 250 characters; an empty key becomes "_".
std::string MlflowKey(std::string_view key);

// A config as params: objects are walked and their leaves named by their keys joined with '/'
// ({"opt": {"lr": 0.1}} -> "opt/lr"), as Ray Tune flattens configs; strings as they are, other
// values as JSON (0.1, true, [1, 2]); keys go through MlflowKey.
std::map<std::string, std::string> MlflowParams(const nlohmann::json& config);

// Milliseconds since the Unix epoch, now.
int64_t MlflowNowMs();

// One MLflow run, open for logging. Copyable value; the files are the state.
class MlflowRun {
 public:
  const std::string& id() const { return run_id_; }
  const std::string& experiment_id() const { return experiment_id_; }
  const std::string& dir() const { return dir_; }

  // params/<key>. MLflow's params are immutable: logging a key again with another value fails
  // (InvalidArgument); with the same value it does nothing.
  Status LogParam(const std::string& key, const std::string& value) const;
  Status LogParams(const std::map<std::string, std::string>& params) const;
  // tags/<key>, overwritten.
  Status SetTag(const std::string& key, const std::string& value) const;
  // Appends "<timestamp_ms> <value> <step>" to metrics/<key>.
  Status LogMetric(const std::string& key, double value, int64_t timestamp_ms,
                   int64_t step) const;
  Status LogMetrics(const std::map<std::string, double>& metrics, int64_t timestamp_ms,
                    int64_t step) const;
  // Rewrites meta.yaml with the final status and end_time.
  Status End(MlflowRunStatus status, int64_t end_ms = MlflowNowMs());

 private:
  friend class MlflowStore;
  Status WriteMeta() const;

  std::string dir_;
  std::string run_id_;
  std::string experiment_id_;
  std::string run_name_;
  std::string artifact_uri_;
  std::string user_id_;
  int64_t start_ms_ = 0;
  std::optional<int64_t> end_ms_;
  MlflowRunStatus status_ = MlflowRunStatus::kRunning;
};

class MlflowStore {
 public:
  // `tracking_uri`: a directory or a "file://" URI (relative paths against the working
  // directory). Creates the root, the Default experiment "0" and .trash when missing, as
  // MLflow's FileStore does. InvalidArgument for another scheme (http://, databricks, ...).
  static Result<MlflowStore> Open(const std::string& tracking_uri);

  const std::string& root() const { return root_; }

  // The id of the active experiment called `name`, created (the next numeric id) when none is.
  Result<std::string> GetOrCreateExperiment(const std::string& name) const;

  // A new RUNNING run in the experiment: meta.yaml, params/, metrics/, artifacts/, and the tags
  // MLflow's client sets (mlflow.runName, mlflow.user, mlflow.source.name, mlflow.source.type)
  // plus `tags`.
  Result<MlflowRun> CreateRun(const std::string& experiment_id, const std::string& run_name,
                              const std::map<std::string, std::string>& tags = {},
                              int64_t start_ms = MlflowNowMs()) const;

  // The run of the experiment whose tag `key` is `value`, reopened (status RUNNING, no end
  // time) so a resumed Fit or sweep goes on logging to it; NotFound when there is none.
  Result<MlflowRun> ReopenRun(const std::string& experiment_id, const std::string& key,
                              const std::string& value) const;

 private:
  explicit MlflowStore(std::string root) : root_(std::move(root)) {}
  Result<std::string> CreateExperiment(const std::string& name) const;

  std::string root_;  // absolute
};

// What the Trainer and the Tuner do for each of their runs: open the store, find or create the
// experiment `experiment_name`, reopen the run tagged rayd.run_dir = `run_dir` (a resumed Fit
// or trial goes on in its MLflow run, its params untouched) or create one named `run_name` with
// `params`; then set `tags`.
Result<MlflowRun> StartMlflowRun(const std::string& tracking_uri,
                                 const std::string& experiment_name, const std::string& run_name,
                                 const std::string& run_dir,
                                 const std::map<std::string, std::string>& params,
                                 const std::map<std::string, std::string>& tags);

// Logs one reported result: every metric, at step training_iteration (0 when absent), stamped
// with the result's `timestamp` (Unix seconds; now when absent).
Status LogMlflowResult(const MlflowRun& run, const std::map<std::string, double>& metrics);

}  // namespace rayd::train
