#pragma once
// A run's directory on the driver (storage_path/name: a Trainer's run, or one trial of a
// sweep), in Ray's layout. The one place that names its files and writes the simple ones:
//
//   result.json          one JSON object per report (the Trainer's CheckpointStore appends)
//   params.json          what the run was asked to do (rewritten whole at each Fit)
//   progress.csv         the same results as a table (the Tuner's trial files)
//   error.txt            one block per failure (the Tuner)
//   checkpoint_NNNNNN/   persisted checkpoints (the CheckpointStore)
//
// Readers and writers elsewhere take the names from here, so that a name is written once.
// No LibTorch header: the Tuner uses it too.

#include <rayd/base/status.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace rayd::train {

class RunDirectory {
 public:
  explicit RunDirectory(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  std::string ResultFile() const { return path_ + "/result.json"; }
  std::string ParamsFile() const { return path_ + "/params.json"; }
  std::string ProgressFile() const { return path_ + "/progress.csv"; }
  std::string ErrorFile() const { return path_ + "/error.txt"; }
  // checkpoint_NNNNNN (six digits at least).
  static std::string CheckpointName(int index);
  std::string CheckpointDir(int index) const { return path_ + "/" + CheckpointName(index); }
  // The index of a directory named checkpoint_NNNNNN, or -1.
  static int CheckpointIndex(const std::string& name);

  // params.json: `params` pretty-printed, replacing the file whole (atomically).
  Status WriteParams(const nlohmann::json& params) const;
  // One line of result.json.
  Status AppendResult(const nlohmann::json& line) const;
  // A block of error.txt: "Failure # N (occurred at <ISO time>)", then `error`.
  Status AppendError(const std::string& error) const;

 private:
  std::string path_;
};

}  // namespace rayd::train
