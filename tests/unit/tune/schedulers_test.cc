// Trial schedulers on scripted results: every expected decision below is worked out by hand from
// the rule the scheduler implements (Ray Tune's schedulers, the ASHA and HyperBand papers).

#include <rayd/tune/schedulers.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pbt_lineage.h"

namespace {

using rayd::tune::AshaConfig;
using rayd::tune::Decision;
using rayd::tune::Domain;
using rayd::tune::FifoConfig;
using rayd::tune::HyperBandConfig;
using rayd::tune::MakeScheduler;
using rayd::tune::MedianStoppingConfig;
using rayd::tune::PbtConfig;
using rayd::tune::internal::PbtLineageLog;
using rayd::tune::SchedulerResult;
using rayd::tune::TrialScheduler;
using Action = Decision::Action;
using nlohmann::json;

SchedulerResult At(const std::string& time_attr, double t, const std::string& metric, double value,
                   bool checkpoint = false, json config = json()) {
  SchedulerResult r;
  r.metrics = {{time_attr, t}, {metric, value}, {"time_this_iter_s", 1.0}};
  r.config = std::move(config);
  r.has_checkpoint = checkpoint;
  return r;
}

SchedulerResult Iter(double iteration, double loss) {
  return At("training_iteration", iteration, "loss", loss);
}

std::string Id(int i) { return "t" + std::to_string(i); }

AshaConfig Asha(bool promotion) {
  AshaConfig c;
  c.max_t = 9;
  c.grace_period = 1;
  c.reduction_factor = 3;
  c.promotion = promotion;
  return c;
}

}  // namespace

TEST_CASE("FIFO always continues and validates mode only when given", "[tune]") {
  auto fifo = MakeScheduler(FifoConfig{}, "", "", 0);
  CHECK(fifo->OnTrialResult("a", Iter(1, 1e9)).action == Action::kContinue);
  CHECK(fifo->ChooseTrialToResume() == std::nullopt);
  CHECK_THROWS_AS(MakeScheduler(FifoConfig{}, "", "avg", 0), std::invalid_argument);
}

TEST_CASE("ASHA stops trials below the rung cut-off as Ray does", "[tune]") {
  // rf = 3, grace 1, max_t 9: rungs at 1, 3, 9. A trial arriving at a rung is compared with the
  // (1 - 1/3) quantile (numpy's linear interpolation) of the scores already recorded there; for
  // mode=min the score is -loss, i.e. the loss cut-off is the 1/3 quantile of recorded losses.
  auto asha = MakeScheduler(Asha(false), "loss", "min", 7);
  for (int i = 0; i < 9; ++i) asha->OnTrialAdd(Id(i), json::object());

  struct Step {
    int trial;
    double loss;
    bool stop;  // loss cut-off worked out by hand in the comment
  };
  const std::vector<Step> rung1 = {
      {0, 5, false},    // nothing recorded
      {1, 3, false},    // recorded {5}: cut-off 5
      {2, 8, true},     // {3,5}: 3 + 1/3*2 = 3.667
      {3, 1, false},    // {3,5,8}: pos 2/3 -> 3 + 2/3*2 = 4.333
      {4, 4, true},     // {1,3,5,8}: pos 1 -> 3
      {5, 6, true},     // {1,3,4,5,8}: pos 4/3 -> 3 + 1/3 = 3.333
      {6, 2, false},    // {1,3,4,5,6,8}: pos 5/3 -> 3 + 2/3 = 3.667
      {7, 7, true},     // {1,2,3,4,5,6,8}: pos 2 -> 3
      {8, 0.5, false},  // {1,...,8}: pos 7/3 -> 3 + 1/3 = 3.333
  };
  for (const Step& s : rung1) {
    INFO("trial " << s.trial << " at rung 1");
    const Action want = s.stop ? Action::kStop : Action::kContinue;
    CHECK(asha->OnTrialResult(Id(s.trial), Iter(1, s.loss)).action == want);
  }
  // Between rungs nothing is decided, even for a bad result.
  for (int t : {0, 1, 3, 6, 8})
    CHECK(asha->OnTrialResult(Id(t), Iter(2, 100)).action == Action::kContinue);
  const std::vector<Step> rung3 = {
      {6, 1.5, false},  // nothing recorded at rung 3
      {0, 4.5, true},   // {1.5}: cut-off 1.5
      {8, 0.4, false},  // {1.5,4.5}: 1.5 + 1/3*3 = 2.5
      {1, 2.5, true},   // {0.4,1.5,4.5}: pos 2/3 -> 0.4 + 2/3*1.1 = 1.133
      {3, 0.9, false},  // {0.4,1.5,2.5,4.5}: pos 1 -> 1.5
  };
  for (const Step& s : rung3) {
    INFO("trial " << s.trial << " at rung 3");
    const Action want = s.stop ? Action::kStop : Action::kContinue;
    CHECK(asha->OnTrialResult(Id(s.trial), Iter(3, s.loss)).action == want);
  }
  // A later result past a rung it already recorded at decides nothing; max_t stops.
  CHECK(asha->OnTrialResult(Id(3), Iter(4, 50)).action == Action::kContinue);
  CHECK(asha->OnTrialResult(Id(3), Iter(9, 0.1)).action == Action::kStop);
  CHECK(asha->Summary() == "ASHA: rungs 1/3/9, 7 stopped");
}

TEST_CASE("ASHA cut-off interpolates between recorded scores", "[tune]") {
  // Recorded losses {4, 2, 1}: scores {-4,-2,-1}, the 2/3 quantile at position 4/3 is
  // -2 + 1/3 * 1 = -1.667, so a loss of 1.66 passes and 1.67 does not. A nearest-rank quantile
  // (-2) would let both through.
  for (double loss : {1.66, 1.67}) {
    auto asha = MakeScheduler(Asha(false), "loss", "min", 0);
    CHECK(asha->OnTrialResult("a", Iter(1, 4)).action == Action::kContinue);
    CHECK(asha->OnTrialResult("b", Iter(1, 2)).action == Action::kContinue);
    CHECK(asha->OnTrialResult("c", Iter(1, 1)).action == Action::kContinue);
    const Action want = loss < 1.667 ? Action::kContinue : Action::kStop;
    CHECK(asha->OnTrialResult("d", Iter(1, loss)).action == want);
  }
  // Only strictly below the cut-off stops (a tie goes on).
  auto tie = MakeScheduler(Asha(false), "loss", "min", 0);
  CHECK(tie->OnTrialResult("a", Iter(1, 2)).action == Action::kContinue);
  CHECK(tie->OnTrialResult("b", Iter(1, 2)).action == Action::kContinue);
}

TEST_CASE("ASHA mode max keeps the high scores", "[tune]") {
  // The same numbers as accuracies: 2 is below the cut-off 4; {2,4}: 2 + 2/3*2 = 3.333 > 1.
  auto max = MakeScheduler(Asha(false), "acc", "max", 0);
  auto acc = [](double v) { return At("training_iteration", 1, "acc", v); };
  CHECK(max->OnTrialResult("a", acc(4)).action == Action::kContinue);
  CHECK(max->OnTrialResult("b", acc(2)).action == Action::kStop);
  CHECK(max->OnTrialResult("c", acc(1)).action == Action::kStop);
  auto min = MakeScheduler(Asha(false), "acc", "min", 0);
  CHECK(min->OnTrialResult("a", acc(4)).action == Action::kContinue);
  CHECK(min->OnTrialResult("b", acc(2)).action == Action::kContinue);
  CHECK(min->OnTrialResult("c", acc(1)).action == Action::kContinue);
}

TEST_CASE("ASHA continues on results without the metric and honours stop_last_trials", "[tune]") {
  auto asha = MakeScheduler(Asha(false), "loss", "min", 0);
  SchedulerResult no_metric;
  no_metric.metrics = {{"training_iteration", 9}};
  CHECK(asha->OnTrialResult("a", no_metric).action == Action::kContinue);
  SchedulerResult no_time;
  no_time.metrics = {{"loss", 1}};
  CHECK(asha->OnTrialResult("a", no_time).action == Action::kContinue);
  CHECK(asha->OnTrialResult("a", Iter(12, 1)).action == Action::kStop);

  AshaConfig keep_going = Asha(false);
  keep_going.stop_last_trials = false;
  auto open = MakeScheduler(keep_going, "loss", "min", 0);
  CHECK(open->OnTrialResult("a", Iter(9, 1)).action == Action::kContinue);
  CHECK(open->OnTrialResult("a", Iter(10, 1)).action == Action::kContinue);
}

TEST_CASE("ASHA brackets start at grace_period times rf to the s", "[tune]") {
  AshaConfig c = Asha(false);
  c.max_t = 27;
  c.brackets = 3;
  auto asha = MakeScheduler(c, "loss", "min", 1);
  CHECK(asha->Summary() == "ASHA: 3 brackets, rungs 1/3/9/27 | 3/9/27 | 9/27, 0 stopped");
  // The weighted draw favours the bracket with the most rungs and is seeded.
  auto again = MakeScheduler(c, "loss", "min", 1);
  for (int i = 0; i < 20; ++i) {
    asha->OnTrialAdd(Id(i), json::object());
    again->OnTrialAdd(Id(i), json::object());
  }
  // Ever worse losses at t=1: in bracket 0 every trial but the first there stops; in the others
  // t=1 is below the first rung. Weights e^0 : e^-1 : e^-2 put about 2/3 in bracket 0.
  int stopped = 0, stopped_again = 0;
  for (int i = 0; i < 20; ++i) {
    stopped += asha->OnTrialResult(Id(i), Iter(1, 10 + i)).action == Action::kStop;
    stopped_again += again->OnTrialResult(Id(i), Iter(1, 10 + i)).action == Action::kStop;
  }
  CHECK(stopped == stopped_again);
  CHECK(stopped >= 5);
  CHECK(stopped < 19);
}

TEST_CASE("ASHA promotion form pauses at rungs and promotes the top third", "[tune]") {
  auto asha = MakeScheduler(Asha(true), "loss", "min", 0);
  for (const char* id : {"a", "b", "c", "d", "e", "f", "g", "h", "i"}) asha->OnTrialAdd(id, {});
  auto pause_at_1 = [&](const std::string& id, double loss) {
    INFO(id);
    CHECK(asha->OnTrialResult(id, Iter(1, loss)).action == Action::kPause);
  };
  pause_at_1("a", 5);
  CHECK(asha->ChooseTrialToResume() == std::nullopt);  // 1 recorded: top floor(1/3) = none
  pause_at_1("b", 3);
  CHECK(asha->ChooseTrialToResume() == std::nullopt);
  pause_at_1("c", 8);
  CHECK(asha->ChooseTrialToResume() == "b");           // top 1 of {a 5, b 3, c 8}
  CHECK(asha->ChooseTrialToResume() == std::nullopt);  // b is promoted already
  pause_at_1("d", 1);
  CHECK(asha->ChooseTrialToResume() == "d");  // top floor(4/3) = 1: d
  CHECK(asha->ChooseTrialToResume() == std::nullopt);
  pause_at_1("e", 4);
  pause_at_1("f", 6);
  CHECK(asha->ChooseTrialToResume() == std::nullopt);  // top 2 = d, b: both promoted
  pause_at_1("g", 9);
  pause_at_1("h", 10);
  pause_at_1("i", 11);
  // 9 recorded: top 3 = d (1), b (3), e (4); only e is left to promote.
  CHECK(asha->ChooseTrialToResume() == "e");
  CHECK(asha->ChooseTrialToResume() == std::nullopt);

  // Promoted trials run on to rung 3 and pause there.
  CHECK(asha->OnTrialResult("b", Iter(2, 2.5)).action == Action::kContinue);
  CHECK(asha->OnTrialResult("b", Iter(3, 2.0)).action == Action::kPause);
  CHECK(asha->OnTrialResult("d", Iter(3, 0.5)).action == Action::kPause);
  CHECK(asha->ChooseTrialToResume() == std::nullopt);  // rung 3 has 2: none in the top third
  CHECK(asha->OnTrialResult("e", Iter(3, 3.5)).action == Action::kPause);
  CHECK(asha->ChooseTrialToResume() == "d");                              // the highest rung first
  CHECK(asha->OnTrialResult("d", Iter(9, 0.2)).action == Action::kStop);  // max_t
  CHECK(asha->ChooseTrialToResume() == std::nullopt);
  CHECK(asha->Summary() == "ASHA (promotion): rungs 1/3/9, 4 promoted, 1 stopped");
}

TEST_CASE("ASHA promotion skips trials that failed or completed while paused", "[tune]") {
  auto asha = MakeScheduler(Asha(true), "loss", "min", 0);
  CHECK(asha->OnTrialResult("a", Iter(1, 1)).action == Action::kPause);
  CHECK(asha->OnTrialResult("b", Iter(1, 2)).action == Action::kPause);
  CHECK(asha->OnTrialResult("c", Iter(1, 3)).action == Action::kPause);
  asha->OnTrialError("a");
  CHECK(asha->ChooseTrialToResume() == std::nullopt);  // a is the top third, and gone
  CHECK(asha->OnTrialResult("x", Iter(1, 0.5)).action == Action::kPause);
  CHECK(asha->OnTrialResult("y", Iter(1, 4)).action == Action::kPause);
  CHECK(asha->OnTrialResult("z", Iter(1, 5)).action == Action::kPause);
  // 6 recorded: top 2 = x (0.5), a (1).
  asha->OnTrialComplete("x");
  CHECK(asha->ChooseTrialToResume() == std::nullopt);
}

TEST_CASE("HyperBand fills brackets of the paper's sizes in order", "[tune]") {
  // max_t 9, eta 3: s_max = 2. Brackets: s=2 takes 9 trials (rungs 1, 3, 9), s=1 takes
  // ceil(3/2 * 3) = 5 (rungs 3, 9), s=0 takes 3 (rung 9), then a new band starts at s=2.
  HyperBandConfig c;
  c.max_t = 9;
  c.reduction_factor = 3;
  auto hb = MakeScheduler(c, "loss", "min", 0);
  for (int i = 0; i < 18; ++i) hb->OnTrialAdd(Id(i), json::object());
  CHECK(hb->OnTrialResult(Id(8), Iter(1, 1)).action == Action::kPause);     // s=2: rung 1
  CHECK(hb->OnTrialResult(Id(9), Iter(1, 1)).action == Action::kContinue);  // s=1: first rung 3
  CHECK(hb->OnTrialResult(Id(13), Iter(3, 1)).action == Action::kPause);    // s=1: rung 3
  // Bracket s=1 halves at 3 and keeps floor(5 / 3) = 1 of its 5: t13 (loss 1).
  CHECK(hb->OnTrialResult(Id(9), Iter(3, 4)).action == Action::kPause);
  CHECK(hb->OnTrialResult(Id(10), Iter(3, 3)).action == Action::kPause);
  CHECK(hb->OnTrialResult(Id(11), Iter(3, 2)).action == Action::kPause);
  CHECK(hb->OnTrialResult(Id(12), Iter(3, 5)).action == Action::kStop);
  CHECK(hb->ChooseTrialToResume() == Id(13));
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  CHECK(hb->OnTrialResult(Id(14), Iter(3, 1)).action == Action::kContinue);  // s=0: only 9
  CHECK(hb->OnTrialResult(Id(16), Iter(8, 1)).action == Action::kContinue);
  CHECK(hb->OnTrialResult(Id(16), Iter(9, 1)).action == Action::kStop);
  // Alone in the new band's bracket: it is the whole rung, so it goes on.
  CHECK(hb->OnTrialResult(Id(17), Iter(1, 1)).action == Action::kContinue);
  // Stopped: 4 at s=1's rung, t16 at max_t.
  CHECK(hb->Summary() == "HyperBand: 4 brackets (latest: 1/9 trials, rung 3), 5 stopped");
}

TEST_CASE("HyperBand halves a bracket when its whole rung has reported", "[tune]") {
  HyperBandConfig c;
  c.max_t = 9;
  c.reduction_factor = 3;
  auto hb = MakeScheduler(c, "loss", "min", 0);
  for (int i = 0; i < 9; ++i) hb->OnTrialAdd(Id(i), json::object());
  const std::vector<double> losses = {5, 3, 8, 1, 4, 6, 2, 7, 0.5};
  for (int i = 0; i < 8; ++i) {
    CHECK(hb->OnTrialResult(Id(i), Iter(1, losses[i])).action == Action::kPause);
    CHECK(hb->ChooseTrialToResume() == std::nullopt);
  }
  // The last one completes rung 1: keep floor(9/3) = 3: t8 (0.5), t3 (1), t6 (2).
  CHECK(hb->OnTrialResult(Id(8), Iter(1, 0.5)).action == Action::kContinue);
  CHECK(hb->ChooseTrialToResume() == Id(3));
  CHECK(hb->ChooseTrialToResume() == Id(6));
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  CHECK(hb->OnTrialResult(Id(0), Iter(2, 0.1)).action == Action::kStop);  // lost the halving

  // Rung 3 keeps floor(9/9) = 1: the last reporter is the worst of the three and stops.
  CHECK(hb->OnTrialResult(Id(8), Iter(2, 0.45)).action == Action::kContinue);
  CHECK(hb->OnTrialResult(Id(8), Iter(3, 0.4)).action == Action::kPause);
  CHECK(hb->OnTrialResult(Id(6), Iter(3, 2.5)).action == Action::kPause);
  CHECK(hb->OnTrialResult(Id(3), Iter(3, 3.0)).action == Action::kStop);
  CHECK(hb->ChooseTrialToResume() == Id(8));
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  CHECK(hb->OnTrialResult(Id(6), Iter(4, 0.1)).action == Action::kStop);
  CHECK(hb->OnTrialResult(Id(8), Iter(9, 0.3)).action == Action::kStop);
  // 6 at rung 1, 2 at rung 3, and t8 at max_t.
  CHECK(hb->Summary() == "HyperBand: 1 bracket (latest: 9/9 trials, rung 9), 9 stopped");
}

TEST_CASE("HyperBand halves when the last missing trial fails", "[tune]") {
  HyperBandConfig c;
  c.max_t = 9;
  c.reduction_factor = 3;
  c.stop_last_trials = false;
  auto hb = MakeScheduler(c, "acc", "max", 0);
  for (int i = 0; i < 9; ++i) hb->OnTrialAdd(Id(i), json::object());
  for (int i = 0; i < 8; ++i) {
    CHECK(hb->OnTrialResult(Id(i), At("training_iteration", 1, "acc", i)).action == Action::kPause);
  }
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  hb->OnTrialError(Id(8));
  // Best three accuracies: t7, t6, t5.
  CHECK(hb->ChooseTrialToResume() == Id(7));
  CHECK(hb->ChooseTrialToResume() == Id(6));
  CHECK(hb->ChooseTrialToResume() == Id(5));
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  // Without stop_last_trials the survivor of the last rung runs on past max_t.
  hb->OnTrialComplete(Id(6));
  hb->OnTrialComplete(Id(5));
  CHECK(hb->OnTrialResult(Id(7), At("training_iteration", 3, "acc", 1)).action ==
        Action::kContinue);  // alone at rung 3: promoted to the last rung at once
  CHECK(hb->OnTrialResult(Id(7), At("training_iteration", 9, "acc", 1)).action ==
        Action::kContinue);
}

TEST_CASE("MedianStopping compares the best result with the median of running means", "[tune]") {
  // grace 2 iterations, 2 other trials needed. For mode=max the same script is negated.
  for (const char* mode : {"min", "max"}) {
    INFO(mode);
    const double sign = std::string(mode) == "min" ? 1 : -1;
    MedianStoppingConfig c;
    c.time_attr = "training_iteration";
    c.grace_period = 2;
    c.min_samples_required = 2;
    auto ms = MakeScheduler(c, "loss", mode, 0);
    auto report = [&](const char* id, double t, double loss) {
      return ms->OnTrialResult(id, Iter(t, sign * loss)).action;
    };
    CHECK(report("a", 1, 1) == Action::kContinue);
    CHECK(report("b", 1, 2) == Action::kContinue);
    CHECK(report("c", 1, 3) == Action::kContinue);
    CHECK(report("a", 2, 1) == Action::kContinue);  // no other trial has reached t=2
    CHECK(report("b", 2, 2) == Action::kContinue);  // only a has
    CHECK(report("c", 2, 3) == Action::kStop);      // means {1, 2}: median 1.5 < best 3
    CHECK(report("a", 3, 1) == Action::kContinue);
    CHECK(report("b", 3, 2) == Action::kContinue);  // only a at t=3: too few
    // d: at t=2 means {a 1, b 2, c 3}: median 2 > best 1.9, it goes on; at t=3 only a and b
    // have reached 3 (c stopped at 2): means over [2, 3] {1, 2}: median 1.5 < best 1.9.
    CHECK(report("d", 1, 5) == Action::kContinue);
    CHECK(report("d", 2, 1.9) == Action::kContinue);
    CHECK(report("d", 3, 2.5) == Action::kStop);
    // e's best (1.8, before the grace period) beats the median at t=2 of {1, 2, 3, 1.9} = 1.95,
    // though its latest result (2.2) does not.
    CHECK(report("e", 1, 1.8) == Action::kContinue);
    CHECK(report("e", 2, 2.2) == Action::kContinue);
    CHECK(ms->Summary() == "MedianStopping: 2 stopped");
  }
}

TEST_CASE("MedianStopping pauses instead without hard_stop", "[tune]") {
  MedianStoppingConfig c;
  c.time_attr = "training_iteration";
  c.grace_period = 0;
  c.min_samples_required = 1;
  c.hard_stop = false;
  auto ms = MakeScheduler(c, "loss", "min", 0);
  CHECK(ms->OnTrialResult("a", Iter(1, 1)).action == Action::kContinue);
  CHECK(ms->OnTrialResult("b", Iter(1, 2)).action == Action::kPause);
  CHECK(ms->OnTrialResult("b", Iter(2, 9)).action == Action::kContinue);  // once paused: FIFO
  CHECK(ms->Summary() == "MedianStopping: 1 paused");
}

namespace {

// Population for the PBT tests: "acc" to maximize, perturbation every 2 iterations.
PbtConfig Pbt() {
  PbtConfig c;
  c.time_attr = "training_iteration";
  c.perturbation_interval = 2;
  c.quantile_fraction = 0.25;
  c.resample_probability = 0;
  c.hyperparam_mutations = {
      {{"lr"}, Domain::LogUniform(1e-4, 1e-1)},
      {{"layers"}, Domain::RandInt(1, 8)},
      {{"opt", "name"}, Domain::Choice({"sgd", "adam", "rmsprop"})},
      {{"batch"}, json::array({16, 32, 64})},
      {{"dropout"}, Domain::QUniform(0.0, 0.5, 0.1)},
  };
  return c;
}

json DonorConfig() {
  return {{"lr", 0.01},  {"layers", 7},    {"opt", {{"name", "adam"}, {"momentum", 0.9}}},
          {"batch", 16}, {"dropout", 0.5}, {"seed", 3}};
}

SchedulerResult Acc(double iteration, double acc, bool checkpoint, json config) {
  return At("training_iteration", iteration, "acc", acc, checkpoint, std::move(config));
}

// t0 (best, with a checkpoint when `checkpoint`), t1, t2 report iteration 1; t3 reports 1 and 2
// and is the worst: the lower quantile (ceil(4 * 0.25) = 1 trial) against the upper (t0).
Decision ExploitOnce(TrialScheduler& pbt, bool checkpoint) {
  const json other = {{"lr", 0.05},  {"layers", 2},    {"opt", {{"name", "sgd"}}},
                      {"batch", 64}, {"dropout", 0.1}, {"seed", 1}};
  pbt.OnTrialAdd("t0", DonorConfig());
  for (const char* id : {"t1", "t2", "t3"}) pbt.OnTrialAdd(id, other);
  pbt.OnTrialResult("t0", Acc(1, 0.9, checkpoint, DonorConfig()));
  pbt.OnTrialResult("t1", Acc(1, 0.5, true, other));
  pbt.OnTrialResult("t2", Acc(1, 0.7, true, other));
  CHECK(pbt.OnTrialResult("t3", Acc(1, 0.2, true, other)).action == Action::kContinue);
  return pbt.OnTrialResult("t3", Acc(2, 0.1, true, other));
}

}  // namespace

TEST_CASE("PBT exploits a top trial with a checkpoint from the bottom quantile", "[tune]") {
  auto pbt = MakeScheduler(Pbt(), "acc", "max", 1);
  Decision d = ExploitOnce(*pbt, true);
  REQUIRE(d.action == Action::kExploit);
  CHECK(d.donor == "t0");
  // Unmutated keys come from the donor.
  CHECK(d.config["seed"] == 3);
  CHECK(d.config["opt"]["momentum"] == 0.9);
  CHECK(pbt->Summary() == "PBT: 1 exploit");
  // A middle trial at its perturbation point continues.
  CHECK(pbt->OnTrialResult("t1", Acc(2, 0.5, true, json::object())).action == Action::kContinue);
}

TEST_CASE("PBT does not exploit without a donor checkpoint or peers", "[tune]") {
  auto pbt = MakeScheduler(Pbt(), "acc", "max", 1);
  CHECK(ExploitOnce(*pbt, false).action == Action::kContinue);
  CHECK(pbt->Summary() == "PBT: 0 exploits");

  auto alone = MakeScheduler(Pbt(), "acc", "max", 1);
  CHECK(alone->OnTrialResult("a", Acc(2, 0.1, true, DonorConfig())).action == Action::kContinue);
  CHECK(alone->OnTrialResult("a", Acc(4, 0.1, true, DonorConfig())).action == Action::kContinue);

  PbtConfig burn_in = Pbt();
  burn_in.burn_in_period = 3;
  auto early = MakeScheduler(burn_in, "acc", "max", 1);
  CHECK(ExploitOnce(*early, true).action == Action::kContinue);

  // Quantiles hold at most half the population: of 3 trials, 1 each; the middle one goes on.
  PbtConfig half = Pbt();
  half.quantile_fraction = 0.5;
  auto three = MakeScheduler(half, "acc", "max", 1);
  three->OnTrialResult("hi", Acc(1, 0.9, true, DonorConfig()));
  three->OnTrialResult("lo", Acc(1, 0.1, true, DonorConfig()));
  CHECK(three->OnTrialResult("mid", Acc(2, 0.5, true, DonorConfig())).action == Action::kContinue);
  CHECK(three->OnTrialResult("lo", Acc(2, 0.1, true, DonorConfig())).action == Action::kExploit);

  // A finished trial is no longer part of the population.
  auto done = MakeScheduler(Pbt(), "acc", "max", 1);
  done->OnTrialAdd("t0", DonorConfig());
  done->OnTrialResult("t0", Acc(1, 0.9, true, DonorConfig()));
  done->OnTrialComplete("t0");
  CHECK(done->OnTrialResult("t1", Acc(2, 0.1, true, DonorConfig())).action == Action::kContinue);
}

TEST_CASE("synchronous PBT pauses each trial at the sync point until every unfinished trial is "
          "there, then ranks them all at once",
          "[tune]") {
  PbtConfig c = Pbt();
  c.synch = true;
  auto pbt = MakeScheduler(c, "acc", "max", 1);
  for (const char* id : {"t0", "t1", "t2", "t3"}) pbt->OnTrialAdd(id, DonorConfig());
  // Before the sync point (iteration 2) everyone continues; at it, each waits for the others.
  CHECK(pbt->OnTrialResult("t0", Acc(1, 0.9, true, DonorConfig())).action == Action::kContinue);
  CHECK(pbt->OnTrialResult("t0", Acc(2, 0.9, true, DonorConfig())).action == Action::kPause);
  CHECK(pbt->OnTrialResult("t3", Acc(2, 0.1, true, DonorConfig())).action == Action::kPause);
  CHECK(pbt->OnTrialResult("t1", Acc(2, 0.5, true, DonorConfig())).action == Action::kPause);
  CHECK_FALSE(pbt->ChooseTrialToResume());
  // The last to arrive ranks them all and goes on; the worst (t3, paused) exploits the best
  // when it resumes, before the others resume as they were.
  CHECK(pbt->OnTrialResult("t2", Acc(2, 0.7, true, DonorConfig())).action == Action::kContinue);
  std::vector<std::string> resumed;
  while (std::optional<std::string> id = pbt->ChooseTrialToResume()) resumed.push_back(*id);
  CHECK(resumed == std::vector<std::string>{"t3", "t0", "t1"});
  CHECK(pbt->OnTrialResume("t0").action == Action::kContinue);
  CHECK(pbt->OnTrialResume("t1").action == Action::kContinue);
  const Decision exploit = pbt->OnTrialResume("t3");
  REQUIRE(exploit.action == Action::kExploit);
  CHECK(exploit.donor == "t0");
  CHECK(exploit.lineage[0] == "t3");
  CHECK(pbt->OnTrialResume("t3").action == Action::kContinue);  // decided once
  CHECK(pbt->Summary() == "PBT: 1 exploit");
  // The next sync point is 4: iteration 3 goes on.
  CHECK(pbt->OnTrialResult("t2", Acc(3, 0.7, true, DonorConfig())).action == Action::kContinue);
  CHECK(pbt->OnTrialResult("t2", Acc(4, 0.7, true, DonorConfig())).action == Action::kPause);

  // The last to arrive exploits at once when it is the worst ...
  auto last = MakeScheduler(c, "acc", "max", 1);
  for (const char* id : {"a", "b"}) last->OnTrialAdd(id, DonorConfig());
  CHECK(last->OnTrialResult("a", Acc(2, 0.9, true, DonorConfig())).action == Action::kPause);
  const Decision now = last->OnTrialResult("b", Acc(2, 0.1, true, DonorConfig()));
  CHECK(now.action == Action::kExploit);
  CHECK(now.donor == "a");
  CHECK(last->ChooseTrialToResume() == std::optional<std::string>("a"));
  CHECK_FALSE(last->ChooseTrialToResume());
  // ... and pauses when it is the best, keeping its checkpoint the ranked one until the worst,
  // resumed first, has cloned it.
  auto best = MakeScheduler(c, "acc", "max", 1);
  for (const char* id : {"a", "b"}) best->OnTrialAdd(id, DonorConfig());
  CHECK(best->OnTrialResult("b", Acc(2, 0.1, true, DonorConfig())).action == Action::kPause);
  CHECK(best->OnTrialResult("a", Acc(2, 0.9, true, DonorConfig())).action == Action::kPause);
  CHECK(best->ChooseTrialToResume() == std::optional<std::string>("b"));
  CHECK(best->ChooseTrialToResume() == std::optional<std::string>("a"));
  CHECK(best->OnTrialResume("b").donor == "a");

  // A trial that ends before the sync point releases those waiting on it.
  auto ended = MakeScheduler(c, "acc", "max", 1);
  for (const char* id : {"a", "b", "c"}) ended->OnTrialAdd(id, DonorConfig());
  CHECK(ended->OnTrialResult("a", Acc(2, 0.9, true, DonorConfig())).action == Action::kPause);
  CHECK(ended->OnTrialResult("b", Acc(2, 0.1, true, DonorConfig())).action == Action::kPause);
  CHECK(ended->OnTrialResult("c", Acc(1, 0.5, true, DonorConfig())).action == Action::kContinue);
  CHECK_FALSE(ended->ChooseTrialToResume());
  ended->OnTrialError("c");
  CHECK(ended->ChooseTrialToResume() == std::optional<std::string>("b"));
  CHECK(ended->ChooseTrialToResume() == std::optional<std::string>("a"));
  CHECK(ended->OnTrialResume("b").action == Action::kExploit);
}

TEST_CASE("PBT explore perturbs inside the domains", "[tune]") {
  std::set<double> lrs;
  std::set<int64_t> layers;
  std::set<std::string> opts;
  std::set<int> batches;
  std::set<double> dropouts;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto pbt = MakeScheduler(Pbt(), "acc", "max", seed);
    Decision d = ExploitOnce(*pbt, true);
    REQUIRE(d.action == Action::kExploit);
    const json& c = d.config;
    lrs.insert(c["lr"].get<double>());
    REQUIRE(c["layers"].is_number_integer());
    layers.insert(c["layers"].get<int64_t>());
    opts.insert(c["opt"]["name"].get<std::string>());
    batches.insert(c["batch"].get<int>());
    dropouts.insert(std::round(c["dropout"].get<double>() * 10) / 10);
  }
  // lr 0.01 * {1.2, 0.8}.
  REQUIRE(lrs.size() == 2);
  CHECK(*lrs.begin() == Approx(0.008));
  CHECK(*lrs.rbegin() == Approx(0.012));
  // layers 7 * 1.2 = 8.4 is clamped below randint's excluded upper bound 8; 7 * 0.8 -> 5.
  CHECK(layers == std::set<int64_t>{5, 7});
  // adam moves to a neighbour, never stays; batch 16 moves right or stays at the edge.
  CHECK(opts == std::set<std::string>{"sgd", "rmsprop"});
  CHECK(batches == std::set<int>{16, 32});
  // dropout 0.5 * 1.2 is clamped to 0.5; 0.5 * 0.8 = 0.4.
  CHECK(dropouts == std::set<double>{0.4, 0.5});
}

TEST_CASE("PBT with resample_probability 1 always resamples", "[tune]") {
  PbtConfig c = Pbt();
  c.resample_probability = 1;
  const Domain lr = Domain::LogUniform(1e-4, 1e-1);
  const Domain layers = Domain::RandInt(1, 8);
  std::set<double> lrs;
  std::set<std::string> opts;
  std::set<int> batches;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    auto pbt = MakeScheduler(c, "acc", "max", seed);
    Decision d = ExploitOnce(*pbt, true);
    REQUIRE(d.action == Action::kExploit);
    CHECK(lr.Contains(d.config["lr"]));
    CHECK(layers.Contains(d.config["layers"]));
    lrs.insert(d.config["lr"].get<double>());
    opts.insert(d.config["opt"]["name"].get<std::string>());
    batches.insert(d.config["batch"].get<int>());
  }
  CHECK(lrs.size() > 50);          // not two perturbations of 0.01
  CHECK(opts.count("adam") == 1);  // a shift never keeps adam
  CHECK(batches.count(64) == 1);   // a shift from 16 never reaches 64
}

TEST_CASE("PBT decisions are reproducible from the seed", "[tune]") {
  std::vector<json> first, second;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    auto a = MakeScheduler(Pbt(), "acc", "max", seed);
    auto b = MakeScheduler(Pbt(), "acc", "max", seed);
    first.push_back(ExploitOnce(*a, true).config);
    second.push_back(ExploitOnce(*b, true).config);
  }
  CHECK(first == second);
  std::set<std::string> distinct;
  for (const json& j : first) distinct.insert(j.dump());
  CHECK(distinct.size() > 1);
}

TEST_CASE(
    "a NaN or infinite metric ranks worst: every scheduler stops or replaces the diverged "
    "trial, whatever the mode",
    "[tune]") {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  // ASHA, rung 1: one finite loss recorded; any non-finite one, -inf included (which a plain
  // "lower is better" would call the best), is below the cut-off.
  for (double diverged : {nan, inf, -inf}) {
    INFO(diverged);
    for (const char* mode : {"min", "max"}) {
      auto asha = MakeScheduler(Asha(false), "loss", mode, 0);
      CHECK(asha->OnTrialResult("a", Iter(1, 2)).action == Action::kContinue);
      CHECK(asha->OnTrialResult("b", Iter(1, diverged)).action == Action::kStop);
      // And a finite result after a diverged one at the rung is judged against it: it goes on.
      CHECK(asha->OnTrialResult("c", Iter(1, 1e6)).action == Action::kContinue);
    }
  }
  // HyperBand: a bracket of 9 halves at rung 1 with the diverged trials last.
  HyperBandConfig c;
  c.max_t = 9;
  c.reduction_factor = 3;
  auto hb = MakeScheduler(c, "loss", "min", 0);
  for (int i = 0; i < 9; ++i) hb->OnTrialAdd(Id(i), json::object());
  const std::vector<double> losses = {nan, -inf, 8, inf, 4, 6, nan, 7, 5};
  for (int i = 0; i < 8; ++i) hb->OnTrialResult(Id(i), Iter(1, losses[i]));
  // The three kept are the three best finite losses: t4 (4), t8 (5, the last reporter, goes on)
  // and t5 (6).
  CHECK(hb->OnTrialResult(Id(8), Iter(1, losses[8])).action == Action::kContinue);
  CHECK(hb->ChooseTrialToResume() == Id(4));
  CHECK(hb->ChooseTrialToResume() == Id(5));
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  // Median stopping: the diverged trial's best is the worst value there is.
  MedianStoppingConfig m;
  m.time_attr = "training_iteration";
  m.grace_period = 1;
  m.min_samples_required = 2;
  for (const char* mode : {"min", "max"}) {
    auto ms = MakeScheduler(m, "loss", mode, 0);
    CHECK(ms->OnTrialResult("a", Iter(1, 1)).action == Action::kContinue);
    CHECK(ms->OnTrialResult("b", Iter(1, 2)).action == Action::kContinue);
    CHECK(ms->OnTrialResult("c", Iter(1, nan)).action == Action::kStop);
    // Its state is written as JSON (numbers, no NaN) and restores.
    auto restored = MakeScheduler(m, "loss", mode, 0);
    restored->Restore(json::parse(ms->State().dump()));
    CHECK(restored->State() == ms->State());
  }
  // PBT: the diverged trial is the bottom quantile and clones the top one.
  auto pbt = MakeScheduler(Pbt(), "acc", "max", 1);
  const json other = {{"lr", 0.05},  {"layers", 2},    {"opt", {{"name", "sgd"}}},
                      {"batch", 64}, {"dropout", 0.1}, {"seed", 1}};
  pbt->OnTrialAdd("t0", DonorConfig());
  for (const char* id : {"t1", "t2", "t3"}) pbt->OnTrialAdd(id, other);
  pbt->OnTrialResult("t0", Acc(2, 0.9, true, DonorConfig()));
  pbt->OnTrialResult("t1", Acc(2, 0.1, true, other));
  pbt->OnTrialResult("t2", Acc(2, 0.7, true, other));
  const Decision d = pbt->OnTrialResult("t3", Acc(2, nan, true, other));
  REQUIRE(d.action == Action::kExploit);
  CHECK(d.donor == "t0");
}

TEST_CASE("MO-ASHA keeps the top ceil(n/rf) of a rung by Pareto rank and crowding, feasible "
          "first",
          "[tune]") {
  using rayd::tune::Constraint;
  using rayd::tune::Objective;
  AshaConfig c;
  c.max_t = 4;
  c.grace_period = 1;
  c.reduction_factor = 2;  // rungs at 1 and 2
  const std::vector<Objective> objectives = {{"acc", true}, {"params", false}};
  const std::vector<Constraint> constraints = {rayd::tune::ParseConstraint("latency <= 5")};
  auto mo = MakeScheduler(c, objectives, constraints);
  CHECK(std::string(mo->name()) == "MO-ASHA");
  auto at = [](double t, double acc, double params, double latency) {
    SchedulerResult r;
    r.metrics = {{"training_iteration", t}, {"acc", acc}, {"params", params}, {"latency", latency}};
    return r;
  };
  // Rung 1. a alone goes on. b is dominated by a (less accurate, larger): of 2, the top 1 goes
  // on, so it stops. c trades size for accuracy: of 3 the top 2 go on, and it shares front 0
  // with a (both at infinite crowding; a newcomer wins ties). d dominates everyone but misses
  // the latency bound: infeasible ranks last, of 4 the top 2 go on, so it stops.
  CHECK(mo->OnTrialResult("a", at(1, 0.9, 100, 1)).action == Action::kContinue);
  CHECK(mo->OnTrialResult("b", at(1, 0.8, 200, 1)).action == Action::kStop);
  CHECK(mo->OnTrialResult("c", at(1, 0.95, 300, 1)).action == Action::kContinue);
  CHECK(mo->OnTrialResult("d", at(1, 0.99, 10, 9)).action == Action::kStop);
  // Between rungs nothing is decided; max_t stops.
  CHECK(mo->OnTrialResult("a", at(1.5, 0.1, 1e9, 99)).action == Action::kContinue);
  CHECK(mo->OnTrialResult("a", at(2, 0.91, 100, 1)).action == Action::kContinue);
  CHECK(mo->OnTrialResult("c", at(2, 0.5, 400, 1)).action == Action::kStop);  // dominated by a
  CHECK(mo->OnTrialResult("a", at(4, 0.92, 100, 1)).action == Action::kStop);
  CHECK(mo->Summary() == "MO-ASHA: rungs 1/2, 4 stopped");
  // A diverged objective is the worst there is: y's NaN accuracy loses to x's 0.01.
  auto fresh = MakeScheduler(c, objectives, {});
  CHECK(fresh->OnTrialResult("x", at(1, 0.01, 100, 0)).action == Action::kContinue);
  CHECK(fresh->OnTrialResult("y", at(1, std::nan(""), 100, 0)).action == Action::kStop);
  // Its state (JSON, as the experiment saves it) restores into one that decides alike.
  auto restored = MakeScheduler(c, objectives, constraints);
  restored->Restore(json::parse(mo->State().dump()));
  CHECK(restored->State() == mo->State());
  CHECK(restored->OnTrialResult("e", at(1, 0.1, 1000, 1)).action == Action::kStop);
  // Schedulers that rank by one metric are refused, naming them.
  CHECK_THROWS_WITH(MakeScheduler(rayd::tune::PashaConfig{}, objectives, {}),
                    Catch::Matchers::Contains("pasha ranks by one metric"));
  CHECK_THROWS_AS(MakeScheduler(c, {}, {}), std::invalid_argument);
  CHECK(std::string(MakeScheduler(FifoConfig{}, objectives, {})->name()) == "FIFO");
}

TEST_CASE("PBT describes each exploit in Ray's lineage logs", "[tune]") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("rayd_pbt_test_" + std::to_string(std::random_device{}()));
  fs::remove_all(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto lines = [](const fs::path& path) {
    std::vector<json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  };

  // The scheduler describes each exploit; the Tuner's PbtLineageLog writes what it applies.
  auto pbt = MakeScheduler(Pbt(), "acc", "max", 5);
  const PbtLineageLog log((dir / "exp").string());
  Decision d1 = ExploitOnce(*pbt, true);
  REQUIRE(d1.action == Action::kExploit);
  const json line1 = {"t3", "t0", 2, 1, DonorConfig(), d1.config};
  CHECK(d1.lineage == line1);
  log.Append(d1.lineage);
  CHECK(lines(dir / "exp" / "pbt_global.txt") == std::vector<json>{line1});
  CHECK(lines(dir / "exp" / "pbt_policy_t3.txt") == std::vector<json>{line1});
  CHECK(lines(dir / "exp" / "pbt_global.txt")[0][2].is_number_integer());

  // t3 goes on from t0's checkpoint and becomes the best; t1 (now the worst) exploits it and
  // inherits t3's lineage.
  CHECK(pbt->OnTrialResult("t3", Acc(4, 0.99, true, d1.config)).action == Action::kContinue);
  Decision d2 = pbt->OnTrialResult("t1", Acc(4, 0.4, true, json::object()));
  REQUIRE(d2.action == Action::kExploit);
  CHECK(d2.donor == "t3");
  const json line2 = {"t1", "t3", 4, 4, d1.config, d2.config};
  CHECK(d2.lineage == line2);
  log.Append(d2.lineage);
  CHECK(lines(dir / "exp" / "pbt_global.txt") == std::vector<json>{line1, line2});
  CHECK(lines(dir / "exp" / "pbt_policy_t1.txt") == std::vector<json>{line1, line2});
  CHECK(lines(dir / "exp" / "pbt_policy_t3.txt") == std::vector<json>{line1});
  CHECK(pbt->Summary() == "PBT: 2 exploits");
}

TEST_CASE("MakeScheduler rejects bad options naming them", "[tune]") {
  using Catch::Matchers::Contains;
  using Catch::Matchers::Equals;
  AshaConfig asha;
  asha.grace_period = 10;
  asha.max_t = 5;
  CHECK_THROWS_WITH(MakeScheduler(asha, "loss", "min", 0),
                    Equals("asha: grace_period (10) must not exceed max_t (5)"));
  asha = AshaConfig{};
  asha.reduction_factor = 1;
  CHECK_THROWS_WITH(MakeScheduler(asha, "loss", "min", 0),
                    Contains("asha: reduction_factor must be > 1"));
  asha = AshaConfig{};
  asha.brackets = 0;
  CHECK_THROWS_WITH(MakeScheduler(asha, "loss", "min", 0), Contains("asha: brackets"));
  CHECK_THROWS_WITH(MakeScheduler(AshaConfig{}, "", "min", 0),
                    Equals("metric is required for asha"));
  CHECK_THROWS_WITH(MakeScheduler(AshaConfig{}, "loss", "mean", 0),
                    Contains("mode must be min or max"));
  CHECK_THROWS_WITH(MakeScheduler(PbtConfig{}, "loss", "min", 0),
                    Equals("pbt: hyperparam_mutations is empty"));

  HyperBandConfig hb;
  hb.max_t = 0.5;
  CHECK_THROWS_WITH(MakeScheduler(hb, "loss", "min", 0), Contains("hyperband: max_t"));
  MedianStoppingConfig ms;
  ms.min_samples_required = 0;
  CHECK_THROWS_WITH(MakeScheduler(ms, "loss", "min", 0),
                    Contains("median_stopping: min_samples_required"));

  PbtConfig pbt = Pbt();
  pbt.quantile_fraction = 0.6;
  CHECK_THROWS_WITH(MakeScheduler(pbt, "acc", "max", 0),
                    Contains("pbt: quantile_fraction must be in (0, 0.5]"));
  pbt = Pbt();
  pbt.quantile_fraction = 0;
  CHECK_THROWS_AS(MakeScheduler(pbt, "acc", "max", 0), std::invalid_argument);
  pbt = Pbt();
  pbt.perturbation_interval = 0;
  CHECK_THROWS_WITH(MakeScheduler(pbt, "acc", "max", 0), Contains("pbt: perturbation_interval"));
  pbt = Pbt();
  pbt.hyperparam_mutations = {{{"lr"}, 0.1}};
  CHECK_THROWS_WITH(MakeScheduler(pbt, "acc", "max", 0),
                    Contains("pbt: hyperparam_mutations 'lr' must be a domain"));
  pbt.hyperparam_mutations = {{{"lr"}, Domain::Uniform(1, 0)}};
  CHECK_THROWS_WITH(MakeScheduler(pbt, "acc", "max", 0),
                    Contains("pbt: hyperparam_mutations 'lr': "));

  CHECK_NOTHROW(MakeScheduler(Pbt(), "acc", "max", 0));
  CHECK_NOTHROW(MakeScheduler(HyperBandConfig{}, "loss", "min", 0));
  CHECK_NOTHROW(MakeScheduler(MedianStoppingConfig{}, "loss", "max", 0));
}

TEST_CASE("Scheduler types and actions have Ray's names", "[tune]") {
  CHECK(std::string(rayd::tune::SchedulerType(FifoConfig{})) == "fifo");
  CHECK(std::string(rayd::tune::SchedulerType(AshaConfig{})) == "asha");
  CHECK(std::string(rayd::tune::SchedulerType(HyperBandConfig{})) == "hyperband");
  CHECK(std::string(rayd::tune::SchedulerType(MedianStoppingConfig{})) == "median_stopping");
  CHECK(std::string(rayd::tune::SchedulerType(PbtConfig{})) == "pbt");
  CHECK(std::string(rayd::tune::ToString(Action::kContinue)) == "CONTINUE");
  CHECK(std::string(rayd::tune::ToString(Action::kPause)) == "PAUSE");
  CHECK(std::string(rayd::tune::ToString(Action::kStop)) == "STOP");
  CHECK(std::string(rayd::tune::ToString(Action::kExploit)) == "EXPLOIT");
  CHECK(std::string(MakeScheduler(FifoConfig{}, "", "", 0)->name()) == "FIFO");
}

namespace {

using rayd::tune::PashaConfig;

// PASHA with rungs at 1, 3, 9, 27 (max_t 27): it starts with 3 as its maximum.
std::unique_ptr<TrialScheduler> Pasha(std::optional<double> epsilon = 0.0) {
  return MakeScheduler(PashaConfig{.max_t = 27, .grace_period = 1, .reduction_factor = 3,
                                   .epsilon = epsilon},
                       "loss", "min", 0);
}

// Three trials at rung 1 (a best), promoted in turn to rung 3 as ASHA's top third allows.
void ThreeAtRungOne(TrialScheduler& pasha) {
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) pasha.OnTrialAdd(id, {});
  const std::vector<std::pair<std::string, double>> first = {
      {"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}, {"f", 6}};
  for (const auto& [id, loss] : first) {
    CHECK(pasha.OnTrialResult(id, Iter(1, loss)).action == Action::kPause);
  }
  CHECK(pasha.ChooseTrialToResume() == "a");
  CHECK(pasha.ChooseTrialToResume() == "b");
  CHECK(pasha.ChooseTrialToResume() == std::nullopt);
}

TEST_CASE("PASHA keeps its maximum while the top two rungs rank trials alike", "[tune]") {
  auto pasha = Pasha();
  ThreeAtRungOne(*pasha);
  CHECK(pasha->OnTrialResult("a", Iter(3, 0.5)).action == Action::kPause);
  CHECK(pasha->OnTrialResult("b", Iter(3, 0.8)).action == Action::kPause);  // still a < b
  // Rung 3 is the maximum: nothing is promoted from it.
  CHECK(pasha->ChooseTrialToResume() == std::nullopt);
  CHECK(pasha->Summary() == "PASHA: max 3 of 27, rungs 1/3/9/27, 2 promoted, grown 0 times, 0 stopped");
}

TEST_CASE("PASHA grows its maximum a rung when the ranking changes, beyond epsilon", "[tune]") {
  SECTION("changed") {
    auto pasha = Pasha();
    ThreeAtRungOne(*pasha);
    CHECK(pasha->OnTrialResult("a", Iter(3, 0.9)).action == Action::kPause);
    CHECK(pasha->OnTrialResult("b", Iter(3, 0.4)).action == Action::kPause);  // b overtakes a
    CHECK(pasha->Summary() == "PASHA: max 9 of 27, rungs 1/3/9/27, 2 promoted, grown 1 times, 0 stopped");
    // Rung 3 may promote now: its top third of 2 is none yet; a third trial there makes one.
    CHECK(pasha->ChooseTrialToResume() == std::nullopt);
    CHECK(pasha->OnTrialResult("c", Iter(3, 2.0)).action == Action::kPause);
    CHECK(pasha->ChooseTrialToResume() == "b");
    CHECK(pasha->OnTrialResult("b", Iter(9, 0.3)).action == Action::kPause);
  }
  SECTION("within epsilon: a tie, not a change") {
    auto pasha = Pasha(/*epsilon=*/0.6);
    ThreeAtRungOne(*pasha);
    CHECK(pasha->OnTrialResult("a", Iter(3, 0.9)).action == Action::kPause);
    CHECK(pasha->OnTrialResult("b", Iter(3, 0.4)).action == Action::kPause);
    CHECK(pasha->Summary() == "PASHA: max 3 of 27, rungs 1/3/9/27, 2 promoted, grown 0 times, 0 stopped");
  }
  CHECK(std::string(rayd::tune::SchedulerType(PashaConfig{})) == "pasha");
  CHECK(std::string(Pasha()->name()) == "PASHA");
}

// Rung 1 holds t1..t9 (losses 1..9); t1..t3 go to rung 3, where t2 overtakes t1 by a hair (the
// first criss-cross: it grows the maximum to 9, epsilon or not) and t3 overtakes both by ~0.2;
// t3 and then t10 (a late, better start) reach rung 9, where t10 falls behind t3 by 0.005.
std::string CrissCrossingSweep(TrialScheduler& pasha) {
  for (int i = 1; i <= 11; ++i) pasha.OnTrialAdd("t" + std::to_string(i), {});
  for (int i = 1; i <= 9; ++i) {
    CHECK(pasha.OnTrialResult("t" + std::to_string(i), Iter(1, i)).action == Action::kPause);
  }
  for (const char* id : {"t1", "t2", "t3"}) CHECK(pasha.ChooseTrialToResume() == id);
  CHECK(pasha.OnTrialResult("t1", Iter(3, 0.50)).action == Action::kPause);
  CHECK(pasha.OnTrialResult("t2", Iter(3, 0.49)).action == Action::kPause);
  CHECK_THAT(pasha.Summary(), Catch::Contains("max 9 of 27"));
  CHECK(pasha.OnTrialResult("t3", Iter(3, 0.30)).action == Action::kPause);
  CHECK(pasha.ChooseTrialToResume() == "t3");
  CHECK(pasha.OnTrialResult("t3", Iter(9, 0.20)).action == Action::kPause);
  CHECK(pasha.OnTrialResult("t10", Iter(1, 0.05)).action == Action::kPause);
  CHECK(pasha.OnTrialResult("t11", Iter(1, 0.06)).action == Action::kPause);
  CHECK(pasha.ChooseTrialToResume() == "t10");
  CHECK(pasha.ChooseTrialToResume() == "t11");
  CHECK(pasha.OnTrialResult("t10", Iter(3, 0.28)).action == Action::kPause);
  CHECK(pasha.OnTrialResult("t11", Iter(3, 0.29)).action == Action::kPause);
  CHECK(pasha.ChooseTrialToResume() == "t10");
  CHECK(pasha.OnTrialResult("t10", Iter(9, 0.205)).action == Action::kPause);
  return pasha.Summary();
}

TEST_CASE("PASHA's estimated epsilon takes a criss-cross smaller than the rankings' noise for a "
          "tie",
          "[tune]") {
  // The criss-crosses at rungs 1 and 3 had gaps 0.01, 0.2 and 0.19: epsilon is their 90th
  // percentile, 0.198, and t10's 0.005 behind t3 at rung 9 is within it.
  auto estimated = Pasha(std::nullopt);
  CHECK_THAT(CrissCrossingSweep(*estimated), Catch::Contains("max 9 of 27"));
  // With epsilon 0 the same sweep grows to 27.
  auto exact = Pasha(0.0);
  CHECK_THAT(CrissCrossingSweep(*exact), Catch::Contains("max 27 of 27"));
}

}  // namespace

namespace {

using rayd::tune::PashaConfig;
using rayd::tune::SchedulerConfig;

// Drives a scheduler as the controller does: up to 3 trials run at once, one result per step
// from the front of the queue (a loss that falls with the iteration, around a per-trial level
// drawn from a seeded generator); a stopped or finished trial completes, a paused one waits; a
// free slot takes the trial the scheduler wants back, or else a new one (24 in all).
struct Driver {
  std::mt19937_64 rng{7};
  int made = 0;
  std::vector<std::string> running;
  std::map<std::string, int> iteration;
  std::map<std::string, double> level;
  std::string log;

  void Step(TrialScheduler& s) {
    while (running.size() < 3) {
      if (std::optional<std::string> back = s.ChooseTrialToResume()) {
        running.push_back(*back);
        const Decision d = s.OnTrialResume(*back);
        log += "resume " + *back + " " + rayd::tune::ToString(d.action) + d.donor + "; ";
      } else if (made < 24) {
        const std::string id = Id(made++);
        level[id] = std::uniform_real_distribution<double>(0, 1)(rng);
        s.OnTrialAdd(id, {{"lr", 0.01}});
        running.push_back(id);
      } else {
        break;
      }
    }
    if (running.empty()) return;
    const std::string id = running.front();
    running.erase(running.begin());
    const int it = ++iteration[id];
    const double loss = level[id] + 1.0 / it + std::uniform_real_distribution<double>(0, 0.3)(rng);
    Decision d = s.OnTrialResult(id, At("training_iteration", it, "loss", loss, true, {{"lr", 0.01}}));
    log += id + "@" + std::to_string(it) + " " + rayd::tune::ToString(d.action) + d.donor + "; ";
    const bool finished = it >= 9;
    if (d.action == Action::kStop || (finished && d.action != Action::kPause)) {
      s.OnTrialComplete(id);
    } else if (d.action != Action::kPause) {
      running.push_back(id);
    }
  }
};

// Runs `config` 25 steps, takes its State (through JSON text, as experiment_state.json keeps
// it), restores it into a new scheduler, and runs both 300 more steps on copies of the driver:
// they must decide alike.
void CheckResumesAlike(const SchedulerConfig& config) {
  auto first = MakeScheduler(config, "loss", "min", 3);
  Driver driver;
  for (int i = 0; i < 25; ++i) driver.Step(*first);
  const json saved = json::parse(first->State().dump());
  REQUIRE_FALSE(saved.is_null());
  auto second = MakeScheduler(config, "loss", "min", 3);
  second->Restore(saved);
  CHECK(second->State() == saved);
  Driver copy = driver;
  driver.log.clear();
  copy.log.clear();
  for (int i = 0; i < 300; ++i) {
    driver.Step(*first);
    copy.Step(*second);
  }
  CHECK_FALSE(driver.log.empty());
  CHECK(copy.log == driver.log);
  CHECK(second->Summary() == first->Summary());
}

}  // namespace

TEST_CASE("every scheduler's state restores into one that decides as it would have", "[tune]") {
  SECTION("ASHA, stopping form, 3 brackets") {
    AshaConfig asha = Asha(false);
    asha.brackets = 3;
    CheckResumesAlike(asha);
  }
  SECTION("ASHA, promotion form") { CheckResumesAlike(Asha(true)); }
  SECTION("PASHA") {
    CheckResumesAlike(PashaConfig{.max_t = 9, .grace_period = 1, .reduction_factor = 3});
  }
  SECTION("HyperBand") {
    CheckResumesAlike(HyperBandConfig{.max_t = 9, .reduction_factor = 3});
  }
  SECTION("median stopping") {
    CheckResumesAlike(MedianStoppingConfig{
        .time_attr = "training_iteration", .grace_period = 2, .min_samples_required = 2});
  }
  SECTION("PBT") {
    PbtConfig pbt;
    pbt.time_attr = "training_iteration";
    pbt.perturbation_interval = 2;
    pbt.hyperparam_mutations = {{{"lr"}, Domain::LogUniform(1e-3, 1e-1)}};
    pbt.log_dir = "";
    CheckResumesAlike(pbt);
    pbt.synch = true;
    pbt.quantile_fraction = 0.5;
    CheckResumesAlike(pbt);
  }
  CHECK(MakeScheduler(FifoConfig{}, "loss", "min", 0)->State().is_null());
}

TEST_CASE("a scheduler refuses the state of one with other rungs", "[tune]") {
  auto nine = MakeScheduler(Asha(false), "loss", "min", 0);
  AshaConfig longer = Asha(false);
  longer.max_t = 27;
  auto twenty_seven = MakeScheduler(longer, "loss", "min", 0);
  CHECK_THROWS_AS(twenty_seven->Restore(nine->State()), std::invalid_argument);
  CHECK_THROWS_AS(nine->Restore(json{{"brackets", json::array()}}), std::exception);
}

TEST_CASE("PASHA's noise estimate keeps the latest 10,000 criss-crossing gaps", "[tune]") {
  auto pasha = MakeScheduler(
      rayd::tune::PashaConfig{.max_t = 27, .grace_period = 1, .reduction_factor = 3}, "loss",
      "min", 0);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> loss(0, 1);
  const int trials = 900;
  for (int i = 0; i < trials; ++i) {
    pasha->OnTrialAdd(Id(i), {});
    pasha->OnTrialResult(Id(i), Iter(1, loss(rng)));
  }
  // The top third goes on to rung 3 with losses unrelated to rung 1's: many pairs cross.
  int promoted = 0;
  while (std::optional<std::string> id = pasha->ChooseTrialToResume()) {
    pasha->OnTrialResult(*id, Iter(3, loss(rng)));
    ++promoted;
  }
  CHECK(promoted >= trials / 3);
  const json state = pasha->State();
  CHECK(state["gaps"].size() == 10'000);
  CHECK(state["gaps_seen"].get<uint64_t>() > 10'000);
}

TEST_CASE("ASHA ranks trials for freed workers by the highest rung reached, then the score there",
          "[tune][asha][elastic]") {
  auto asha = MakeScheduler(Asha(false), "loss", "min", 0);
  for (int i = 0; i < 3; ++i) asha->OnTrialAdd(Id(i), json::object());
  // Rung 0 (iteration 1): t0 0.5, t1 0.9, t2 0.3. Only t1 goes on to rung 1 (iteration 3).
  asha->OnTrialResult(Id(0), Iter(1, 0.5));
  asha->OnTrialResult(Id(1), Iter(1, 0.9));
  asha->OnTrialResult(Id(2), Iter(1, 0.3));
  asha->OnTrialResult(Id(1), Iter(2, 0.8));
  asha->OnTrialResult(Id(1), Iter(3, 0.7));
  // t1 reached rung 1: first, though its loss is the worst; then rung 0 by loss: t2, t0.
  CHECK(asha->RankForGrowth({Id(0), Id(1), Id(2)}) ==
        std::vector<std::string>{Id(1), Id(2), Id(0)});
  // A trial at no rung yet keeps its place after them; FIFO keeps the order it is given.
  CHECK(asha->RankForGrowth({"new", Id(0), Id(2)}) ==
        std::vector<std::string>{Id(2), Id(0), "new"});
  auto fifo = MakeScheduler(FifoConfig{}, "", "", 0);
  CHECK(fifo->RankForGrowth({Id(2), Id(0)}) == std::vector<std::string>{Id(2), Id(0)});
  // Growing a trial ASHA judged at a rung comes before starting new ones; not one it has not.
  CHECK(asha->GrowsBeforeNew(Id(1)));
  CHECK(asha->GrowsBeforeNew(Id(0)));
  CHECK_FALSE(asha->GrowsBeforeNew("new"));
  CHECK_FALSE(fifo->GrowsBeforeNew(Id(1)));
}

namespace {

// Two objectives (acc up, params down) under "latency <= 5", for the schedulers that rank by
// several objectives.
const std::vector<rayd::tune::Objective> kMoObjectives = {{"acc", true}, {"params", false}};

std::vector<rayd::tune::Constraint> MoConstraints() {
  return {rayd::tune::ParseConstraint("latency <= 5")};
}

SchedulerResult MoAt(double t, double acc, double params, double latency, bool checkpoint = false,
                     json config = json()) {
  SchedulerResult r;
  r.metrics = {{"training_iteration", t}, {"acc", acc}, {"params", params}, {"latency", latency}};
  r.has_checkpoint = checkpoint;
  r.config = std::move(config);
  return r;
}

}  // namespace

TEST_CASE("MO-HyperBand halves a bracket by Pareto rank and crowding, infeasible trials last",
          "[tune][multi_objective]") {
  // max_t 4, eta 2: s_max 2, the first bracket takes 4 trials, rungs 1, 2, 4 keeping 4, 2, 1.
  HyperBandConfig c;
  c.max_t = 4;
  c.reduction_factor = 2;
  auto hb = MakeScheduler(c, kMoObjectives, MoConstraints());
  CHECK(std::string(hb->name()) == "MO-HyperBand");
  for (const char* id : {"a", "b", "c", "d"}) hb->OnTrialAdd(id, json::object());
  // Rung 1. a and c are non-dominated (c trades size for accuracy); b is dominated by a; d would
  // dominate everyone but misses the latency bound. Keep 2: a and c; b and d stop.
  CHECK(hb->OnTrialResult("a", MoAt(1, 0.9, 100, 1)).action == Action::kPause);
  CHECK(hb->OnTrialResult("b", MoAt(1, 0.8, 200, 1)).action == Action::kPause);
  CHECK(hb->OnTrialResult("c", MoAt(1, 0.95, 300, 1)).action == Action::kPause);
  // A result without every objective is not counted: d has not reached the rung yet.
  SchedulerResult partial = MoAt(1, 0.99, 10, 9);
  partial.metrics.erase("params");
  CHECK(hb->OnTrialResult("d", partial).action == Action::kContinue);
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  CHECK(hb->OnTrialResult("d", MoAt(1, 0.99, 10, 9)).action == Action::kStop);
  CHECK(hb->ChooseTrialToResume() == "a");  // front 0, both ends: ties to the earlier trial
  CHECK(hb->ChooseTrialToResume() == "c");
  CHECK(hb->ChooseTrialToResume() == std::nullopt);
  CHECK(hb->OnTrialResult("b", MoAt(1.5, 0.99, 1, 1)).action == Action::kStop);  // lost rung 1

  // Its state (JSON, as the experiment saves it) restores into one that decides alike.
  auto restored = MakeScheduler(c, kMoObjectives, MoConstraints());
  restored->Restore(json::parse(hb->State().dump()));
  CHECK(restored->State() == hb->State());

  // Rung 2 keeps 1: c fell behind a in both objectives and stops; a runs to max_t.
  for (TrialScheduler* s : {hb.get(), restored.get()}) {
    CHECK(s->OnTrialResult("a", MoAt(2, 0.91, 100, 1)).action == Action::kPause);
    CHECK(s->OnTrialResult("c", MoAt(2, 0.5, 400, 1)).action == Action::kStop);
    CHECK(s->ChooseTrialToResume() == "a");
    CHECK(s->OnTrialResult("a", MoAt(4, 0.92, 100, 1)).action == Action::kStop);
    CHECK(s->Summary() == "MO-HyperBand: 1 bracket (latest: 4/4 trials, rung 4), 4 stopped");
  }
}

TEST_CASE("MO-HyperBand keeps a feasible trial over an infeasible one that dominates it",
          "[tune][multi_objective]") {
  // max_t 2, eta 2: s_max 1, the first bracket takes ceil(2 / 2 * 2) = 2 trials, rungs 1 and 2
  // keeping 2 and 1.
  HyperBandConfig c;
  c.max_t = 2;
  c.reduction_factor = 2;
  auto hb = MakeScheduler(c, kMoObjectives, MoConstraints());
  hb->OnTrialAdd("worse", json::object());
  hb->OnTrialAdd("infeasible", json::object());
  CHECK(hb->OnTrialResult("worse", MoAt(1, 0.5, 500, 5)).action == Action::kPause);
  CHECK(hb->OnTrialResult("infeasible", MoAt(1, 0.99, 1, 5.5)).action == Action::kStop);
  CHECK(hb->ChooseTrialToResume() == "worse");
}

TEST_CASE("MO-MedianStopping stops dominated and infeasible trials on a weighted sum",
          "[tune][multi_objective]") {
  MedianStoppingConfig c;
  c.time_attr = "training_iteration";
  c.grace_period = 1;
  c.min_samples_required = 2;
  c.scalarization = rayd::tune::Scalarization{.weights = {{"acc", 1.0}, {"params", 0.001}}};
  auto ms = MakeScheduler(c, kMoObjectives, MoConstraints());
  CHECK(std::string(ms->name()) == "MO-MedianStopping");
  // The value compared: acc - 0.001 * params (both in their mode's direction).
  CHECK(ms->OnTrialResult("a", MoAt(1, 0.9, 100, 1)).action == Action::kContinue);  // 0.8
  CHECK(ms->OnTrialResult("b", MoAt(1, 0.8, 100, 1)).action == Action::kContinue);  // 0.7
  // c dominates a and b: 0.85 beats their median 0.75.
  CHECK(ms->OnTrialResult("c", MoAt(1, 0.95, 100, 1)).action == Action::kContinue);
  // d is dominated by a, b and c: 0.5 against the median 0.8 of {0.8, 0.7, 0.85}.
  CHECK(ms->OnTrialResult("d", MoAt(1, 0.7, 200, 1)).action == Action::kStop);
  // e would beat everyone on both objectives but misses the latency bound: the worst there is.
  CHECK(ms->OnTrialResult("e", MoAt(1, 0.99, 10, 9)).action == Action::kStop);
  // A diverged objective is the worst a feasible result can score.
  CHECK(ms->OnTrialResult("f", MoAt(1, std::nan(""), 10, 1)).action == Action::kStop);
  // A result without a weighted objective is not counted.
  SchedulerResult partial = MoAt(1, 0.1, 100, 1);
  partial.metrics.erase("acc");
  CHECK(ms->OnTrialResult("g", partial).action == Action::kContinue);
  CHECK(ms->Summary() == "MO-MedianStopping (weighted_sum): 3 stopped");

  // Its state restores into one that decides alike. g's 0.75 beats the median 0.6 of
  // {0.8, 0.7, 0.85, 0.5, e, f}; h's 0.3 does not beat the median 0.7 of those and g's.
  auto restored = MakeScheduler(c, kMoObjectives, MoConstraints());
  restored->Restore(json::parse(ms->State().dump()));
  CHECK(restored->State() == ms->State());
  CHECK(restored->OnTrialResult("g", MoAt(1, 0.85, 100, 1)).action == Action::kContinue);
  CHECK(restored->OnTrialResult("h", MoAt(1, 0.6, 300, 1)).action == Action::kStop);
}

TEST_CASE("MO-MedianStopping on a Chebyshev scalarisation, and its options checked",
          "[tune][multi_objective]") {
  MedianStoppingConfig c;
  c.time_attr = "training_iteration";
  c.grace_period = 1;
  c.min_samples_required = 2;
  c.scalarization = rayd::tune::Scalarization{.kind = rayd::tune::Scalarization::Kind::kChebyshev,
                                              .weights = {{"acc", 1.0}, {"params", 0.001}},
                                              .reference = {{"acc", 1.0}, {"params", 0.0}}};
  auto ms = MakeScheduler(c, kMoObjectives, {});
  // The value: -max(1 - acc, 0.001 * params).
  CHECK(ms->OnTrialResult("a", MoAt(1, 0.9, 100, 0)).action == Action::kContinue);   // -0.1
  CHECK(ms->OnTrialResult("b", MoAt(1, 0.8, 100, 0)).action == Action::kContinue);   // -0.2
  CHECK(ms->OnTrialResult("c", MoAt(1, 0.95, 100, 0)).action == Action::kContinue);  // -0.1
  CHECK(ms->OnTrialResult("d", MoAt(1, 0.7, 200, 0)).action == Action::kStop);       // -0.3
  CHECK(ms->Summary() == "MO-MedianStopping (chebyshev): 1 stopped");

  using Catch::Matchers::Contains;
  MedianStoppingConfig bad = c;
  bad.scalarization.reset();
  CHECK_THROWS_WITH(MakeScheduler(bad, kMoObjectives, {}),
                    Contains("median_stopping: scalarization is required"));
  bad.scalarization = rayd::tune::Scalarization{.weights = {{"latency", 1.0}}};
  CHECK_THROWS_WITH(
      MakeScheduler(bad, kMoObjectives, {}),
      Contains("weights: 'latency' is not an objective (the objectives: acc, params)"));
  bad.scalarization = rayd::tune::Scalarization{.weights = {{"acc", -1.0}}};
  CHECK_THROWS_WITH(MakeScheduler(bad, kMoObjectives, {}),
                    Contains("weights: 'acc' must be finite and >= 0"));
  bad.scalarization = rayd::tune::Scalarization{.weights = {{"acc", 0.0}}};
  CHECK_THROWS_WITH(MakeScheduler(bad, kMoObjectives, {}),
                    Contains("at least one must be above 0"));
  bad.scalarization = c.scalarization;
  bad.scalarization->reference.erase("params");
  CHECK_THROWS_WITH(MakeScheduler(bad, kMoObjectives, {}),
                    Contains("chebyshev needs the ideal value of 'params'"));
  bad.scalarization->kind = rayd::tune::Scalarization::Kind::kWeightedSum;
  CHECK_THROWS_WITH(MakeScheduler(bad, kMoObjectives, {}),
                    Contains("reference is for chebyshev only"));
  // With one metric a scalarization is refused rather than ignored.
  CHECK_THROWS_WITH(MakeScheduler(c, "acc", "max", 0),
                    Contains("scalarization is for several objectives"));
}

TEST_CASE("MO-PBT replaces dominated and infeasible trials from the non-dominated set",
          "[tune][multi_objective]") {
  PbtConfig c = Pbt();
  c.quantile_fraction = 0.5;  // of 4 trials, the bottom 2 (when off the front)
  auto pbt = MakeScheduler(c, kMoObjectives, MoConstraints(), 7);
  CHECK(std::string(pbt->name()) == "MO-PBT");
  const json other = {{"lr", 0.05},  {"layers", 2},    {"opt", {{"name", "sgd"}}},
                      {"batch", 64}, {"dropout", 0.1}, {"seed", 1}};
  // Front 0: t0 and t1 (feasible, neither dominates the other). t3 is dominated by t0; t2
  // dominates everyone but misses the latency bound, so it ranks last.
  CHECK(pbt->OnTrialResult("t0", MoAt(1, 0.9, 100, 1, true, DonorConfig())).action ==
        Action::kContinue);
  CHECK(pbt->OnTrialResult("t1", MoAt(1, 0.95, 300, 1, true, DonorConfig())).action ==
        Action::kContinue);
  CHECK(pbt->OnTrialResult("t2", MoAt(1, 0.99, 10, 9, true, other)).action == Action::kContinue);
  CHECK(pbt->OnTrialResult("t3", MoAt(1, 0.8, 200, 1, true, other)).action == Action::kContinue);
  // At their perturbation points the non-dominated ones go on; the others exploit one of them.
  CHECK(pbt->OnTrialResult("t0", MoAt(2, 0.9, 100, 1, true, DonorConfig())).action ==
        Action::kContinue);
  const Decision dominated = pbt->OnTrialResult("t3", MoAt(2, 0.8, 200, 1, true, other));
  REQUIRE(dominated.action == Action::kExploit);
  CHECK((dominated.donor == "t0" || dominated.donor == "t1"));
  CHECK(dominated.config["seed"] == 3);  // the donor's config, explored
  const Decision infeasible = pbt->OnTrialResult("t2", MoAt(2, 0.99, 10, 9, true, other));
  REQUIRE(infeasible.action == Action::kExploit);
  CHECK((infeasible.donor == "t0" || infeasible.donor == "t1"));
  CHECK(pbt->OnTrialResult("t1", MoAt(2, 0.95, 300, 1, true, DonorConfig())).action ==
        Action::kContinue);
  CHECK(pbt->Summary() == "MO-PBT: 2 exploits");

  // Its state restores into one that decides alike.
  auto restored = MakeScheduler(c, kMoObjectives, MoConstraints(), 7);
  restored->Restore(json::parse(pbt->State().dump()));
  CHECK(restored->State() == pbt->State());
  const Decision original = pbt->OnTrialResult("t3", MoAt(4, 0.1, 900, 1, true, other));
  const Decision again = restored->OnTrialResult("t3", MoAt(4, 0.1, 900, 1, true, other));
  REQUIRE(original.action == Action::kExploit);
  CHECK(again.action == original.action);
  CHECK(again.donor == original.donor);
  CHECK(again.config == original.config);
}

TEST_CASE("MO-PBT never replaces a non-dominated trial, nor from a donor without a checkpoint",
          "[tune][multi_objective]") {
  PbtConfig c = Pbt();
  c.quantile_fraction = 0.5;
  auto pbt = MakeScheduler(c, kMoObjectives, {}, 7);
  // Every trial is on the front: nobody exploits, however they rank by crowding.
  const std::vector<std::pair<double, double>> front = {
      {0.9, 100}, {0.95, 300}, {0.8, 50}, {0.99, 1000}};
  for (int step : {1, 2}) {
    for (size_t i = 0; i < front.size(); ++i) {
      CHECK(pbt->OnTrialResult(Id(static_cast<int>(i)),
                               MoAt(step, front[i].first, front[i].second, 0, true, DonorConfig()))
                .action == Action::kContinue);
    }
  }
  // A dominated trial whose only possible donor has no checkpoint goes on.
  auto lone = MakeScheduler(c, kMoObjectives, {}, 7);
  lone->OnTrialResult("best", MoAt(1, 0.9, 100, 0, false, DonorConfig()));
  CHECK(lone->OnTrialResult("worst", MoAt(2, 0.5, 200, 0, true, DonorConfig())).action ==
        Action::kContinue);
  CHECK(lone->Summary() == "MO-PBT: 0 exploits");
}
