// `rayd tune FILE.yaml` and `rayd train FILE.yaml`: a sweep or one training run from a YAML
// file, on an embedded cluster or (with --address / RAYD_ADDRESS) a running one.
//
// Built as librayd_cli_tune.so, which the `rayd` binary loads for these two commands only
// (tune_launcher.cc): it links LibTorch through rayd_train, whose loading costs ~0.5 s, and
// every other command, and every worker the binary becomes, must not pay that.
//
// The file is checked before anything starts. The train loops come from the example trainables
// shipped with rayd (found beside this binary, in the build tree or the install prefix) and the
// file's `libraries:`; the driver loads them here, and workers (this binary re-run in worker
// mode) load the same list from the job's code search path.

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "commands.h"
#include "rayd/api.h"
#include "rayd/runtime/cluster.h"
#include "rayd/train/command.h"
#include "rayd/train/trainer.h"
#include "rayd/tune/config_file.h"
#include "rayd/tune/simulator.h"
#include "rayd/tune/tuner.h"

namespace rayd::cli {
namespace {

namespace fs = std::filesystem;

// The local time now, as strftime's `format` writes it: run and experiment names.
std::string LocalTime(const char* format) {
  std::time_t now = std::time(nullptr);
  std::ostringstream out;
  out << std::put_time(std::localtime(&now), format);
  return out.str();
}

// Ray Tune's habit: a sweep (or run) whose directory holds an earlier one (the quick start's,
// say) goes to a directory of its own, `<name>_<start time>`, instead of refusing or replaying
// it. --resume continues the earlier one and --overwrite replaces it. Returns the name to run
// under; `taken`: whether storage/name holds an earlier one; `command` and `what` name the
// command and the thing in the line printed ("rayd tune", "sweep").
std::string FreshName(const fs::path& storage, const std::string& name, bool taken,
                      const std::string& command, const std::string& what) {
  if (!taken) return name;
  const std::string stamped = name + "_" + LocalTime("%Y-%m-%d_%H-%M-%S");
  std::string fresh = stamped;
  std::error_code ec;
  for (int n = 2; fs::exists(storage / fresh, ec); ++n) fresh = stamped + "_" + std::to_string(n);
  std::cerr << command << ": " << (storage / name).string() << " holds an earlier " << what
            << " (--resume continues it, --overwrite replaces it); this one goes to "
            << (storage / fresh).string() << "\n";
  return fresh;
}

std::string FreshExperimentName(const tune::TuneFile& file) {
  const fs::path storage(file.run.storage_path);
  return FreshName(storage, file.run.name,
                   tune::Tuner::CanRestore((storage / file.run.name).string()), "rayd tune",
                   "sweep");
}

// The example loops' libraries this rayd has, torch-free first (examples/CMakeLists.txt):
// build/cli/rayd finds build/examples/, <prefix>/bin/rayd finds <prefix>/lib/rayd/.
std::vector<std::string> ExampleLibraries() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  std::vector<std::string> found;
  for (const char* name : {"libexample_loops.so", "libexample_trainables.so"}) {
    for (const fs::path& dir : {exe.parent_path().parent_path() / "examples",
                                exe.parent_path().parent_path() / "lib" / "rayd"}) {
      if (fs::exists(dir / name, ec)) {
        found.push_back(fs::canonical(dir / name, ec).string());
        break;
      }
    }
  }
  return found;
}

// The library that holds the Trainer's rank actor (librayd_train.so, which this plugin links):
// every worker of a run loads it, whatever else it loads.
std::optional<std::string> TrainLibrary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&train::RegisterTrainLoop), &info) == 0 ||
      info.dli_fname == nullptr) {
    return std::nullopt;
  }
  std::error_code ec;
  std::string path = fs::canonical(info.dli_fname, ec).string();
  return ec ? std::nullopt : std::optional(path);
}

// Loads `libraries` into this process, and the example trainables too when `loop` is set and
// none of them registers it; returns the list workers load, or an error line. A command needs
// no loop library, and a loop of the user's needs no example: their ranks then never load the
// examples; a torch-free example loop loads only the torch-free examples (the others link
// LibTorch, ~1 s of CPU per rank process).
Result<std::vector<std::string>> LoadLibraries(const std::vector<std::string>& libraries,
                                               const std::optional<std::string>& loop) {
  std::vector<std::string> loaded;
  if (std::optional<std::string> train = TrainLibrary()) loaded.push_back(*train);
  auto load = [&loaded](const std::string& library) -> Status {
    if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      return Status::InvalidArgument("libraries: cannot load " + library + ": " + dlerror());
    }
    loaded.push_back(library);
    return Status::Ok();
  };
  for (const auto& library : libraries) RAYD_RETURN_IF_ERROR(load(library));
  // The examples' torch-free library first: a loop found there (toy_objective) keeps LibTorch
  // out of its ranks.
  for (const std::string& examples : ExampleLibraries()) {
    if (!loop || train::UnknownTrainLoop(*loop).empty()) break;
    RAYD_RETURN_IF_ERROR(load(examples));
  }
  return loaded;
}

// Fails with the registered names when `loop` is not among them.
Status CheckRegistered(const std::string& file, const std::string& key, const std::string& loop) {
  std::string unknown = train::UnknownTrainLoop(loop);
  if (unknown.empty()) return Status::Ok();
  return Status::NotFound(file + ": " + key + ": " + unknown +
                          "; add the library that registers it under libraries:");
}

std::string FormatMetrics(const std::map<std::string, double>& metrics) {
  std::ostringstream out;
  out << std::setprecision(5);
  bool first = true;
  for (const auto& [name, value] : metrics) {
    if (name == "timestamp" || name == "time_this_iter_s") continue;
    out << (first ? "" : " ") << name << "=" << value;
    first = false;
  }
  return out.str();
}

// ", 1 preemption" after the restarts, when a drain (`rayd drain`) took ranks away.
std::string Preemptions(const train::TrainResult& result) {
  if (result.preemptions == 0) return "";
  return ", " + std::to_string(result.preemptions) +
         (result.preemptions == 1 ? " preemption" : " preemptions");
}

// The Tuner that Ctrl-C stops (one per `rayd tune` process).
std::atomic<tune::Tuner*> g_interruptible{nullptr};

void OnInterrupt(int) {
  if (tune::Tuner* tuner = g_interruptible.load()) tuner->RequestStop();
  // A second Ctrl-C ends the process the usual way.
  std::signal(SIGINT, SIG_DFL);
}

RaydConfig DriverConfig(const std::string& address, const std::vector<std::string>& libraries) {
  RaydConfig config;
  config.address = address;
  config.code_search_path = libraries;
  // An embedded cluster (no address) gets the dashboard a head would have, if 8265 is free.
  config.dashboard_port = 8265;
  return config;
}

// Init for `rayd tune` and `rayd train`. Joining a running cluster (--address, RAYD_ADDRESS),
// it prints where the head's dashboard is, as an embedded cluster's start does.
void InitDriver(const std::string& address, const std::vector<std::string>& libraries) {
  Init(DriverConfig(address, libraries));
  const char* env = std::getenv("RAYD_ADDRESS");
  if (address.empty() && (env == nullptr || *env == '\0')) return;
  const internal::ClusterEndpoint endpoint = internal::DriverClusterEndpoint();
  Result<ClusterView> view = FetchClusterView(endpoint.gcs_address, endpoint.token, Millis(5000));
  if (view.ok() && !view->dashboard_url.empty()) {
    std::cerr << "rayd: dashboard at " << view->dashboard_url << "\n";
  }
}

// Trials whose last `metric` was NaN or infinite.
size_t Diverged(const tune::ResultGrid& grid, const std::string& metric) {
  size_t n = 0;
  for (const auto& trial : grid.trials()) {
    auto it = trial.metrics.find(metric);
    if (it != trial.metrics.end() && !std::isfinite(it->second)) ++n;
  }
  return n;
}

// A sweep with several objectives: prints its Pareto front (every trial on it, with the
// objectives' values and its config) and the hypervolume it dominates; false when it is empty.
bool PrintFront(const tune::ResultGrid& grid) {
  std::string how;
  for (const tune::Objective& o : grid.objectives()) {
    how += (how.empty() ? "" : ", ") + o.metric + (o.maximize ? " max" : " min");
  }
  std::string constraints;
  for (const tune::Constraint& c : grid.constraints()) {
    constraints += (constraints.empty() ? "; constraints: " : ", ") + c.text;
  }
  // An objective no trial ever reported (a typo, or a metric the loop does not report) scores
  // worst everywhere: the front would rank by the others alone and look valid. Refuse it.
  std::set<std::string> reported;
  for (const tune::TrialResult& t : grid.trials()) {
    for (const tune::Metrics& result : t.history) {
      for (const auto& [name, value] : result) {
        if (std::isfinite(value)) reported.insert(name);
      }
    }
  }
  for (const tune::Objective& o : grid.objectives()) {
    if (reported.count(o.metric)) continue;
    std::string names;
    for (const std::string& name : reported) names += (names.empty() ? "" : ", ") + name;
    std::cout << "No Pareto front (" << how << constraints << "): no trial ever reported the "
              << "objective " << o.metric << " (the metrics reported: "
              << (names.empty() ? "none" : names) << ")\n";
    return false;
  }
  const std::vector<size_t> front = grid.ParetoFront();
  if (front.empty()) {
    std::cout << "No Pareto front (" << how << constraints << "): "
              << (grid.constraints().empty() ? "no trial reported the objectives"
                                             : "no trial met every constraint")
              << "\n";
    return false;
  }
  std::vector<double> reference;
  const double volume = grid.FrontHypervolume(&reference);
  std::string at;  // the reference point, in the objectives' own units
  for (size_t d = 0; d < reference.size() && d < grid.objectives().size(); ++d) {
    const tune::Objective& o = grid.objectives()[d];
    std::ostringstream value;
    value << (o.maximize ? -reference[d] : reference[d]);
    at += (at.empty() ? "" : ", ") + o.metric + " " + value.str();
  }
  std::cout << "Pareto front: " << front.size() << " of " << grid.size() << " trials (" << how
            << constraints << "), hypervolume " << volume << " at (" << at << ") ("
            << grid.experiment_path() << "/pareto_front.csv; over time in progress.csv)\n";
  for (size_t i : front) {
    const tune::TrialResult& t = grid[i];
    tune::Metrics shown;
    for (const tune::Objective& o : grid.objectives()) {
      if (auto it = t.metrics.find(o.metric); it != t.metrics.end()) shown.insert(*it);
    }
    std::cout << "  " << t.trial_id << ": " << FormatMetrics(shown) << "  config: " << t.config.dump()
              << "\n";
  }
  return true;
}

// Prints the best trial, or a sweep's Pareto front; false when there is none (no trial
// reported the metric).
bool PrintBest(const tune::ResultGrid& grid, const tune::TuneFile& file) {
  if (!grid.objectives().empty()) return PrintFront(grid);
  try {
    const tune::TrialResult& best = grid.GetBestResult();
    std::cout << "Best trial " << best.trial_id << " (" << file.tune.metric << " "
              << file.tune.mode << "): " << FormatMetrics(best.metrics) << "\n"
              << "  config: " << best.config.dump() << "\n"
              << "  checkpoint: " << best.checkpoint.value_or("(none)") << "\n";
    return true;
  } catch (const RaydError& e) {
    std::cout << "No best trial: " << e.what() << "\n";
    return false;
  }
}

// `rayd tune FILE --simulate RESULTS`: the sweep's decisions on recorded curves, no cluster.
int RunSimulation(const TuneArgs& args, tune::TuneFile& file) {
  Result<tune::RecordedCurves> curves = tune::RecordedCurves::Load(args.simulate);
  if (!curves.ok()) {
    std::cerr << "rayd tune: --simulate: " << curves.status().message() << "\n";
    return 2;
  }
  try {
    const auto started = std::chrono::steady_clock::now();
    tune::Tuner tuner(file.trainable, file.param_space, file.tune, file.run);
    tune::Simulation sim = tuner.Simulate(*curves);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const tune::ResultGrid& grid = sim.grid;
    std::cout << "Simulated " << grid.size() << " trials, " << sim.max_concurrent
              << " at once, on " << curves->curves().size() << " recorded curves ("
              << args.simulate << "): " << grid.num_terminated() << " terminated, "
              << grid.num_errors() << " errors.\n"
              << "Budget: " << sim.iterations << " results replayed (training iterations); "
              << "simulated clock " << std::fixed << std::setprecision(1) << sim.simulated_s
              << " s; replayed in " << std::setprecision(2) << took << " s.\n"
              << std::defaultfloat;
    if (file.tune.simulate.workers > 0) {
      std::cout << "Workers: " << file.tune.simulate.workers << ", utilization " << std::fixed
                << std::setprecision(3) << sim.utilization << std::defaultfloat << ".\n";
    }
    if (const auto& a = file.tune.simulate.autoscaler; a.max_nodes > 0) {
      std::cout << "Autoscaled: " << std::fixed << std::setprecision(2)
                << sim.node_seconds / 3600 << " node-hours, peak " << sim.peak_nodes << " of "
                << a.max_nodes << " nodes (" << a.workers_per_node << " workers each), "
                << sim.launches << " launches (latency " << std::setprecision(0)
                << a.launch_latency_s << " s, idle timeout " << a.idle_timeout_s
                << " s), utilization " << std::setprecision(3) << sim.utilization
                << std::defaultfloat << ".\n";
    }
    // With several objectives the trace follows the first; the front's hypervolume over the
    // simulated clock is in the sweep's progress.csv.
    const std::string traced =
        file.tune.objectives.empty() ? file.tune.metric : file.tune.objectives[0].metric;
    std::cout << "Best " << traced << " first reported at " << std::fixed << std::setprecision(1)
              << sim.time_to_best_s << " s (simulated).\n"
              << std::defaultfloat;
    if (!file.tune.objectives.empty()) {
      std::cout << "The front's hypervolume over the simulated clock: "
                << fs::absolute(fs::path(grid.experiment_path()) / "progress.csv").string() << "\n";
    }
    std::cout << "Results in " << fs::absolute(grid.experiment_path()).string() << "\n";
    // Every replayed result on the simulated clock, for comparing sweeps (bench/elastic_sim.sh).
    {
      std::ofstream trace(fs::path(grid.experiment_path()) / "simulation_trace.csv");
      trace << "time_s,iterations,trial_id," << traced << "\n" << std::setprecision(10);
      for (const auto& e : sim.trace) {
        trace << e.time_s << "," << e.iterations << "," << e.trial_id << "," << e.value << "\n";
      }
    }
    for (const auto& trial : grid.trials()) {
      if (!trial.error.empty()) {
        std::cout << "  " << trial.trial_id << " failed: " << trial.error << "\n";
      }
    }
    PrintBest(grid, file);
    return grid.num_terminated() > 0 ? 0 : 1;
  } catch (const tune::ReplayError& e) {
    // Checked before anything started: blamed on the file's line, as its other errors are.
    const tune::ReplayProblem& problem = e.problem();
    std::string where = args.file;
    auto line = file.lines.find(problem.key);
    // A key the file leaves to its default (tune.metric) is blamed on its section.
    if (line == file.lines.end()) line = file.lines.find(problem.key.substr(0, problem.key.find('.')));
    if (line != file.lines.end()) where += ":" + std::to_string(line->second);
    std::cerr << "rayd tune: " << where << ": " << e.what() << "\n";
    return 2;
  } catch (const RaydError& e) {
    std::cerr << "rayd tune: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int RunTuneCommand(const TuneArgs& args) {
  tune::TuneFile file;
  try {
    file = tune::LoadTuneFile(args.file);
  } catch (const tune::ConfigFileError& e) {
    std::cerr << "rayd tune: " << e.what() << "\n";
    return 2;
  }
  if (!args.simulate.empty()) {
    if (args.resume) {
      std::cerr << "rayd tune: --simulate replays a sweep from its start; it cannot --resume\n";
      return 2;
    }
    fs::path experiment = fs::path(file.run.storage_path) / file.run.name;
    if (args.overwrite) {
      std::error_code ec;
      fs::remove_all(experiment, ec);
    }
    return RunSimulation(args, file);
  }
  Result<std::vector<std::string>> libraries = LoadLibraries(
      file.libraries,
      file.trainable.command ? std::nullopt : std::optional(file.trainable.train_loop));
  if (!libraries.ok()) {
    std::cerr << "rayd tune: " << args.file << ": " << libraries.status().message() << "\n";
    return 2;
  }
  if (Status known = file.trainable.command ? Status::Ok()
                                             : CheckRegistered(args.file, "trainable",
                                                               file.trainable.train_loop);
      !known.ok()) {
    std::cerr << "rayd tune: " << known.message() << "\n";
    return 2;
  }
  file.tune.resume = args.resume;
  if (file.tune.progress_interval_s <= 0) file.tune.progress_interval_s = args.progress_interval_s;
  fs::path experiment = fs::path(file.run.storage_path) / file.run.name;
  if (args.overwrite && !args.resume) {
    std::error_code ec;
    fs::remove_all(experiment, ec);
  } else if (!args.resume) {
    file.run.name = FreshExperimentName(file);
  }
  try {
    InitDriver(args.address, *libraries);
    tune::Tuner tuner(file.trainable, file.param_space, file.tune, file.run);
    tune::ResultGrid grid = [&] {
      // Ctrl-C stops this Tuner for as long as its Fit runs, however Fit ends.
      struct Interruptible {
        explicit Interruptible(tune::Tuner& tuner) {
          g_interruptible = &tuner;
          std::signal(SIGINT, OnInterrupt);
        }
        ~Interruptible() {
          std::signal(SIGINT, SIG_DFL);
          g_interruptible = nullptr;
        }
      } interruptible(tuner);
      return tuner.Fit();
    }();
    int unfinished = 0;
    for (const auto& trial : grid.trials()) {
      if (trial.status != "TERMINATED" && trial.status != "ERROR") ++unfinished;
    }
    std::cout << "\n" << grid.size() << " trials: " << grid.num_terminated() << " terminated, "
              << grid.num_errors() << " errors";
    if (unfinished > 0) std::cout << ", " << unfinished << " unfinished";
    std::cout << ". Results in " << fs::absolute(grid.experiment_path()).string() << "\n";
    for (const auto& trial : grid.trials()) {
      if (!trial.error.empty()) {
        std::cout << "  " << trial.trial_id << " failed: " << trial.error << "\n";
      }
    }
    if (const size_t diverged = Diverged(grid, file.tune.metric); diverged > 0) {
      std::cout << "  " << diverged << (diverged == 1 ? " trial" : " trials") << " ended with "
                << file.tune.metric << " NaN or infinite (diverged): ranked last, not failed\n";
    }
    if (unfinished > 0) {
      std::cout << "Interrupted: continue with `rayd tune " << args.file << " --resume`\n";
      Shutdown();
      return 130;
    }
    const bool best = PrintBest(grid, file);
    Shutdown();
    // As Ray Tune raises TuneError: a failed trial, or a sweep with no result to rank, fails
    // the command (scripts and CI see it), with one line saying why.
    if (!best) {
      std::cerr << "rayd tune: "
                << (file.tune.objectives.empty()
                        ? "no trial reported a finite " + file.tune.metric
                        : std::string("no trial is on a Pareto front (see above)"))
                << "\n";
      return 1;
    }
    if (grid.num_errors() > 0 && !args.allow_failed_trials) {
      std::cerr << "rayd tune: " << grid.num_errors() << " of " << grid.size()
                << " trials failed (listed above; --allow-failed-trials accepts them)\n";
      return 1;
    }
    return 0;
  } catch (const RaydError& e) {
    std::cerr << "rayd tune: " << e.what() << "\n";
    Shutdown();
    return 1;
  }
}

// The job of `rayd train -- CMD ARGS`, as torchrun would run it (one rank per worker).
Result<tune::TrainFile> CommandJob(const TrainArgs& args) {
  tune::TrainFile job;
  job.path = "rayd train";
  train::Command command;
  command.argv = args.command;
  command.launcher = args.launcher;
  command.working_dir = fs::current_path().string();
  job.command = std::move(command);
  job.config = nlohmann::json::parse(args.config_json, nullptr, /*allow_exceptions=*/false);
  if (!job.config.is_object()) {
    return Status::InvalidArgument("--config: expected a JSON object, got " + args.config_json);
  }
  job.scaling = {.num_workers = args.num_workers,
                 .min_workers = args.min_workers,
                 .use_gpu = args.use_gpu,
                 .resources_per_worker = {{"CPU", args.cpus_per_worker}},
                 .local_mode = args.local_mode};
  std::string name = args.name;
  if (name.empty()) name = "train_" + LocalTime("%Y%m%d_%H%M%S");
  job.run = {.name = name, .storage_path = args.storage_path};
  job.run.failure.max_failures = args.max_failures;
  job.run.failure.max_preemptions = args.max_preemptions;
  job.run.checkpoint.num_to_keep = args.num_to_keep;
  return job;
}

// The command-line options given with a train.yaml, applied over its keys; an error naming a
// flag that cannot apply to it. `applied` lists what changed, for one line on the console.
Status ApplyTrainFlags(const TrainArgs& args, tune::TrainFile& file,
                       std::vector<std::string>* applied) {
  for (const std::string& flag : args.given) {
    std::string what;
    if (flag == "--num-workers") {
      file.scaling.num_workers = args.num_workers;
      file.scaling.min_workers = args.min_workers;
      what = "scaling.num_workers " +
             (args.min_workers > 0 ? std::to_string(args.min_workers) + ":" : std::string()) +
             std::to_string(args.num_workers);
    } else if (flag == "--use-gpu") {
      file.scaling.use_gpu = args.use_gpu;
      what = std::string("scaling.use_gpu ") + (args.use_gpu ? "true" : "false");
    } else if (flag == "--local-mode") {
      file.scaling.local_mode = args.local_mode;
      what = std::string("scaling.local_mode ") + (args.local_mode ? "true" : "false");
    } else if (flag == "--cpus-per-worker") {
      file.scaling.resources_per_worker["CPU"] = args.cpus_per_worker;
      std::ostringstream cpus;
      cpus << args.cpus_per_worker;
      what = "scaling.resources_per_worker.CPU " + cpus.str();
    } else if (flag == "--launcher") {
      if (!file.command) {
        return Status::InvalidArgument(
            "--launcher: the file's trainable is the loop '" + file.train_loop +
            "', which no launcher starts (it applies to a command: `-- CMD` or "
            "trainable.command)");
      }
      file.command->launcher = args.launcher;
      what = "trainable.launcher " + args.launcher;
    } else if (flag == "--name") {
      file.run.name = args.name;
      what = "name " + args.name;
    } else if (flag == "--storage-path") {
      file.run.storage_path = args.storage_path;
      what = "run.storage_path " + args.storage_path;
    } else if (flag == "--max-failures") {
      file.run.failure.max_failures = args.max_failures;
      what = "run.failure.max_failures " + std::to_string(args.max_failures);
    } else if (flag == "--max-preemptions") {
      file.run.failure.max_preemptions = args.max_preemptions;
      what = "run.failure.max_preemptions " + std::to_string(args.max_preemptions);
    } else if (flag == "--num-to-keep") {
      file.run.checkpoint.num_to_keep = args.num_to_keep;
      what = "run.checkpoint.num_to_keep " + std::to_string(args.num_to_keep);
    } else if (flag == "--config") {
      const nlohmann::json config =
          nlohmann::json::parse(args.config_json, nullptr, /*allow_exceptions=*/false);
      if (!config.is_object()) {
        return Status::InvalidArgument("--config: expected a JSON object, got " + args.config_json);
      }
      file.config.update(config);  // its keys over the file's
      what = "config " + config.dump();
    } else {
      return Status::Internal(flag + ": not an option rayd train knows how to apply to a file");
    }
    applied->push_back(what);
  }
  return Status::Ok();
}

int RunTrainCommand(const TrainArgs& args) {
  tune::TrainFile file;
  if (!args.command.empty()) {
    Result<tune::TrainFile> job = CommandJob(args);
    if (!job.ok()) {
      std::cerr << "rayd train: " << job.status().message() << "\n";
      return 2;
    }
    file = std::move(job).value();
  } else {
    try {
      file = tune::LoadTrainFile(args.file);
    } catch (const tune::ConfigFileError& e) {
      std::cerr << "rayd train: " << e.what() << "\n";
      return 2;
    }
    std::vector<std::string> applied;
    if (Status s = ApplyTrainFlags(args, file, &applied); !s.ok()) {
      std::cerr << "rayd train: " << args.file << ": " << s.message() << "\n";
      return 2;
    }
    if (!applied.empty()) {
      std::string line;
      for (const std::string& a : applied) line += (line.empty() ? "" : ", ") + a;
      std::cout << "rayd train: over " << args.file << ": " << line << std::endl;
    }
  }
  Result<std::vector<std::string>> libraries =
      LoadLibraries(file.libraries, file.command ? std::nullopt : std::optional(file.train_loop));
  if (!libraries.ok()) {
    std::cerr << "rayd train: " << args.file << ": " << libraries.status().message() << "\n";
    return 2;
  }
  if (Status known = file.command ? Status::Ok()
                                  : CheckRegistered(args.file, "train_loop", file.train_loop);
      !known.ok()) {
    std::cerr << "rayd train: " << known.message() << "\n";
    return 2;
  }
  {
    const fs::path storage(file.run.storage_path);
    const fs::path earlier = storage / file.run.name;
    std::error_code ec;
    const bool taken = fs::exists(earlier / "params.json", ec) ||
                       fs::exists(earlier / "result.json", ec);
    if (args.overwrite) {
      fs::remove_all(earlier, ec);
    } else if (!args.resume) {
      file.run.name = FreshName(storage, file.run.name, taken, "rayd train", "run");
    } else if (taken) {
      std::cout << "rayd train: resuming " << fs::absolute(earlier).string()
                << " from its latest checkpoint" << std::endl;
    }
  }
  try {
    InitDriver(args.address, *libraries);
    if (file.scaling.num_workers == -1) {
      // HorovodRunner's np=-1: every GPU (the Trainer's -1), or without GPUs every CPU slot.
      file.scaling.num_workers = file.scaling.use_gpu
                                     ? train::ResolveNumWorkers(file.scaling)
                                     : train::WorkersThatFit(file.scaling, ClusterResources());
      if (file.scaling.num_workers < 1) {
        throw RaydError("--num-workers -1: the cluster holds no rank of " +
                        std::to_string(file.scaling.resources_per_worker.at("CPU")) + " CPUs");
      }
      std::cout << "rayd train: --num-workers -1: " << file.scaling.num_workers << " ranks"
                << std::endl;
    }
    train::Trainer trainer = file.command ? train::Trainer(*file.command, file.config,
                                                           file.scaling, file.run)
                                          : train::Trainer(file.train_loop, file.config,
                                                           file.scaling, file.run);
    train::FitOptions options;
    // An elastic run's waits and resizes, and restarts that leave a draining node.
    options.on_notice = [&file](const std::string& line) {
      std::cout << "rayd train: " << file.run.name << ": " << line << std::endl;
    };
    options.on_report = [](const train::ReportedResult& result) {
      auto iteration = result.metrics.find("training_iteration");
      std::cout << "[iteration "
                << (iteration == result.metrics.end() ? 0 : static_cast<int>(iteration->second))
                << "] " << FormatMetrics(result.metrics)
                << (result.checkpoint ? "  (checkpoint)" : "") << std::endl;
      return true;
    };
    train::TrainResult result = trainer.Fit(options);
    fs::path run_dir = fs::absolute(fs::path(file.run.storage_path) / file.run.name);
    if (!result.ok()) {
      std::cerr << "rayd train: " << file.run.name << " failed after " << result.restarts
                << " restarts" << Preemptions(result) << ": " << result.error << "\n";
      Shutdown();
      return 1;
    }
    std::cout << "Finished " << file.run.name << " (" << result.restarts << " restarts"
              << (result.resizes > 0 ? ", " + std::to_string(result.resizes) + " resizes" : "")
              << Preemptions(result) << "): " << FormatMetrics(result.metrics) << "\n"
              << "  results: " << run_dir.string() << "\n"
              << "  checkpoint: " << result.checkpoint.value_or("(none)") << "\n";
    Shutdown();
    return 0;
  } catch (const RaydError& e) {
    std::cerr << "rayd train: " << e.what() << "\n";
    Shutdown();
    return 1;
  }
}

}  // namespace rayd::cli

// The plugin's entry points (tune_launcher.cc looks them up by name).
extern "C" int rayd_cli_tune(const rayd::cli::TuneArgs* args) {
  return rayd::cli::RunTuneCommand(*args);
}
extern "C" int rayd_cli_train(const rayd::cli::TrainArgs* args) {
  return rayd::cli::RunTrainCommand(*args);
}
