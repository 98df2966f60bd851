// The console trial table (Ray Tune's CLIReporter layout, tabulate's "psql" style): a status
// header, then one row per trial with its differing config values and latest metrics.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trial.h"

namespace rayd::tune::internal {
namespace {

using nlohmann::json;

constexpr size_t kMaxConfigColumns = 6;
constexpr size_t kConstantConfigColumns = 3;  // shown when no config path differs
constexpr size_t kExtraMetricColumns = 2;
constexpr size_t kMaxErrorWidth = 80;

// Keys every result carries that are not the user's metrics.
const std::set<std::string>& AutoFilledKeys() {
  static const std::set<std::string> keys = {"training_iteration",
                                             "time_total_s",
                                             "time_this_iter_s",
                                             "timestamp",
                                             "time_since_restore",
                                             "iterations_since_restore",
                                             "timesteps_total",
                                             "done",
                                             "pid",
                                             "epoch"};
  return keys;
}

// Statuses in the order the count lines list them.
constexpr TrialStatus kStatusOrder[] = {TrialStatus::kRunning, TrialStatus::kPaused,
                                        TrialStatus::kTerminated, TrialStatus::kError,
                                        TrialStatus::kPending};

void Flatten(const json& config, const std::string& prefix, std::map<std::string, json>* out) {
  if (!config.is_object()) {
    (*out)[prefix] = config;
    return;
  }
  for (const auto& [key, value] : config.items()) {
    Flatten(value, prefix.empty() ? key : prefix + "/" + key, out);
  }
}

// About five significant digits; integral values as integers.
std::string ShortNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(value));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.5g", value);
  }
  return buffer;
}

struct Cell {
  std::string text;
  bool numeric = false;  // right-aligned
};

Cell ConfigCell(const json* value) {
  if (value == nullptr || value->is_null()) return {};
  if (value->is_number()) return {ShortNumber(value->get<double>()), true};
  if (value->is_string()) return {value->get<std::string>(), false};
  if (value->is_boolean()) return {value->get<bool>() ? "True" : "False", false};
  return {value->dump(), false};
}

Cell MetricCell(const Metrics& metrics, const std::string& key) {
  auto it = metrics.find(key);
  if (it == metrics.end()) return {};
  return {ShortNumber(it->second), true};
}

std::string Duration(double seconds) {
  char buffer[64];
  if (seconds < 60) {
    std::snprintf(buffer, sizeof(buffer), "%.1f s", seconds);
  } else {
    long long total = static_cast<long long>(seconds);
    long long hours = total / 3600, minutes = total % 3600 / 60, secs = total % 60;
    if (hours > 0) {
      std::snprintf(buffer, sizeof(buffer), "%lld hr %lld min %lld s", hours, minutes, secs);
    } else {
      std::snprintf(buffer, sizeof(buffer), "%lld min %lld s", minutes, secs);
    }
  }
  return buffer;
}

std::string LocalTimeNow() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &local);
  return buffer;
}

// "2 RUNNING | 3 TERMINATED" style list of the non-zero counts, joined by `separator`.
std::string CountsText(const std::vector<const Trial*>& trials, const std::string& separator) {
  std::string text;
  for (TrialStatus status : kStatusOrder) {
    int count = static_cast<int>(std::count_if(
        trials.begin(), trials.end(), [&](const Trial* t) { return t->status == status; }));
    if (count == 0) continue;
    if (!text.empty()) text += separator;
    text += std::to_string(count) + " " + ToString(status);
  }
  return text;
}

// The config paths to show: those whose values differ between trials (a path some trials lack
// differs), at most kMaxConfigColumns; when none differ, the first few paths.
std::vector<std::string> ConfigColumns(const std::vector<std::map<std::string, json>>& flat) {
  std::set<std::string> all;
  for (const auto& config : flat) {
    for (const auto& [path, value] : config) all.insert(path);
  }
  std::vector<std::string> differing;
  for (const std::string& path : all) {
    if (differing.size() == kMaxConfigColumns) break;
    const json* first = nullptr;
    bool seen = false;
    bool differs = false;
    for (const auto& config : flat) {
      auto it = config.find(path);
      const json* value = it == config.end() ? nullptr : &it->second;
      if (!seen) {
        first = value;
        seen = true;
      } else if ((first == nullptr) != (value == nullptr) ||
                 (first != nullptr && *first != *value)) {
        differs = true;
        break;
      }
    }
    if (differs) differing.push_back(path);
  }
  if (!differing.empty()) return differing;
  std::vector<std::string> constant(all.begin(), all.end());
  if (constant.size() > kConstantConfigColumns) constant.resize(kConstantConfigColumns);
  return constant;
}

// Up to kExtraMetricColumns of the user's metrics other than `metric`, sorted by name.
std::vector<std::string> ExtraMetricColumns(const std::vector<Trial>& trials,
                                            const std::string& metric) {
  std::set<std::string> keys;
  for (const Trial& trial : trials) {
    for (const auto& [key, value] : trial.last_result) {
      if (key != metric && AutoFilledKeys().count(key) == 0) keys.insert(key);
    }
  }
  std::vector<std::string> out(keys.begin(), keys.end());
  if (out.size() > kExtraMetricColumns) out.resize(kExtraMetricColumns);
  return out;
}

// tabulate's psql format: numbers right-aligned, text left-aligned.
std::string FormatTable(const std::vector<std::string>& headers,
                        const std::vector<std::vector<Cell>>& rows) {
  std::vector<size_t> widths(headers.size());
  for (size_t c = 0; c < headers.size(); ++c) {
    widths[c] = headers[c].size();
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].text.size());
  }
  auto rule = [&](char edge, char inner) {
    std::string line(1, edge);
    for (size_t c = 0; c < widths.size(); ++c) {
      line += std::string(widths[c] + 2, '-');
      line += c + 1 < widths.size() ? inner : edge;
    }
    return line + "\n";
  };
  auto line = [&](const std::vector<Cell>& cells) {
    std::string text = "|";
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(widths[c] - cells[c].text.size(), ' ');
      text += " " + (cells[c].numeric ? pad + cells[c].text : cells[c].text + pad) + " |";
    }
    return text + "\n";
  };
  std::vector<Cell> header_cells;
  for (const std::string& header : headers) header_cells.push_back({header, false});
  std::string text = rule('+', '+') + line(header_cells) + rule('|', '+');
  for (const auto& row : rows) text += line(row);
  return text + rule('+', '+');
}

// Ray lists failed trials apart, with why; here the first line of each error.
std::string ErroredTable(const std::vector<const Trial*>& trials) {
  std::vector<std::vector<Cell>> errored;
  for (const Trial* trial : trials) {
    if (trial->status != TrialStatus::kError) continue;
    std::string reason = trial->error.substr(0, trial->error.find('\n'));
    if (reason.size() > kMaxErrorWidth) reason = reason.substr(0, kMaxErrorWidth - 3) + "...";
    errored.push_back({{trial->dir_name.empty() ? trial->id : trial->dir_name, false},
                       {std::to_string(trial->num_failures), true},
                       {reason, false}});
  }
  if (errored.empty()) return "";
  return "Number of errored trials: " + std::to_string(errored.size()) + "\n" +
         FormatTable({"Trial name", "# failures", "error"}, errored);
}

}  // namespace

std::string RenderTable(const std::vector<Trial>& trials, const std::string& metric,
                        const std::string& scheduler_summary, const std::string& resources_line,
                        double elapsed_s, int max_rows) {
  std::vector<const Trial*> ordered;
  for (const Trial& trial : trials) ordered.push_back(&trial);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Trial* a, const Trial* b) { return a->index < b->index; });
  size_t shown = std::min(ordered.size(), static_cast<size_t>(std::max(max_rows, 0)));

  std::string text = "== Status ==\n";
  text += "Current time: " + LocalTimeNow() + ". Total running time: " + Duration(elapsed_s) + "\n";
  if (!scheduler_summary.empty()) text += scheduler_summary + "\n";
  if (!resources_line.empty()) text += resources_line + "\n";
  std::string counts = CountsText(ordered, " | ");
  text += "Trials: " + (counts.empty() ? std::string("none") : counts) + "\n";
  if (ordered.empty()) return text;

  std::vector<std::map<std::string, json>> flat(ordered.size());
  for (size_t i = 0; i < ordered.size(); ++i) Flatten(ordered[i]->config, "", &flat[i]);
  std::vector<std::string> config_columns = ConfigColumns(flat);
  std::vector<std::string> metric_columns;
  if (!metric.empty() && metric != "training_iteration") metric_columns.push_back(metric);
  for (const std::string& key : ExtraMetricColumns(trials, metric)) metric_columns.push_back(key);

  // A searcher's sweep says what proposed each trial.
  const bool searched = std::any_of(ordered.begin(), ordered.end(),
                                    [](const Trial* t) { return !t->searcher.empty(); });
  std::vector<std::string> headers = {"Trial name", "status"};
  if (searched) headers.push_back("searcher");
  headers.insert(headers.end(), config_columns.begin(), config_columns.end());
  headers.push_back("iter");
  headers.insert(headers.end(), metric_columns.begin(), metric_columns.end());
  headers.push_back("total time (s)");

  std::vector<std::vector<Cell>> rows;
  for (size_t i = 0; i < shown; ++i) {
    const Trial& trial = *ordered[i];
    std::vector<Cell> row;
    row.push_back({trial.dir_name.empty() ? trial.id : trial.dir_name, false});
    row.push_back({ToString(trial.status), false});
    if (searched) row.push_back({trial.searcher, false});
    for (const std::string& path : config_columns) {
      auto it = flat[i].find(path);
      row.push_back(ConfigCell(it == flat[i].end() ? nullptr : &it->second));
    }
    row.push_back(MetricCell(trial.last_result, "training_iteration"));
    for (const std::string& key : metric_columns) row.push_back(MetricCell(trial.last_result, key));
    row.push_back(trial.time_total_s > 0 || trial.status != TrialStatus::kPending
                      ? Cell{ShortNumber(trial.time_total_s), true}
                      : Cell{});
    rows.push_back(std::move(row));
  }
  text += FormatTable(headers, rows);

  if (shown < ordered.size()) {
    std::vector<const Trial*> hidden(ordered.begin() + static_cast<long>(shown), ordered.end());
    text += "... " + std::to_string(hidden.size()) + " more trials not shown (" +
            CountsText(hidden, ", ") + ")\n";
  }

  return text + ErroredTable(ordered);
}

}  // namespace rayd::tune::internal
