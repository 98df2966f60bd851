#pragma once
// Replaying recorded learning curves: a sweep whose trials are not trained but played back
// from an earlier experiment's results, on a simulated clock (`rayd tune FILE --simulate
// RESULTS`). The Tuner's own controller, schedulers and searchers make every decision as they
// would on a cluster; only the runs are replaced. A sweep of hundreds of trials replays in well
// under a second and, with a seed, the same way each time, so schedulers and searchers are
// compared on many sweeps (bench/search).
//
//   auto curves = rayd::tune::RecordedCurves::Load("rayd_results/mlp-grid");
//   rayd::tune::Tuner tuner(trainable, space, tune, run);
//   rayd::tune::Simulation sim = tuner.Simulate(*curves);
//   sim.iterations;  // results replayed: the training budget the sweep spent
//
// Recorded curves come from
//   - a directory: every result.json under it (an experiment, or a storage path holding
//     several), each trial's config from the params.json beside it;
//   - a CSV table in progress.csv's layout (Ray Tune's too): `config/<a>/<b>` columns hold the
//     config, every other numeric column a metric, one row per result; rows with the same
//     `trial_id` (when the table has that column), or else consecutive rows with the same config
//     whose training_iteration rises, make one curve.
//
// A trial asking for config C plays a curve recorded for C, as far as the sweep's param_space
// determines C (keys the recording has beyond it are ignored). When several curves were recorded
// for C (repeated seeds), the trials asking for C take them in turn. Numbers match to 12
// significant digits, so 0.1 recorded and 0.1 + 2e-17 asked for are the same config.
//
// The clock: each result takes its recorded time_this_iter_s (else the step in time_total_s,
// else one second), counted from when its run started or resumed, scaled by the run's workers
// (TuneConfig::simulate: speedup of its size over the recording's; a resize adds restart_s);
// results of concurrent trials reach the controller in the order of their simulated times (ties by
// trial), each only after the controller has decided about the one before. A paused trial resumes
// where it stopped; a trial that PBT cloned plays its new config's curve from the donor's place.

#include <rayd/api/errors.h>
#include <rayd/base/status.h>
#include <rayd/tune/tuner.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rayd::tune {

struct RecordedCurve {
  nlohmann::json config;
  std::vector<Metrics> results;  // in order
  std::string source;            // the result.json, or "table.csv:LINE" of its first row
};

class RecordedCurves {
 public:
  RecordedCurves() = default;
  RecordedCurves(std::string source, std::vector<RecordedCurve> curves)
      : source_(std::move(source)), curves_(std::move(curves)) {}

  // A directory or a CSV table, as above; a one-line reason when it holds no curve, a line of
  // the table is malformed, or a result.json has no config.
  static Result<RecordedCurves> Load(const std::string& path);
  // The CSV form from text; `name` is what errors call it.
  static Result<RecordedCurves> ParseCsv(const std::string& text, const std::string& name);

  const std::string& source() const { return source_; }
  const std::vector<RecordedCurve>& curves() const { return curves_; }

 private:
  std::string source_;
  std::vector<RecordedCurve> curves_;
};

// Why a sweep cannot be replayed from `curves`, and the tune.yaml key to blame
// ("param_space.lr", "param_space", "tune.metric").
struct ReplayProblem {
  std::string key;
  std::string reason;
};

// What Tuner::Simulate throws when the sweep cannot be replayed (CheckReplayable's problem):
// what() reads "key: reason".
class ReplayError : public RaydError {
 public:
  explicit ReplayError(ReplayProblem problem)
      : RaydError(problem.key.empty() ? problem.reason : problem.key + ": " + problem.reason),
        problem_(std::move(problem)) {}
  const ReplayProblem& problem() const { return problem_; }

 private:
  ReplayProblem problem_;
};

// Checks, before anything starts, that every config the sweep can ask for has a recorded curve:
// each parameter must take finitely many values (choice, grid_search, randint, qrandint,
// quniform, qloguniform, constants), every value and every combination of them must have been
// recorded, and the recorded results must report the sweep's metric.
std::optional<ReplayProblem> CheckReplayable(const ParamSpace& space, const TuneConfig& tune,
                                             const RecordedCurves& curves);

// What a replayed sweep did besides its trials' results.
struct Simulation {
  ResultGrid grid;
  int64_t iterations = 0;  // results replayed, over every trial: the training budget spent
  double simulated_s = 0;  // the simulated clock when the last run ended
  // Every result, in the order the controller heard them.
  struct Event {
    double time_s;       // simulated
    int64_t iterations;  // results replayed so far, this one included
    std::string trial_id;
    double value;  // TuneConfig::metric in this result (NaN when it has none)
  };
  std::vector<Event> trace;
  int max_concurrent = 0;  // trials that ran at once at most (the sweep's limit)
  // TuneConfig::simulate.workers set: busy worker-seconds / (workers x the simulated clock).
  double utilization = 0;
  // The simulated time the sweep's best value (TuneConfig::metric, mode) was first reported.
  double time_to_best_s = 0;
  // TuneConfig::simulate.autoscaler set: node-seconds paid (from each launch to its node's
  // end, or to the end of the sweep), the most nodes at once, and the launches.
  double node_seconds = 0;
  int peak_nodes = 0;
  int launches = 0;
};

}  // namespace rayd::tune
