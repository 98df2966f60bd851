#pragma once
// A trial as the Tuner's controller tracks it, and the files it keeps for it. Used on the
// controller thread only.

#include <rayd/base/files.h>
#include <rayd/base/status.h>
#include <rayd/train/run_directory.h>
#include <rayd/tune/tuner.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rayd::tune::internal {

enum class TrialStatus { kPending, kRunning, kPaused, kTerminated, kError };
// "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR" (Ray's spelling).
const char* ToString(TrialStatus status);
std::optional<TrialStatus> TrialStatusFromString(const std::string& s);

struct Trial {
  std::string id;          // "<5 hex of the experiment>_<index, 5 digits>", e.g. "3fa2c_00004"
  int index = 0;
  std::string dir_name;    // "<train_loop>_<id>", under the experiment directory
  nlohmann::json config;   // current (PBT changes it)
  TrialStatus status = TrialStatus::kPending;
  Metrics last_result;
  std::vector<Metrics> history;
  std::optional<std::string> checkpoint;  // latest checkpoint directory (absolute)
  std::string error;
  int num_failures = 0;
  double time_total_s = 0;  // wall seconds the trial has run, over all its runs
  // What proposed its config: "" when the sweep made every trial at the start (random or grid
  // search), else the searcher's account ("tpe", "tpe (random start)").
  std::string searcher;

  TrialResult ToResult(const std::string& experiment_dir) const;
};

// A new trial: id "<tag>_<index, 5 digits>", directory "<name>_<id>".
Trial MakeTrial(const std::string& tag, int index, const std::string& name, nlohmann::json config);

// experiment_state.json: {"name", "trainable", "metric", "mode", "timestamp", "trials": [{id,
// index, dir_name, config, status, last_result, error, num_failures, checkpoint,
// time_total_s, searcher}]}. Histories are not stored: they come back from each trial's result.json.
// Written to a temporary file and renamed, so a crash leaves the previous state whole.
struct ExperimentState {
  std::string name;
  std::string trainable;
  std::string metric;
  std::string mode;
  std::vector<Trial> trials;
  // The searcher that proposes new trials ("" when every trial was made at the start), and its
  // state (searcher.h): {"searcher": {"type": ..., "state": ...}} in the file.
  std::string searcher;
  nlohmann::json searcher_state;
  // The scheduler's name and state (TrialScheduler::State), and how many of each trial's
  // results it had seen when the state was taken: {"scheduler": {"type", "state", "seen"}}.
  // A resume restores the state and gives it only the results after those.
  std::string scheduler;
  nlohmann::json scheduler_state;
  std::map<std::string, size_t> scheduler_seen;
};
Status SaveExperimentState(const std::string& experiment_dir, const ExperimentState& state);
// The same with `trials` in place of state.trials: the controller's own, never copied (they hold
// every result).
Status SaveExperimentState(const std::string& experiment_dir, const ExperimentState& state,
                           const std::vector<Trial>& trials);
// Whether the directory has an experiment_state.json (readable or not).
bool HasExperimentState(const std::string& experiment_dir);
// NotFound when the directory has no experiment_state.json; InvalidArgument naming the problem
// when it cannot be read. Fills each trial's history from its result.json (numeric fields).
Result<ExperimentState> LoadExperimentState(const std::string& experiment_dir);

// The numeric fields of each parsable line of a result.json; a missing file is an empty
// history. Lines that do not parse (a crash can cut the last one) are skipped.
std::vector<Metrics> ReadHistory(const std::string& result_file);
// Splits CSV text into records of fields (RFC 4180 quoting; fields may span lines).
std::vector<std::vector<std::string>> ParseCsv(const std::string& text);
// One CSV record of `fields`, each quoted (RFC 4180) only when it must be, ending in "\n".
std::string CsvLine(const std::vector<std::string>& fields);
// The shortest text that reads back as the same double; integral values without a fraction;
// "nan", "inf", "-inf".
std::string FormatDouble(double value);

// The files the Tuner keeps in a trial's run directory beside the Trainer's (result.json,
// params.json, checkpoints); their names come from train::RunDirectory.
class TrialFiles {
 public:
  explicit TrialFiles(std::string trial_dir)
      : dir_(std::move(trial_dir)), progress_(dir_.ProgressFile()) {}
  const std::string& dir() const { return dir_.path(); }
  // progress.csv: one row per result. Columns are the first result's keys in order (metrics
  // sorted, then config/<path> columns flattened from `config`); a later result with new keys
  // rewrites the file with the union of columns. Values missing in a row are empty.
  Status AppendProgress(const Metrics& result, const nlohmann::json& config);
  // error.txt (appended, one failure per block, with the time).
  Status AppendError(const std::string& error) const;
  // Rows are written by Flush (or Close), a batch in one write.
  Status Flush() { return progress_.Flush(); }
  // Flushes and closes progress.csv until the next row (a trial that is not running holds no
  // descriptor).
  Status Close() { return progress_.Close(); }

 private:
  train::RunDirectory dir_;
  std::vector<std::string> columns_;
  size_t rows_ = 0;        // rows in the file, besides its header
  nlohmann::json config_;  // the config of the last row, and its columns' values
  std::vector<std::pair<std::string, std::string>> config_values_;
  AppendFile progress_;
};

// The console table, Ray's layout:
//   == Status ==
//   Current time: 2026-11-22 22:40:01. Total running time: 12.3 s
//   ASHA: ... (scheduler summary)
//   Resources requested: 4/8 CPUs (2 trials x 2 workers)
//   Trials: 2 RUNNING | 3 TERMINATED | 1 ERROR | 2 PENDING
//   +-------------+------------+--------+-------+--------+------+---------+
//   | Trial name  | status     | lr     | hidden| iter   | loss | total s |
//   ...
// Config columns are the flattened config paths that differ between trials (at most 6);
// metric columns: training_iteration, the TuneConfig metric, then up to 2 other metrics; numbers
// with 4-5 significant digits. At most `max_rows` rows (the rest summarised in one line).
std::string RenderTable(const std::vector<Trial>& trials, const std::string& metric,
                        const std::string& scheduler_summary, const std::string& resources_line,
                        double elapsed_s, int max_rows = 20);

}  // namespace rayd::tune::internal
