// The Pareto front report of a sweep with several objectives (pareto_report.h).
#include "pareto_report.h"

#include <rayd/api/errors.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

namespace rayd::tune::internal {
namespace {

// A CSV field: quoted, with quotes doubled, when it holds a comma, quote or newline.
std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string CsvNumber(const Metrics& metrics, const std::string& name) {
  auto it = metrics.find(name);
  if (it == metrics.end()) return "";
  std::ostringstream out;
  out << std::setprecision(10) << it->second;
  return out.str();
}

}  // namespace

void WriteParetoFront(const ResultGrid& grid) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const Objective& o : grid.objectives()) {
    if (seen.insert(o.metric).second) columns.push_back(o.metric);
  }
  for (const Constraint& c : grid.constraints()) {
    if (seen.insert(c.metric).second) columns.push_back(c.metric);
  }
  const std::string path =
      (std::filesystem::path(grid.experiment_path()) / "pareto_front.csv").string();
  std::ofstream out(path);
  out << "trial_id";
  for (const std::string& c : columns) out << "," << CsvField(c);
  out << ",checkpoint,config\n";
  for (size_t i : grid.ParetoFront()) {
    const TrialResult& t = grid[i];
    out << CsvField(t.trial_id);
    for (const std::string& c : columns) out << "," << CsvNumber(t.metrics, c);
    out << "," << CsvField(t.checkpoint.value_or("")) << "," << CsvField(t.config.dump()) << "\n";
  }
  if (!out) throw RaydError("cannot write " + path);
}

}  // namespace rayd::tune::internal
