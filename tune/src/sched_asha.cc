// Asynchronous successive halving (Li et al., "A System for Massively Parallel Hyperparameter
// Tuning"), in Ray Tune's two readings.
//
// How it works. Bracket s has rungs at grace_period * rf^(k + s) for k = 0, 1, ... up to max_t;
// a new trial joins a bracket drawn at random with weights softmax(number of rungs), as Ray's
// AsyncHyperBandScheduler does. A rung records the score (the metric, negated for mode=min, so
// higher is better) of every trial that reached it.
//
//  - Stopping form (Ray's): on a result, the highest rung the trial has reached but not yet
//    recorded at compares the score with that rung's cut-off, the (1 - 1/rf) quantile of the
//    scores recorded there before it, then records it; below the cut-off the trial stops.
//    A result at max_t stops the trial (stop_last_trials).
//  - Promotion form (the paper's Algorithm 2): a trial reaching a rung records its score and
//    pauses. ChooseTrialToResume promotes, searching from the highest rung down, a paused trial
//    among the top floor(n / rf) of the n scores recorded at its rung that has not been promoted
//    from it; it runs on to the next rung. A trial at max_t stops.
//
// PASHA (Bohdal et al., 2023) is the promotion form with a growing maximum: it starts at the
// second rung, and each time a trial records at the current top rung, it is ranked against the
// trials recorded there by their scores at the top rung and at the rung below; if some pair is
// ordered differently (beyond epsilon at both), the top moves up a rung (up to max_t). Trials at
// the top rung pause rather than stop, so a later growth can promote them. Epsilon, unless
// given, is the paper's estimate of the noise in rankings, in our reading: every pair of trials
// whose order differs between two consecutive rungs (criss-crossing curves) adds the smaller of
// its two score gaps, and epsilon is the 90th percentile of the gaps seen before the result
// being judged (0 until there is one; the latest 10,000 in a large sweep).
//
// Invariants: a trial records at most once per rung; a trial is paused at most at one rung, the
// highest it recorded at; promoted[k] holds only trials recorded at rung k.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "sched_internal.h"

namespace rayd::tune::internal {
namespace {

struct Rung {
  double milestone = 0;
  std::map<std::string, double> recorded;  // trial -> score (higher is better)
  std::set<std::string> promoted;          // promotion form: resumed from this rung
};

struct AshaTrial {
  size_t bracket = 0;
  std::optional<size_t> paused_at;                // promotion form: the rung it waits at
  bool done = false;                              // completed, stopped or failed
  std::optional<std::pair<double, double>> last;  // (time, score) of its last result
};

class AshaScheduler final : public TrialScheduler {
 public:
  AshaScheduler(const AshaConfig& config, std::string metric, std::string mode, uint64_t seed,
                std::optional<PashaOptions> pasha)
      : config_(config),
        metric_(std::move(metric)),
        sign_(mode == "max" ? 1.0 : -1.0),
        rng_(seed),
        pasha_(pasha) {
    const int max_rungs =
        FloorLog(config_.max_t / config_.grace_period, config_.reduction_factor) + 1;
    for (int s = 0; s < config_.brackets; ++s) {
      std::vector<Rung> rungs;
      for (int k = 0; k < max_rungs - s; ++k) {
        Rung rung;
        rung.milestone = config_.grace_period * std::pow(config_.reduction_factor, k + s);
        rungs.push_back(std::move(rung));
      }
      brackets_.push_back(std::move(rungs));
    }
    top_ = std::min<size_t>(1, brackets_[0].size() - 1);
  }

  const char* name() const override { return pasha_ ? "PASHA" : "ASHA"; }

  void OnTrialAdd(const std::string& trial_id, const nlohmann::json&) override {
    if (trials_.count(trial_id)) return;
    trials_[trial_id].bracket = ChooseBracket();
  }

  Decision OnTrialResult(const std::string& trial_id, const SchedulerResult& result) override {
    auto t = Lookup(result.metrics, config_.time_attr);
    auto score = Score(result.metrics, metric_, sign_);
    if (!t || !score) return Decision::Continue();  // Ray raises; a sweep should not die of it
    AshaTrial& trial = State(trial_id);
    trial.last = {{*t, *score}};
    Decision decision = config_.promotion ? OnResultPromotion(trial_id, trial, *t, *score)
                                          : OnResultStopping(trial_id, trial, *t, *score);
    if (decision.action == Decision::Action::kStop) {
      ++num_stopped_;
      trial.done = true;
    }
    return decision;
  }

  void OnTrialComplete(const std::string& trial_id) override {
    auto it = trials_.find(trial_id);
    if (it == trials_.end()) return;
    AshaTrial& trial = it->second;
    // Ray records the final result at a rung the trial passed without recording there.
    if (!config_.promotion && trial.last && !trial.done) {
      RecordStopping(trial_id, trial, trial.last->first, trial.last->second);
    }
    trial.done = true;
    trial.paused_at.reset();
  }

  void OnTrialError(const std::string& trial_id) override {
    auto it = trials_.find(trial_id);
    if (it == trials_.end()) return;
    AshaTrial& trial = it->second;
    trial.done = true;
    trial.paused_at.reset();
  }

  // The highest rung each trial reached, then its score there, best first; trials at no rung
  // yet keep their order after those.
  std::vector<std::string> RankForGrowth(std::vector<std::string> running) const override {
    std::stable_sort(
        running.begin(), running.end(),
        [&](const std::string& a, const std::string& b) { return Standing(a) > Standing(b); });
    return running;
  }

  // A running trial recorded at a rung went on past it: ASHA judged it.
  bool GrowsBeforeNew(const std::string& trial_id) const override {
    return Standing(trial_id).first >= 0;
  }

  std::optional<std::string> ChooseTrialToResume() override {
    if (!config_.promotion) return std::nullopt;
    for (auto& rungs : brackets_) {
      for (size_t k = rungs.size(); k-- > 0;) {
        Rung& rung = rungs[k];
        if (rung.milestone >= MaxT()) continue;  // nothing above the maximum to promote to
        const auto top = static_cast<size_t>(
            std::floor(static_cast<double>(rung.recorded.size()) / config_.reduction_factor));
        for (const std::string& id : Ranked(rung, top)) {
          AshaTrial& trial = trials_[id];
          if (trial.done || trial.paused_at != k || rung.promoted.count(id)) continue;
          rung.promoted.insert(id);
          trial.paused_at.reset();
          ++num_promoted_;
          return id;
        }
      }
    }
    return std::nullopt;
  }

  nlohmann::json State() const override {
    nlohmann::json brackets = nlohmann::json::array();
    for (const auto& rungs : brackets_) {
      nlohmann::json saved = nlohmann::json::array();
      for (const Rung& rung : rungs) {
        saved.push_back({{"recorded", rung.recorded}, {"promoted", rung.promoted}});
      }
      brackets.push_back(std::move(saved));
    }
    nlohmann::json trials = nlohmann::json::object();
    for (const auto& [id, t] : trials_) {
      nlohmann::json last = nullptr;
      if (t.last) last = {t.last->first, t.last->second};
      trials[id] = {{"bracket", t.bracket},
                    {"paused_at", t.paused_at ? nlohmann::json(*t.paused_at) : nullptr},
                    {"done", t.done},
                    {"last", std::move(last)}};
    }
    return {{"brackets", std::move(brackets)}, {"trials", std::move(trials)},
            {"stopped", num_stopped_},         {"promoted", num_promoted_},
            {"top", top_},                     {"grown", num_grown_},
            {"gaps", gaps_},                   {"gaps_seen", gaps_seen_},
            {"rng", RngState(rng_)}};
  }

  void Restore(const nlohmann::json& state) override {
    const nlohmann::json& brackets = state.at("brackets");
    if (brackets.size() != brackets_.size()) {
      throw std::invalid_argument("it has " + std::to_string(brackets.size()) +
                                  " brackets, the scheduler " +
                                  std::to_string(brackets_.size()));
    }
    auto restored = brackets_;
    for (size_t b = 0; b < restored.size(); ++b) {
      if (brackets[b].size() != restored[b].size()) {
        throw std::invalid_argument("its rungs differ from the scheduler's (max_t, grace_period "
                                    "or reduction_factor changed)");
      }
      for (size_t k = 0; k < restored[b].size(); ++k) {
        restored[b][k].recorded = brackets[b][k].at("recorded").get<std::map<std::string, double>>();
        restored[b][k].promoted = brackets[b][k].at("promoted").get<std::set<std::string>>();
      }
    }
    std::map<std::string, AshaTrial> trials;
    for (const auto& [id, t] : state.at("trials").items()) {
      AshaTrial& trial = trials[id];
      trial.bracket = t.at("bracket").get<size_t>();
      if (trial.bracket >= restored.size()) throw std::invalid_argument("a trial's bracket is out of range");
      if (!t.at("paused_at").is_null()) trial.paused_at = t.at("paused_at").get<size_t>();
      trial.done = t.at("done").get<bool>();
      if (const auto& last = t.at("last"); !last.is_null()) {
        trial.last = {{last.at(0).get<double>(), last.at(1).get<double>()}};
      }
    }
    rng_ = RngFromState(state.at("rng"));
    brackets_ = std::move(restored);
    trials_ = std::move(trials);
    num_stopped_ = state.at("stopped").get<int>();
    num_promoted_ = state.at("promoted").get<int>();
    top_ = std::min(state.at("top").get<size_t>(), brackets_[0].size() - 1);
    num_grown_ = state.at("grown").get<int>();
    gaps_ = state.at("gaps").get<std::vector<double>>();
    gaps_seen_ = state.value("gaps_seen", static_cast<uint64_t>(gaps_.size()));
  }

  std::string Summary() const override {
    std::string out = pasha_ ? "PASHA: max " + FormatNumber(MaxT()) + " of " +
                                           FormatNumber(config_.max_t) + ", "
                      : config_.promotion ? "ASHA (promotion): "
                                          : "ASHA: ";
    if (brackets_.size() > 1) out += std::to_string(brackets_.size()) + " brackets, ";
    out += "rungs ";
    for (size_t b = 0; b < brackets_.size(); ++b) {
      if (b > 0) out += " | ";
      for (size_t k = 0; k < brackets_[b].size(); ++k) {
        if (k > 0) out += "/";
        out += FormatNumber(brackets_[b][k].milestone);
      }
    }
    if (config_.promotion) out += ", " + std::to_string(num_promoted_) + " promoted";
    if (pasha_) out += ", grown " + std::to_string(num_grown_) + " times";
    out += ", " + std::to_string(num_stopped_) + " stopped";
    return out;
  }

 private:
  // The highest rung the trial reached and its score there; (-1, 0) at none yet.
  std::pair<double, double> Standing(const std::string& id) const {
    auto trial = trials_.find(id);
    if (trial == trials_.end()) return {-1, 0};
    const std::vector<Rung>& rungs = brackets_[trial->second.bracket];
    for (size_t k = rungs.size(); k-- > 0;) {
      auto score = rungs[k].recorded.find(id);
      if (score != rungs[k].recorded.end()) return {static_cast<double>(k), score->second};
    }
    return {-1, 0};
  }

  AshaTrial& State(const std::string& trial_id) {
    auto it = trials_.find(trial_id);
    if (it == trials_.end()) {
      AshaTrial state;
      state.bracket = ChooseBracket();
      it = trials_.emplace(trial_id, std::move(state)).first;
    }
    return it->second;
  }

  // Ray: np.random.choice(brackets, p=softmax(number of rungs)).
  size_t ChooseBracket() {
    if (brackets_.size() == 1) return 0;
    double max_size = 0;
    for (const auto& b : brackets_) max_size = std::max(max_size, static_cast<double>(b.size()));
    std::vector<double> weights;
    double total = 0;
    for (const auto& b : brackets_) {
      weights.push_back(std::exp(static_cast<double>(b.size()) - max_size));
      total += weights.back();
    }
    double x = Uniform01(rng_) * total;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (x < weights[i]) return i;
      x -= weights[i];
    }
    return weights.size() - 1;
  }

  // The best `count` trials recorded at `rung`, best first (ties: by id).
  static std::vector<std::string> Ranked(const Rung& rung, size_t count) {
    std::vector<std::pair<double, std::string>> scores;
    for (const auto& [id, score] : rung.recorded) scores.emplace_back(score, id);
    std::stable_sort(scores.begin(), scores.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> out;
    for (size_t i = 0; i < std::min(count, scores.size()); ++i) out.push_back(scores[i].second);
    return out;
  }

  Decision OnResultStopping(const std::string& trial_id, AshaTrial& trial, double t, double score) {
    if (t >= config_.max_t && config_.stop_last_trials) return Decision::Stop();
    return RecordStopping(trial_id, trial, t, score);
  }

  // Ray's _Bracket.on_result: only the highest rung reached and not yet recorded decides.
  Decision RecordStopping(const std::string& trial_id, AshaTrial& trial, double t, double score) {
    auto& rungs = brackets_[trial.bracket];
    for (size_t k = rungs.size(); k-- > 0;) {
      Rung& rung = rungs[k];
      const bool recorded = rung.recorded.count(trial_id) > 0;
      if (t >= rung.milestone && recorded && !config_.stop_last_trials) break;
      if (t < rung.milestone || recorded) continue;
      Decision decision;
      if (!rung.recorded.empty()) {
        std::vector<double> values;
        for (const auto& [id, v] : rung.recorded) values.push_back(v);
        const double cutoff = Percentile(values, (1 - 1 / config_.reduction_factor) * 100);
        if (score < cutoff) decision = Decision::Stop();
      }
      rung.recorded[trial_id] = score;
      return decision;
    }
    return Decision::Continue();
  }

  Decision OnResultPromotion(const std::string& trial_id, AshaTrial& trial, double t,
                             double score) {
    auto& rungs = brackets_[trial.bracket];
    for (size_t k = rungs.size(); k-- > 0;) {
      Rung& rung = rungs[k];
      if (t < rung.milestone) continue;
      if (rung.recorded.count(trial_id)) break;  // past this rung already: run to the next
      rung.recorded[trial_id] = score;
      if (pasha_ && trial.bracket == 0 && k > 0) {
        // Judged against the noise measured before this result, then added to it.
        const bool grow = k == top_ && top_ + 1 < rungs.size() &&
                          RankingChanged(trial_id, rungs[k - 1], rung, Epsilon());
        AddCrissCrosses(trial_id, rungs[k - 1], rung);
        if (grow) {
          ++top_;
          ++num_grown_;
        }
      }
      if (t < config_.max_t) {
        trial.paused_at = k;
        return Decision::Pause();
      }
      break;
    }
    if (t >= config_.max_t && config_.stop_last_trials) return Decision::Stop();
    return Decision::Continue();
  }

  // PASHA: the maximum resource so far (ASHA: max_t).
  double MaxT() const { return pasha_ ? brackets_[0][top_].milestone : config_.max_t; }

  // Calls `f(gap_below, gap_top)` for each trial recorded at both rungs besides `trial`, with
  // the differences of trial's scores from its scores (trial's minus the other's).
  template <typename F>
  static void ForPairs(const std::string& trial, const Rung& below, const Rung& top, F f) {
    const double trial_below = below.recorded.at(trial), trial_top = top.recorded.at(trial);
    for (const auto& [other, other_top] : top.recorded) {
      if (other == trial) continue;
      auto other_below = below.recorded.find(other);
      if (other_below == below.recorded.end()) continue;
      f(trial_below - other_below->second, trial_top - other_top);
    }
  }

  // Whether `trial`, just recorded at `top`, is ordered against a trial recorded there before
  // one way at `top` and the other way at `below`, by more than `eps` at both.
  static bool RankingChanged(const std::string& trial, const Rung& below, const Rung& top,
                             double eps) {
    bool changed = false;
    ForPairs(trial, below, top, [&](double at_below, double at_top) {
      changed = changed || (at_top > eps && at_below < -eps) || (at_top < -eps && at_below > eps);
    });
    return changed;
  }

  // The pairs `trial` makes with the others at `below` and `top` whose order differs: the
  // noise PASHA's epsilon is estimated from.
  void AddCrissCrosses(const std::string& trial, const Rung& below, const Rung& top) {
    ForPairs(trial, below, top, [&](double at_below, double at_top) {
      if (at_below * at_top >= 0) return;
      const double gap = std::min(std::fabs(at_below), std::fabs(at_top));
      // The latest kMaxGaps only: a sweep of thousands of trials makes millions of pairs.
      if (gaps_.size() < kMaxGaps) {
        gaps_.push_back(gap);
      } else {
        gaps_[gaps_seen_ % kMaxGaps] = gap;
      }
      ++gaps_seen_;
    });
  }

  double Epsilon() const {
    if (pasha_->epsilon) return *pasha_->epsilon;
    return gaps_.empty() ? 0.0 : Percentile(gaps_, 90);
  }

  const AshaConfig config_;
  const std::string metric_;
  const double sign_;  // +1 for max, -1 for min: scores are "higher is better"
  Rng rng_;
  std::vector<std::vector<Rung>> brackets_;  // rungs ascending by milestone
  std::map<std::string, AshaTrial> trials_;
  int num_stopped_ = 0;
  int num_promoted_ = 0;
  const std::optional<PashaOptions> pasha_;  // set: PASHA
  size_t top_ = 0;                           // PASHA: the current top rung of bracket 0
  int num_grown_ = 0;
  // PASHA: the criss-crossing pairs' gaps, for epsilon: the latest kMaxGaps of gaps_seen_.
  static constexpr size_t kMaxGaps = 10'000;
  std::vector<double> gaps_;
  uint64_t gaps_seen_ = 0;
};

}  // namespace

std::unique_ptr<TrialScheduler> MakeAsha(const AshaConfig& config, std::string metric,
                                         std::string mode, uint64_t seed,
                                         std::optional<PashaOptions> pasha) {
  return std::make_unique<AshaScheduler>(config, std::move(metric), std::move(mode), seed,
                                         pasha);
}

AshaConfig PashaAsAsha(const PashaConfig& config) {
  return {.time_attr = config.time_attr,
          .max_t = config.max_t,
          .grace_period = config.grace_period,
          .reduction_factor = config.reduction_factor,
          .brackets = 1,
          .promotion = true,
          .stop_last_trials = true};
}

}  // namespace rayd::tune::internal
