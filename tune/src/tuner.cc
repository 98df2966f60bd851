// The Tuner's controller: trials as Trainer runs on their own threads, decisions on the
// controller thread (the one calling Fit). See rayd/tune/tuner.h for what it promises.
//
// Each running trial has a thread blocked in Trainer::Fit. Its on_report hook hands every
// persisted result to the controller as an event and waits for the verdict (continue or stop),
// so results are decided one at a time, in arrival order, by the one thread that owns the
// trials and the scheduler; the trial threads touch nothing else. When Fit returns, the thread
// posts a "done" event with what the run ended with, and the controller decides what the trial
// becomes: terminated, paused, errored, or (PBT) restarted from a donor's checkpoint.

#include <rayd/api.h>
#include <rayd/tune/tuner.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "dashboard_feed.h"
#include "trial.h"
#include "trial_tracking.h"

namespace rayd::tune {
namespace {

namespace fs = std::filesystem;
using internal::Trial;
using internal::TrialStatus;
using Clock = std::chrono::steady_clock;

constexpr auto kSaveInterval = std::chrono::milliseconds(500);

// What a trial thread tells the controller.
struct Event {
  enum class Kind { kResult, kDone } kind = Kind::kResult;
  size_t trial = 0;
  train::ReportedResult result;      // kResult
  std::promise<bool>* verdict = nullptr;  // kResult: true = continue
  train::TrainResult ended;          // kDone
};

// What the controller decided about a running trial, applied when its run ends.
enum class Pending { kNone, kStop, kPause, kExploit, kInterrupt };

struct Running {
  std::thread thread;
  Pending pending = Pending::kNone;
  std::string cloned;          // kExploit: the donor's checkpoint, copied into this trial
  nlohmann::json new_config;   // kExploit
  Clock::time_point started;
  std::shared_ptr<train::GangPool> pool;  // this slot's idle gang, reused trial after trial
};

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

class Controller {
 public:
  Controller(const Trainable& trainable, const TuneConfig& tune, const train::RunConfig& run,
             std::unique_ptr<TrialScheduler> scheduler, std::string experiment_dir,
             internal::TrialTracking tracking, const std::atomic<bool>& stop_requested)
      : stop_requested_(stop_requested),
        trainable_(trainable),
        tune_(tune),
        run_(run),
        scheduler_(std::move(scheduler)),
        dir_(std::move(experiment_dir)),
        tracking_(std::move(tracking)),
        feed_(run.name, tune.metric, tune.mode, scheduler_->name()) {}

  ResultGrid Run(std::vector<Trial> trials, int max_concurrent) {
    trials_ = std::move(trials);
    for (const Trial& t : trials_) files_.emplace_back((fs::path(dir_) / t.dir_name).string());
    max_concurrent_ = max_concurrent;
    started_ = Clock::now();
    for (size_t i = 0; i < trials_.size(); ++i) {
      Trial& t = trials_[i];
      if (t.status == TrialStatus::kTerminated || t.status == TrialStatus::kError) continue;
      scheduler_->OnTrialAdd(t.id, t.config);
      // A resumed experiment feeds the scheduler what unfinished trials reported before.
      for (const Metrics& m : t.history) {
        scheduler_->OnTrialResult(t.id, {m, t.config, t.checkpoint.has_value()});
        feed_.OnResult(t, m);
      }
      t.status = TrialStatus::kPending;
      Status written = files_[i].WriteParams(t.config);
      if (!written.ok()) throw RaydError(written.message());
    }
    Save();
    auto last_table = Clock::now() - std::chrono::hours(1);
    while (true) {
      if (!stop_requested_) LaunchWhatFits();
      // Gangs no new trial took: give their resources back, so trials still waiting for their
      // placement group (more slots than the cluster holds) get them.
      free_pools_.clear();
      if (running_.empty()) {
        if (stop_requested_ || !FinishStrandedPauses()) break;
        continue;
      }
      std::optional<Event> event = NextEvent(std::chrono::milliseconds(200));
      if (event) Handle(std::move(*event));
      if (save_pending_) Save();
      feed_.Publish(trials_, /*finished=*/false);
      if (stop_requested_) InterruptAll();
      if (tune_.progress_interval_s > 0 &&
          Clock::now() - last_table >= std::chrono::duration<double>(tune_.progress_interval_s)) {
        PrintTable();
        last_table = Clock::now();
      }
    }
    Save(/*now=*/true);
    feed_.Publish(trials_, /*finished=*/true);
    tracking_.Close();
    if (tune_.progress_interval_s > 0) PrintTable();
    std::vector<TrialResult> results;
    for (const Trial& t : trials_) results.push_back(t.ToResult(dir_));
    return ResultGrid(dir_, std::move(results), tune_.metric, tune_.mode);
  }

 private:
  // Starts trials while slots are free: paused trials the scheduler wants back first, then
  // PBT's restarts (pending trials with a checkpoint), then new ones in order.
  void LaunchWhatFits() {
    while (static_cast<int>(running_.size()) < max_concurrent_) {
      std::optional<size_t> next;
      if (std::optional<std::string> resume = scheduler_->ChooseTrialToResume()) {
        next = IndexOf(*resume);
        if (next && running_.count(*next)) {
          // Told to pause but its run has not ended yet: it resumes as soon as it has.
          resume_when_paused_.insert(*next);
          continue;
        }
        if (next && trials_[*next].status != TrialStatus::kPaused) next.reset();
      }
      for (size_t i = 0; !next && i < trials_.size(); ++i) {
        if (trials_[i].status == TrialStatus::kPending && trials_[i].checkpoint) next = i;
      }
      for (size_t i = 0; !next && i < trials_.size(); ++i) {
        if (trials_[i].status == TrialStatus::kPending) next = i;
      }
      if (!next) return;
      Start(*next);
    }
  }

  // Nothing runs: resume a paused trial the scheduler still wants, else the paused trials are
  // finished (the scheduler will not bring them back). Returns false when the sweep is over.
  bool FinishStrandedPauses() {
    bool paused = false;
    for (const Trial& t : trials_) {
      if (t.status == TrialStatus::kPending) return true;
      paused = paused || t.status == TrialStatus::kPaused;
    }
    if (!paused) return false;
    if (std::optional<std::string> resume = scheduler_->ChooseTrialToResume()) {
      std::optional<size_t> index = IndexOf(*resume);
      if (index && trials_[*index].status == TrialStatus::kPaused) {
        Start(*index);
        return true;
      }
    }
    for (Trial& t : trials_) {
      if (t.status != TrialStatus::kPaused) continue;
      t.status = TrialStatus::kTerminated;
      scheduler_->OnTrialComplete(t.id);
      tracking_.OnStatus(t);
    }
    Save();
    return false;
  }

  std::optional<size_t> IndexOf(const std::string& id) const {
    for (size_t i = 0; i < trials_.size(); ++i) {
      if (trials_[i].id == id) return i;
    }
    return std::nullopt;
  }

  void Start(size_t index) {
    Trial& t = trials_[index];
    t.status = TrialStatus::kRunning;
    Save();
    Running& r = running_[index];
    r = Running{};
    r.started = Clock::now();
    tracking_.OnStart(t);
    train::RunConfig run = run_;
    run.name = t.dir_name;
    run.storage_path = dir_;
    // The sweep tracks its trials itself (one MLflow run per trial, over all of its Fits).
    run.mlflow_tracking_uri.clear();
    train::Trainer trainer(trainable_.train_loop, t.config, trainable_.scaling, run);
    train::FitOptions options;
    options.write_params = false;
    if (free_pools_.empty()) free_pools_.push_back(std::make_shared<train::GangPool>());
    r.pool = std::move(free_pools_.back());
    free_pools_.pop_back();
    options.reuse = r.pool;
    options.result_fields = {{"trial_id", t.id}, {"config", t.config}};
    options.on_report = [this, index](const train::ReportedResult& result) {
      std::promise<bool> verdict;
      std::future<bool> answer = verdict.get_future();
      Post({Event::Kind::kResult, index, result, &verdict, {}});
      return answer.get();
    };
    r.thread = std::thread([this, index, trainer = std::move(trainer),
                            options = std::move(options)]() mutable {
      train::TrainResult ended;
      try {
        ended = trainer.Fit(options);
      } catch (const std::exception& e) {
        ended.error = e.what();
      }
      Post({Event::Kind::kDone, index, {}, nullptr, std::move(ended)});
    });
  }

  void Post(Event event) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(event));
    }
    posted_.notify_one();
  }

  std::optional<Event> NextEvent(std::chrono::milliseconds wait) {
    std::unique_lock lock(mu_);
    if (!posted_.wait_for(lock, wait, [this] { return !events_.empty(); })) return std::nullopt;
    Event event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

  void Handle(Event event) {
    if (event.kind == Event::Kind::kResult) {
      event.verdict->set_value(OnResult(event.trial, event.result));
    } else {
      OnDone(event.trial, event.ended);
    }
  }

  // Records a result and decides whether the trial goes on.
  bool OnResult(size_t index, const train::ReportedResult& result) {
    Trial& t = trials_[index];
    Running& r = running_.at(index);
    t.last_result = result.metrics;
    t.history.push_back(result.metrics);
    if (result.checkpoint) t.checkpoint = result_checkpoint_[index] = *result.checkpoint;
    auto total = result.metrics.find("time_total_s");
    if (total != result.metrics.end()) t.time_total_s = total->second;
    Status logged = files_[index].AppendProgress(result.metrics, t.config);
    if (!logged.ok()) std::cerr << "rayd tune: " << logged.message() << "\n";
    tracking_.OnResult(t, result.metrics);
    feed_.OnResult(t, result.metrics);
    if (r.pending != Pending::kNone) return false;  // already on its way out
    if (stop_requested_) {
      r.pending = Pending::kInterrupt;
      return false;
    }
    for (const auto& [metric, limit] : tune_.stop) {
      auto value = result.metrics.find(metric);
      if (value != result.metrics.end() && value->second >= limit) {
        r.pending = Pending::kStop;
        return false;
      }
    }
    Decision decision =
        scheduler_->OnTrialResult(t.id, {result.metrics, t.config, t.checkpoint.has_value()});
    switch (decision.action) {
      case Decision::Action::kContinue: return true;
      case Decision::Action::kStop: r.pending = Pending::kStop; return false;
      case Decision::Action::kPause: r.pending = Pending::kPause; return false;
      case Decision::Action::kExploit:
        if (Status cloned = Clone(index, decision.donor, &r.cloned); !cloned.ok()) {
          // Keep training as it was rather than lose the trial.
          std::cerr << "rayd tune: PBT exploit of " << t.id << " skipped: " << cloned.message()
                    << "\n";
          return true;
        }
        r.pending = Pending::kExploit;
        r.new_config = decision.config;
        return false;
    }
    return true;
  }

  // A trial's run ended: decide what the trial becomes.
  void OnDone(size_t index, const train::TrainResult& ended) {
    Running& r = running_.at(index);
    r.thread.join();
    free_pools_.push_back(std::move(r.pool));
    Pending pending = r.pending;
    std::string cloned = r.cloned;
    nlohmann::json new_config = r.new_config;
    running_.erase(index);
    Trial& t = trials_[index];
    if (ended.checkpoint) t.checkpoint = ended.checkpoint;
    t.num_failures += ended.restarts;
    if (!ended.stopped && !ended.ok()) {
      // The Trainer already retried within max_failures: the trial failed for good.
      ++t.num_failures;
      t.status = TrialStatus::kError;
      t.error = ended.error;
      Status logged = files_[index].AppendError(ended.error);
      if (!logged.ok()) std::cerr << "rayd tune: " << logged.message() << "\n";
      scheduler_->OnTrialError(t.id);
    } else if (pending == Pending::kPause) {
      t.status = resume_when_paused_.erase(index) ? TrialStatus::kPending : TrialStatus::kPaused;
    } else if (pending == Pending::kInterrupt) {
      t.status = TrialStatus::kPending;  // resumed from its checkpoint by `--resume`
    } else if (pending == Pending::kExploit) {
      // Restarted first by LaunchWhatFits, from the clone, with the explored config.
      t.checkpoint = cloned;
      t.config = std::move(new_config);
      Status written = files_[index].WriteParams(t.config);
      if (!written.ok()) std::cerr << "rayd tune: " << written.message() << "\n";
      t.status = TrialStatus::kPending;
    } else {
      t.status = TrialStatus::kTerminated;
      scheduler_->OnTrialComplete(t.id);
    }
    tracking_.OnStatus(t);
    Save();
  }

  // PBT: copies the donor's checkpoint into the trial's run directory as its newest, while the
  // trial's run is held in its on_report (so nothing else writes there); the trial's next run
  // resumes from it. The copy is of the checkpoint of the donor's last result (what the
  // scheduler ranked), even when the donor was itself exploited since; failing that (pruned by
  // num_to_keep), its latest. Checkpoints live on the driver (the Trainer ships every rank-0
  // checkpoint here) and reach the restarted ranks through their actor calls: no shared
  // filesystem.
  Status Clone(size_t index, const std::string& donor_id, std::string* cloned) {
    std::optional<size_t> donor = IndexOf(donor_id);
    if (!donor || !trials_[*donor].checkpoint) {
      return Status::NotFound("donor trial " + donor_id + " has no checkpoint");
    }
    const std::string target = (fs::path(dir_) / trials_[index].dir_name).string();
    Result<std::string> added = Status::NotFound("no ranked checkpoint");
    if (auto ranked = result_checkpoint_.find(*donor); ranked != result_checkpoint_.end()) {
      added = train::AddCheckpoint(target, ranked->second);
    }
    if (!added.ok()) added = train::AddCheckpoint(target, *trials_[*donor].checkpoint);
    if (!added.ok()) return added.status();
    *cloned = *added;
    return Status::Ok();
  }

  // Ctrl-C: stop every running trial at its next result; they stay resumable.
  void InterruptAll() {
    for (auto& [index, r] : running_) {
      if (r.pending == Pending::kNone) r.pending = Pending::kInterrupt;
    }
  }

  // Writes experiment_state.json, at most every kSaveInterval unless `now` (the file holds every
  // trial, so writing it on every change would cost O(trials) per change); Run writes it last
  // whatever happened. Between writes a crash loses only status changes: results and
  // checkpoints are on disk already, and a resumed trial that had finished resumes from its last
  // checkpoint and ends at once.
  void Save(bool now = false) {
    if (!now && Clock::now() - last_save_ < kSaveInterval) {
      save_pending_ = true;
      return;
    }
    internal::ExperimentState state{run_.name, trainable_.train_loop, tune_.metric, tune_.mode,
                                    trials_};
    Status saved = internal::SaveExperimentState(dir_, state);
    if (!saved.ok()) std::cerr << "rayd tune: " << saved.message() << "\n";
    last_save_ = Clock::now();
    save_pending_ = false;
  }

  void PrintTable() {
    const int workers = std::max(trainable_.scaling.num_workers, 1);
    const int running = static_cast<int>(running_.size());
    std::ostringstream resources;
    resources << "Resources requested: ";
    if (running == 0) resources << "none";
    bool first = true;
    for (const auto& [name, amount] : train::WorkerBundle(trainable_.scaling)) {
      if (running == 0) break;
      resources << (first ? "" : ", ") << amount * workers * running << " " << name;
      first = false;
    }
    resources << " (" << running << " trials x " << workers << " workers running; at most "
              << max_concurrent_ << " at once)";
    double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
    std::cout << internal::RenderTable(trials_, tune_.metric, scheduler_->Summary(),
                                       resources.str(), elapsed)
              << std::endl;
  }

  const std::atomic<bool>& stop_requested_;  // the Tuner's: set by RequestStop
  const Trainable& trainable_;
  const TuneConfig& tune_;
  const train::RunConfig& run_;
  std::unique_ptr<TrialScheduler> scheduler_;
  std::string dir_;
  internal::TrialTracking tracking_;
  internal::DashboardFeed feed_;
  std::vector<Trial> trials_;
  std::vector<internal::TrialFiles> files_;
  std::map<size_t, Running> running_;
  std::map<size_t, std::string> result_checkpoint_;  // the checkpoint of each trial's last result
  std::set<size_t> resume_when_paused_;  // promoted while their pausing run was still ending
  // One per slot: the gang a finished trial leaves for the next (Ray Tune's reuse_actors).
  std::vector<std::shared_ptr<train::GangPool>> free_pools_;
  int max_concurrent_ = 1;
  Clock::time_point started_;
  Clock::time_point last_save_;
  bool save_pending_ = false;

  std::mutex mu_;
  std::condition_variable posted_;
  std::deque<Event> events_;  // guarded by mu_
};

// New trials for the sweep: ids "<5 hex of the experiment>_<index>".
std::vector<Trial> NewTrials(const Trainable& trainable, const ParamSpace& space,
                             const TuneConfig& tune, uint64_t seed) {
  std::vector<nlohmann::json> configs = GenerateVariants(space, tune.num_samples, seed);
  std::string experiment = Hex5(std::random_device{}());
  std::vector<Trial> trials;
  for (size_t i = 0; i < configs.size(); ++i) {
    Trial t;
    t.index = static_cast<int>(i);
    std::ostringstream id;
    id << experiment << "_" << std::setw(5) << std::setfill('0') << i;
    t.id = id.str();
    t.dir_name = trainable.train_loop + "_" + t.id;
    t.config = std::move(configs[i]);
    trials.push_back(std::move(t));
  }
  return trials;
}

}  // namespace

Tuner::Tuner(Trainable trainable, ParamSpace param_space, TuneConfig tune, train::RunConfig run)
    : trainable_(std::move(trainable)),
      param_space_(std::move(param_space)),
      tune_(std::move(tune)),
      run_(std::move(run)) {}

ResultGrid Tuner::Fit() {
  if (!rayd::IsInitialized()) throw RaydError("rayd::tune::Tuner::Fit: call rayd::Init first");
  if (run_.name.empty() || run_.storage_path.empty()) {
    throw RaydError("the Tuner's RunConfig needs a name and a storage_path");
  }
  if (std::string unknown = train::UnknownTrainLoop(trainable_.train_loop); !unknown.empty()) {
    throw RaydError("trainable: " + unknown);
  }
  if (tune_.num_samples < 1) throw RaydError("num_samples must be at least 1");
  uint64_t seed = tune_.seed ? *tune_.seed : std::random_device{}();
  if (auto* pbt = std::get_if<PbtConfig>(&tune_.scheduler); pbt && pbt->log_dir.empty()) {
    pbt->log_dir = (fs::path(run_.storage_path) / run_.name).string();
  }
  std::unique_ptr<TrialScheduler> scheduler;
  try {
    scheduler = MakeScheduler(tune_.scheduler, tune_.metric, tune_.mode, seed);
  } catch (const std::invalid_argument& e) {
    throw RaydError(std::string("invalid scheduler options: ") + e.what());
  }

  // A gang larger than the whole cluster can never run: say so before starting anything.
  std::map<std::string, double> total = rayd::ClusterResources();
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

  std::error_code ec;
  std::string dir =
      fs::weakly_canonical(fs::absolute(fs::path(run_.storage_path) / run_.name), ec).string();
  fs::create_directories(dir, ec);
  if (ec) throw RaydError("cannot create " + dir + ": " + ec.message());
  std::vector<Trial> trials;
  Result<internal::ExperimentState> previous = internal::LoadExperimentState(dir);
  if (tune_.resume) {
    if (!previous.ok()) {
      throw RaydError("cannot resume " + dir + ": " + previous.status().message());
    }
    trials = std::move(previous->trials);
  } else {
    if (previous.ok()) {
      throw RaydError("an experiment already exists at " + dir +
                      ": resume it, or choose another name or storage_path");
    }
    trials = NewTrials(trainable_, param_space_, tune_, seed);
  }
  Result<internal::TrialTracking> tracking =
      internal::TrialTracking::Open(run_, scheduler->name(), dir);
  if (!tracking.ok()) throw RaydError("MLflow tracking: " + tracking.status().message());
  Controller controller(trainable_, tune_, run_, std::move(scheduler), dir,
                        std::move(tracking).value(), *stop_requested_);
  return controller.Run(std::move(trials), max_concurrent);
}

}  // namespace rayd::tune
