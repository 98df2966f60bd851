#include "controller.h"

#include <rayd/api.h>
#include <rayd/base/logging.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>

#include "pareto_report.h"

namespace rayd::tune::internal {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kSaveInterval = std::chrono::milliseconds(500);
// A save that took d waits at least this many d for the next one, so writing the experiment's
// state never takes more than 1/kSaveBackoff of the loop's time however many trials it holds
// (Ray Tune's "auto" checkpoint period keeps it under 5%).
constexpr int kSaveBackoff = 40;
// The console table and the dashboard feed see the sweep this often besides its events.
constexpr auto kTickInterval = std::chrono::milliseconds(1000);

}  // namespace

Controller::Controller(EventLoop& loop, const Trainable& trainable, const TuneConfig& tune,
                       const train::RunConfig& run, std::unique_ptr<TrialScheduler> scheduler,
                       std::string experiment_dir, std::vector<std::unique_ptr<ResultSink>> sinks,
                       StopSignal& stop, TrialRunner& runner)
    : loop_(loop),
      stop_(stop),
      save_timer_(loop),
      tick_timer_(loop),
      trainable_(trainable),
      tune_(tune),
      run_(run),
      scheduler_(std::move(scheduler)),
      dir_(std::move(experiment_dir)),
      sinks_(std::move(sinks)),
      runner_(runner) {
  runner_.SetPost([this](RunEvent event) { Post(std::move(event)); });
  stop_watch_ = new uv_poll_t;
  RAYD_CHECK(uv_poll_init(loop_.uv(), stop_watch_, stop_.fd()) == 0);
  stop_watch_->data = this;
}

Controller::~Controller() {
  stop_watch_->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(stop_watch_),
           [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
}

void Controller::SetSearcher(std::unique_ptr<Searcher> searcher, std::string tag,
                             std::string name) {
  searcher_ = std::move(searcher);
  trial_tag_ = std::move(tag);
  trial_name_ = std::move(name);
}

ResultGrid Controller::Run(std::vector<Trial> trials, int max_concurrent) {
  trials_ = std::move(trials);
  max_concurrent_ = max_concurrent;
  started_ = Clock::now();
  for (size_t i = 0; i < trials_.size(); ++i) {
    Trial& t = trials_[i];
    if (t.status == TrialStatus::kTerminated || t.status == TrialStatus::kError) continue;
    scheduler_->OnTrialAdd(t.id, t.config);
    // A resumed experiment feeds the scheduler what unfinished trials reported before: all of
    // it, or what came after its restored state.
    size_t seen = 0;
    if (scheduler_seen_) {
      auto it = scheduler_seen_->find(t.id);
      if (it != scheduler_seen_->end()) seen = std::min(it->second, t.history.size());
    }
    for (size_t k = 0; k < t.history.size(); ++k) {
      const Metrics& m = t.history[k];
      if (k >= seen) scheduler_->OnTrialResult(t.id, {m, t.config, t.checkpoint.has_value()});
      for (auto& sink : sinks_) sink->OnRestoredResult(t, m);
    }
    // A paused trial waits for the scheduler to want it back, as it did before the resume (its
    // scheduler knows it is paused: restored, or told its results again); the rest run again.
    if (t.status != TrialStatus::kPaused) t.status = TrialStatus::kPending;
  }
  Save();
  uv_poll_start(stop_watch_, UV_READABLE, [](uv_poll_t* h, int, int) {
    if (h->data) static_cast<Controller*>(h->data)->OnStopSignal();
  });
  tick_timer_.Start(kTickInterval, kTickInterval, [this] { Tick(/*finished=*/false); });
  Step();
  if (!done_) loop_.Run();
  uv_poll_stop(stop_watch_);
  tick_timer_.Stop();
  save_timer_.Stop();
  Save(/*now=*/true);
  Tick(/*finished=*/true);
  std::vector<TrialResult> results;
  for (const Trial& t : trials_) results.push_back(t.ToResult(dir_));
  ResultGrid grid(dir_, std::move(results), tune_.metric, tune_.mode, tune_.objectives,
                  tune_.constraints, tune_.reference_point);
  if (!tune_.objectives.empty()) {
    // The sweep's results are all on disk already: a report that cannot be written costs a
    // line, not the grid.
    try {
      internal::WriteParetoFront(grid);
    } catch (const RaydError& e) {
      std::cerr << "rayd tune: no pareto_front.csv: " << e.what() << "\n";
    }
  }
  return grid;
}

void Controller::Step() {
  while (!done_) {
    GrowElastic(/*before_new=*/true);
    if (!stop_.raised()) LaunchWhatFits();
    GrowElastic(/*before_new=*/false);
    PublishGrowthWant();
    // Gangs no new trial took: give their resources back, so trials still waiting for their
    // placement group (more slots than the cluster holds) get them.
    runner_.ReleaseIdle();
    if (!running_.empty()) return;
    if (stop_.raised() || !FinishStrandedPauses()) {
      done_ = true;
      loop_.Stop();
    }
  }
}

void Controller::OnStopSignal() {
  uv_poll_stop(stop_watch_);  // the pipe stays readable; one stop is enough
  InterruptAll();
  Step();
}

// Starts trials while slots are free: paused trials the scheduler wants back first, then
// PBT's restarts (pending trials with a checkpoint), then new ones in order.
void Controller::LaunchWhatFits() {
  while (static_cast<int>(running_.size()) < max_concurrent_) {
    // Elastic trials: while a trial the scheduler judged could still grow, a new one starts
    // only when its least fits in what is free, rather than queue for the workers growth
    // would take.
    if (JudgedCanGrow() && runner_.FreeWorkers() < trainable_.scaling.min_workers) return;
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
    if (!next) next = MakeNext();
    if (!next) return;
    Start(*next);
  }
}

bool Controller::CanGrowNow(const Running& r, double now) const {
  const train::ScalingConfig& scaling = trainable_.scaling;
  // (No result yet: its size is not known.)
  return r.workers > 0 && r.pending == Pending::kNone && r.growing_to == 0 &&
         r.workers < scaling.num_workers && now - r.sized_at >= scaling.resize_interval_s;
}

bool Controller::JudgedCanGrow() {
  if (trainable_.scaling.min_workers == 0) return false;
  const double now = runner_.NowSeconds();
  return std::any_of(running_.begin(), running_.end(), [&](const auto& entry) {
    return CanGrowNow(entry.second, now) && scheduler_->GrowsBeforeNew(trials_[entry.first].id);
  });
}

// Elastic trials (ScalingConfig::min_workers): the workers the cluster has free go to the
// running trials the scheduler ranks best first (TrialScheduler::RankForGrowth), each up to its
// max, each at most once per resize_interval_s; a trial restarts at its new size at its next
// checkpoint (TrainingRun::GrowTo). Called twice a step: before new trials start, for the
// trials the scheduler has judged worth it (GrowsBeforeNew: ASHA's, past a rung), and after,
// for any with what is still free. A run still waiting for its gang's workers comes before any
// growth. This one place decides, from one count of free workers, so trials do not race for
// them; none is shrunk to grow another, so sizes do not oscillate.
void Controller::GrowElastic(bool before_new) {
  const train::ScalingConfig& scaling = trainable_.scaling;
  if (scaling.min_workers == 0 || stop_.raised() || running_.empty()) return;
  if (runner_.AnyWaitingForWorkers()) return;
  const double now = runner_.NowSeconds();
  std::vector<std::pair<double, std::string>> candidates;  // (latest metric, best first), id
  for (const auto& [index, r] : running_) {
    if (!CanGrowNow(r, now)) continue;
    const Trial& t = trials_[index];
    if (before_new && !scheduler_->GrowsBeforeNew(t.id)) continue;
    auto value = t.last_result.find(tune_.metric);
    const double score = value == t.last_result.end()
                             ? -std::numeric_limits<double>::infinity()
                             : (tune_.mode == "max" ? value->second : -value->second);
    candidates.emplace_back(score, t.id);
  }
  if (candidates.empty()) return;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> ids;
  for (const auto& [score, id] : candidates) ids.push_back(id);
  int free = runner_.FreeWorkers();
  for (const std::string& id : scheduler_->RankForGrowth(std::move(ids))) {
    if (free <= 0) break;
    const std::optional<size_t> index = IndexOf(id);
    if (!index || !running_.count(*index)) continue;
    Running& r = running_.at(*index);
    const int to = std::min(scaling.num_workers, r.workers + free);
    if (to <= r.workers) continue;
    free -= to - r.workers;
    r.growing_to = to;
    runner_.GrowTo(*index, to);
  }
}

// What the running elastic trials could still grow by, beyond the workers free now: a hint the
// runner passes to an autoscaler (TrialRunner::WantWorkers). Counted over every running trial,
// whatever its resize interval, so the hint does not come and go between resizes.
void Controller::PublishGrowthWant() {
  const train::ScalingConfig& scaling = trainable_.scaling;
  if (scaling.min_workers == 0) return;
  int want = 0;
  for (const auto& [index, r] : running_) {
    if (r.workers > 0) want += scaling.num_workers - std::max(r.workers, r.growing_to);
  }
  if (want > 0) want -= std::max(runner_.FreeWorkers(), 0);
  runner_.WantWorkers(stop_.raised() ? 0 : std::max(want, 0));
}

// Nothing runs: resume a paused trial the scheduler still wants, else the paused trials are
// finished (the scheduler will not bring them back). Returns false when the sweep is over.
bool Controller::FinishStrandedPauses() {
  if (searcher_ && searcher_->HasNext(trials_.size())) return true;
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
    Ended(t);
    for (auto& sink : sinks_) sink->OnStatus(t);
  }
  Save();
  return false;
}

std::optional<size_t> Controller::MakeNext() {
  if (!searcher_ || !searcher_->HasNext(trials_.size())) return std::nullopt;
  const int index = static_cast<int>(trials_.size());
  trials_.push_back(MakeTrial(trial_tag_, index, trial_name_, searcher_->Next()));
  trials_.back().searcher = searcher_->ProposedBy();
  scheduler_->OnTrialAdd(trials_.back().id, trials_.back().config);
  return trials_.size() - 1;
}

void Controller::Ended(const Trial& trial) {
  if (!searcher_) return;
  std::optional<double> value;
  if (auto it = trial.last_result.find(tune_.metric); it != trial.last_result.end()) {
    value = it->second;
  }
  searcher_->OnTrialEnd(trial.config, trial.status == TrialStatus::kError ? std::nullopt : value);
}

std::optional<size_t> Controller::IndexOf(const std::string& id) const {
  for (size_t i = 0; i < trials_.size(); ++i) {
    if (trials_[i].id == id) return i;
  }
  return std::nullopt;
}

void Controller::Start(size_t index) {
  Trial& t = trials_[index];
  // Synchronous PBT decides the exploits of the trials it paused while they wait.
  if (Decision resume = scheduler_->OnTrialResume(t.id);
      resume.action == Decision::Action::kExploit) {
    if (std::string cloned; CloneForExploit(index, resume, &cloned)) {
      t.checkpoint = cloned;
      t.config = std::move(resume.config);
    }
  }
  t.status = TrialStatus::kRunning;
  Save();
  running_[index] = Running{};
  for (auto& sink : sinks_) sink->OnTrialStart(t);
  runner_.Start({.trial = index,
                 .trial_id = t.id,
                 .experiment_dir = dir_,
                 .run_dir_name = t.dir_name,
                 .config = t.config});
}

void Controller::Post(RunEvent event) {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = events_.empty();
    events_.push_back(std::move(event));
  }
  // The loop may run what was posted after the controller is gone (its destructor drains).
  if (first) {
    loop_.Post([this, alive = std::weak_ptr<const bool>(alive_)] {
      if (alive.lock()) Drain();
    });
  }
}

void Controller::Drain() {
  while (true) {
    std::optional<RunEvent> event;
    {
      std::lock_guard lock(mu_);
      if (events_.empty()) break;
      event = std::move(events_.front());
      events_.pop_front();
    }
    Handle(std::move(*event));
  }
  if (stop_.raised()) InterruptAll();
  Step();
  Tick(/*finished=*/false);
}

void Controller::Handle(RunEvent event) {
  if (event.kind == RunEvent::Kind::kResult) {
    runner_.Answer(event.trial, OnResult(event.trial, std::move(event.result)));
    GrowElastic(/*before_new=*/false);  // a trial's size or standing may have changed
    PublishGrowthWant();
  } else {
    runner_.Finished(event.trial);
    OnDone(event.trial, event.ended);
  }
}

// Records a result and decides whether the trial goes on.
bool Controller::OnResult(size_t index, train::ReportedResult result) {
  Trial& t = trials_[index];
  Running& r = running_.at(index);
  // The history keeps the result's own metrics (moved: a sweep holds every result once).
  t.history.push_back(std::move(result.metrics));
  const Metrics& metrics = t.history.back();
  t.last_result = metrics;
  if (auto world = metrics.find("world_size"); world != metrics.end()) {
    const int workers = static_cast<int>(world->second);
    if (workers != r.workers) {
      r.workers = workers;
      r.sized_at = runner_.NowSeconds();
    }
    if (workers >= r.growing_to) r.growing_to = 0;
  }
  if (result.checkpoint) t.checkpoint = result_checkpoint_[index] = *result.checkpoint;
  auto total = metrics.find("time_total_s");
  if (total != metrics.end()) t.time_total_s = total->second;
  for (auto& sink : sinks_) sink->OnResult(t, metrics);
  if (searcher_) searcher_->OnTrialResult(t.config, metrics);
  if (r.pending != Pending::kNone) return false;  // already on its way out
  if (stop_.raised()) {
    r.pending = Pending::kInterrupt;
    return false;
  }
  for (const auto& [metric, limit] : tune_.stop) {
    auto value = metrics.find(metric);
    if (value != metrics.end() && value->second >= limit) {
      r.pending = Pending::kStop;
      return false;
    }
  }
  Decision decision =
      scheduler_->OnTrialResult(t.id, {metrics, t.config, t.checkpoint.has_value()});
  switch (decision.action) {
    case Decision::Action::kContinue:
      return true;
    case Decision::Action::kStop:
      r.pending = Pending::kStop;
      return false;
    case Decision::Action::kPause:
      r.pending = Pending::kPause;
      return false;
    case Decision::Action::kExploit:
      // Failing, keep training as it was rather than lose the trial.
      if (!CloneForExploit(index, decision, &r.cloned)) return true;
      r.pending = Pending::kExploit;
      r.new_config = decision.config;
      return false;
  }
  return true;
}

// A trial's run ended: decide what the trial becomes.
void Controller::OnDone(size_t index, const train::TrainResult& ended) {
  Running& r = running_.at(index);
  Pending pending = r.pending;
  std::string cloned = r.cloned;
  nlohmann::json new_config = r.new_config;
  running_.erase(index);
  Trial& t = trials_[index];
  if (ended.checkpoint) t.checkpoint = ended.checkpoint;
  t.num_failures += ended.restarts;
  for (const std::string& error : ended.restart_errors) {
    for (auto& sink : sinks_) sink->OnFailure(t, error);
  }
  if (!ended.stopped && !ended.ok()) {
    // The Trainer already retried within max_failures: the trial failed for good.
    ++t.num_failures;
    t.status = TrialStatus::kError;
    t.error = ended.error;
    scheduler_->OnTrialError(t.id);
    Ended(t);
  } else if (pending == Pending::kPause) {
    t.status = resume_when_paused_.erase(index) ? TrialStatus::kPending : TrialStatus::kPaused;
  } else if (pending == Pending::kInterrupt) {
    t.status = TrialStatus::kPending;  // resumed from its checkpoint by `--resume`
  } else if (pending == Pending::kExploit) {
    // Restarted first by LaunchWhatFits, from the clone, with the explored config.
    t.checkpoint = cloned;
    t.config = std::move(new_config);  // its next run writes it to params.json
    t.status = TrialStatus::kPending;
  } else {
    t.status = TrialStatus::kTerminated;
    scheduler_->OnTrialComplete(t.id);
    Ended(t);
  }
  for (auto& sink : sinks_) sink->OnStatus(t);
  Save();
}

// PBT's exploit `decision` of trial `index`: its donor's checkpoint cloned (Clone) and the
// lineage logged; false, saying why, when the clone failed (the trial then goes on as it was).
bool Controller::CloneForExploit(size_t index, const Decision& decision, std::string* cloned) {
  if (Status status = Clone(index, decision.donor, cloned); !status.ok()) {
    std::cerr << "rayd tune: PBT exploit of " << trials_[index].id
              << " skipped: " << status.message() << "\n";
    return false;
  }
  for (auto& sink : sinks_) sink->OnExploit(decision.lineage);
  return true;
}

// PBT: copies the donor's checkpoint into the trial's run directory as its newest, while the
// trial's run is held in its on_report or the trial is paused (so nothing else writes there);
// the trial's next run
// resumes from it. The copy is of the checkpoint of the donor's last result (what the
// scheduler ranked), even when the donor was itself exploited since; failing that (pruned by
// num_to_keep), its latest. Checkpoints live on the driver (the Trainer ships every rank-0
// checkpoint here) and reach the restarted ranks through their actor calls: no shared
// filesystem.
Status Controller::Clone(size_t index, const std::string& donor_id, std::string* cloned) {
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
void Controller::InterruptAll() {
  for (auto& [index, r] : running_) {
    if (r.pending == Pending::kNone) r.pending = Pending::kInterrupt;
  }
}

// Writes experiment_state.json, at most every kSaveInterval (longer when a save is slow:
// kSaveBackoff) unless `now` (the file holds every trial, so writing it on every change would
// cost O(trials) per change); Run writes it last
// whatever happened. Between writes a crash loses only status changes: results and
// checkpoints are on disk already, and a resumed trial that had finished resumes from its last
// checkpoint and ends at once.
void Controller::Save(bool now) {
  const auto due = last_save_ + save_gap_;
  if (!now && Clock::now() < due) {
    if (!save_pending_) {
      save_pending_ = true;
      save_timer_.Start(std::chrono::ceil<Millis>(due - Clock::now()), Millis(0),
                        [this] { Save(/*now=*/true); });
    }
    return;
  }
  ExperimentState state{run_.name, trainable_.train_loop, tune_.metric, tune_.mode, {}};
  if (searcher_) {
    state.searcher = searcher_->name();
    state.searcher_state = searcher_->State();
  }
  state.scheduler_state = scheduler_->State();
  if (!state.scheduler_state.is_null()) {
    state.scheduler = scheduler_->name();
    for (const Trial& t : trials_) state.scheduler_seen[t.id] = t.history.size();
  }
  const auto start = Clock::now();
  Status saved = SaveExperimentState(dir_, state, trials_);
  if (!saved.ok()) std::cerr << "rayd tune: " << saved.message() << "\n";
  last_save_ = Clock::now();
  save_gap_ = std::max<Clock::duration>(kSaveInterval, (last_save_ - start) * kSaveBackoff);
  save_pending_ = false;
  save_timer_.Stop();
}

void Controller::Tick(bool finished) {
  const SweepView view{trials_,
                       static_cast<int>(running_.size()),
                       max_concurrent_,
                       *scheduler_,
                       std::chrono::duration<double>(Clock::now() - started_).count(),
                       finished};
  for (auto& sink : sinks_) sink->OnTick(view);
}

}  // namespace rayd::tune::internal
