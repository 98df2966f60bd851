#pragma once
// FrontProgress: how a sweep with several objectives (TuneConfig::objectives) advances: its
// Pareto front and the hypervolume that front dominates, over the sweep's time. Written to
// <experiment>/progress.csv (the sweep's own; each trial keeps its progress.csv in its
// directory), read by the dashboard feed for its front plot, and equal at the end to what the
// summary prints and pareto_front.csv lists.
//
// How it works:
//   - The front is that of the trials' last results (ResultGrid::ParetoFront's rule: by
//     constrained non-dominated sorting, feasible trials only). It is recomputed at a tick after
//     new results, at most once a second (every trial's point, O(trials^2)), and at the end.
//   - A row is added whenever the front changed (another trial on it, or a value moved):
//     elapsed_s (the sweep's), results (reported so far), trials_reported (those with an
//     objective), front_size, hypervolume, and the reference point it was taken at, one
//     reference/<metric> column per objective in the metric's own units.
//   - The reference point is TuneConfig::reference_point when given (fixed: the column is
//     comparable from row to row). Otherwise it is derived from the trials' results
//     (DerivedReferencePoint: the worst value reported plus a tenth of the range), and it moves
//     while the sweep runs: each live row carries the reference it used, and at the end the file
//     is rewritten with every row taken at the final one.
//   - The file is appended to as rows come; a write that fails warns once and the sweep goes
//     on (a sink's trouble is its own).
//   - A resumed sweep starts the file again from its restored results: the rows before the
//     interruption are not kept (their fronts are not in the file to retake them at the final
//     reference).
//
// Threading: the controller's thread (ResultSink).

#include <rayd/tune/multi_objective.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "result_sink.h"

namespace rayd::tune::internal {

class FrontProgress : public ResultSink {
 public:
  // `reference_point`: in the objectives' own units, one per objective; empty: derived.
  FrontProgress(std::string experiment_dir, std::vector<Objective> objectives,
                std::vector<Constraint> constraints, std::vector<double> reference_point);

  void OnResult(const Trial& trial, const Metrics& result) override { Dirty(); }
  void OnRestoredResult(const Trial& trial, const Metrics& result) override { Dirty(); }
  void OnTick(const SweepView& view) override;

  // A trial's latest point, as the dashboard plots it.
  struct Point {
    std::string trial_id;
    std::vector<double> values;  // per objective, in its units; NaN when not reported
    bool feasible = true;
    bool on_front = false;
  };
  struct Row {
    double elapsed_s = 0;
    uint64_t results = 0;
    size_t trials_reported = 0;
    std::vector<std::vector<double>> front;  // the front's points, to minimise
  };
  const std::vector<Point>& points() const { return points_; }
  const std::vector<Row>& rows() const { return rows_; }
  const std::vector<Objective>& objectives() const { return objectives_; }
  // The reference point in use, to minimise; empty until every objective was reported.
  const std::vector<double>& reference() const { return reference_; }
  // The row's hypervolume at reference() (0 without one).
  double Hypervolume(const Row& row) const;

 private:
  void Dirty() {
    ++results_;
    dirty_ = true;
  }
  // Recomputes points_, reference_ and the front; true when the front changed.
  bool Recompute(const std::vector<Trial>& trials);
  void AppendRow(const Row& row);
  void RewriteFile();
  std::vector<std::string> RowFields(const Row& row) const;

  std::string path_;
  std::vector<Objective> objectives_;
  std::vector<Constraint> constraints_;
  std::vector<double> fixed_reference_;  // to minimise; empty: derived
  std::vector<double> reference_;
  std::vector<Point> points_;
  std::vector<std::vector<double>> front_;  // the last row's front
  std::vector<Row> rows_;
  uint64_t results_ = 0;
  bool dirty_ = false;
  bool header_written_ = false;
  bool warned_ = false;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace rayd::tune::internal
