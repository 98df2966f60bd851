#pragma once
// The Tuner: runs a sweep of trials over a rayd cluster, each trial a Trainer (its own gang of
// `scaling.num_workers` rank actors in one placement group) running a registered train loop
// with the trial's config, as many at once as fit, under a trial scheduler.
//
//   rayd::tune::Tuner tuner({.train_loop = "mlp_classifier",
//                            .scaling = rayd::train::ScalingConfig{.num_workers = 2}},
//                           {{{"lr"}, rayd::tune::Domain::LogUniform(1e-4, 1e-1)}},
//                           {.metric = "loss", .mode = "min", .num_samples = 8,
//                            .scheduler = rayd::tune::AshaConfig{.max_t = 20}},
//                           {.name = "mlp-asha", .storage_path = "./rayd_results"});
//   rayd::tune::ResultGrid grid = tuner.Fit();
//   const rayd::tune::TrialResult& best = grid.GetBestResult();
//
// On disk (Ray Tune's layout), under storage_path/name/:
//   experiment_state.json        every trial's id, config, status, last result, error
//   <trial dir>/params.json      the trial's config (rewritten when PBT changes it)
//   <trial dir>/result.json      one JSON object per result (the Trainer's lines)
//   <trial dir>/progress.csv     the same as CSV
//   <trial dir>/checkpoint_NNNNNN/
//   <trial dir>/error.txt        why the trial failed
//   pbt_global.txt, pbt_policy_<trial>.txt (PBT)
// The state is written after every change, so a Tuner on the same storage_path/name with
// resume = true continues unfinished trials from their checkpoints and keeps finished ones.

#include <rayd/train/command.h>
#include <rayd/train/trainer.h>
#include <rayd/tune/schedulers.h>
#include <rayd/tune/search_space.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rayd::tune {

namespace internal {
class StopSignal;
}  // namespace internal
class RecordedCurves;
struct Simulation;

// What a trial runs.
struct Trainable {
  std::string train_loop;  // registered with RAYD_TRAIN_LOOP
  // A Trainer with these workers per trial. Default: one worker with {"CPU": 1} (a plain
  // function trainable that does not need PrepareModel).
  rayd::train::ScalingConfig scaling;
  // Or a command each rank runs as a process (a Python script, any framework's job):
  // rayd/train/command.h. When set, train_loop is only the trials' name ("command" if empty).
  std::optional<rayd::train::Command> command;
};

struct TuneConfig {
  std::string metric;  // what schedulers and GetBestResult rank by
  std::string mode = "min";
  // Several objectives at once (tune.yaml: `metric: [val_accuracy, params]`, `mode: [max, min]`),
  // in place of metric/mode: trials rank by Pareto dominance (rayd/tune/multi_objective.h), the
  // scheduler is fifo, asha (MO-ASHA), hyperband, pbt, or median_stopping on a scalarization
  // (pasha is refused), the search random, grid, tpe (MOTPE) or nsga2 (Nsga2Config), and the
  // sweep writes its Pareto front
  // (pareto_front.csv). Constraints over any reported metric ("latency_ms <= 5") rank a trial
  // that misses one below every trial that meets them all, by how far it misses; they take
  // this path with one objective too.
  std::vector<Objective> objectives;
  std::vector<Constraint> constraints;
  // Where the hypervolume of the front is taken (tune.yaml: `reference_point: [0.0, 1e6]`), one
  // value per objective in its own units, worse than any value that should count. Empty: the
  // worst value reported plus a tenth of the range, at the end (DerivedReferencePoint). The
  // sweep's progress.csv gives the hypervolume over time (front_progress.h).
  std::vector<double> reference_point;
  int num_samples = 1;
  // Trials running at once; 0: as many gangs as the cluster's resources hold at the start.
  int max_concurrent_trials = 0;
  std::optional<uint64_t> seed;  // unset: random
  // A trial stops when a reported metric reaches its value here (>=), e.g.
  // {"training_iteration": 20}.
  std::map<std::string, double> stop;
  SchedulerConfig scheduler = FifoConfig{};
  // How configs are chosen: all at the start (random/grid), or each from the results so far.
  SearchConfig search = RandomSearchConfig{};
  // Seconds between console table refreshes on stdout; 0: no table.
  double progress_interval_s = 0;
  // Continue the experiment at storage_path/name from its experiment_state.json.
  bool resume = false;
  // How `rayd tune --simulate` (Tuner::Simulate) models the cluster for elastic trials
  // (ScalingConfig::min_workers) and fixed ones alike.
  struct Simulated {
    int workers = 0;  // the cluster's workers (bundles); 0: as many as the trials ask for
    // speedup[w - 1]: how much faster an iteration runs on w workers than on one; past the
    // list's end, and by default, linear (w).
    std::vector<double> speedup;
    double restart_s = 0;  // what a resize costs the resized trial's next iteration
    // The workers the curves were recorded on; 0: the size each trial starts at (num_workers,
    // or an elastic trial's min_workers), so a fixed sweep replays at its recorded speed.
    int recorded_workers = 0;
    // An autoscaled cluster instead of `workers`: nodes of workers_per_node workers each,
    // launched when runs wait for workers (up to max_nodes, ready launch_latency_s later) and
    // terminated after idle_timeout_s idle (down to min_nodes, which are there from the start),
    // as `rayd start --head --autoscaler` does. max_nodes 0: no autoscaler.
    struct Autoscaler {
      int workers_per_node = 1;
      int min_nodes = 0;
      int max_nodes = 0;
      double launch_latency_s = 60;
      double idle_timeout_s = 60;
    } autoscaler;
  } simulate;
};

struct TrialResult {
  std::string trial_id;
  std::string path;        // the trial's directory
  nlohmann::json config;   // its final config
  std::string status;      // "TERMINATED", "ERROR", "PAUSED", "PENDING", "RUNNING"
  Metrics metrics;         // the last result
  std::vector<Metrics> history;  // every result, in order
  std::optional<std::string> checkpoint;  // latest checkpoint directory
  std::string error;       // empty unless it failed
  int num_failures = 0;
};

class ResultGrid {
 public:
  ResultGrid() = default;
  ResultGrid(std::string experiment_path, std::vector<TrialResult> trials, std::string metric,
             std::string mode, std::vector<Objective> objectives = {},
             std::vector<Constraint> constraints = {}, std::vector<double> reference_point = {})
      : experiment_path_(std::move(experiment_path)),
        trials_(std::move(trials)),
        metric_(std::move(metric)),
        mode_(std::move(mode)),
        objectives_(std::move(objectives)),
        constraints_(std::move(constraints)),
        reference_point_(std::move(reference_point)) {}

  size_t size() const { return trials_.size(); }
  const TrialResult& operator[](size_t i) const { return trials_[i]; }
  const std::vector<TrialResult>& trials() const { return trials_; }
  const std::string& experiment_path() const { return experiment_path_; }
  int num_errors() const;
  int num_terminated() const;
  // The trial whose last result is best by `metric`/`mode` (default: the TuneConfig's);
  // scope "last" as Ray's default. Throws rayd::RaydError when no trial reported the metric,
  // and when the sweep had several objectives and no metric is given (there is no one best:
  // name the rule, or take ParetoFront).
  const TrialResult& GetBestResult(const std::string& metric = "",
                                   const std::string& mode = "") const;
  // A sweep with objectives: the trial whose last result scores highest under `rule`
  // (Scalarize: a weighted sum or Chebyshev distance of the objectives, constraints first),
  // the first of equals. ParetoFront() is the other rule: every trial no other beats on all.
  // Throws rayd::RaydError for a sweep without objectives, a rule that weighs a metric that is
  // not an objective, or no trial that reported every objective the rule weighs.
  const TrialResult& GetBestResult(const Scalarization& rule) const;
  // A sweep with objectives: the trials on its Pareto front by their last results (indices into
  // trials(), ascending), among those that met every constraint (none when no trial did);
  // trials that reported no objective are left out. Empty without objectives.
  std::vector<size_t> ParetoFront() const;
  // The hypervolume ParetoFront dominates (rayd/tune/multi_objective.h, objectives as points to
  // minimise) up to the sweep's TuneConfig::reference_point, or when it has none a reference
  // point 10% of each objective's range beyond the worst value any trial reported for it (1
  // beyond when all reported the same; DerivedReferencePoint); `reference` receives it, to
  // minimise: comparable between sweeps only through the same reference. 0 for an empty front.
  double FrontHypervolume(std::vector<double>* reference = nullptr) const;
  // Whether trial `i`'s last result meets every constraint.
  bool Feasible(size_t i) const;
  const std::vector<Objective>& objectives() const { return objectives_; }
  const std::vector<Constraint>& constraints() const { return constraints_; }

 private:
  std::string experiment_path_;
  std::vector<TrialResult> trials_;
  std::string metric_;
  std::string mode_;
  std::vector<Objective> objectives_;
  std::vector<Constraint> constraints_;
  std::vector<double> reference_point_;  // in the objectives' units; empty: derived
};

class Tuner {
 public:
  Tuner(Trainable trainable, ParamSpace param_space, TuneConfig tune, rayd::train::RunConfig run);

  // Runs the sweep to the end on the current rayd cluster (rayd::Init first). Trial failures
  // land in the grid; throws RaydError for a bad configuration (unknown train loop, invalid
  // scheduler options, a gang larger than the cluster) before any trial starts.
  ResultGrid Fit();

  // Asks this Tuner's Fit to stop (Ctrl-C): running trials stop at their next result and stay
  // resumable with TuneConfig::resume; Fit then returns what it has (at once, when asked
  // before it started). Callable from any thread and from a signal handler (it sets a
  // lock-free flag and writes a byte to a pipe the controller's loop watches); other Tuners in
  // the process are not affected.
  void RequestStop() noexcept;

  // Runs the sweep without a cluster, each trial replaying a curve recorded for its config on a
  // simulated clock (rayd/tune/simulator.h); the same decisions Fit would make on those
  // results. max_concurrent_trials defaults to 4. Throws RaydError when a config the sweep can
  // ask for has no recorded curve ("param_space.lr: ..."), and as Fit does for bad options.
  Simulation Simulate(const RecordedCurves& curves);

  // Ray's Tuner.can_restore: whether `experiment_dir` (storage_path/name) holds a sweep's
  // saved state (experiment_state.json). Fit with TuneConfig::resume continues such a sweep;
  // Fit without it refuses to start there (`rayd tune` picks a new name instead).
  static bool CanRestore(const std::string& experiment_dir);

 private:
  uint64_t Prepare();
  std::unique_ptr<TrialScheduler> Scheduler(uint64_t seed) const;

  Trainable trainable_;
  ParamSpace param_space_;
  TuneConfig tune_;
  rayd::train::RunConfig run_;
  // Shared, so a Tuner stays movable; the signal itself never moves while Fit watches it.
  std::shared_ptr<internal::StopSignal> stop_;
};

}  // namespace rayd::tune
