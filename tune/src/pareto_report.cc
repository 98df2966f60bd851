// The Pareto front report of a sweep with several objectives (pareto_report.h).
#include "pareto_report.h"

#include <rayd/api/errors.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "trial.h"

namespace rayd::tune::internal {

void WriteParetoFront(const ResultGrid& grid) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const Objective& o : grid.objectives()) {
    if (seen.insert(o.metric).second) columns.push_back(o.metric);
  }
  for (const Constraint& c : grid.constraints()) {
    if (seen.insert(c.metric).second) columns.push_back(c.metric);
  }
  std::vector<std::string> header = {"trial_id"};
  header.insert(header.end(), columns.begin(), columns.end());
  header.insert(header.end(), {"checkpoint", "config"});
  const std::string path =
      (std::filesystem::path(grid.experiment_path()) / "pareto_front.csv").string();
  std::ofstream out(path);
  out << CsvLine(header);
  for (size_t i : grid.ParetoFront()) {
    const TrialResult& t = grid[i];
    std::vector<std::string> row = {t.trial_id};
    for (const std::string& c : columns) {
      auto it = t.metrics.find(c);
      row.push_back(it == t.metrics.end() ? "" : FormatDouble(it->second));
    }
    row.push_back(t.checkpoint.value_or(""));
    row.push_back(t.config.dump());
    out << CsvLine(row);
  }
  if (!out) throw RaydError("cannot write " + path);
}

}  // namespace rayd::tune::internal
