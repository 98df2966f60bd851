// Recorded curves, the check that a sweep can be replayed from them, and the ReplayRunner
// that plays them on a simulated clock (replay_runner.h; rayd/tune/simulator.h for users).

#include <rayd/train/run_directory.h>
#include <rayd/train/trainer.h>
#include <rayd/tune/simulator.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "replay_runner.h"
#include "trial.h"

namespace rayd::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// At most this many values of one parameter, and combinations of all, are checked up front.
constexpr size_t kMaxValues = 10'000;
constexpr size_t kMaxCombinations = 1'000'000;

// Integral numbers as integers, the rest to 12 significant digits, so that a value recorded
// and the same value computed (a quantized draw) compare equal.
json Normalized(const json& value) {
  if (value.is_number()) {
    double x = value.get<double>();
    if (std::isfinite(x) && x == std::trunc(x) && std::fabs(x) < 1e15) {
      return static_cast<int64_t>(x);
    }
    char buffer[40];
    std::snprintf(buffer, sizeof(buffer), "%.12g", x);
    return std::strtod(buffer, nullptr);
  }
  if (value.is_array() || value.is_object()) {
    json out = value;
    for (auto& element : out) element = Normalized(element);
    return out;
  }
  return value;
}

std::optional<double> ParseNumber(const std::string& text) {
  double x = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return x;
}

// A config cell of a CSV table: empty (absent), a boolean (Python's spelling too), a number, a
// JSON list or map, or a string.
json ParseCell(const std::string& text) {
  if (text.empty()) return nullptr;
  if (text == "True" || text == "true") return true;
  if (text == "False" || text == "false") return false;
  int64_t integer = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), integer);
  if (ec == std::errc() && end == text.data() + text.size()) return integer;
  if (std::optional<double> x = ParseNumber(text)) return *x;
  if (text.front() == '[' || text.front() == '{') {
    json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) return parsed;
  }
  return text;
}

std::vector<std::string> SplitPath(const std::string& dotted) {
  std::vector<std::string> path;
  std::stringstream in(dotted);
  for (std::string part; std::getline(in, part, '/');) path.push_back(part);
  return path;
}

std::string Join(const std::vector<std::string>& items, size_t most) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < most; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > most) out += ", ...";
  return out;
}

// A curve's config: params.json beside its result.json, else the config its results carry.
std::optional<json> ConfigOf(const fs::path& result_file) {
  std::ifstream params(result_file.parent_path() / "params.json");
  if (params) {
    json config = json::parse(params, nullptr, /*allow_exceptions=*/false);
    if (config.is_object()) return config;
  }
  std::ifstream results(result_file);
  for (std::string line; std::getline(results, line);) {
    json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.contains("config") && row["config"].is_object()) {
      return row["config"];
    }
  }
  return std::nullopt;
}

// The values a parameter can take, or why they cannot be listed.
Result<std::vector<json>> ValuesOf(const Param& param) {
  if (const auto* constant = std::get_if<json>(&param.value)) return std::vector<json>{*constant};
  const Domain& d = std::get<Domain>(param.value);
  std::vector<json> values;
  switch (d.kind()) {
    case Domain::Kind::kGridSearch:
    case Domain::Kind::kChoice:
      return d.values();
    case Domain::Kind::kRandInt:
    case Domain::Kind::kQRandInt:
    case Domain::Kind::kQUniform:
    case Domain::Kind::kQLogUniform: {
      const double step = d.kind() == Domain::Kind::kRandInt ? 1.0 : d.q();
      const double first = std::floor(d.lower() / step), last = std::ceil(d.upper() / step);
      if (last - first >= kMaxValues) {
        return Status::InvalidArgument(std::string(d.name()) + " takes more than " +
                                       std::to_string(kMaxValues) + " values to replay");
      }
      for (double k = first; k <= last; ++k) {
        json v = d.is_integer() ? json(static_cast<int64_t>(k * step)) : json(k * step);
        if (d.Contains(v)) values.push_back(std::move(v));
      }
      return values;
    }
    default:
      return Status::InvalidArgument(
          "--simulate replays recorded configurations, so each parameter must take finitely "
          "many values (choice, grid_search, randint, qrandint, quniform, qloguniform); " +
          std::string(d.name()) + " does not");
  }
}

}  // namespace

Result<RecordedCurves> RecordedCurves::ParseCsv(const std::string& text, const std::string& name) {
  std::vector<std::vector<std::string>> records = internal::ParseCsv(text);
  if (records.empty()) return Status::InvalidArgument(name + ": the table is empty");
  const std::vector<std::string>& header = records[0];
  std::vector<std::pair<size_t, std::vector<std::string>>> config_columns;
  std::vector<size_t> metric_columns;
  std::optional<size_t> trial_column;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i].rfind("config/", 0) == 0 && header[i].size() > 7) {
      config_columns.emplace_back(i, SplitPath(header[i].substr(7)));
    } else if (header[i] == "trial_id") {
      trial_column = i;
    } else {
      metric_columns.push_back(i);
    }
  }
  if (config_columns.empty()) {
    return Status::InvalidArgument(
        name +
        ":1: no config/<key> columns (the table is laid out as progress.csv: a "
        "config/<key> column per hyperparameter, a column per metric, a row per result)");
  }
  std::vector<RecordedCurve> curves;
  std::map<std::string, size_t> by_trial;
  for (size_t r = 1; r < records.size(); ++r) {
    const std::vector<std::string>& row = records[r];
    const std::string where = name + ":" + std::to_string(r + 1);
    if (row.size() != header.size()) {
      return Status::InvalidArgument(where + ": expected " + std::to_string(header.size()) +
                                     " fields as the header has, got " +
                                     std::to_string(row.size()));
    }
    json config = json::object();
    for (const auto& [column, path] : config_columns) {
      json value = ParseCell(row[column]);
      if (!value.is_null()) SetPath(config, path, std::move(value));
    }
    Metrics metrics;
    for (size_t column : metric_columns) {
      if (std::optional<double> x = ParseNumber(row[column])) metrics[header[column]] = *x;
    }
    RecordedCurve* curve = nullptr;
    if (trial_column) {
      auto [it, added] = by_trial.emplace(row[*trial_column], curves.size());
      if (!added) curve = &curves[it->second];
    } else if (!curves.empty() && curves.back().config == config) {
      // The same config goes on unless its training_iteration starts again.
      auto iteration = metrics.find("training_iteration");
      const Metrics& last = curves.back().results.back();
      auto before = last.find("training_iteration");
      if (iteration == metrics.end() || before == last.end() ||
          iteration->second > before->second) {
        curve = &curves.back();
      }
    }
    if (curve == nullptr) {
      curves.push_back({std::move(config), {}, where});
      curve = &curves.back();
    }
    curve->results.push_back(std::move(metrics));
  }
  if (curves.empty()) return Status::InvalidArgument(name + ": the table has no rows");
  return RecordedCurves(name, std::move(curves));
}

Result<RecordedCurves> RecordedCurves::Load(const std::string& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return Status::NotFound("no such file or directory: " + path);
  if (!fs::is_directory(status)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::InvalidArgument("cannot read " + path);
    std::stringstream text;
    text << in.rdbuf();
    return ParseCsv(text.str(), path);
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(
           path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() == "result.json") files.push_back(it->path());
  }
  if (ec) return Status::InvalidArgument("cannot read " + path + ": " + ec.message());
  std::sort(files.begin(), files.end());  // the same curves in the same order, every time
  std::vector<RecordedCurve> curves;
  for (const fs::path& file : files) {
    std::vector<Metrics> results = internal::ReadHistory(file.string());
    if (results.empty()) continue;
    std::optional<json> config = ConfigOf(file);
    if (!config) {
      return Status::InvalidArgument(file.string() +
                                     ": no params.json beside it and no config in its results");
    }
    curves.push_back({std::move(*config), std::move(results), file.string()});
  }
  if (curves.empty()) {
    return Status::InvalidArgument(path + ": no result.json with results under it");
  }
  return RecordedCurves(path, std::move(curves));
}

std::optional<ReplayProblem> CheckReplayable(const ParamSpace& space, const TuneConfig& tune,
                                             const RecordedCurves& curves) {
  if (curves.curves().empty()) return ReplayProblem{"", "no recorded curves in " + curves.source()};
  // The metric, or every objective, must be in the recordings.
  std::vector<std::string> needed;
  if (!tune.metric.empty()) needed.push_back(tune.metric);
  for (const Objective& o : tune.objectives) needed.push_back(o.metric);
  if (!needed.empty()) {
    std::set<std::string> reported;
    for (const RecordedCurve& curve : curves.curves()) {
      for (const Metrics& result : curve.results) {
        for (const auto& [key, value] : result) reported.insert(key);
      }
    }
    for (const std::string& metric : needed) {
      if (reported.count(metric)) continue;
      return ReplayProblem{
          "tune.metric",
          "the recorded curves in " + curves.source() + " do not report '" + metric +
              "' (they report: " + Join({reported.begin(), reported.end()}, 12) + ")"};
    }
  }
  // Every value of every parameter, normalised as the table keys them.
  std::vector<std::vector<json>> values;
  for (const Param& param : space) {
    Result<std::vector<json>> listed = ValuesOf(param);
    if (!listed.ok()) {
      return ReplayProblem{"param_space." + JoinPath(param.path), listed.status().message()};
    }
    values.push_back(std::move(listed).value());
    for (json& v : values.back()) v = Normalized(v);
  }
  // Each value on its own first: the most useful thing to say is which one was never run.
  internal::ReplayTable table(curves, space);
  std::vector<std::set<std::string>> recorded(space.size());
  size_t complete = 0;
  for (const RecordedCurve& curve : curves.curves()) {
    if (table.KeyOf(curve.config).empty()) continue;
    ++complete;
    for (size_t i = 0; i < space.size(); ++i) {
      recorded[i].insert(Normalized(GetPath(curve.config, space[i].path)).dump());
    }
  }
  if (complete == 0) {
    for (const Param& param : space) {
      if (GetPath(curves.curves().front().config, param.path).is_null()) {
        return ReplayProblem{
            "param_space." + JoinPath(param.path),
            "the recorded configs in " + curves.source() + " have no " + JoinPath(param.path)};
      }
    }
  }
  for (size_t i = 0; i < space.size(); ++i) {
    for (const json& v : values[i]) {
      if (recorded[i].count(v.dump())) continue;
      return ReplayProblem{
          "param_space." + JoinPath(space[i].path),
          "no recorded curve in " + curves.source() + " has " + JoinPath(space[i].path) + " = " +
              v.dump() + " (recorded: " + Join({recorded[i].begin(), recorded[i].end()}, 12) + ")"};
    }
  }
  // Then every combination.
  double combinations = 1;
  for (const auto& v : values) combinations *= static_cast<double>(v.size());
  if (combinations > static_cast<double>(kMaxCombinations)) {
    return ReplayProblem{"param_space", "takes more than " + std::to_string(kMaxCombinations) +
                                            " combinations of values to replay"};
  }
  std::vector<size_t> at(space.size(), 0);
  while (true) {
    json config = json::object();
    for (size_t i = 0; i < space.size(); ++i) SetPath(config, space[i].path, values[i][at[i]]);
    if (!table.Has(table.KeyOf(config))) {
      return ReplayProblem{"param_space", "no recorded curve for " + config.dump() + " (" +
                                              std::to_string(table.distinct()) +
                                              " configurations recorded in " + curves.source() +
                                              ")"};
    }
    size_t i = space.size();
    while (i > 0 && ++at[i - 1] == values[i - 1].size()) at[--i] = 0;
    if (i == 0) break;
  }
  return std::nullopt;
}

namespace internal {
namespace {

// How long result `i` of `curve` took: its time_this_iter_s, else its step in time_total_s,
// else one second.
double Duration(const RecordedCurve& curve, size_t i) {
  const Metrics& result = curve.results[i];
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  if (auto it = result.find("time_this_iter_s"); it != result.end() && positive(it->second)) {
    return it->second;
  }
  auto total = result.find("time_total_s");
  if (total != result.end()) {
    double before = 0;
    if (i > 0) {
      const Metrics& previous = curve.results[i - 1];
      auto it = previous.find("time_total_s");
      if (it == previous.end()) return 1.0;
      before = it->second;
    }
    if (positive(total->second - before)) return total->second - before;
  }
  return 1.0;
}

constexpr char kReplayStateFile[] = "replay_state";
constexpr size_t kCheckpointsKept = 2;

}  // namespace

ReplayTable::ReplayTable(const RecordedCurves& curves, const ParamSpace& space) : space_(space) {
  for (const RecordedCurve& curve : curves.curves()) {
    std::string key = KeyOf(curve.config);
    if (!key.empty()) by_key_[key].push_back(&curve);
  }
}

std::string ReplayTable::KeyOf(const nlohmann::json& config) const {
  std::string key;
  for (const Param& param : space_) {
    json value = GetPath(config, param.path);
    if (value.is_null()) return "";
    key += Normalized(value).dump();
    key += '\x1f';
  }
  return key.empty() ? std::string(1, '\x1f') : key;  // an empty space: one config
}

const RecordedCurve* ReplayTable::Find(size_t trial, const nlohmann::json& config) {
  std::string key = KeyOf(config);
  auto was = assigned_.find(trial);
  if (was != assigned_.end() && was->second.first == key) return was->second.second;
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  const RecordedCurve* curve = it->second[taken_[key]++ % it->second.size()];
  assigned_[trial] = {std::move(key), curve};
  return curve;
}

ReplayRunner::ReplayRunner(EventLoop& loop, ReplayTable& table, std::string metric,
                           std::string mode, const train::ScalingConfig& scaling,
                           const TuneConfig::Simulated& simulated)
    : loop_(loop),
      table_(table),
      metric_(std::move(metric)),
      mode_(std::move(mode)),
      scaling_(scaling),
      simulated_(simulated) {
  if (simulated.autoscaler.max_nodes > 0) nodes_.emplace(simulated.autoscaler);
}

int ReplayRunner::Capacity() const {
  return nodes_ ? nodes_->ReadyWorkers() : simulated_.workers;
}

void ReplayRunner::Start(const RunRequest& request) {
  Run& run = runs_[request.trial];
  run = Run{};
  run.trial_id = request.trial_id;
  run.dir = (fs::path(request.experiment_dir) / request.run_dir_name).string();
  run.config = request.config;
  std::error_code ec;
  fs::create_directories(run.dir, ec);
  const train::RunDirectory dir(run.dir);
  (void)dir.WriteParams(run.config);
  run.curve = table_.Find(request.trial, request.config);
  if (run.curve == nullptr) {
    return End(request.trial,
               "no recorded curve for config " + request.config.dump() + " to replay", false);
  }
  // Where the trial got to: its newest checkpoint (its own, or a PBT donor's copy).
  std::vector<int> saved;
  for (const auto& entry : fs::directory_iterator(run.dir, ec)) {
    int index = train::RunDirectory::CheckpointIndex(entry.path().filename().string());
    if (index >= 0) saved.push_back(index);
  }
  std::sort(saved.begin(), saved.end());
  for (int index : saved) run.checkpoints.push_back(dir.CheckpointDir(index));
  if (!saved.empty()) {
    std::ifstream state(fs::path(run.checkpoints.back()) / kReplayStateFile);
    size_t place = 0;
    if (state >> place) run.place = place;
    run.next_checkpoint = saved.back() + 1;
  }
  waiting_.push_back(request.trial);
  StartWaiting();
}

int ReplayRunner::StartSize() const {
  return std::max(1, scaling_.min_workers > 0 ? scaling_.min_workers : scaling_.num_workers);
}

// Runs start in the order they were asked for, each once its workers are free.
void ReplayRunner::StartWaiting() {
  while (!waiting_.empty()) {
    const size_t trial = waiting_.front();
    const int need = StartSize();
    if ((nodes_ || simulated_.workers > 0) && used_ + need > Capacity()) {
      // The autoscaler launches nodes for every run that waits; their joining is an event.
      if (nodes_) {
        nodes_->Want(now_, used_ + need * static_cast<int>(waiting_.size()));
        RequestHandOver();
      }
      break;
    }
    waiting_.erase(waiting_.begin());
    Run& run = runs_.at(trial);
    run.workers = need;
    run.busy_since = now_;
    used_ += need;
    ScheduleNext(trial);
  }
  if (nodes_) nodes_->Used(now_, used_);
}

void ReplayRunner::Release(size_t trial) {
  Run& run = runs_.at(trial);
  if (run.workers == 0) return;
  busy_ += run.workers * (now_ - run.busy_since);
  used_ -= std::max(run.workers, run.grow_to);
  run.workers = 0;
  run.grow_to = 0;
  StartWaiting();
}

int ReplayRunner::FreeWorkers() {
  if (!waiting_.empty()) return 0;  // runs waiting to start come first
  return nodes_ || simulated_.workers > 0 ? Capacity() - used_ : 1 << 20;
}

void ReplayRunner::GrowTo(size_t trial, int workers) {
  auto it = runs_.find(trial);
  if (it == runs_.end() || it->second.workers == 0) return;
  Run& run = it->second;
  const int held = std::max(run.workers, run.grow_to);
  if (workers <= held) return;
  used_ += workers - held;  // held from now: the controller counted them as given
  run.grow_to = workers;
  if (nodes_) nodes_->Used(now_, used_);
}

double ReplayRunner::Duration(const Run& run) const {
  auto speed = [this](int workers) {
    const size_t w = static_cast<size_t>(std::max(workers, 1));
    return w <= simulated_.speedup.size() ? simulated_.speedup[w - 1] : static_cast<double>(w);
  };
  const int recorded = simulated_.recorded_workers > 0 ? simulated_.recorded_workers : StartSize();
  return internal::Duration(*run.curve, run.place) * speed(recorded) / speed(run.workers) +
         (run.restarting ? simulated_.restart_s : 0.0);
}

void ReplayRunner::ScheduleNext(size_t trial) {
  Run& run = runs_.at(trial);
  if (run.place >= run.curve->results.size()) return End(trial, "", false);
  due_.emplace(now_ + Duration(run), scheduled_++, trial);
  run.restarting = false;
  RequestHandOver();
}

void ReplayRunner::End(size_t trial, std::string error, bool stopped) {
  Release(trial);
  const Run& run = runs_.at(trial);
  train::TrainResult ended;
  ended.error = std::move(error);
  ended.stopped = stopped;
  if (run.curve != nullptr && run.place > 0) ended.metrics = run.curve->results[run.place - 1];
  if (!run.checkpoints.empty()) ended.checkpoint = run.checkpoints.back();
  ++out_;
  post_({RunEvent::Kind::kDone, trial, {}, std::move(ended)});
}

void ReplayRunner::Answer(size_t trial, bool go_on) {
  --out_;
  if (go_on) {
    ScheduleNext(trial);
  } else {
    End(trial, "", /*stopped=*/true);
  }
  RequestHandOver();
}

void ReplayRunner::Finished(size_t trial) {
  --out_;
  runs_.erase(trial);
  RequestHandOver();
}

void ReplayRunner::RequestHandOver() {
  if (hand_over_posted_) return;
  hand_over_posted_ = true;
  loop_.Post([this, alive = std::weak_ptr<const bool>(alive_)] {
    if (alive.lock()) HandOver();
  });
}

// Gives the controller the earliest due result, once it has dealt with everything else. An
// autoscaled cluster's node events come first when they are earlier, while runs wait or play.
void ReplayRunner::HandOver() {
  hand_over_posted_ = false;
  if (out_ > 0) return;
  if (nodes_ && (!due_.empty() || !waiting_.empty())) {
    const double next = nodes_->NextEvent();
    if (next < (due_.empty() ? std::numeric_limits<double>::infinity() : std::get<0>(due_.top()))) {
      now_ = std::max(now_, next);
      nodes_->Advance(now_);
      StartWaiting();
      return RequestHandOver();
    }
  }
  if (due_.empty()) return;
  auto [time, order, trial] = due_.top();
  due_.pop();
  now_ = time;
  Play(trial);
}

void ReplayRunner::Play(size_t trial) {
  Run& run = runs_.at(trial);
  train::ReportedResult result;
  result.metrics = run.curve->results[run.place++];
  if (scaling_.min_workers > 0) result.metrics["world_size"] = run.workers;
  ++iterations_;
  const train::RunDirectory dir(run.dir);
  json line(result.metrics);
  line["trial_id"] = run.trial_id;
  line["config"] = run.config;
  (void)dir.AppendResult(line);
  // The run's place, as a Trainer's checkpoint would hold its state.
  const std::string checkpoint = dir.CheckpointDir(run.next_checkpoint++);
  std::error_code ec;
  fs::create_directories(checkpoint, ec);
  std::ofstream(fs::path(checkpoint) / kReplayStateFile) << run.place << "\n";
  if (run.grow_to > run.workers) {  // restarts at its new size from this checkpoint
    busy_ += run.workers * (now_ - run.busy_since);
    run.busy_since = now_;
    run.workers = std::exchange(run.grow_to, 0);
    run.restarting = true;
  }
  run.checkpoints.push_back(checkpoint);
  while (run.checkpoints.size() > kCheckpointsKept) {
    fs::remove_all(run.checkpoints.front(), ec);
    run.checkpoints.erase(run.checkpoints.begin());
  }
  result.checkpoint = checkpoint;
  auto value = result.metrics.find(metric_);
  trace_.push_back({now_, iterations_, run.trial_id,
                    value == result.metrics.end() ? std::nan("") : value->second});
  ++out_;
  post_({RunEvent::Kind::kResult, trial, std::move(result), {}});
}

void ReplayRunner::Fill(Simulation& simulation) const {
  simulation.iterations = iterations_;
  simulation.simulated_s = now_;
  simulation.trace = trace_;
  if (simulated_.workers > 0 && now_ > 0) {
    simulation.utilization = busy_ / (simulated_.workers * now_);
  }
  if (nodes_) {
    simulation.node_seconds = nodes_->NodeSeconds(now_);
    simulation.peak_nodes = nodes_->peak();
    simulation.launches = nodes_->launches();
    if (simulation.node_seconds > 0) {
      simulation.utilization =
          busy_ / (simulation.node_seconds * simulated_.autoscaler.workers_per_node);
    }
  }
  const double sign = mode_ == "max" ? 1.0 : -1.0;
  double best = -std::numeric_limits<double>::infinity();
  for (const Simulation::Event& event : trace_) {
    if (std::isfinite(event.value) && sign * event.value > best) {
      best = sign * event.value;
      simulation.time_to_best_s = event.time_s;
    }
  }
}

}  // namespace internal
}  // namespace rayd::tune
