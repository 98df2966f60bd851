// The Tuner: checks a sweep's configuration, creates or resumes its trials, and hands them to
// the controller (controller.h), whose TrainerRunner runs each trial as a Trainer. See
// rayd/tune/tuner.h for what it promises.

#include <rayd/api.h>
#include <rayd/tune/simulator.h>
#include <rayd/tune/tuner.h>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <random>
#include <sstream>
#include <utility>

#include "console_table.h"
#include "controller.h"
#include "dashboard_feed.h"
#include "front_progress.h"
#include "mo_tpe.h"
#include "nsga2.h"
#include "pbt_lineage.h"
#include "replay_runner.h"
#include "stop_signal.h"
#include "trial.h"
#include "tensorboard_sink.h"
#include "trial_files_sink.h"
#include "searcher.h"
#include "trial_runner.h"
#include "trial_tracking.h"

namespace rayd::tune {
namespace {

namespace fs = std::filesystem;
using internal::Trial;

// Trials a simulation runs at once unless TuneConfig::max_concurrent_trials says: it has no
// cluster to fill, and a number that does not depend on the machine keeps it repeatable.
constexpr int kSimulatedConcurrency = 4;

std::string Hex5(uint64_t x) {
  std::ostringstream out;
  out << std::hex << std::setw(5) << std::setfill('0') << (x & 0xfffff);
  return out.str();
}

// How many trial gangs the cluster's resources hold at once (at least 1).
int GangsThatFit(const train::ScalingConfig& scaling, const std::map<std::string, double>& total) {
  const int workers = std::max(scaling.num_workers, 1);
  int gangs = 1 << 20;
  for (const auto& [name, amount] : train::WorkerBundle(scaling)) {
    if (amount <= 0) continue;
    auto have = total.find(name);
    double available = have == total.end() ? 0 : have->second;
    gangs = std::min(gangs, static_cast<int>(std::floor(available / (amount * workers) + 1e-9)));
  }
  return std::max(gangs, 1);
}

// New trials for the sweep: ids "<5 hex of the experiment>_<index>".
// What trial directories are named after: the train loop, or the command's name for itself.
std::string TrialName(const Trainable& trainable) {
  if (!trainable.train_loop.empty() || !trainable.command) return trainable.train_loop;
  return "command";
}

std::vector<Trial> NewTrials(const std::string& tag, const Trainable& trainable,
                             const ParamSpace& space, const TuneConfig& tune, uint64_t seed) {
  std::vector<Trial> trials;
  if (!std::holds_alternative<RandomSearchConfig>(tune.search)) return trials;  // made as they go
  std::vector<nlohmann::json> configs = GenerateVariants(space, tune.num_samples, seed);
  for (size_t i = 0; i < configs.size(); ++i) {
    trials.push_back(internal::MakeTrial(tag, static_cast<int>(i), TrialName(trainable),
                                         std::move(configs[i])));
  }
  return trials;
}

}  // namespace

Tuner::Tuner(Trainable trainable, ParamSpace param_space, TuneConfig tune, train::RunConfig run)
    : trainable_(std::move(trainable)),
      param_space_(std::move(param_space)),
      tune_(std::move(tune)),
      run_(std::move(run)),
      stop_(std::make_shared<internal::StopSignal>()) {}

void Tuner::RequestStop() noexcept { stop_->Raise(); }

bool Tuner::CanRestore(const std::string& experiment_dir) {
  return internal::HasExperimentState(experiment_dir);
}

namespace {

// The metric and mode a sweep's curves and its simulation trace follow: the TuneConfig's, or
// with several objectives the first objective's.
std::pair<std::string, std::string> CurveMetric(const TuneConfig& tune) {
  if (tune.objectives.empty()) return {tune.metric, tune.mode};
  return {tune.objectives[0].metric, tune.objectives[0].maximize ? "max" : "min"};
}

// What Fit and Simulate share once they know how trials run: the searcher, the trials (new, or
// loaded by a resume), the sinks, and the controller, on `loop` with `runner`.
ResultGrid RunSweep(EventLoop& loop, internal::TrialRunner& runner, const Trainable& trainable,
                    const ParamSpace& space, const TuneConfig& tune, const train::RunConfig& run,
                    internal::StopSignal& stop, std::unique_ptr<TrialScheduler> scheduler,
                    uint64_t seed, int max_concurrent, bool simulated) {
  std::error_code ec;
  std::string dir =
      fs::weakly_canonical(fs::absolute(fs::path(run.storage_path) / run.name), ec).string();
  fs::create_directories(dir, ec);
  if (ec) throw RaydError("cannot create " + dir + ": " + ec.message());
  // TPE and NSGA-II propose trials as slots free; random and grid search make them all now.
  std::unique_ptr<internal::Searcher> searcher;
  if (const auto* tpe = std::get_if<TpeConfig>(&tune.search)) {
    if (tune.metric.empty() && tune.objectives.empty()) {
      throw RaydError("the tpe searcher needs TuneConfig::metric or objectives");
    }
    try {
      // With an early-stopping scheduler, BOHB's rule: fit on the highest budget reached.
      std::optional<std::string> budget;
      if (const auto* asha = std::get_if<AshaConfig>(&tune.scheduler)) budget = asha->time_attr;
      if (const auto* hb = std::get_if<HyperBandConfig>(&tune.scheduler)) budget = hb->time_attr;
      if (const auto* pasha = std::get_if<PashaConfig>(&tune.scheduler)) {
        budget = pasha->time_attr;
      }
      // Several objectives or constraints: MOTPE (mo_tpe.h).
      if (!tune.objectives.empty()) {
        searcher = std::make_unique<internal::MoTpeSearch>(space, tune.objectives,
                                                           tune.constraints, *tpe,
                                                           tune.num_samples, seed, budget);
      } else {
        searcher = std::make_unique<internal::TpeSearch>(space, tune.metric, tune.mode, *tpe,
                                                         tune.num_samples, seed, budget);
      }
    } catch (const std::invalid_argument& e) {
      throw RaydError(std::string("invalid search options: ") + e.what());
    }
  } else if (const auto* nsga2 = std::get_if<Nsga2Config>(&tune.search)) {
    try {
      searcher = std::make_unique<internal::Nsga2Search>(space, tune.objectives, tune.constraints,
                                                         *nsga2, tune.num_samples, seed);
    } catch (const std::invalid_argument& e) {
      throw RaydError(std::string("invalid search options: ") + e.what());
    }
  }
  std::vector<Trial> trials;
  std::optional<std::map<std::string, size_t>> restored_seen;
  // A simulation names its trials the same way every time, as it replays them.
  std::string tag = simulated ? Hex5(seed) : Hex5(std::random_device{}());
  Result<internal::ExperimentState> previous = internal::LoadExperimentState(dir);
  if (tune.resume) {
    if (!previous.ok()) {
      throw RaydError("cannot resume " + dir + ": " + previous.status().message());
    }
    trials = std::move(previous->trials);
    if (!trials.empty()) tag = trials.front().id.substr(0, trials.front().id.find('_'));
    const std::string was = previous->searcher.empty() ? "random" : previous->searcher;
    const std::string now = searcher ? searcher->name() : "random";
    if (was != now) {
      throw RaydError("cannot resume " + dir + ": it was searched with " + was + ", not " + now);
    }
    if (searcher && !previous->searcher_state.is_null()) {
      try {
        searcher->Restore(previous->searcher_state);
      } catch (const std::exception& e) {
        throw RaydError("cannot resume " + dir + ": the " + now + " searcher's state: " +
                        e.what());
      }
    }
    // The same scheduler continues from its saved state; another one (the file changed its
    // type) is given every result again instead.
    if (previous->scheduler == scheduler->name() && !previous->scheduler_state.is_null()) {
      try {
        scheduler->Restore(previous->scheduler_state);
      } catch (const std::exception& e) {
        throw RaydError("cannot resume " + dir + ": the " + previous->scheduler +
                        " scheduler's state: " + e.what());
      }
      restored_seen = std::move(previous->scheduler_seen);
    }
  } else {
    if (Tuner::CanRestore(dir)) {  // also when its state cannot be read: never overwrite it
      throw RaydError("an experiment already exists at " + dir +
                      ": resume it, or choose another name or storage_path");
    }
    trials = NewTrials(tag, trainable, space, tune, seed);
  }
  // What happens to results besides the decisions, in this order. A simulation keeps the
  // files only: it has no cluster to publish to, and is over before a table would print.
  std::vector<std::unique_ptr<internal::ResultSink>> sinks;
  sinks.push_back(std::make_unique<internal::TrialFilesSink>(dir));
  sinks.push_back(std::make_unique<internal::TensorBoardSink>(dir));
  const internal::FrontProgress* front = nullptr;
  if (!tune.objectives.empty()) {
    auto progress = std::make_unique<internal::FrontProgress>(dir, tune.objectives,
                                                              tune.constraints,
                                                              tune.reference_point);
    front = progress.get();
    sinks.push_back(std::move(progress));
  }
  if (!simulated) {
    Result<internal::TrialTracking> tracking =
        internal::TrialTracking::Open(run, scheduler->name(), dir);
    if (!tracking.ok()) throw RaydError("MLflow tracking: " + tracking.status().message());
    sinks.push_back(std::make_unique<internal::TrialTracking>(std::move(tracking).value()));
    auto [metric, mode] = CurveMetric(tune);
    sinks.push_back(std::make_unique<internal::DashboardFeed>(
        run.name, std::move(metric), std::move(mode), scheduler->name(), dir, front));
  }
  if (const auto* pbt = std::get_if<PbtConfig>(&tune.scheduler); pbt && !pbt->log_dir.empty()) {
    sinks.push_back(std::make_unique<internal::PbtLineageLog>(pbt->log_dir));
  }
  if (tune.progress_interval_s > 0 && !simulated) {
    sinks.push_back(std::make_unique<internal::ConsoleTable>(trainable, tune.metric,
                                                             tune.progress_interval_s));
  }
  internal::Controller controller(loop, trainable, tune, run, std::move(scheduler), dir,
                                  std::move(sinks), stop, runner);
  if (searcher) controller.SetSearcher(std::move(searcher), tag, TrialName(trainable));
  if (restored_seen) controller.SchedulerRestored(std::move(*restored_seen));
  return controller.Run(std::move(trials), max_concurrent);
}

}  // namespace

// Checks what Fit and Simulate both need; returns the seed.
uint64_t Tuner::Prepare() {
  if (run_.name.empty() || run_.storage_path.empty()) {
    throw RaydError("the Tuner's RunConfig needs a name and a storage_path");
  }
  if (tune_.num_samples < 1) throw RaydError("num_samples must be at least 1");
  if (!tune_.objectives.empty() && !tune_.metric.empty()) {
    throw RaydError("TuneConfig: give metric/mode or objectives, not both");
  }
  if (!tune_.constraints.empty() && tune_.objectives.empty()) {
    throw RaydError("TuneConfig: constraints need objectives (one objective is enough)");
  }
  if (!tune_.reference_point.empty()) {
    if (tune_.reference_point.size() != tune_.objectives.size()) {
      throw RaydError("TuneConfig: reference_point has " +
                      std::to_string(tune_.reference_point.size()) + " values for " +
                      std::to_string(tune_.objectives.size()) + " objectives");
    }
    for (double x : tune_.reference_point) {
      if (!std::isfinite(x)) throw RaydError("TuneConfig: reference_point values must be finite");
    }
  }
  if (tune_.objectives.empty() && std::holds_alternative<Nsga2Config>(tune_.search)) {
    throw RaydError("the nsga2 searcher ranks by TuneConfig::objectives: give them (for one "
                    "metric use tpe)");
  }
  if (auto* pbt = std::get_if<PbtConfig>(&tune_.scheduler); pbt && pbt->log_dir.empty()) {
    pbt->log_dir = (fs::path(run_.storage_path) / run_.name).string();
  }
  return tune_.seed ? *tune_.seed : std::random_device{}();
}

ResultGrid Tuner::Fit() {
  if (!rayd::IsInitialized()) throw RaydError("rayd::tune::Tuner::Fit: call rayd::Init first");
  const uint64_t seed = Prepare();
  if (trainable_.command) {
    // Relative to where the sweep was started, as every rank runs it.
    if (trainable_.command->working_dir.empty()) {
      trainable_.command->working_dir = fs::current_path();
    }
    if (std::string why = train::CheckCommand(*trainable_.command); !why.empty()) {
      throw RaydError("trainable: " + why);
    }
  } else if (std::string unknown = train::UnknownTrainLoop(trainable_.train_loop);
             !unknown.empty()) {
    throw RaydError("trainable: " + unknown);
  }
  std::unique_ptr<TrialScheduler> scheduler = Scheduler(seed);

  // A gang larger than the whole cluster can never run: say so before starting anything. The
  // cluster is as large as its autoscaler may make it (MaxClusterResources), and as many
  // trials start at once as that holds: their waiting gangs are what it launches nodes for.
  std::map<std::string, double> total = rayd::MaxClusterResources();
  const int workers = std::max(trainable_.scaling.num_workers, 1);
  for (const auto& [name, amount] : train::WorkerBundle(trainable_.scaling)) {
    double have = total.count(name) ? total[name] : 0;
    if (amount * workers > have + 1e-9) {
      throw RaydError("a trial needs " + std::to_string(amount * workers) + " " + name + " (" +
                      std::to_string(workers) + " workers) but the cluster has " +
                      std::to_string(have));
    }
  }
  int max_concurrent = tune_.max_concurrent_trials > 0
                           ? tune_.max_concurrent_trials
                           : GangsThatFit(trainable_.scaling, total);
  // One thread drives every trial: this one, running `loop` (declared first: it outlives the
  // runs the runner holds).
  EventLoop loop;
  internal::TrainerRunner runner(loop, trainable_, run_);
  return RunSweep(loop, runner, trainable_, param_space_, tune_, run_, *stop_,
                  std::move(scheduler), seed, max_concurrent, /*simulated=*/false);
}

Simulation Tuner::Simulate(const RecordedCurves& curves) {
  const uint64_t seed = Prepare();
  if (std::optional<ReplayProblem> problem = CheckReplayable(param_space_, tune_, curves)) {
    throw ReplayError(std::move(*problem));
  }
  // A trial larger than the whole simulated cluster would wait for ever.
  const auto& model = tune_.simulate.autoscaler;
  const int most = model.max_nodes > 0 ? model.max_nodes * std::max(model.workers_per_node, 1)
                                       : tune_.simulate.workers;
  const int size = std::max(1, trainable_.scaling.min_workers > 0 ? trainable_.scaling.min_workers
                                                                  : trainable_.scaling.num_workers);
  if (most > 0 && size > most) {
    throw RaydError("tune.simulate: a trial needs " + std::to_string(size) +
                    " workers but the simulated cluster has at most " + std::to_string(most));
  }
  std::unique_ptr<TrialScheduler> scheduler = Scheduler(seed);
  Simulation simulation;
  simulation.max_concurrent =
      tune_.max_concurrent_trials > 0 ? tune_.max_concurrent_trials : kSimulatedConcurrency;
  EventLoop loop;
  internal::ReplayTable table(curves, param_space_);
  auto [metric, mode] = CurveMetric(tune_);
  internal::ReplayRunner runner(loop, table, std::move(metric), std::move(mode),
                                trainable_.scaling, tune_.simulate);
  simulation.grid = RunSweep(loop, runner, trainable_, param_space_, tune_, run_, *stop_,
                             std::move(scheduler), seed, simulation.max_concurrent,
                             /*simulated=*/true);
  runner.Fill(simulation);
  return simulation;
}

std::unique_ptr<TrialScheduler> Tuner::Scheduler(uint64_t seed) const {
  try {
    if (!tune_.objectives.empty()) {
      return MakeScheduler(tune_.scheduler, tune_.objectives, tune_.constraints, seed);
    }
    return MakeScheduler(tune_.scheduler, tune_.metric, tune_.mode, seed);
  } catch (const std::invalid_argument& e) {
    throw RaydError(std::string("invalid scheduler options: ") + e.what());
  }
}

}  // namespace rayd::tune
