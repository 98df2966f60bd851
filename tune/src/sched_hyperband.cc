// HyperBand (Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
// Optimization"): synchronous successive-halving brackets with pausing, after Ray Tune's
// HyperBandScheduler.
//
// How it works. With R = max_t, eta = reduction_factor and s_max = floor(log_eta(R)), bracket s
// (s = s_max, s_max - 1, ..., 0, then again from s_max: a new band) takes
// n_s = ceil((s_max + 1) / (s + 1) * eta^s) trials as they are added. Its rungs are at
// r_i = R * eta^(i - s) for i = 0..s (the last one is R) and rung i keeps floor(n_s * eta^-i)
// trials. A trial reaching the bracket's current rung pauses; when every live trial of the
// bracket has reached it (added trials that have not reported yet count as not there), the
// bracket halves: the best floor(n_s * eta^-(i+1)) go on (paused ones through
// ChooseTrialToResume, the reporting one continues), the others are stopped. A trial reaching
// the last rung stops (stop_last_trials) or runs on.
//
// Simplified from Ray, on purpose:
//  - brackets fill from the most exploratory (s_max) down, in the paper's order (Ray starts at
//    s = 0); rung resources are exact (Ray truncates r to an integer, so its last rung can fall
//    short of max_t); keep counts are the paper's floors (Ray's ceils);
//  - a trial reaching the last rung stops at once instead of pausing until its bracket is done;
//  - a decision only ever applies to the reporting trial, so a paused trial that loses a halving
//    is never resumed and stays paused (Ray stops it): the Tuner ends paused trials that nothing
//    resumes once no trial is running or pending;
//  - paused trials are resumed bracket by bracket in order of addition (Ray: least complete
//    bracket first).
//
// With several objectives (MO-HyperBand, after MO-ASHA, Schmucker et al. 2021) a halving ranks
// the bracket's trials by ParetoRanking (constrained non-dominated sort, then crowding distance;
// ties to the earlier trial) instead of by one score; everything else is the same. A result
// counts once it names every objective (a NaN or infinite one is the worst value there is).
//
// Invariants: a bracket's `live` trials are all at or below its current rung; to_resume holds
// only live, paused trials whose time is below the current rung.

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>

#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

struct Bracket {
  int s = 0;
  int size = 0;                    // n_s: trials it takes
  std::vector<double> milestones;  // r_0 .. r_s
  std::vector<int> keep;           // trials that may be at rung i
  size_t rung = 0;                 // current rung
  int added = 0;
  std::vector<std::string> live;  // in order of addition: ties go to the earlier trial
  std::deque<std::string> to_resume;
};

struct HyperBandTrial {
  size_t bracket = 0;
  double time = 0;
  std::optional<double> score;  // higher is better
  // With several objectives instead of `score`.
  std::optional<ParetoRanking::Standing> standing;
  bool paused = false;
};

class HyperBandScheduler final : public TrialScheduler {
 public:
  // `ranking` set: several objectives, and `metric` and `mode` are unused.
  HyperBandScheduler(const HyperBandConfig& config, std::string metric, std::string mode,
                     std::optional<ParetoRanking> ranking = std::nullopt)
      : config_(config),
        metric_(std::move(metric)),
        sign_(mode == "max" ? 1.0 : -1.0),
        s_max_(FloorLog(config_.max_t, config_.reduction_factor)),
        ranking_(std::move(ranking)) {}

  const char* name() const override { return ranking_ ? "MO-HyperBand" : "HyperBand"; }

  void OnTrialAdd(const std::string& trial_id, const nlohmann::json&) override {
    if (trials_.count(trial_id)) return;
    if (brackets_.empty() || brackets_.back().added >= brackets_.back().size) {
      const int s = brackets_.empty() ? s_max_ : (brackets_.back().s + s_max_) % (s_max_ + 1);
      brackets_.push_back(NewBracket(s));
    }
    Bracket& bracket = brackets_.back();
    ++bracket.added;
    bracket.live.push_back(trial_id);
    trials_[trial_id].bracket = brackets_.size() - 1;
  }

  Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) override {
    auto t = Lookup(result.metrics, config_.time_attr);
    if (!t) return Decision::Continue();
    std::optional<ResultMeasure> measure = MeasureResult(ranking_, result.metrics, metric_, sign_);
    if (!measure) return Decision::Continue();
    auto& [score, standing] = *measure;
    if (!trials_.count(trial_id)) OnTrialAdd(trial_id, result.config);
    HyperBandTrial& trial = trials_[trial_id];
    Bracket& bracket = brackets_[trial.bracket];
    if (!IsLive(bracket, trial_id)) return Decision::Stop();  // lost a halving while paused
    trial.time = *t;
    trial.score = score;
    trial.standing = std::move(standing);
    trial.paused = false;
    if (trial.time < bracket.milestones[bracket.rung]) return Decision::Continue();
    trial.paused = true;
    return Process(bracket, &trial_id);
  }

  void OnTrialComplete(const std::string& trial_id) override { Remove(trial_id); }
  void OnTrialError(const std::string& trial_id) override { Remove(trial_id); }

  std::optional<std::string> ChooseTrialToResume() override {
    for (Bracket& bracket : brackets_) {
      if (bracket.to_resume.empty()) continue;
      std::string id = bracket.to_resume.front();
      bracket.to_resume.pop_front();
      trials_[id].paused = false;
      return id;
    }
    return std::nullopt;
  }

  nlohmann::json State() const override {
    nlohmann::json brackets = nlohmann::json::array();
    for (const Bracket& b : brackets_) {
      brackets.push_back({{"s", b.s},
                          {"rung", b.rung},
                          {"added", b.added},
                          {"live", b.live},
                          {"to_resume", b.to_resume}});
    }
    nlohmann::json trials = nlohmann::json::object();
    for (const auto& [id, t] : trials_) {
      trials[id] = {{"bracket", t.bracket},
                    {"time", t.time},
                    {"score", OptionalNumber(t.score)},
                    {"paused", t.paused}};
      if (ranking_) {
        trials[id]["standing"] = t.standing ? ParetoRanking::ToJson(*t.standing) : nullptr;
      }
    }
    return {{"brackets", std::move(brackets)},
            {"trials", std::move(trials)},
            {"stopped", num_stopped_}};
  }

  void Restore(const nlohmann::json& state) override {
    std::vector<Bracket> brackets;
    for (const nlohmann::json& saved : state.at("brackets")) {
      const int s = saved.at("s").get<int>();
      if (s < 0 || s > s_max_) {
        throw std::invalid_argument("a bracket's s is out of range (max_t or reduction_factor "
                                    "changed)");
      }
      Bracket b = NewBracket(s);  // its sizes and milestones follow from s and the config
      b.rung = saved.at("rung").get<size_t>();
      if (b.rung >= b.milestones.size()) throw std::invalid_argument("a bracket's rung is out of range");
      b.added = saved.at("added").get<int>();
      b.live = saved.at("live").get<std::vector<std::string>>();
      const auto to_resume = saved.at("to_resume").get<std::vector<std::string>>();
      b.to_resume.assign(to_resume.begin(), to_resume.end());
      brackets.push_back(std::move(b));
    }
    std::map<std::string, HyperBandTrial> trials;
    for (const auto& [id, t] : state.at("trials").items()) {
      HyperBandTrial& trial = trials[id];
      trial.bracket = t.at("bracket").get<size_t>();
      if (trial.bracket >= brackets.size()) throw std::invalid_argument("a trial's bracket is out of range");
      trial.time = t.at("time").get<double>();
      trial.score = OptionalNumber(t.at("score"));
      trial.paused = t.at("paused").get<bool>();
      if (ranking_ && !t.at("standing").is_null()) {
        trial.standing = ranking_->FromJson(t.at("standing"));
      }
    }
    brackets_ = std::move(brackets);
    trials_ = std::move(trials);
    num_stopped_ = state.at("stopped").get<int>();
  }

  std::string Summary() const override {
    std::string out = std::string(name()) + ": " + std::to_string(brackets_.size()) +
                      (brackets_.size() == 1 ? " bracket" : " brackets");
    if (!brackets_.empty()) {
      const Bracket& b = brackets_.back();
      out += " (latest: " + std::to_string(b.added) + "/" + std::to_string(b.size) +
             " trials, rung " + FormatNumber(b.milestones[b.rung]) + ")";
    }
    return out + ", " + std::to_string(num_stopped_) + " stopped";
  }

 private:
  Bracket NewBracket(int s) const {
    const double eta = config_.reduction_factor;
    Bracket b;
    b.s = s;
    // The epsilon keeps ceil(5 / 2 * 3) = 8 from becoming 9 through rounding.
    b.size = static_cast<int>(std::ceil((s_max_ + 1.0) / (s + 1.0) * std::pow(eta, s) - 1e-9));
    for (int i = 0; i <= s; ++i) {
      b.milestones.push_back(config_.max_t * std::pow(eta, i - s));
      b.keep.push_back(
          std::max(1, static_cast<int>(std::floor(b.size * std::pow(eta, -i) + 1e-9))));
    }
    b.milestones.back() = config_.max_t;
    return b;
  }

  static bool IsLive(const Bracket& bracket, const std::string& trial_id) {
    return std::find(bracket.live.begin(), bracket.live.end(), trial_id) != bracket.live.end();
  }

  static void Erase(Bracket& bracket, const std::string& trial_id) {
    std::erase(bracket.live, trial_id);
    std::erase(bracket.to_resume, trial_id);
  }

  void Remove(const std::string& trial_id) {
    auto it = trials_.find(trial_id);
    if (it == trials_.end()) return;
    Bracket& bracket = brackets_[it->second.bracket];
    if (!IsLive(bracket, trial_id)) return;
    Erase(bracket, trial_id);
    Process(bracket, nullptr);
  }

  bool Reached(const Bracket& bracket, const std::string& trial_id) {
    return trials_[trial_id].time >= bracket.milestones[bracket.rung];
  }

  // `live`, best first (ties: the earlier trial).
  std::vector<std::string> Ranked(const std::vector<std::string>& live) {
    std::vector<std::string> ranked = live;
    if (!ranking_) {
      std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
        return trials_[a].score.value_or(-INFINITY) > trials_[b].score.value_or(-INFINITY);
      });
      return ranked;
    }
    // Trials without a result (none at a rung: only a restored state could hold one) go last.
    std::vector<std::string> measured, unmeasured;
    std::vector<const ParetoRanking::Standing*> standings;
    for (const std::string& id : live) {
      const HyperBandTrial& trial = trials_[id];
      if (trial.standing) {
        measured.push_back(id);
        standings.push_back(&*trial.standing);
      } else {
        unmeasured.push_back(id);
      }
    }
    ranked.clear();
    for (size_t i : ParetoRanking::Rank(standings)) ranked.push_back(measured[i]);
    ranked.insert(ranked.end(), unmeasured.begin(), unmeasured.end());
    return ranked;
  }

  // Halves `bracket` as long as every live trial has reached its current rung. `reporting` is the
  // trial whose result got here, if any: the return value is its decision.
  Decision Process(Bracket& bracket, const std::string* reporting) {
    Decision decision = Decision::Pause();
    while (!bracket.live.empty()) {
      if (bracket.rung + 1 == bracket.milestones.size()) {
        // The last rung: whoever reached it is done (or runs on without stop_last_trials).
        if (reporting && Reached(bracket, *reporting)) {
          trials_[*reporting].paused = false;
          if (!config_.stop_last_trials) return Decision::Continue();
          Erase(bracket, *reporting);
          ++num_stopped_;
          return Decision::Stop();
        }
        return Decision::Continue();
      }
      for (const std::string& id : bracket.live) {
        if (!Reached(bracket, id)) return decision;
      }
      // Every live trial is at the rung: keep the best, stop the rest.
      const std::vector<std::string> ranked = Ranked(bracket.live);
      ++bracket.rung;
      const size_t keep = std::min(ranked.size(), static_cast<size_t>(bracket.keep[bracket.rung]));
      bool reporting_lost = false;
      for (size_t i = keep; i < ranked.size(); ++i) {
        Erase(bracket, ranked[i]);
        ++num_stopped_;
        if (reporting && ranked[i] == *reporting) reporting_lost = true;
      }
      for (size_t i = 0; i < keep; ++i) {
        const std::string& id = ranked[i];
        if (Reached(bracket, id)) continue;  // already past the next rung too: stays paused
        if (reporting && id == *reporting) {
          trials_[id].paused = false;
          decision = Decision::Continue();
        } else if (trials_[id].paused) {
          bracket.to_resume.push_back(id);
        }
      }
      if (reporting_lost) return Decision::Stop();
    }
    return decision;
  }

  const HyperBandConfig config_;
  const std::string metric_;
  const double sign_;  // +1 for max, -1 for min
  const int s_max_;
  const std::optional<ParetoRanking> ranking_;  // set: several objectives
  std::vector<Bracket> brackets_;  // in order of creation; the last one takes new trials
  std::map<std::string, HyperBandTrial> trials_;
  int num_stopped_ = 0;
};

}  // namespace

std::unique_ptr<TrialScheduler> MakeHyperBand(const HyperBandConfig& config, std::string metric,
                                              std::string mode) {
  return std::make_unique<HyperBandScheduler>(config, std::move(metric), std::move(mode));
}

std::unique_ptr<TrialScheduler> MakeMoHyperBand(const HyperBandConfig& config,
                                                ParetoRanking ranking) {
  return std::make_unique<HyperBandScheduler>(config, "", "min", std::move(ranking));
}

}  // namespace rayd::tune::internal
