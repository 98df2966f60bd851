// A sweep's Pareto front and hypervolume over time (front_progress.h).
#include "front_progress.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <stdexcept>

#include "trial.h"

namespace rayd::tune::internal {

namespace {

constexpr std::chrono::seconds kFrontInterval{1};

// A point to minimise back in the objective's own units.
double InMetricUnits(const Objective& o, double minimised) {
  return o.maximize ? -minimised : minimised;
}

}  // namespace

FrontProgress::FrontProgress(std::string experiment_dir, std::vector<Objective> objectives,
                             std::vector<Constraint> constraints,
                             std::vector<double> reference_point)
    : path_((std::filesystem::path(experiment_dir) / "progress.csv").string()),
      objectives_(std::move(objectives)),
      constraints_(std::move(constraints)) {
  if (!reference_point.empty()) {
    if (reference_point.size() != objectives_.size()) {
      throw std::invalid_argument("reference_point: " + std::to_string(reference_point.size()) +
                                  " values for " + std::to_string(objectives_.size()) +
                                  " objectives");
    }
    for (size_t d = 0; d < reference_point.size(); ++d) {
      fixed_reference_.push_back(objectives_[d].maximize ? -reference_point[d]
                                                         : reference_point[d]);
    }
    reference_ = fixed_reference_;
  }
}

void FrontProgress::OnTick(const SweepView& view) {
  const auto now = std::chrono::steady_clock::now();
  if (dirty_ && (view.finished || now >= next_)) {
    next_ = now + kFrontInterval;
    dirty_ = false;
    if (Recompute(view.trials)) {
      size_t reported = points_.size();
      rows_.push_back(Row{view.elapsed_s, results_, reported, front_});
      AppendRow(rows_.back());
    }
  }
  // The live rows used the reference of their moment; the file ends at the final one.
  if (view.finished && fixed_reference_.empty() && !rows_.empty()) RewriteFile();
}

bool FrontProgress::Recompute(const std::vector<Trial>& trials) {
  points_.clear();
  std::vector<std::vector<double>> minimised;
  std::vector<double> violations;
  std::vector<size_t> point_of;  // index into points_ of each row of `minimised`
  for (const Trial& t : trials) {
    const Metrics& m = t.last_result;
    bool any = false;
    for (const Objective& o : objectives_) any = any || m.contains(o.metric);
    if (!any) continue;
    Point p{t.id, {}, TotalViolation(constraints_, m) == 0, false};
    for (const Objective& o : objectives_) {
      auto it = m.find(o.metric);
      p.values.push_back(it == m.end() ? std::numeric_limits<double>::quiet_NaN() : it->second);
    }
    point_of.push_back(points_.size());
    points_.push_back(std::move(p));
    minimised.push_back(ObjectiveVector(objectives_, m));
    violations.push_back(TotalViolation(constraints_, m));
  }
  if (fixed_reference_.empty()) reference_ = DerivedReferencePoint(minimised);
  std::vector<std::vector<double>> front;
  for (size_t k : ParetoFront(minimised, violations)) {
    if (violations[k] != 0) continue;  // no trial feasible: no front
    points_[point_of[k]].on_front = true;
    front.push_back(minimised[k]);
  }
  if (front == front_) return false;
  front_ = std::move(front);
  return true;
}

double FrontProgress::Hypervolume(const Row& row) const {
  if (reference_.empty() || row.front.empty()) return 0;
  return tune::Hypervolume(row.front, reference_);
}

std::vector<std::string> FrontProgress::RowFields(const Row& row) const {
  std::vector<std::string> fields = {FormatDouble(row.elapsed_s), std::to_string(row.results),
                                     std::to_string(row.trials_reported),
                                     std::to_string(row.front.size()),
                                     FormatDouble(Hypervolume(row))};
  for (size_t d = 0; d < objectives_.size(); ++d) {
    fields.push_back(reference_.empty() ? ""
                                        : FormatDouble(InMetricUnits(objectives_[d], reference_[d])));
  }
  return fields;
}

void FrontProgress::AppendRow(const Row& row) {
  std::ofstream out(path_, header_written_ ? std::ios::app : std::ios::trunc);
  if (!header_written_) {
    std::vector<std::string> header = {"elapsed_s", "results", "trials_reported", "front_size",
                                       "hypervolume"};
    for (const Objective& o : objectives_) header.push_back("reference/" + o.metric);
    out << CsvLine(header);
    header_written_ = true;
  }
  out << CsvLine(RowFields(row));
  if (!out && !warned_) {
    warned_ = true;
    std::cerr << "rayd tune: cannot write " << path_ << "; the sweep goes on without it\n";
  }
}

void FrontProgress::RewriteFile() {
  header_written_ = false;
  for (const Row& row : rows_) AppendRow(row);
}

}  // namespace rayd::tune::internal
