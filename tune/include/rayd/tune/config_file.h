#pragma once
// tune.yaml and train.yaml: what `rayd tune FILE` and `rayd train FILE` run (ARCHITECTURE.md
// §10). Loading checks everything before anything starts: an unknown key, a value of the wrong
// type, an empty or inverted domain, an unknown scheduler type throw ConfigFileError with the
// file, line and key path:
//   "tune.yaml:14: tune.scheduler.type: unknown scheduler 'ashaa' (one of fifo, asha,
//    hyperband, median_stopping, pbt)"
// Whether the trainable is registered is checked by the caller once libraries are loaded.
//
// train.yaml:
//   name: mlp                       # the run's directory under run.storage_path
//   train_loop: mlp_classifier
//   libraries: [path/libfoo.so]     # optional
//   config: {lr: 0.01, hidden: 128} # passed to the loop as JSON
//   scaling: {num_workers: 2, use_gpu: false, resources_per_worker: {CPU: 1},
//             placement_strategy: PACK, local_mode: false}   # num_processes: alias of num_workers
//   run: {storage_path: ./rayd_results, failure: {max_failures: 1, max_preemptions: -1},
//         checkpoint: {num_to_keep: 2, score_attribute: loss, score_order: min},
//         mlflow: {tracking_uri: ./mlruns, experiment_name: mlp}}  # optional; docs/tracking.md

#include <rayd/train/trainer.h>
#include <rayd/tune/tuner.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace rayd::tune {

class ConfigFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TuneFile {
  std::string path;                    // as given
  std::string name;                    // also run.name
  Trainable trainable;                 // trainable + scaling (default: 1 worker, 1 CPU)
  std::vector<std::string> libraries;  // relative entries resolved against the file's directory
  ParamSpace param_space;
  TuneConfig tune;
  rayd::train::RunConfig run;          // storage_path default "./rayd_results"
  // The line of each key in the file, by dotted path ("param_space.lr", "tune.metric"), for
  // errors found after loading (`--simulate`'s).
  std::map<std::string, int> lines;
};

struct TrainFile {
  std::string path;
  std::string train_loop;                       // or:
  std::optional<rayd::train::Command> command;  // `trainable: {command: ...}`
  std::vector<std::string> libraries;
  nlohmann::json config = nlohmann::json::object();
  rayd::train::ScalingConfig scaling;
  rayd::train::RunConfig run;          // name from `name`
};

TuneFile LoadTuneFile(const std::string& path);
TuneFile ParseTuneFile(const std::string& text, const std::string& path);
TrainFile LoadTrainFile(const std::string& path);
TrainFile ParseTrainFile(const std::string& text, const std::string& path);

// The keys the parser accepts, section by section, each section named as
// docs/config-reference.md heads it ("`scaling`", "`tune.scheduler` (type: asha)", ...): the
// reference is checked against these, so it cannot drift from the parser.
std::vector<std::pair<std::string, std::vector<std::string>>> FileKeys();

}  // namespace rayd::tune
