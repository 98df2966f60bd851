// tune.yaml / train.yaml loading. How it works: yaml-cpp parses the text into a node tree (a
// syntax error becomes a ConfigFileError at once); then one Parser walks the tree, section by
// section, and turns every node into its field with a check: a map's keys against the keys it
// allows, a scalar against the type its field needs. The first problem throws, naming the file,
// the node's line and the dotted key path. Scalars are typed by the YAML 1.2 core schema
// (quoted scalars are always strings, so `num_samples: "8"` is not an integer).

#include <rayd/api/task_options.h>
#include <rayd/tune/config_file.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "exact_number.h"

namespace rayd::tune {
namespace {

using internal::ExactNumber;

using Keys = std::vector<std::string_view>;

const Keys kDomainNames = {"grid_search", "choice",  "uniform",  "quniform", "loguniform",
                           "qloguniform", "randint", "qrandint", "randn"};
// In SchedulerConfig's alternative order.
const Keys kSchedulerTypes = {"fifo", "asha", "hyperband", "median_stopping", "pbt", "pasha"};
const Keys kTuneFileKeys = {"name", "trainable", "libraries", "scaling",
                            "param_space", "tune", "run", "datasets"};
const Keys kTrainFileKeys = {"name",   "train_loop", "trainable", "libraries",
                             "config", "scaling",    "run",       "datasets"};
const Keys kCommandKeys = {"command", "launcher",         "working_dir",
                           "env",     "report_timeout_s", "stop_grace_s"};
const Keys kScalingKeys = {"num_workers",          "num_processes",        "use_gpu",
                           "resources_per_worker", "placement_strategy",   "local_mode",
                           "placement_timeout_s",  "collective_timeout_s", "mesh",
                           "resize_interval_s"};
const Keys kMeshKeys = {"data", "pipeline", "tensor"};
const Keys kSimulateKeys = {"workers", "speedup", "restart_s", "recorded_workers", "autoscaler"};
const Keys kSimulateAutoscalerKeys = {"workers_per_node", "min_nodes", "max_nodes",
                                      "launch_latency_s", "idle_timeout_s"};
const Keys kRunKeys = {"storage_path", "failure", "checkpoint", "mlflow"};
const Keys kMlflowKeys = {"tracking_uri", "experiment_name"};
const Keys kFailureKeys = {"max_failures", "max_preemptions"};
const Keys kCheckpointKeys = {"num_to_keep", "score_attribute", "score_order"};
const Keys kTuneKeys = {"metric", "mode",     "num_samples", "max_concurrent_trials",
                        "seed",   "stop",     "scheduler",   "progress_interval_s",
                        "search", "simulate", "constraints", "reference_point"};
const Keys kSearchTypes = {"random", "grid", "tpe", "nsga2"};
const Keys kTpeKeys = {"type",         "n_startup_trials", "n_ei_candidates",
                       "gamma",        "prior_weight",     "multivariate",
                       "weight_by_bandwidth"};
const Keys kNsga2Keys = {"type", "population_size", "mutation_prob", "crossover_prob",
                         "swapping_prob"};
const Keys kAshaKeys = {"type",         "time_attr",        "max_t",
                        "grace_period", "reduction_factor", "brackets",
                        "promotion",    "stop_last_trials"};
const Keys kPashaKeys = {"type",         "time_attr",        "max_t",
                         "grace_period", "reduction_factor", "epsilon"};
const Keys kHyperBandKeys = {"type", "time_attr", "max_t", "reduction_factor", "stop_last_trials"};
const Keys kMedianKeys = {"type",      "time_attr",    "grace_period", "min_samples_required",
                          "hard_stop", "scalarization"};
const Keys kScalarizationKeys = {"type", "weights", "reference"};
// In Scalarization::Kind's order.
const Keys kScalarizationTypes = {"weighted_sum", "chebyshev"};
const Keys kPbtKeys = {"type",
                       "time_attr",
                       "perturbation_interval",
                       "burn_in_period",
                       "hyperparam_mutations",
                       "quantile_fraction",
                       "resample_probability",
                       "perturbation_factors",
                       "synch"};

bool Has(const Keys& keys, std::string_view name) {
  return std::find(keys.begin(), keys.end(), name) != keys.end();
}

std::string JoinKeys(const Keys& keys) {
  std::string out;
  for (std::string_view key : keys) {
    if (!out.empty()) out += ", ";
    out += key;
  }
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown key 'num_sample'; did you mean 'num_samples'? (allowed: ...)"
std::string UnknownKey(std::string_view what, const std::string& name, const Keys& allowed) {
  std::string out = "unknown " + std::string(what) + " '" + name + "'";
  std::string_view best;
  size_t best_distance = 3;  // suggest only near misses
  for (std::string_view key : allowed) {
    size_t d = EditDistance(name, key);
    if (d < best_distance) best_distance = d, best = key;
  }
  if (!best.empty()) out += "; did you mean '" + std::string(best) + "'?";
  return out + " (allowed: " + JoinKeys(allowed) + ")";
}

// A node and where it sits: the node of its key (null values carry no useful line in yaml-cpp,
// so errors about them point at the key) and its dotted key path.
struct Field {
  YAML::Node key;
  YAML::Node value;
  std::string path;
};

std::string ChildPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// A map's entries, in file order.
class MapFields {
 public:
  void Add(Field f, std::string name) { entries_.emplace_back(std::move(name), std::move(f)); }
  const Field* Find(std::string_view name) const {
    for (const auto& [key, field] : entries_) {
      if (key == name) return &field;
    }
    return nullptr;
  }
  const std::vector<std::pair<std::string, Field>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Field>> entries_;
};

// The core schema's number forms, matched by hand: libstdc++'s std::regex recurses once per
// character and overflowed the stack on a long scalar (fuzz/regressions/tune_yaml/).
size_t SkipSign(std::string_view s, size_t i) {
  return i < s.size() && (s[i] == '+' || s[i] == '-') ? i + 1 : i;
}
size_t SkipDigits(std::string_view s, size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}
// [-+]?[0-9]+
bool IsYamlInt(std::string_view s) {
  const size_t digits = SkipSign(s, 0);
  const size_t end = SkipDigits(s, digits);
  return end > digits && end == s.size();
}
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsYamlFloat(std::string_view s) {
  size_t i = SkipSign(s, 0);
  if (i < s.size() && s[i] == '.') {
    const size_t end = SkipDigits(s, i + 1);
    if (end == i + 1) return false;
    i = end;
  } else {
    const size_t end = SkipDigits(s, i);
    if (end == i) return false;
    i = end;
    if (i < s.size() && s[i] == '.') i = SkipDigits(s, i + 1);
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const size_t digits = SkipSign(s, i + 1);
    const size_t end = SkipDigits(s, digits);
    if (end == digits) return false;
    i = end;
  }
  return i == s.size();
}
// [-+]?\.(inf|Inf|INF)
bool IsYamlInf(std::string_view s) {
  const std::string_view body = s.substr(SkipSign(s, 0));
  return body == ".inf" || body == ".Inf" || body == ".INF";
}
// \.(nan|NaN|NAN)
bool IsYamlNan(std::string_view s) { return s == ".nan" || s == ".NaN" || s == ".NAN"; }

// A scalar by the YAML 1.2 core schema: null, bool, integer, float, else string.
nlohmann::json ScalarToJson(const YAML::Node& node) {
  if (node.IsNull()) return nullptr;
  const std::string& s = node.Scalar();
  if (node.Tag() != "?") return s;  // quoted, or an explicit tag: keep the text
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
  if (IsYamlInt(s)) {
    std::string_view digits = s[0] == '+' ? std::string_view(s).substr(1) : std::string_view(s);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec == std::errc() && end == digits.data() + digits.size()) return v;
    return std::strtod(s.c_str(), nullptr);  // too large for int64: a float, as YAML says
  }
  if (IsYamlFloat(s)) return std::strtod(s.c_str(), nullptr);
  if (IsYamlInf(s)) {
    return s[0] == '-' ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
  }
  if (IsYamlNan(s)) return std::numeric_limits<double>::quiet_NaN();
  return s;
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:  // a quoted scalar shown quoted: it is a string however it reads
      return node.Tag() == "!" ? "\"" + node.Scalar() + "\"" : "'" + node.Scalar() + "'";
    default:
      return "nothing";
  }
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  YAML::Node Load(const std::string& text) const {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw ConfigFileError(file_ + ":" + std::to_string(std::max(e.mark.line, 0) + 1) +
                            ": YAML syntax error: " + e.msg);
    } catch (const YAML::Exception& e) {
      throw ConfigFileError(file_ + ":1: YAML error: " + e.what());
    }
    CheckExpansion(root);
    return root;
  }

  // Aliases make the tree a graph: a cycle (`&a [*a]`) sent the recursive walks below into
  // unbounded recursion, and aliases of aliases ("billion laughs") into exponential work (both
  // kept in fuzz/regressions/tune_yaml/). This walk, without recursion, bounds the tree as the
  // walks see it. yaml-cpp itself stops plain documents near 500 levels, so only aliases reach
  // kMaxDepth.
  void CheckExpansion(const YAML::Node& root) const {
    constexpr size_t kMaxDepth = 1000;
    constexpr size_t kMaxValues = 1'000'000;
    std::vector<std::pair<YAML::Node, size_t>> stack = {{root, 1}};
    size_t values = 0;
    while (!stack.empty()) {
      auto [node, depth] = std::move(stack.back());
      stack.pop_back();
      if (depth > kMaxDepth) {
        Fail({YAML::Node(), node, ""},
             "nested deeper than " + std::to_string(kMaxDepth) + " levels (a cyclic alias?)");
      }
      if (++values > kMaxValues) {
        Fail({YAML::Node(), node, ""},
             "more than " + std::to_string(kMaxValues) + " values once aliases are expanded");
      }
      if (node.IsSequence()) {
        for (size_t i = 0; i < node.size(); ++i) stack.emplace_back(node[i], depth + 1);
      } else if (node.IsMap()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
          stack.emplace_back(it->first, depth + 1);
          stack.emplace_back(it->second, depth + 1);
        }
      }
    }
  }

  [[noreturn]] void Fail(const Field& f, const std::string& reason) const {
    int line = -1;
    if (f.value.IsDefined() && !f.value.IsNull()) line = f.value.Mark().line;
    if (line < 0 && f.key.IsDefined()) line = f.key.Mark().line;
    std::string where = file_ + ":" + std::to_string(std::max(line, 0) + 1) + ": ";
    if (!f.path.empty()) where += f.path + ": ";
    throw ConfigFileError(where + reason);
  }

  // The entries of a map (null counts as empty); with `allowed`, any other key fails.
  MapFields ReadMap(const Field& f, const std::optional<Keys>& allowed,
                    std::string_view what = "key") const {
    MapFields out;
    if (f.value.IsNull()) return out;
    if (!f.value.IsMap()) Fail(f, "expected a map, got " + Describe(f.value));
    for (auto it = f.value.begin(); it != f.value.end(); ++it) {
      Field key_field{it->first, it->first, f.path};
      if (!it->first.IsScalar()) Fail(key_field, "a key must be a plain string");
      std::string name = it->first.Scalar();
      Field child{it->first, it->second, ChildPath(f.path, name)};
      if (allowed && !Has(*allowed, name)) {
        Fail({it->first, it->first, child.path}, UnknownKey(what, name, *allowed));
      }
      if (out.Find(name) != nullptr) Fail({it->first, it->first, child.path}, "duplicate key");
      lines_[child.path] = std::max(it->first.Mark().line, 0) + 1;
      out.Add(std::move(child), std::move(name));
    }
    return out;
  }

  // Where to blame something about `f` as a whole (a missing key inside it): the line of its
  // key when it has one, else its first line.
  static Field AtKey(const Field& f, std::string path) {
    if (f.key.IsDefined() && f.key.Mark().line >= 0) return {f.key, YAML::Node(), std::move(path)};
    return {f.key, f.value, std::move(path)};
  }

  const Field& Required(const MapFields& map, const Field& parent, std::string_view name) const {
    const Field* f = map.Find(name);
    if (f == nullptr) Fail(AtKey(parent, ChildPath(parent.path, std::string(name))), "required");
    return *f;
  }

  std::string String(const Field& f) const {
    if (!f.value.IsScalar()) Fail(f, "expected a string, got " + Describe(f.value));
    return f.value.Scalar();
  }

  std::string NonEmptyString(const Field& f) const {
    std::string s = String(f);
    if (s.empty()) Fail(f, "must not be empty");
    return s;
  }

  std::string OneOf(const Field& f, const Keys& allowed) const {
    std::string s = String(f);
    if (!Has(allowed, s)) Fail(f, "expected one of " + JoinKeys(allowed) + ", got '" + s + "'");
    return s;
  }

  int64_t Int64(const Field& f) const {
    nlohmann::json j = f.value.IsScalar() ? ScalarToJson(f.value) : nlohmann::json();
    if (!j.is_number_integer()) Fail(f, "expected an integer, got " + Describe(f.value));
    return j.get<int64_t>();
  }

  int Int(const Field& f, int64_t min, int64_t max = std::numeric_limits<int>::max()) const {
    int64_t v = Int64(f);
    if (v < min || v > max) {
      Fail(f, "expected an integer " +
                  (max == std::numeric_limits<int>::max()
                       ? ">= " + std::to_string(min)
                       : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]") +
                  ", got " + std::to_string(v));
    }
    return static_cast<int>(v);
  }

  // Any number, including .inf and .nan (domain bounds: Domain::Validate reports those).
  double AnyNumber(const Field& f) const {
    nlohmann::json j = f.value.IsScalar() ? ScalarToJson(f.value) : nlohmann::json();
    if (!j.is_number()) Fail(f, "expected a number, got " + Describe(f.value));
    return j.get<double>();
  }

  double Number(const Field& f) const {
    double v = AnyNumber(f);
    if (!std::isfinite(v)) Fail(f, "expected a finite number, got " + Describe(f.value));
    return v;
  }

  double Positive(const Field& f) const {
    double v = Number(f);
    if (v <= 0) Fail(f, "must be positive, got " + ExactNumber(v));
    return v;
  }

  double NonNegative(const Field& f) const {
    double v = Number(f);
    if (v < 0) Fail(f, "must not be negative, got " + ExactNumber(v));
    return v;
  }

  bool Bool(const Field& f) const {
    nlohmann::json j = f.value.IsScalar() ? ScalarToJson(f.value) : nlohmann::json();
    if (!j.is_boolean()) Fail(f, "expected true or false, got " + Describe(f.value));
    return j.get<bool>();
  }

  nlohmann::json ToJson(const Field& f) const {
    if (f.value.IsSequence()) {
      nlohmann::json out = nlohmann::json::array();
      for (size_t i = 0; i < f.value.size(); ++i) {
        out.push_back(ToJson({f.key, f.value[i], f.path + "[" + std::to_string(i) + "]"}));
      }
      return out;
    }
    if (f.value.IsMap()) {
      nlohmann::json out = nlohmann::json::object();
      MapFields map = ReadMap(f, std::nullopt);
      for (const auto& [name, child] : map.entries()) {
        out[name] = ToJson(child);
      }
      return out;
    }
    return ScalarToJson(f.value);
  }

  std::vector<Field> List(const Field& f) const {
    if (!f.value.IsSequence()) Fail(f, "expected a list, got " + Describe(f.value));
    std::vector<Field> out;
    for (size_t i = 0; i < f.value.size(); ++i) {
      out.push_back({f.key, f.value[i], f.path + "[" + std::to_string(i) + "]"});
    }
    return out;
  }

  std::vector<std::string> Libraries(const Field& f) const;
  // `datasets:` (rayd/data/reader.h): each entry's format and paths checked here (relative
  // paths made absolute against the file's directory), the rest by rayd Data's own parser.
  std::vector<rayd::data::DatasetSpec> Datasets(const Field& f) const;
  // `trainable:` a registered train loop's name, or a map: a command (rayd/train/command.h).
  Trainable ParseTrainable(const Field& f) const;
  rayd::train::ScalingConfig Scaling(const Field& f) const;
  rayd::train::RunConfig Run(const Field* f) const;
  void Space(const Field& f, std::vector<std::string>& prefix, bool mutations,
             ParamSpace& out) const;
  Domain ParseDomain(const std::string& kind, const Field& args) const;
  TuneConfig Tune(const Field& f) const;
  // `metric`/`mode`, or several objectives (a list of metrics, one mode or a list of modes)
  // and `constraints`, into `out`.
  void Objectives(const MapFields& map, const Field& tune, TuneConfig* out) const;
  // `objectives`: the sweep's, when several (median stopping's scalarization names them).
  SchedulerConfig Scheduler(const Field& f, const std::vector<Objective>& objectives) const;
  SearchConfig Search(const Field& f) const;
  Nsga2Config Nsga2(const Field& f) const;
  AshaConfig Asha(const MapFields& map, const Field& f) const;
  HyperBandConfig HyperBand(const MapFields& map) const;
  MedianStoppingConfig MedianStopping(const MapFields& map, const Field& f,
                                      const std::vector<Objective>& objectives) const;
  Scalarization ParseScalarization(const Field& f, const std::vector<Objective>& objectives) const;
  // A map of numbers keyed by objective metrics (scalarization's weights and reference).
  std::map<std::string, double> ObjectiveNumbers(const Field& f,
                                                 const std::vector<Objective>& objectives,
                                                 bool non_negative) const;
  PbtConfig Pbt(const MapFields& map, const Field& f) const;
  PashaConfig Pasha(const MapFields& map, const Field& f) const;

  // The line of every key read so far, by dotted path.
  const std::map<std::string, int>& lines() const { return lines_; }

 private:
  std::string file_;
  mutable std::map<std::string, int> lines_;  // filled as maps are read
};

std::vector<std::string> Parser::Libraries(const Field& f) const {
  std::filesystem::path dir = std::filesystem::path(file_).parent_path();
  std::vector<std::string> out;
  for (const Field& entry : List(f)) {
    std::filesystem::path lib = NonEmptyString(entry);
    if (lib.is_relative()) lib = dir / lib;
    out.push_back(std::filesystem::absolute(lib).lexically_normal().string());
  }
  return out;
}

std::vector<rayd::data::DatasetSpec> Parser::Datasets(const Field& f) const {
  std::filesystem::path dir = std::filesystem::path(file_).parent_path();
  std::vector<rayd::data::DatasetSpec> out;
  MapFields datasets = ReadMap(f, std::nullopt);
  for (const auto& [name, entry] : datasets.entries()) {
    MapFields keys = ReadMap(entry, std::nullopt);
    const Field& format = Required(keys, entry, "format");
    NonEmptyString(format);
    nlohmann::json json = ToJson(entry);
    // Globs relative to the file, as libraries are: ranks run with other working directories.
    auto absolute = [&](const Field& p) {
      std::filesystem::path path = NonEmptyString(p);
      if (path.is_relative()) path = dir / path;
      return std::filesystem::absolute(path).lexically_normal().string();
    };
    if (const Field* paths = keys.Find("paths")) {
      nlohmann::json resolved = nlohmann::json::array();
      if (paths->value.IsScalar()) {
        resolved.push_back(absolute(*paths));
      } else {
        for (const Field& p : List(*paths)) resolved.push_back(absolute(p));
      }
      json["paths"] = resolved;
    }
    if (const Field* columns = keys.Find("columns"); columns && columns->value.IsMap()) {
      MapFields globs = ReadMap(*columns, std::nullopt);
      for (const auto& [column, glob] : globs.entries()) {
        json["columns"][column] = absolute(glob);
      }
    }
    Result<rayd::data::DatasetSpec> spec = rayd::data::ParseDatasetSpec(name, json);
    if (!spec.ok()) {
      // "datasets.train.paths: why": blame that key's line when the file has the key, else the
      // dataset's own.
      const std::string& message = spec.status().message();
      const size_t colon = message.find(": ");
      const std::string path = colon == std::string::npos ? entry.path : message.substr(0, colon);
      Field at = AtKey(entry, path);
      for (const auto& [key, child] : keys.entries()) {
        if (path == child.path) at = child;
      }
      Fail(at, colon == std::string::npos ? message : message.substr(colon + 2));
    }
    out.push_back(std::move(*spec));
  }
  return out;
}

Trainable Parser::ParseTrainable(const Field& f) const {
  Trainable out;
  if (!f.value.IsMap()) {
    out.train_loop = NonEmptyString(f);
    return out;
  }
  // The file's directory, absolute ("tune.yaml" alone is in the working directory).
  std::filesystem::path dir = std::filesystem::path(file_).parent_path();
  std::error_code ec;
  dir = dir.empty() ? std::filesystem::current_path(ec) : std::filesystem::absolute(dir, ec);
  dir = dir.lexically_normal();
  MapFields map = ReadMap(f, kCommandKeys);
  rayd::train::Command command;
  const Field& argv = Required(map, f, "command");
  if (argv.value.IsScalar()) {
    command.argv.push_back(NonEmptyString(argv));
  } else {
    for (const Field& arg : List(argv)) command.argv.push_back(String(arg));
    if (command.argv.empty()) Fail(argv, "expected the program and its arguments, got []");
    if (command.argv[0].empty()) Fail(argv, "the program must not be empty");
  }
  if (const Field* x = map.Find("launcher")) {
    std::vector<std::string_view> launchers(rayd::train::Launchers().begin(),
                                            rayd::train::Launchers().end());
    command.launcher = OneOf(*x, launchers);
  }
  std::filesystem::path working_dir = dir;
  if (const Field* x = map.Find("working_dir")) {
    working_dir = NonEmptyString(*x);
    if (working_dir.is_relative()) working_dir = dir / working_dir;
    working_dir = working_dir.lexically_normal();
    if (!std::filesystem::is_directory(working_dir, ec)) {
      Fail(*x, "no directory " + working_dir.string());
    }
  }
  command.working_dir = working_dir.string();
  if (const Field* x = map.Find("env")) {
    const MapFields env = ReadMap(*x, std::nullopt);
    for (const auto& [name, value] : env.entries()) {
      if (!value.value.IsScalar()) Fail(value, "expected a string, got " + Describe(value.value));
      command.env[name] = value.value.Scalar();
    }
  }
  if (const Field* x = map.Find("report_timeout_s")) command.report_timeout_s = Int(*x, 0);
  if (const Field* x = map.Find("stop_grace_s")) command.stop_grace_s = Int(*x, 0);
  out.command = std::move(command);
  return out;
}

rayd::train::ScalingConfig Parser::Scaling(const Field& f) const {
  rayd::train::ScalingConfig out;
  MapFields map = ReadMap(f, kScalingKeys);
  const Field* workers = map.Find("num_workers");
  if (const Field* alias = map.Find("num_processes")) {
    if (workers != nullptr) Fail(*alias, "an alias of num_workers: give one of the two");
    workers = alias;
  }
  if (const Field* x = map.Find("use_gpu")) out.use_gpu = Bool(*x);
  if (workers != nullptr && workers->value.IsSequence()) {
    // [min, max]: an elastic run.
    std::vector<Field> bounds = List(*workers);
    if (bounds.size() != 2) {
      Fail(*workers, "expected [min, max] (an elastic run) or a number of workers");
    }
    out.min_workers = Int(bounds[0], 1);
    out.num_workers = Int(bounds[1], 1);
    if (out.min_workers > out.num_workers) {
      Fail(*workers, "[min, max]: min " + std::to_string(out.min_workers) + " is above max " +
                         std::to_string(out.num_workers));
    }
  } else if (workers != nullptr) {
    out.num_workers = Int(*workers, -1);
    if (out.num_workers == 0) Fail(*workers, "expected at least 1 worker (or -1: one per GPU)");
    if (out.num_workers == -1 && !out.use_gpu) {
      Fail(*workers, "-1 (one worker per GPU) needs use_gpu: true");
    }
  }
  if (const Field* x = map.Find("resources_per_worker")) {
    MapFields resources = ReadMap(*x, std::nullopt);
    for (const auto& [name, amount] : resources.entries()) {
      out.resources_per_worker[name] = NonNegative(amount);
      try {
        rayd::internal::CheckTaskOptions(
            std::map<std::string, double>{{name, out.resources_per_worker[name]}});
      } catch (const rayd::RaydError& e) {
        Fail(amount, e.what());
      }
    }
    if (const Field* gpu = resources.Find("GPU")) {
      if (std::string why = rayd::train::CheckGpuSharing(out); !why.empty()) Fail(*gpu, why);
    }
  }
  if (const Field* x = map.Find("placement_strategy")) {
    std::string s = OneOf(*x, {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"});
    out.placement_strategy = s == "PACK"          ? rayd::PlacementStrategy::PACK
                             : s == "SPREAD"      ? rayd::PlacementStrategy::SPREAD
                             : s == "STRICT_PACK" ? rayd::PlacementStrategy::STRICT_PACK
                                                  : rayd::PlacementStrategy::STRICT_SPREAD;
  }
  if (const Field* x = map.Find("local_mode")) out.local_mode = Bool(*x);
  if (const Field* x = map.Find("placement_timeout_s")) out.placement_timeout_s = Int(*x, 1);
  if (const Field* x = map.Find("collective_timeout_s")) out.collective_timeout_s = Int(*x, 1);
  if (const Field* x = map.Find("resize_interval_s")) {
    out.resize_interval_s = Number(*x);
    if (!(out.resize_interval_s > 0)) Fail(*x, "expected a number of seconds above 0");
  }
  if (const Field* x = map.Find("mesh")) {
    MapFields mesh = ReadMap(*x, kMeshKeys);
    if (const Field* d = mesh.Find("data")) out.mesh.data = Int(*d, 1);
    if (const Field* p = mesh.Find("pipeline")) out.mesh.pipeline = Int(*p, 1);
    if (const Field* t = mesh.Find("tensor")) out.mesh.tensor = Int(*t, 1);
    if (out.num_workers == -1) Fail(*x, "a mesh needs num_workers given, not -1");
    if (out.min_workers > 0)
      Fail(*x, "an elastic run (num_workers: [min, max]) cannot have a mesh");
    if (std::string why = rayd::train::CheckMesh(out); !why.empty()) Fail(*x, why);
  }
  return out;
}

rayd::train::RunConfig Parser::Run(const Field* f) const {
  rayd::train::RunConfig out;
  out.storage_path = "./rayd_results";
  if (f == nullptr) return out;
  MapFields map = ReadMap(*f, kRunKeys);
  if (const Field* x = map.Find("storage_path")) out.storage_path = NonEmptyString(*x);
  if (const Field* x = map.Find("failure")) {
    MapFields failure = ReadMap(*x, kFailureKeys);
    if (const Field* y = failure.Find("max_failures")) out.failure.max_failures = Int(*y, -1);
    if (const Field* y = failure.Find("max_preemptions")) {
      out.failure.max_preemptions = Int(*y, -1);
    }
  }
  if (const Field* x = map.Find("checkpoint")) {
    MapFields checkpoint = ReadMap(*x, kCheckpointKeys);
    if (const Field* y = checkpoint.Find("num_to_keep")) out.checkpoint.num_to_keep = Int(*y, 0);
    if (const Field* y = checkpoint.Find("score_attribute")) {
      out.checkpoint.score_attribute = NonEmptyString(*y);
    }
    if (const Field* y = checkpoint.Find("score_order")) {
      out.checkpoint.score_order = OneOf(*y, {"min", "max"});
    }
  }
  if (const Field* x = map.Find("mlflow")) {
    // Experiment tracking (docs/tracking.md): a local MLflow file store.
    MapFields mlflow = ReadMap(*x, kMlflowKeys);
    const Field& uri = Required(mlflow, *x, "tracking_uri");
    out.mlflow_tracking_uri = NonEmptyString(uri);
    const std::string& s = out.mlflow_tracking_uri;
    if (s.find("://") != std::string::npos && s.rfind("file://", 0) != 0) {
      Fail(uri, "expected a directory or a file:// URI (a local MLflow file store), got '" + s +
                    "'");
    }
    if (const Field* y = mlflow.Find("experiment_name")) {
      out.mlflow_experiment_name = NonEmptyString(*y);
    }
  }
  return out;
}

// A map is a domain when its one key names a domain; any other map nests. In PBT's
// hyperparam_mutations (`mutations`) a plain list means choice and a constant makes no sense.
void Parser::Space(const Field& f, std::vector<std::string>& prefix, bool mutations,
                   ParamSpace& out) const {
  MapFields map = ReadMap(f, std::nullopt);
  if (mutations && map.entries().empty()) Fail(f, "expected at least one hyperparameter");
  for (const auto& [name, child] : map.entries()) {
    prefix.push_back(name);
    const YAML::Node& v = child.value;
    if (v.IsMap() && v.size() > 0) {
      MapFields inner = ReadMap(child, std::nullopt);
      const auto is_domain = [](const auto& entry) { return Has(kDomainNames, entry.first); };
      auto domain = std::find_if(inner.entries().begin(), inner.entries().end(), is_domain);
      if (domain == inner.entries().end()) {
        Space(child, prefix, mutations, out);
      } else if (inner.entries().size() > 1) {
        const auto& other = inner.entries()[domain == inner.entries().begin() ? 1 : 0].first;
        Fail(child,
             "a domain map has exactly one key: '" + domain->first + "' beside '" + other + "'");
      } else {
        if (mutations && domain->first == "grid_search") {
          Fail(child, "grid_search cannot be a mutation (use choice)");
        }
        out.emplace_back(prefix, ParseDomain(domain->first, {domain->second.key,
                                                             domain->second.value, child.path}));
      }
    } else if (mutations) {
      if (!v.IsSequence()) {
        Fail(child, "expected a domain or a list of values, got " + Describe(v));
      }
      Domain choice = Domain::Choice(ToJson(child).get<std::vector<nlohmann::json>>());
      if (choice.values().empty()) Fail(child, "expected at least one value");
      out.emplace_back(prefix, std::move(choice));
    } else {
      out.emplace_back(prefix, ToJson(child));
    }
    prefix.pop_back();
  }
}

Domain Parser::ParseDomain(const std::string& kind, const Field& args) const {
  Domain domain;
  if (kind == "grid_search" || kind == "choice") {
    if (!args.value.IsSequence()) {
      Fail(args, kind + ": expected a list of values, got " + Describe(args.value));
    }
    std::vector<nlohmann::json> values = ToJson(args).get<std::vector<nlohmann::json>>();
    domain = kind == "grid_search" ? Domain::GridSearch(std::move(values))
                                   : Domain::Choice(std::move(values));
  } else {
    const bool quantized = kind[0] == 'q';
    const bool integer = kind == "randint" || kind == "qrandint";
    const char* form = kind == "randn"      ? "[mean, sd] or []"
                       : kind == "qrandint" ? "[lower, upper, q] or [lower, upper]"
                       : quantized          ? "[lower, upper, q]"
                                            : "[lower, upper]";
    std::vector<Field> items;
    if (args.value.IsSequence()) {
      items = List(args);
    } else if (!(kind == "randn" && args.value.IsNull())) {
      Fail(args, kind + " takes " + form + ", got " + Describe(args.value));
    }
    bool arity_ok = kind == "randn"      ? items.size() <= 2
                    : kind == "qrandint" ? items.size() == 2 || items.size() == 3
                                         : items.size() == (quantized ? 3u : 2u);
    if (!arity_ok) {
      Fail(args, kind + " takes " + form + ", got " + std::to_string(items.size()) + " values");
    }
    std::vector<double> n;
    std::vector<int64_t> i;
    for (const Field& item : items) {
      if (integer) {
        i.push_back(Int64(item));
      } else {
        n.push_back(AnyNumber(item));
      }
    }
    if (kind == "uniform") domain = Domain::Uniform(n[0], n[1]);
    if (kind == "quniform") domain = Domain::QUniform(n[0], n[1], n[2]);
    if (kind == "loguniform") domain = Domain::LogUniform(n[0], n[1]);
    if (kind == "qloguniform") domain = Domain::QLogUniform(n[0], n[1], n[2]);
    if (kind == "randint") domain = Domain::RandInt(i[0], i[1]);
    if (kind == "qrandint") domain = Domain::QRandInt(i[0], i[1], i.size() == 3 ? i[2] : 1);
    if (kind == "randn") {
      domain = Domain::Randn(n.size() > 0 ? n[0] : 0.0, n.size() > 1 ? n[1] : 1.0);
    }
  }
  try {
    domain.Validate();
  } catch (const std::invalid_argument& e) {
    Fail(args, e.what());
  }
  return domain;
}

PbtConfig Parser::Pbt(const MapFields& map, const Field& f) const {
  PbtConfig c;
  if (const Field* x = map.Find("time_attr")) c.time_attr = NonEmptyString(*x);
  if (const Field* x = map.Find("perturbation_interval")) c.perturbation_interval = Positive(*x);
  if (const Field* x = map.Find("burn_in_period")) c.burn_in_period = NonNegative(*x);
  const Field& mutations = Required(map, f, "hyperparam_mutations");
  std::vector<std::string> prefix;
  Space(mutations, prefix, /*mutations=*/true, c.hyperparam_mutations);
  if (const Field* x = map.Find("quantile_fraction")) {
    c.quantile_fraction = Number(*x);
    if (c.quantile_fraction <= 0 || c.quantile_fraction > 0.5) {
      Fail(*x, "must be in (0, 0.5], got " + ExactNumber(c.quantile_fraction));
    }
  }
  if (const Field* x = map.Find("resample_probability")) {
    c.resample_probability = Number(*x);
    if (c.resample_probability < 0 || c.resample_probability > 1) {
      Fail(*x, "must be in [0, 1], got " + ExactNumber(c.resample_probability));
    }
  }
  if (const Field* x = map.Find("perturbation_factors")) {
    c.perturbation_factors.clear();
    for (const Field& factor : List(*x)) c.perturbation_factors.push_back(Positive(factor));
    if (c.perturbation_factors.empty()) Fail(*x, "expected at least one factor");
  }
  if (const Field* x = map.Find("synch")) c.synch = Bool(*x);
  return c;
}

AshaConfig Parser::Asha(const MapFields& map, const Field& f) const {
  AshaConfig c;
  if (const Field* x = map.Find("time_attr")) c.time_attr = NonEmptyString(*x);
  if (const Field* x = map.Find("max_t")) c.max_t = Positive(*x);
  if (const Field* x = map.Find("grace_period")) c.grace_period = Positive(*x);
  if (const Field* x = map.Find("reduction_factor")) {
    c.reduction_factor = Number(*x);
    if (c.reduction_factor <= 1)
      Fail(*x, "must be greater than 1, got " + ExactNumber(c.reduction_factor));
  }
  if (const Field* x = map.Find("brackets")) c.brackets = Int(*x, 1);
  if (const Field* x = map.Find("promotion")) c.promotion = Bool(*x);
  if (const Field* x = map.Find("stop_last_trials")) c.stop_last_trials = Bool(*x);
  if (c.grace_period > c.max_t) {
    const Field* at = map.Find("grace_period") ? map.Find("grace_period") : map.Find("max_t");
    Fail(at ? *at : f,
         "grace_period " + ExactNumber(c.grace_period) + " exceeds max_t " + ExactNumber(c.max_t));
  }
  return c;
}

PashaConfig Parser::Pasha(const MapFields& map, const Field& f) const {
  // ASHA's options, less brackets and the stopping form, plus epsilon.
  const AshaConfig asha = Asha(map, f);
  PashaConfig c{.time_attr = asha.time_attr,
                .max_t = asha.max_t,
                .grace_period = asha.grace_period,
                .reduction_factor = map.Find("reduction_factor") ? asha.reduction_factor : 3};
  if (const Field* x = map.Find("epsilon")) {
    if (!(x->value.IsScalar() && x->value.Scalar() == "auto")) c.epsilon = NonNegative(*x);
  }
  return c;
}

HyperBandConfig Parser::HyperBand(const MapFields& map) const {
  HyperBandConfig c;
  if (const Field* x = map.Find("time_attr")) c.time_attr = NonEmptyString(*x);
  if (const Field* x = map.Find("max_t")) c.max_t = Positive(*x);
  if (const Field* x = map.Find("reduction_factor")) {
    c.reduction_factor = Number(*x);
    if (c.reduction_factor <= 1)
      Fail(*x, "must be greater than 1, got " + ExactNumber(c.reduction_factor));
  }
  if (const Field* x = map.Find("stop_last_trials")) c.stop_last_trials = Bool(*x);
  return c;
}

MedianStoppingConfig Parser::MedianStopping(const MapFields& map, const Field& f,
                                            const std::vector<Objective>& objectives) const {
  MedianStoppingConfig c;
  if (const Field* x = map.Find("time_attr")) c.time_attr = NonEmptyString(*x);
  if (const Field* x = map.Find("grace_period")) c.grace_period = NonNegative(*x);
  if (const Field* x = map.Find("min_samples_required")) c.min_samples_required = Int(*x, 1);
  if (const Field* x = map.Find("hard_stop")) c.hard_stop = Bool(*x);
  if (const Field* x = map.Find("scalarization")) {
    c.scalarization = ParseScalarization(*x, objectives);
  } else if (!objectives.empty()) {
    Fail(AtKey(f, ChildPath(f.path, "scalarization")),
         "required with several objectives or constraints, e.g. {weights: {" +
             objectives[0].metric + ": 1}}");
  }
  return c;
}

Scalarization Parser::ParseScalarization(const Field& f,
                                         const std::vector<Objective>& objectives) const {
  if (objectives.empty()) {
    Fail(f,
         "only with several objectives (tune.metric a list) or tune.constraints; with one "
         "metric leave it out");
  }
  MapFields map = ReadMap(f, kScalarizationKeys, "scalarization key");
  Scalarization s;
  if (const Field* x = map.Find("type")) {
    s.kind = OneOf(*x, kScalarizationTypes) == "chebyshev" ? Scalarization::Kind::kChebyshev
                                                           : Scalarization::Kind::kWeightedSum;
  }
  const Field& weights = Required(map, f, "weights");
  s.weights = ObjectiveNumbers(weights, objectives, /*non_negative=*/true);
  if (s.weights.empty()) Fail(weights, "expected at least one objective's weight");
  if (std::none_of(s.weights.begin(), s.weights.end(),
                   [](const auto& w) { return w.second > 0; })) {
    Fail(weights, "expected at least one weight above 0");
  }
  const Field* reference = map.Find("reference");
  if (s.kind != Scalarization::Kind::kChebyshev) {
    if (reference != nullptr) Fail(*reference, "only for type: chebyshev");
    return s;
  }
  const Field& ideal = Required(map, f, "reference");
  s.reference = ObjectiveNumbers(ideal, objectives, /*non_negative=*/false);
  for (const auto& [metric, weight] : s.weights) {
    if (weight > 0 && !s.reference.contains(metric)) {
      Fail(AtKey(ideal, ChildPath(ideal.path, metric)),
           "required: chebyshev needs the ideal value of every objective weighted above 0");
    }
  }
  return s;
}

std::map<std::string, double> Parser::ObjectiveNumbers(const Field& f,
                                                       const std::vector<Objective>& objectives,
                                                       bool non_negative) const {
  std::string names;
  for (const Objective& o : objectives) names += (names.empty() ? "" : ", ") + o.metric;
  std::map<std::string, double> out;
  const MapFields map = ReadMap(f, std::nullopt);
  for (const auto& [name, value] : map.entries()) {
    bool objective = false;
    for (const Objective& o : objectives) objective = objective || o.metric == name;
    if (!objective) {
      Fail(value, "'" + name + "' is not an objective (the objectives: " + names + ")");
    }
    out[name] = non_negative ? NonNegative(value) : Number(value);
  }
  return out;
}

SchedulerConfig Parser::Scheduler(const Field& f, const std::vector<Objective>& objectives) const {
  // `scheduler: asha` is short for `scheduler: {type: asha}`.
  const bool shorthand = f.value.IsScalar();
  MapFields map = shorthand ? MapFields() : ReadMap(f, std::nullopt);
  const Field& type_field = shorthand ? f : Required(map, f, "type");
  Field type_at{type_field.key, type_field.value, ChildPath(f.path, "type")};
  std::string type = String(type_at);
  if (!Has(kSchedulerTypes, type)) {
    Fail(type_at, "unknown scheduler '" + type + "' (one of " + JoinKeys(kSchedulerTypes) + ")");
  }
  const Keys& allowed = type == "fifo"              ? Keys{"type"}
                        : type == "asha"            ? kAshaKeys
                        : type == "hyperband"       ? kHyperBandKeys
                        : type == "median_stopping" ? kMedianKeys
                        : type == "pasha"           ? kPashaKeys
                                                    : kPbtKeys;
  if (!shorthand) ReadMap(f, allowed, "option for the " + type + " scheduler");

  if (type == "fifo") return FifoConfig{};
  if (type == "asha") return Asha(map, f);
  if (type == "hyperband") return HyperBand(map);
  if (type == "median_stopping") return MedianStopping(map, f, objectives);
  if (type == "pasha") return Pasha(map, f);
  if (shorthand) Fail(type_at, "the pbt scheduler needs hyperparam_mutations: give a map");
  return Pbt(map, f);
}

void Parser::Objectives(const MapFields& map, const Field& tune, TuneConfig* out) const {
  const Field* metric = map.Find("metric");
  const Field* mode = map.Find("mode");
  const Field* constraints = map.Find("constraints");
  const Field* reference = map.Find("reference_point");
  const bool several = (metric != nullptr && metric->value.IsSequence()) ||
                       (mode != nullptr && mode->value.IsSequence()) || constraints != nullptr;
  if (!several && reference != nullptr) {
    Fail(*reference, "only with several objectives (tune.metric a list) or tune.constraints");
  }
  if (!several) {
    if (metric != nullptr) out->metric = NonEmptyString(*metric);
    if (mode != nullptr) out->mode = OneOf(*mode, {"min", "max"});
    return;
  }
  // Several objectives (or one, under constraints): `metric` a name or a list of names, `mode`
  // one mode for all or a list as long as `metric`.
  if (metric == nullptr) {
    Fail(AtKey(*constraints, ChildPath(tune.path, "metric")), "required with constraints");
  }
  std::vector<Field> names = metric->value.IsSequence() ? List(*metric) : std::vector{*metric};
  if (names.empty()) Fail(*metric, "expected at least one metric");
  std::vector<std::string> modes;
  if (mode == nullptr) {
    modes.assign(names.size(), "min");
  } else if (!mode->value.IsSequence()) {
    modes.assign(names.size(), OneOf(*mode, {"min", "max"}));
  } else {
    std::vector<Field> listed = List(*mode);
    if (listed.size() != names.size()) {
      Fail(*mode, "expected " + std::to_string(names.size()) + " modes, one per metric, got " +
                      std::to_string(listed.size()));
    }
    for (const Field& m : listed) modes.push_back(OneOf(m, {"min", "max"}));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name = NonEmptyString(names[i]);
    for (const Objective& o : out->objectives) {
      if (o.metric == name) Fail(names[i], "metric '" + name + "' is listed twice");
    }
    out->objectives.push_back({name, modes[i] == "max"});
  }
  if (reference != nullptr) {
    std::vector<Field> values = List(*reference);
    if (values.size() != out->objectives.size()) {
      Fail(*reference, "expected " + std::to_string(out->objectives.size()) +
                           " values, one per metric, got " + std::to_string(values.size()));
    }
    for (const Field& v : values) out->reference_point.push_back(Number(v));
  }
  if (constraints == nullptr) return;
  for (const Field& c : List(*constraints)) {
    try {
      out->constraints.push_back(ParseConstraint(NonEmptyString(c)));
    } catch (const std::invalid_argument& e) {
      Fail(c, e.what());
    }
  }
}

TuneConfig Parser::Tune(const Field& f) const {
  TuneConfig out;
  MapFields map = ReadMap(f, kTuneKeys);
  Objectives(map, f, &out);
  if (const Field* x = map.Find("num_samples")) out.num_samples = Int(*x, 1);
  if (const Field* x = map.Find("max_concurrent_trials")) out.max_concurrent_trials = Int(*x, 0);
  if (const Field* x = map.Find("seed")) {
    int64_t seed = Int64(*x);
    if (seed < 0) Fail(*x, "expected a non-negative integer, got " + std::to_string(seed));
    out.seed = static_cast<uint64_t>(seed);
  }
  if (const Field* x = map.Find("stop")) {
    MapFields stop = ReadMap(*x, std::nullopt);
    for (const auto& [name, value] : stop.entries()) {
      out.stop[name] = Number(value);
    }
  }
  if (const Field* x = map.Find("scheduler")) {
    out.scheduler = Scheduler(*x, out.objectives);
    // With several objectives, the schedulers' own rule on which of them rank that way (and
    // how), placed at this key's line.
    if (!out.objectives.empty()) {
      try {
        MakeScheduler(out.scheduler, out.objectives, out.constraints);
      } catch (const std::invalid_argument& e) {
        Fail(*x, e.what());
      }
    }
    if (!std::holds_alternative<FifoConfig>(out.scheduler) && out.metric.empty() &&
        out.objectives.empty()) {
      Fail(AtKey(*x, ChildPath(f.path, "metric")),
           "required by the " + std::string(kSchedulerTypes[out.scheduler.index()]) + " scheduler");
    }
  }
  if (const Field* x = map.Find("progress_interval_s")) out.progress_interval_s = NonNegative(*x);
  if (const Field* x = map.Find("simulate")) {
    MapFields simulate = ReadMap(*x, kSimulateKeys);
    if (const Field* y = simulate.Find("workers")) out.simulate.workers = Int(*y, 0);
    if (const Field* y = simulate.Find("speedup")) {
      for (const Field& w : List(*y)) {
        const double speedup = Number(w);
        if (!(speedup > 0)) Fail(w, "expected a speedup above 0");
        out.simulate.speedup.push_back(speedup);
      }
    }
    if (const Field* y = simulate.Find("restart_s")) out.simulate.restart_s = NonNegative(*y);
    if (const Field* y = simulate.Find("recorded_workers")) {
      out.simulate.recorded_workers = Int(*y, 0);
    }
    if (const Field* y = simulate.Find("autoscaler")) {
      MapFields a = ReadMap(*y, kSimulateAutoscalerKeys);
      auto& model = out.simulate.autoscaler;
      const Field* max_nodes = a.Find("max_nodes");
      if (max_nodes == nullptr) Fail(*y, "max_nodes: required");
      model.max_nodes = Int(*max_nodes, 1);
      if (const Field* z = a.Find("workers_per_node")) model.workers_per_node = Int(*z, 1);
      if (const Field* z = a.Find("min_nodes")) model.min_nodes = Int(*z, 0);
      if (model.min_nodes > model.max_nodes) {
        Fail(*a.Find("min_nodes"), "min_nodes is above max_nodes (" +
                                       std::to_string(model.max_nodes) + ")");
      }
      if (const Field* z = a.Find("launch_latency_s")) model.launch_latency_s = NonNegative(*z);
      if (const Field* z = a.Find("idle_timeout_s")) model.idle_timeout_s = NonNegative(*z);
      if (simulate.Find("workers")) {
        Fail(*y, "give workers (a fixed cluster) or autoscaler, not both");
      }
    }
  }
  if (const Field* x = map.Find("search")) {
    out.search = Search(*x);
    if (std::holds_alternative<Nsga2Config>(out.search) && out.objectives.empty()) {
      Fail(*x, "the nsga2 searcher ranks by several objectives: give tune.metric as a list, or "
               "constraints (with one metric use tpe)");
    }
    // With several objectives or constraints, tpe is MOTPE (tune/src/mo_tpe.h).
    if (std::holds_alternative<TpeConfig>(out.search) && out.metric.empty() &&
        out.objectives.empty()) {
      Fail(AtKey(*x, ChildPath(f.path, "metric")), "required by the tpe searcher");
    }
  }
  return out;
}

SearchConfig Parser::Search(const Field& f) const {
  MapFields map = ReadMap(f, std::nullopt);
  const std::string type = OneOf(Required(map, f, "type"), kSearchTypes);
  if (type == "nsga2") return Nsga2(f);
  if (type != "tpe") {
    ReadMap(f, Keys{"type"});
    return RandomSearchConfig{};
  }
  map = ReadMap(f, kTpeKeys);
  TpeConfig tpe;
  if (const Field* x = map.Find("n_startup_trials")) tpe.n_startup_trials = Int(*x, 0);
  if (const Field* x = map.Find("n_ei_candidates")) tpe.n_ei_candidates = Int(*x, 1);
  if (const Field* x = map.Find("gamma")) {
    tpe.gamma = Positive(*x);
    if (tpe.gamma > 1) Fail(*x, "expected a share in (0, 1], got " + ExactNumber(tpe.gamma));
  }
  if (const Field* x = map.Find("prior_weight")) tpe.prior_weight = Positive(*x);
  if (const Field* x = map.Find("multivariate")) tpe.multivariate = Bool(*x);
  if (const Field* x = map.Find("weight_by_bandwidth")) tpe.weight_by_bandwidth = Bool(*x);
  return tpe;
}

Nsga2Config Parser::Nsga2(const Field& f) const {
  MapFields map = ReadMap(f, kNsga2Keys);
  Nsga2Config nsga2;
  // A probability in [0, 1], or (0, 1] when zero would make the option pointless.
  auto probability = [&](const Field& x, bool zero_allowed) {
    const double p = Number(x);
    if (p > 1 || p < 0 || (p == 0 && !zero_allowed)) {
      Fail(x, std::string("expected a probability in ") + (zero_allowed ? "[0, 1]" : "(0, 1]") +
                  ", got " + ExactNumber(p));
    }
    return p;
  };
  if (const Field* x = map.Find("population_size")) nsga2.population_size = Int(*x, 2);
  if (const Field* x = map.Find("mutation_prob"); x != nullptr && !x->value.IsNull()) {
    nsga2.mutation_prob = probability(*x, false);
  }
  if (const Field* x = map.Find("crossover_prob")) nsga2.crossover_prob = probability(*x, true);
  if (const Field* x = map.Find("swapping_prob")) nsga2.swapping_prob = probability(*x, true);
  return nsga2;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigFileError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigFileError(path + ": cannot read: " + std::strerror(errno));
  return text.str();
}

}  // namespace

TuneFile ParseTuneFile(const std::string& text, const std::string& path) {
  Parser parser(path);
  Field root{YAML::Node(), parser.Load(text), ""};
  if (root.value.IsNull()) parser.Fail(root, "the file is empty: expected name, trainable, ...");
  MapFields map = parser.ReadMap(root, kTuneFileKeys);
  TuneFile out;
  out.path = path;
  out.name = parser.NonEmptyString(parser.Required(map, root, "name"));
  out.trainable = parser.ParseTrainable(parser.Required(map, root, "trainable"));
  if (const Field* x = map.Find("libraries")) out.libraries = parser.Libraries(*x);
  if (const Field* x = map.Find("scaling")) out.trainable.scaling = parser.Scaling(*x);
  if (const Field* x = map.Find("param_space")) {
    std::vector<std::string> prefix;
    parser.Space(*x, prefix, /*mutations=*/false, out.param_space);
  }
  if (const Field* x = map.Find("tune")) out.tune = parser.Tune(*x);
  // The searchers that propose trials one at a time draw every parameter: no grid_search (and
  // TPE models bounded domains only, so no randn either).
  const bool tpe = std::holds_alternative<TpeConfig>(out.tune.search);
  if (tpe || std::holds_alternative<Nsga2Config>(out.tune.search)) {
    for (const Param& param : out.param_space) {
      const auto* domain = std::get_if<Domain>(&param.value);
      if (domain == nullptr || (domain->kind() != Domain::Kind::kGridSearch &&
                                (!tpe || domain->kind() != Domain::Kind::kRandn))) {
        continue;
      }
      const Field* tune = map.Find("tune");
      MapFields tune_map = parser.ReadMap(*tune, std::nullopt);
      parser.Fail(*tune_map.Find("search"),
                  std::string(tpe ? "tpe cannot model" : "nsga2 cannot draw") + " param_space." +
                      JoinPath(param.path) + " (" + domain->name() +
                      (domain->kind() == Domain::Kind::kGridSearch ? "; use choice)"
                                                                   : "; give it bounds)"));
    }
  }
  out.run = parser.Run(map.Find("run"));
  out.run.name = out.name;
  if (const Field* x = map.Find("datasets")) out.run.datasets = parser.Datasets(*x);
  out.lines = parser.lines();
  return out;
}

TuneFile LoadTuneFile(const std::string& path) { return ParseTuneFile(ReadWholeFile(path), path); }

TrainFile ParseTrainFile(const std::string& text, const std::string& path) {
  Parser parser(path);
  Field root{YAML::Node(), parser.Load(text), ""};
  if (root.value.IsNull()) parser.Fail(root, "the file is empty: expected name, train_loop, ...");
  MapFields map = parser.ReadMap(root, kTrainFileKeys);
  TrainFile out;
  out.path = path;
  std::string name = parser.NonEmptyString(parser.Required(map, root, "name"));
  const Field* loop = map.Find("train_loop");
  const Field* trainable = map.Find("trainable");
  if (loop != nullptr && trainable != nullptr) {
    parser.Fail(*trainable, "give train_loop or trainable, not both");
  }
  if (trainable != nullptr) {
    Trainable parsed = parser.ParseTrainable(*trainable);
    out.train_loop = parsed.train_loop;
    out.command = std::move(parsed.command);
  } else {
    out.train_loop = parser.NonEmptyString(parser.Required(map, root, "train_loop"));
  }
  if (const Field* x = map.Find("libraries")) out.libraries = parser.Libraries(*x);
  if (const Field* x = map.Find("config")) {
    parser.ReadMap(*x, std::nullopt);  // a map (or nothing), with no duplicate keys
    if (!x->value.IsNull()) out.config = parser.ToJson(*x);
  }
  if (const Field* x = map.Find("scaling")) out.scaling = parser.Scaling(*x);
  out.run = parser.Run(map.Find("run"));
  out.run.name = name;
  if (const Field* x = map.Find("datasets")) out.run.datasets = parser.Datasets(*x);
  return out;
}

TrainFile LoadTrainFile(const std::string& path) {
  return ParseTrainFile(ReadWholeFile(path), path);
}

std::vector<std::pair<std::string, std::vector<std::string>>> FileKeys() {
  const std::vector<std::pair<std::string, const Keys*>> sections = {
      {"`tune.yaml` (top level)", &kTuneFileKeys},
      {"`train.yaml` (top level)", &kTrainFileKeys},
      {"`trainable` (a command)", &kCommandKeys},
      {"`scaling`", &kScalingKeys},
      {"`scaling.mesh`", &kMeshKeys},
      {"`run`", &kRunKeys},
      {"`run.failure`", &kFailureKeys},
      {"`run.checkpoint`", &kCheckpointKeys},
      {"`run.mlflow`", &kMlflowKeys},
      {"`tune`", &kTuneKeys},
      {"`tune.simulate`", &kSimulateKeys},
      {"`tune.simulate.autoscaler`", &kSimulateAutoscalerKeys},
      {"`tune.search` (type: tpe)", &kTpeKeys},
      {"`tune.search` (type: nsga2)", &kNsga2Keys},
      {"`tune.scheduler` (type: asha)", &kAshaKeys},
      {"`tune.scheduler` (type: pasha)", &kPashaKeys},
      {"`tune.scheduler` (type: hyperband)", &kHyperBandKeys},
      {"`tune.scheduler` (type: median_stopping)", &kMedianKeys},
      {"`tune.scheduler.scalarization`", &kScalarizationKeys},
      {"`tune.scheduler` (type: pbt)", &kPbtKeys}};
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto& [name, keys] : sections) {
    out.emplace_back(name, std::vector<std::string>(keys->begin(), keys->end()));
  }
  return out;
}

}  // namespace rayd::tune
