// mo_search_bench replay: searchers and MO-ASHA on recorded learning curves with two
// objectives, a model's accuracy (maximised) against its size (minimised), e.g.
// data/fashion_mo_curves.csv (record_fashion_mo.py).
//
// How it works:
//   - Each key the table varies becomes a choice of its values (constants stay constants), so
//     every config a searcher proposes has a recorded curve; the table must hold every
//     combination (a grid).
//   - A sweep runs one trial at a time, as an Optuna study with n_jobs=1 does. Two drivers
//     that make the same decisions (the same trace, seed for seed): the bench's own loop, as the
//     Tuner's controller drives a trial (the searcher proposes a config, its curve plays result
//     by result, each to the searcher's OnTrialResult and then to the scheduler, until the
//     scheduler says stop or the curve ends; then OnTrialEnd), and with --simulator the Tuner's
//     controller itself (Tuner::Simulate, which needs a Tuner that replays several objectives).
//   - Arms: each searcher of MoArms (random, nsga2, mo_tpe) at full fidelity (FIFO: every
//     trial plays its whole curve) for --trials trials, and under MO-ASHA ("+mo_asha":
//     MakeScheduler with the objectives, ASHA's stopping form, grace 1 epoch, reduction factor
//     3, max_t the longest curve; TPE fitted BOHB-style, as the Tuner makes it) until it has
//     spent what a full-fidelity arm spends, trials x the longest curve (results replayed,
//     "epochs").
//   - The hypervolume of a sweep at a moment: of the Pareto front of every trial's last result
//     so far (what ResultGrid::ParetoFront reports), as points (1 - accuracy, log10(size)),
//     and of those trials only that played their whole curve ("full": what a full-fidelity
//     evaluation measures). The reference point is the table's own best front's nadir plus a
//     tenth of its range (as (1.1, 1.1) is ZDT's), the best front being that of every curve's
//     last result; "optimum" is that front's hypervolume.
//
// Output, one JSON object: the table's reference, optimum and size, and per arm and seed a
// trace [epochs, hv, hv_full] at each change, the epochs and trials spent, how many trials ran
// to the end, and how many distinct configs were tried and trained to the end.
// bench/search/report_mo.py sets it next to optuna_mo_replay_peer.py's.

#include "mo_replay.h"

#include <rayd/tune/multi_objective.h>
#include <rayd/tune/schedulers.h>
#include <rayd/tune/simulator.h>
#include <rayd/tune/tuner.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mo_arms.h"
#include "replay_space.h"

namespace rayd::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tune::Domain;
using tune::ParamSpace;
using tune::RecordedCurve;
using tune::RecordedCurves;


struct Table {
  RecordedCurves curves;
  ParamSpace space;
  std::map<std::string, const RecordedCurve*> by_config;  // by the config's JSON text
  size_t longest = 0;
  std::vector<double> reference;
  double optimum = 0;
};

// A result as a point to minimise, (1 - accuracy, log10(size)); nullopt without both.
std::optional<std::vector<double>> PointOf(const tune::Metrics& m, const MoReplayOptions& o) {
  auto accuracy = m.find(o.accuracy);
  auto size = m.find(o.size);
  if (accuracy == m.end() || size == m.end() || !(size->second > 0)) return std::nullopt;
  return std::vector<double>{1 - accuracy->second, std::log10(size->second)};
}

Table LoadTable(const MoReplayOptions& o) {
  Result<RecordedCurves> loaded = RecordedCurves::Load(o.curves);
  if (!loaded.ok()) throw std::runtime_error(loaded.status().message());
  Table table{std::move(*loaded)};
  table.space = SpaceOf(table.curves);
  std::vector<std::vector<double>> finals;
  for (const RecordedCurve& curve : table.curves.curves()) {
    table.by_config.emplace(curve.config.dump(), &curve);
    table.longest = std::max(table.longest, curve.results.size());
    if (curve.results.empty()) continue;
    if (auto p = PointOf(curve.results.back(), o)) finals.push_back(*p);
  }
  if (finals.empty()) {
    throw std::runtime_error(o.curves + " reports no '" + o.accuracy + "' and '" + o.size + "'");
  }
  std::vector<size_t> front = tune::ParetoFront(finals, std::vector<double>(finals.size(), 0.0));
  for (size_t k = 0; k < 2; ++k) {
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i : front) {
      lo = std::min(lo, finals[i][k]);
      hi = std::max(hi, finals[i][k]);
    }
    table.reference.push_back(hi + 0.1 * (hi > lo ? hi - lo : 1));
  }
  table.optimum = FrontHypervolume(finals, table.reference);
  return table;
}

struct ReplayArm {
  std::string name;
  const MoArm* search;
  bool mo_asha;
};

tune::SchedulerConfig SchedulerOf(const ReplayArm& arm, const Table& table,
                                  const MoReplayOptions& o) {
  if (!arm.mo_asha) return tune::FifoConfig{};
  return tune::AshaConfig{.max_t = static_cast<double>(table.longest),
                          .grace_period = o.grace_period,
                          .reduction_factor = o.reduction_factor};
}

// One result of a sweep, in the order the sweep heard them.
struct Played {
  std::string trial;
  json config;
  const tune::Metrics* metrics;
  size_t place;  // 0 for a trial's first result
};

// The bench's own loop, one trial at a time: the searcher's trials until `samples` are made or
// `budget` results are played.
std::vector<Played> OwnLoop(const Table& table, const MoReplayOptions& o, const ReplayArm& arm,
                            int samples, int64_t budget, uint64_t seed) {
  const std::vector<tune::Objective> objectives = {{o.accuracy, true}, {o.size, false}};
  std::unique_ptr<tune::internal::Searcher> searcher = arm.search->make(
      table.space, objectives, samples, seed,
      arm.mo_asha ? std::optional<std::string>("training_iteration") : std::nullopt);
  std::unique_ptr<tune::TrialScheduler> scheduler =
      tune::MakeScheduler(SchedulerOf(arm, table, o), objectives, {});
  std::vector<Played> played;
  size_t made = 0;
  while (static_cast<int64_t>(played.size()) < budget && searcher->HasNext(made)) {
    const json config = searcher->Next();
    const std::string id = "trial_" + std::to_string(made++);
    auto curve = table.by_config.find(config.dump());
    if (curve == table.by_config.end()) {
      throw std::runtime_error("no recorded curve for " + config.dump());
    }
    scheduler->OnTrialAdd(id, config);
    const std::vector<tune::Metrics>& results = curve->second->results;
    for (size_t place = 0; place < results.size() && static_cast<int64_t>(played.size()) < budget;
         ++place) {
      played.push_back({id, config, &results[place], place});
      searcher->OnTrialResult(config, results[place]);
      const tune::Decision d = scheduler->OnTrialResult(id, {results[place], config});
      if (d.action == tune::Decision::Action::kStop) break;
    }
    scheduler->OnTrialComplete(id);
    searcher->OnTrialEnd(config, std::nullopt);
  }
  return played;
}

// The same sweep through the Tuner's controller (Tuner::Simulate), one trial at a time:
// `samples` trials, results in the order the trace heard them. `grid` keeps the metrics alive.
std::vector<Played> Simulated(const Table& table, const MoReplayOptions& o, const ReplayArm& arm,
                              int samples, uint64_t seed, tune::ResultGrid& grid) {
  const fs::path scratch =
      (fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path()) /
      ("rayd_mo_replay_" + std::to_string(getpid()));
  const std::string name = arm.name + "_" + std::to_string(seed);
  tune::TuneConfig tune{.objectives = {{o.accuracy, true}, {o.size, false}},
                        .num_samples = samples,
                        .max_concurrent_trials = 1,
                        .seed = seed,
                        .scheduler = SchedulerOf(arm, table, o),
                        .search = arm.search->search};
  tune::Tuner tuner(tune::Trainable{"replayed", {}}, table.space, tune,
                    rayd::train::RunConfig{.name = name, .storage_path = scratch.string()});
  tune::Simulation sim = tuner.Simulate(table.curves);
  std::error_code ec;
  fs::remove_all(scratch, ec);
  grid = std::move(sim.grid);
  std::map<std::string, std::pair<const tune::TrialResult*, size_t>> next;
  for (const tune::TrialResult& t : grid.trials()) next[t.trial_id] = {&t, 0};
  std::vector<Played> played;
  for (const tune::Simulation::Event& e : sim.trace) {
    auto& [trial, place] = next.at(e.trial_id);
    played.push_back({e.trial_id, trial->config, &trial->history.at(place), place});
    ++place;
  }
  return played;
}

// The hypervolume trace of a sweep's first `budget` results (see the top of the file).
json Summarize(const Table& table, const MoReplayOptions& o, const std::vector<Played>& played,
               int64_t budget, uint64_t seed) {
  std::map<std::string, size_t> index;  // trial -> its place in `last`
  std::vector<std::vector<double>> last, full;
  // The configs tried, and those trained all epochs: a repeated config replays the same curve.
  std::set<std::string> distinct, distinct_full;
  json trace = json::array();
  double hv = 0, hv_full = 0;
  int64_t epochs = 0;
  for (const Played& r : played) {
    if (epochs == budget) break;
    ++epochs;
    distinct.insert(r.config.dump());
    std::optional<std::vector<double>> p = PointOf(*r.metrics, o);
    if (!p) continue;
    auto [it, added] = index.emplace(r.trial, last.size());
    if (added) {
      last.push_back(*p);
    } else {
      last[it->second] = *p;
    }
    if (r.place + 1 == table.longest) {
      full.push_back(*p);
      distinct_full.insert(r.config.dump());
    }
    const double now = FrontHypervolume(last, table.reference);
    const double now_full = FrontHypervolume(full, table.reference);
    if (now != hv || now_full != hv_full) {
      hv = now;
      hv_full = now_full;
      trace.push_back({epochs, hv, hv_full});
    }
  }
  return {{"seed", seed},
          {"trace", trace},
          {"epochs", epochs},
          {"trials", index.size()},
          {"full_trials", full.size()},
          {"distinct", distinct.size()},
          {"distinct_full", distinct_full.size()},
          {"final", {hv, hv_full}}};
}

}  // namespace

json ReplayMoCurves(const MoReplayOptions& o) {
  const Table table = LoadTable(o);
  const auto budget = static_cast<int64_t>(o.trials) * static_cast<int64_t>(table.longest);
  json out = {
      {"curves", table.curves.curves().size()},
      {"epochs_per_curve", table.longest},
      {"reference", table.reference},
      {"optimum", table.optimum},
      {"trials", o.trials},
      {"population", o.population},
      {"budget", budget},
      {"mo_asha", {{"grace_period", o.grace_period}, {"reduction_factor", o.reduction_factor}}},
      {"driver", o.simulator ? "Tuner::Simulate" : "the bench's loop"},
      {"arms", json::object()}};
  const std::vector<MoArm> searchers = MoArms(o.population);
  std::vector<ReplayArm> arms;
  for (const MoArm& s : searchers) {
    arms.push_back({s.name, &s, false});
    arms.push_back({s.name + "+mo_asha", &s, true});
  }
  for (const ReplayArm& arm : arms) {
    // MO-ASHA arms: trials until they have spent what the full-fidelity arms spend (an MO-ASHA
    // trial costs at least one epoch, so `budget` trials always do).
    const int samples = arm.mo_asha ? static_cast<int>(budget) : o.trials;
    for (int seed = 1; seed <= o.seeds; ++seed) {
      const auto s = static_cast<uint64_t>(seed);
      tune::ResultGrid grid;
      const std::vector<Played> played = o.simulator ? Simulated(table, o, arm, samples, s, grid)
                                                     : OwnLoop(table, o, arm, samples, budget, s);
      out["arms"][arm.name].push_back(Summarize(table, o, played, budget, s));
    }
  }
  return out;
}

}  // namespace rayd::bench
