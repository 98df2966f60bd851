#include "trial.h"

#include <rayd/base/files.h>

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <iomanip>
#include <sstream>
#include <utility>

namespace rayd::tune::internal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kStateFile = "experiment_state.json";

// ---- experiment_state.json ----

json MetricsToJson(const Metrics& metrics) {
  // nlohmann writes a non-finite double as null; LoadMetrics reads null back as NaN.
  json out = json::object();
  for (const auto& [key, value] : metrics) out[key] = value;
  return out;
}

json TrialToJson(const Trial& trial) {
  return json{{"id", trial.id},
              {"index", trial.index},
              {"dir_name", trial.dir_name},
              {"config", trial.config},
              {"status", ToString(trial.status)},
              {"last_result", MetricsToJson(trial.last_result)},
              {"error", trial.error},
              {"num_failures", trial.num_failures},
              {"checkpoint", trial.checkpoint ? json(*trial.checkpoint) : json(nullptr)},
              {"time_total_s", trial.time_total_s},
              {"searcher", trial.searcher}};
}

// Reads a field of `object` into `out` when present. `what` names the object in errors.
Status ReadString(const json& object, const char* key, const std::string& what, std::string* out,
                  bool required) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (required) return Status::InvalidArgument(what + " has no \"" + key + "\"");
    return Status::Ok();
  }
  if (!it->is_string()) {
    return Status::InvalidArgument(what + ": \"" + key + "\" is not a string: " + it->dump());
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

Status ReadInt(const json& object, const char* key, const std::string& what, int* out,
               bool required) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (required) return Status::InvalidArgument(what + " has no \"" + key + "\"");
    return Status::Ok();
  }
  if (!it->is_number_integer()) {
    return Status::InvalidArgument(what + ": \"" + key + "\" is not an integer: " + it->dump());
  }
  *out = it->get<int>();
  return Status::Ok();
}

Result<Trial> TrialFromJson(const json& entry, size_t position) {
  std::string what = std::string(kStateFile) + ": trials[" + std::to_string(position) + "]";
  if (!entry.is_object()) return Status::InvalidArgument(what + " is not an object");
  Trial trial;
  RAYD_RETURN_IF_ERROR(ReadString(entry, "id", what, &trial.id, true));
  what += " (" + trial.id + ")";
  RAYD_RETURN_IF_ERROR(ReadInt(entry, "index", what, &trial.index, true));
  RAYD_RETURN_IF_ERROR(ReadString(entry, "dir_name", what, &trial.dir_name, true));
  RAYD_RETURN_IF_ERROR(ReadString(entry, "searcher", what, &trial.searcher, false));
  if (!entry.contains("config")) return Status::InvalidArgument(what + " has no \"config\"");
  trial.config = entry["config"];
  std::string status;
  RAYD_RETURN_IF_ERROR(ReadString(entry, "status", what, &status, true));
  std::optional<TrialStatus> parsed = TrialStatusFromString(status);
  if (!parsed) return Status::InvalidArgument(what + ": unknown status \"" + status + "\"");
  trial.status = *parsed;
  if (auto it = entry.find("last_result"); it != entry.end()) {
    if (!it->is_object()) {
      return Status::InvalidArgument(what + ": \"last_result\" is not an object");
    }
    for (const auto& [key, value] : it->items()) {
      if (value.is_null()) {
        trial.last_result[key] = std::numeric_limits<double>::quiet_NaN();
      } else if (value.is_number()) {
        trial.last_result[key] = value.get<double>();
      } else {
        return Status::InvalidArgument(what + ": last_result \"" + key +
                                       "\" is not a number: " + value.dump());
      }
    }
  }
  RAYD_RETURN_IF_ERROR(ReadString(entry, "error", what, &trial.error, false));
  RAYD_RETURN_IF_ERROR(ReadInt(entry, "num_failures", what, &trial.num_failures, false));
  if (auto it = entry.find("checkpoint"); it != entry.end() && !it->is_null()) {
    if (!it->is_string()) {
      return Status::InvalidArgument(what + ": \"checkpoint\" is not a string or null");
    }
    trial.checkpoint = it->get<std::string>();
  }
  if (auto it = entry.find("time_total_s"); it != entry.end()) {
    if (!it->is_number()) {
      return Status::InvalidArgument(what + ": \"time_total_s\" is not a number");
    }
    trial.time_total_s = it->get<double>();
  }
  return trial;
}

// ---- progress.csv ----

// Appends the leaves of `config` as ("config/a/b", value); objects are walked, everything else
// (arrays included) is a leaf, as Ray's flatten_dict.
void FlattenConfig(const json& config, const std::string& prefix,
                   std::vector<std::pair<std::string, const json*>>* out) {
  if (!config.is_object()) {
    out->emplace_back(prefix, &config);
    return;
  }
  for (const auto& [key, value] : config.items()) FlattenConfig(value, prefix + "/" + key, out);
}

std::string FormatConfigValue(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "";
    case json::value_t::string:
      return value.get<std::string>();
    case json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";  // as Python's
    case json::value_t::number_integer:
      return std::to_string(value.get<int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(value.get<uint64_t>());
    case json::value_t::number_float:
      return FormatDouble(value.get<double>());
    default:
      return value.dump();
  }
}

}  // namespace

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<long long>(value));
  }
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

namespace {

std::string CsvField(const std::string& value) {
  if (value.find_first_of(",\"\r\n") == std::string::npos) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    line += CsvField(fields[i]);
  }
  return line + "\n";
}

// The numeric fields of each parsable line of a trial's result.json; a missing file is an
// empty history. Lines that do not parse (a crash can cut the last one) are skipped.
std::vector<Metrics> ReadHistory(const std::string& result_file) {
  std::vector<Metrics> history;
  std::ifstream in(result_file);
  for (std::string line; std::getline(in, line);) {
    json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;
    Metrics metrics;
    for (const auto& [key, value] : row.items()) {
      if (value.is_number()) metrics[key] = value.get<double>();
    }
    history.push_back(std::move(metrics));
  }
  return history;
}

// Splits CSV text into records of fields (RFC 4180 quoting; fields may span lines).
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false;
  bool any = false;  // the current record has content
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      any = true;
    } else if (c == ',') {
      record.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        record.push_back(std::move(field));
        records.push_back(std::move(record));
      }
      field.clear();
      record.clear();
      any = false;
    } else {
      field += c;
      any = true;
    }
  }
  if (any || !field.empty()) {
    record.push_back(std::move(field));
    records.push_back(std::move(record));
  }
  return records;
}

// Every record of the CSV file at `path` (none when it is missing).
std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  return ParseCsv(text.str());
}

const char* ToString(TrialStatus status) {
  switch (status) {
    case TrialStatus::kPending:
      return "PENDING";
    case TrialStatus::kRunning:
      return "RUNNING";
    case TrialStatus::kPaused:
      return "PAUSED";
    case TrialStatus::kTerminated:
      return "TERMINATED";
    case TrialStatus::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

std::optional<TrialStatus> TrialStatusFromString(const std::string& s) {
  for (TrialStatus status : {TrialStatus::kPending, TrialStatus::kRunning, TrialStatus::kPaused,
                             TrialStatus::kTerminated, TrialStatus::kError}) {
    if (s == ToString(status)) return status;
  }
  return std::nullopt;
}

TrialResult Trial::ToResult(const std::string& experiment_dir) const {
  TrialResult result;
  result.trial_id = id;
  result.path = (fs::path(experiment_dir) / dir_name).string();
  result.config = config;
  result.status = ToString(status);
  result.metrics = last_result;
  result.history = history;
  result.checkpoint = checkpoint;
  result.error = error;
  result.num_failures = num_failures;
  return result;
}

Trial MakeTrial(const std::string& tag, int index, const std::string& name, nlohmann::json config) {
  Trial t;
  t.index = index;
  std::ostringstream id;
  id << tag << "_" << std::setw(5) << std::setfill('0') << index;
  t.id = id.str();
  t.dir_name = name + "_" + t.id;
  t.config = std::move(config);
  return t;
}

Status SaveExperimentState(const std::string& experiment_dir, const ExperimentState& state) {
  return SaveExperimentState(experiment_dir, state, state.trials);
}

Status SaveExperimentState(const std::string& experiment_dir, const ExperimentState& state,
                           const std::vector<Trial>& trial_list) {
  json trials = json::array();
  for (const Trial& trial : trial_list) trials.push_back(TrialToJson(trial));
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  json doc{{"name", state.name},     {"trainable", state.trainable},
           {"metric", state.metric}, {"mode", state.mode},
           {"timestamp", now},       {"trials", std::move(trials)}};
  if (!state.searcher.empty()) {
    doc["searcher"] = {{"type", state.searcher}, {"state", state.searcher_state}};
  }
  if (!state.scheduler.empty()) {
    doc["scheduler"] = {{"type", state.scheduler},
                        {"state", state.scheduler_state},
                        {"seen", state.scheduler_seen}};
  }
  return WriteFileAtomically((fs::path(experiment_dir) / kStateFile).string(), doc.dump(2) + "\n");
}

bool HasExperimentState(const std::string& experiment_dir) {
  std::error_code ec;
  return fs::exists(fs::path(experiment_dir) / kStateFile, ec);
}

Result<ExperimentState> LoadExperimentState(const std::string& experiment_dir) {
  fs::path path = fs::path(experiment_dir) / kStateFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return Status::NotFound("no " + std::string(kStateFile) + " in " + experiment_dir);
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Status::InvalidArgument("cannot read " + path.string());
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path.string() + " is not valid JSON: " + e.what());
  }
  if (!doc.is_object()) return Status::InvalidArgument(path.string() + " is not a JSON object");

  ExperimentState state;
  const std::string what = kStateFile;
  RAYD_RETURN_IF_ERROR(ReadString(doc, "name", what, &state.name, false));
  RAYD_RETURN_IF_ERROR(ReadString(doc, "trainable", what, &state.trainable, false));
  RAYD_RETURN_IF_ERROR(ReadString(doc, "metric", what, &state.metric, false));
  RAYD_RETURN_IF_ERROR(ReadString(doc, "mode", what, &state.mode, false));
  if (auto searcher = doc.find("searcher"); searcher != doc.end()) {
    if (!searcher->is_object() || !searcher->contains("type") || !(*searcher)["type"].is_string()) {
      return Status::InvalidArgument(what + ": \"searcher\" is not {\"type\", \"state\"}");
    }
    state.searcher = (*searcher)["type"].get<std::string>();
    state.searcher_state = searcher->value("state", json());
  }
  if (auto scheduler = doc.find("scheduler"); scheduler != doc.end()) {
    if (!scheduler->is_object() || !scheduler->contains("type") ||
        !(*scheduler)["type"].is_string()) {
      return Status::InvalidArgument(what + ": \"scheduler\" is not {\"type\", \"state\", \"seen\"}");
    }
    state.scheduler = (*scheduler)["type"].get<std::string>();
    state.scheduler_state = scheduler->value("state", json());
    try {
      state.scheduler_seen =
          scheduler->value("seen", json::object()).get<std::map<std::string, size_t>>();
    } catch (const json::exception&) {
      return Status::InvalidArgument(what + ": \"scheduler.seen\" is not {trial: count}");
    }
  }
  auto trials = doc.find("trials");
  if (trials == doc.end() || !trials->is_array()) {
    return Status::InvalidArgument(what + ": \"trials\" is missing or not an array");
  }
  for (size_t i = 0; i < trials->size(); ++i) {
    RAYD_ASSIGN_OR_RETURN(Trial trial, TrialFromJson((*trials)[i], i));
    trial.history = ReadHistory(
        train::RunDirectory((fs::path(experiment_dir) / trial.dir_name).string()).ResultFile());
    state.trials.push_back(std::move(trial));
  }
  return state;
}

Status TrialFiles::AppendProgress(const Metrics& result, const nlohmann::json& config) {
  const std::string path = dir_.ProgressFile();
  if (columns_.empty()) {
    // A resumed trial: carry on under the header an earlier run wrote.
    std::vector<std::vector<std::string>> records = ReadCsv(path);
    if (!records.empty()) {
      columns_ = std::move(records[0]);
      rows_ = records.size() - 1;
    }
  }
  // The config's columns are the same result after result (PBT may change them): made once.
  if (config != config_) {
    config_ = config;
    config_values_.clear();
    std::vector<std::pair<std::string, const json*>> leaves;
    if (!config.is_null()) FlattenConfig(config, "config", &leaves);
    for (const auto& [key, value] : leaves) {
      config_values_.emplace_back(key, FormatConfigValue(*value));
    }
  }

  bool grew = columns_.empty();
  std::vector<std::string> row(columns_.size());
  auto place = [&](const std::string& key, std::string value) {
    size_t column = 0;
    while (column < columns_.size() && columns_[column] != key) ++column;
    if (column == columns_.size()) {
      columns_.push_back(key);
      row.emplace_back();
      grew = true;
    }
    row[column] = std::move(value);
  };
  for (const auto& [key, value] : result) place(key, FormatDouble(value));
  for (const auto& [key, value] : config_values_) place(key, value);
  ++rows_;

  if (!grew) return progress_.Append(CsvLine(row));
  // A new file: its header and first row, appended like any row (nothing to rewrite).
  if (rows_ == 1) return progress_.Append(CsvLine(columns_) + CsvLine(row));
  // New columns (rare): the file is rewritten under the wider header, from what it holds.
  RAYD_RETURN_IF_ERROR(progress_.Close());  // replaced: the next row goes to the new file
  std::vector<std::vector<std::string>> records = ReadCsv(path);
  std::string text = CsvLine(columns_);
  for (size_t i = 1; i < records.size(); ++i) {
    records[i].resize(columns_.size());
    text += CsvLine(records[i]);
  }
  text += CsvLine(row);
  // Informational (a resume reads result.json, not this): whole for readers, without an fsync.
  return WriteFileAtomically(path, text, /*durable=*/false);
}

Status TrialFiles::AppendError(const std::string& error) const { return dir_.AppendError(error); }

}  // namespace rayd::tune::internal
