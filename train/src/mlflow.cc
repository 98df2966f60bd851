// The MLflow file-store writer. See rayd/train/mlflow.h for the layout; the formats follow
// mlflow/store/tracking/file_store.py (create_run, _log_run_metric, _overwrite_run_info) and
// mlflow/utils/file_utils.py (write_yaml: PyYAML's safe_dump, block style, sorted keys).

#include <pwd.h>
#include <rayd/train/mlflow.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

namespace rayd::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMeta = "meta.yaml";
constexpr const char* kDefaultExperimentId = "0";
constexpr const char* kDefaultExperimentName = "Default";
constexpr int kSourceTypeLocal = 4;  // mlflow.entities.SourceType.LOCAL
constexpr size_t kMaxKeyLength = 250;  // MLflow's MAX_ENTITY_KEY_LENGTH
// The tag that names the rayd run directory an MLflow run records, so a resumed Fit finds it.
constexpr const char* kRunDirTag = "rayd.run_dir";

// ---- YAML, as PyYAML's safe_dump writes it for these values ----

bool IsYaml11Keyword(const std::string& s) {
  static const char* const kWords[] = {"yes",  "Yes",   "YES",   "no",    "No",   "NO",
                                       "true", "True",  "TRUE",  "false", "False", "FALSE",
                                       "on",   "On",    "ON",    "off",   "Off",  "OFF",
                                       "null", "Null",  "NULL"};
  return std::find(std::begin(kWords), std::end(kWords), s) != std::end(kWords);
}

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// Whether PyYAML would write `s` as a plain scalar that reads back as the same string. Stays on
// the safe side: where it says no, the quoted form reads back the same anyway.
bool PlainIsSafe(const std::string& s) {
  if (s.empty() || IsYaml11Keyword(s)) return false;
  const char first = s[0];
  if (first >= '0' && first <= '9') {
    // Digits first: only alphanumerics with a letter, and not 0x / 0b (YAML 1.1 ints), can be
    // neither a number nor a timestamp (run ids are mostly such hex strings).
    if (s.size() > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X' || s[1] == 'b' || s[1] == 'B')) {
      return false;
    }
    bool letter = false;
    for (char c : s) {
      if (!IsAlnum(c)) return false;
      letter = letter || !(c >= '0' && c <= '9');
    }
    return letter;
  }
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || first == '/' ||
        first == '_')) {
    return false;
  }
  if (s.back() == ' ' || s.back() == ':') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const char next = i + 1 < s.size() ? s[i + 1] : '\0';
    if (IsAlnum(c) || c == '_' || c == '.' || c == '/' || c == '-') continue;
    if (c == ':' && next != ' ') continue;
    if (c == ' ' && next != '#' && next != ' ') continue;
    return false;
  }
  return true;
}

std::string YamlString(const std::string& s) {
  if (PlainIsSafe(s)) return s;
  bool printable = std::none_of(s.begin(), s.end(), [](char c) {
    unsigned char u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (!printable) return nlohmann::json(s).dump();  // a JSON string is a YAML double-quoted one
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// A map in sorted-key block style; values are already YAML.
std::string YamlMap(const std::map<std::string, std::string>& fields) {
  std::string out;
  for (const auto& [key, value] : fields) out += key + ": " + value + "\n";
  return out;
}

// ---- files ----

Status WriteFile(const fs::path& path, const std::string& contents) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return Status::Internal("cannot create " + path.parent_path().string() + ": " + ec.message());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.flush();
  if (!out) return Status::Internal("cannot write " + path.string());
  return Status::Ok();
}

// Through a temporary file and a rename, so a reader (mlflow ui) never sees half a meta.yaml.
Status ReplaceFile(const fs::path& path, const std::string& contents) {
  fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  RAYD_RETURN_IF_ERROR(WriteFile(temp, contents));
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) return Status::Internal("cannot replace " + path.string() + ": " + ec.message());
  return Status::Ok();
}

Status AppendLine(const fs::path& path, const std::string& line) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << line << '\n';
  out.flush();
  if (!out) return Status::Internal("cannot append to " + path.string());
  return Status::Ok();
}

std::optional<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A meta.yaml as a map of scalars; nullopt when missing or not a YAML map.
std::optional<YAML::Node> ReadMeta(const fs::path& dir) {
  std::optional<std::string> text = ReadFile(dir / kMeta);
  if (!text) return std::nullopt;
  try {
    YAML::Node node = YAML::Load(*text);
    if (!node.IsMap()) return std::nullopt;
    return node;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

std::string MetaString(const YAML::Node& meta, const char* key) {
  const YAML::Node value = meta[key];
  return value && value.IsScalar() ? value.Scalar() : std::string();
}

// ---- values ----

// A double as Python's repr writes it (MLflow's metric lines come from an f-string): the
// shortest digits that read back the same, fixed notation for exponents -4..15 (with ".0" when
// integral), else "1e-05" / "1.5e+16"; "nan", "inf", "-inf".
std::string PythonFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, end);  // "-1.2345e+02"
  const size_t e = sci.find('e');
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t integral = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integral) return out + digits + std::string(integral - digits.size(), '0') + ".0";
  return out + digits.substr(0, integral) + "." + digits.substr(integral);
}

// uuid.uuid4().hex: 32 lower-case hex digits with the version (4) and variant bits set.
std::string NewRunId() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          static_cast<uint64_t>(::getpid()) << 32};
  uint8_t bytes[16];
  for (int i = 0; i < 16; i += 8) {
    uint64_t x = rng();
    for (int j = 0; j < 8; ++j) bytes[i + j] = static_cast<uint8_t>(x >> (8 * j));
  }
  bytes[6] = static_cast<uint8_t>((bytes[6] & 0x0f) | 0x40);
  bytes[8] = static_cast<uint8_t>((bytes[8] & 0x3f) | 0x80);
  static const char* const kHex = "0123456789abcdef";
  std::string id;
  for (uint8_t b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

std::string UserName() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user != '\0') return user;
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return "unknown";
}

std::string ProgramPath() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("rayd") : exe.string();
}

// "file:///abs/path": MLflow's path_to_local_file_uri.
std::string FileUri(const fs::path& path) { return "file://" + path.string(); }

void Flatten(const nlohmann::json& value, const std::string& prefix,
             std::map<std::string, std::string>* out) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [key, child] : value.items()) {
      Flatten(child, prefix.empty() ? key : prefix + "/" + key, out);
    }
    return;
  }
  (*out)[MlflowKey(prefix)] = value.is_string() ? value.get<std::string>() : value.dump();
}

Status ExperimentMetaWrite(const fs::path& dir, const std::string& id, const std::string& name,
                           int64_t now_ms) {
  std::map<std::string, std::string> fields = {
      {"artifact_location", YamlString(FileUri(dir))},
      {"creation_time", std::to_string(now_ms)},
      {"experiment_id", YamlString(id)},
      {"last_update_time", std::to_string(now_ms)},
      {"lifecycle_stage", "active"},
      {"name", YamlString(name)}};
  return ReplaceFile(dir / kMeta, YamlMap(fields));
}

}  // namespace

std::string MlflowKey(std::string_view key) {
  std::string out;
  for (char c : key.substr(0, kMaxKeyLength)) {
    bool ok = IsAlnum(c) || c == '_' || c == '-' || c == '.' || c == ' ' || c == '/';
    out += ok ? c : '_';
  }
  if (out.empty()) return "_";
  if (out[0] == '/') out[0] = '_';
  // "..": a path part that would leave the run's directory (MLflow's path validation).
  std::string result;
  size_t start = 0;
  while (start <= out.size()) {
    size_t slash = out.find('/', start);
    std::string part = out.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part == ".." || part == ".") part = std::string(part.size(), '_');
    result += part;
    if (slash == std::string::npos) break;
    result += '/';
    start = slash + 1;
  }
  return result;
}

std::map<std::string, std::string> MlflowParams(const nlohmann::json& config) {
  std::map<std::string, std::string> params;
  if (config.is_null()) return params;
  Flatten(config, "", &params);
  return params;
}

int64_t MlflowNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- MlflowRun ----

Status MlflowRun::LogParam(const std::string& key, const std::string& value) const {
  fs::path path = fs::path(dir_) / "params" / MlflowKey(key);
  if (std::optional<std::string> current = ReadFile(path)) {
    if (*current == value) return Status::Ok();
    return Status::InvalidArgument("MLflow run " + run_id_ + ": param '" + key +
                                   "' was logged as '" + *current + "', cannot change it to '" +
                                   value + "'");
  }
  return WriteFile(path, value);
}

Status MlflowRun::LogParams(const std::map<std::string, std::string>& params) const {
  for (const auto& [key, value] : params) RAYD_RETURN_IF_ERROR(LogParam(key, value));
  return Status::Ok();
}

Status MlflowRun::SetTag(const std::string& key, const std::string& value) const {
  return WriteFile(fs::path(dir_) / "tags" / MlflowKey(key), value);
}

Status MlflowRun::LogMetric(const std::string& key, double value, int64_t timestamp_ms,
                            int64_t step) const {
  return AppendLine(fs::path(dir_) / "metrics" / MlflowKey(key),
                    std::to_string(timestamp_ms) + " " + PythonFloat(value) + " " +
                        std::to_string(step));
}

Status MlflowRun::LogMetrics(const std::map<std::string, double>& metrics, int64_t timestamp_ms,
                             int64_t step) const {
  for (const auto& [key, value] : metrics) {
    RAYD_RETURN_IF_ERROR(LogMetric(key, value, timestamp_ms, step));
  }
  return Status::Ok();
}

Status MlflowRun::End(MlflowRunStatus status, int64_t end_ms) {
  status_ = status;
  end_ms_ = end_ms;
  return WriteMeta();
}

// _make_persisted_run_info_dict: the RunInfo fields, status as its int, tags: [] for old
// readers, the source fields blank; deleted_time: null only while the run is as created.
Status MlflowRun::WriteMeta() const {
  std::map<std::string, std::string> fields = {
      {"artifact_uri", YamlString(artifact_uri_)},
      {"end_time", end_ms_ ? std::to_string(*end_ms_) : "null"},
      {"entry_point_name", "''"},
      {"experiment_id", YamlString(experiment_id_)},
      {"lifecycle_stage", "active"},
      {"run_id", YamlString(run_id_)},
      {"run_name", YamlString(run_name_)},
      {"run_uuid", YamlString(run_id_)},
      {"source_name", "''"},
      {"source_type", std::to_string(kSourceTypeLocal)},
      {"source_version", "''"},
      {"start_time", std::to_string(start_ms_)},
      {"status", std::to_string(static_cast<int>(status_))},
      {"tags", "[]"},
      {"user_id", YamlString(user_id_)}};
  if (!end_ms_) fields["deleted_time"] = "null";
  return ReplaceFile(fs::path(dir_) / kMeta, YamlMap(fields));
}

// ---- MlflowStore ----

Result<MlflowStore> MlflowStore::Open(const std::string& tracking_uri) {
  std::string path = tracking_uri;
  if (path.rfind("file://", 0) == 0) {
    path = path.substr(7);  // file:///abs and file://./rel alike
  } else if (size_t scheme = path.find("://"); scheme != std::string::npos) {
    return Status::InvalidArgument("MLflow tracking URI '" + tracking_uri +
                                   "': only a local directory or a file:// URI is supported");
  }
  if (path.empty()) return Status::InvalidArgument("MLflow tracking URI is empty");
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) return Status::InvalidArgument("MLflow tracking URI '" + tracking_uri + "': " + ec.message());
  fs::create_directories(root / ".trash", ec);
  if (ec) return Status::Internal("cannot create the MLflow store " + root.string() + ": " + ec.message());
  fs::path default_dir = root / kDefaultExperimentId;
  if (fs::create_directory(default_dir, ec)) {
    RAYD_RETURN_IF_ERROR(
        ExperimentMetaWrite(default_dir, kDefaultExperimentId, kDefaultExperimentName, MlflowNowMs()));
  } else if (ec) {
    return Status::Internal("cannot create " + default_dir.string() + ": " + ec.message());
  }
  return MlflowStore(root.string());
}

Result<std::string> MlflowStore::GetOrCreateExperiment(const std::string& name) const {
  if (name.empty()) return Status::InvalidArgument("an MLflow experiment needs a name");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    if (!entry.is_directory() || entry.path().filename() == ".trash") continue;
    std::optional<YAML::Node> meta = ReadMeta(entry.path());
    if (!meta) continue;  // not an experiment (MLflow skips it too)
    if (MetaString(*meta, "name") == name && MetaString(*meta, "lifecycle_stage") == "active") {
      return entry.path().filename().string();
    }
  }
  if (ec) return Status::Internal("cannot list the MLflow store " + root_ + ": " + ec.message());
  return CreateExperiment(name);
}

Result<std::string> MlflowStore::CreateExperiment(const std::string& name) const {
  // The next id after every numeric one, active or deleted (MLflow never reuses an id).
  int64_t next = 1;
  for (const fs::path& parent : {fs::path(root_), fs::path(root_) / ".trash"}) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
      const std::string id = entry.path().filename().string();
      int64_t number = 0;
      auto [end, err] = std::from_chars(id.data(), id.data() + id.size(), number);
      if (err == std::errc() && end == id.data() + id.size()) next = std::max(next, number + 1);
    }
  }
  for (;; ++next) {
    const std::string id = std::to_string(next);
    fs::path dir = fs::path(root_) / id;
    std::error_code ec;
    if (!fs::create_directory(dir, ec)) {
      if (ec) return Status::Internal("cannot create " + dir.string() + ": " + ec.message());
      continue;  // taken meanwhile by another writer
    }
    RAYD_RETURN_IF_ERROR(ExperimentMetaWrite(dir, id, name, MlflowNowMs()));
    return id;
  }
}

Result<MlflowRun> MlflowStore::CreateRun(const std::string& experiment_id,
                                         const std::string& run_name,
                                         const std::map<std::string, std::string>& tags,
                                         int64_t start_ms) const {
  fs::path experiment_dir = fs::path(root_) / experiment_id;
  if (!ReadMeta(experiment_dir)) {
    return Status::NotFound("no MLflow experiment " + experiment_id + " in " + root_);
  }
  MlflowRun run;
  run.run_id_ = NewRunId();
  run.dir_ = (experiment_dir / run.run_id_).string();
  run.experiment_id_ = experiment_id;
  run.run_name_ = run_name;
  run.artifact_uri_ = FileUri(experiment_dir / run.run_id_ / "artifacts");
  run.user_id_ = UserName();
  run.start_ms_ = start_ms;
  std::error_code ec;
  for (const char* sub : {"metrics", "params", "artifacts", "tags"}) {
    fs::create_directories(fs::path(run.dir_) / sub, ec);
    if (ec) return Status::Internal("cannot create " + run.dir_ + "/" + sub + ": " + ec.message());
  }
  RAYD_RETURN_IF_ERROR(run.WriteMeta());
  std::map<std::string, std::string> all = {{"mlflow.runName", run_name},
                                            {"mlflow.user", run.user_id_},
                                            {"mlflow.source.name", ProgramPath()},
                                            {"mlflow.source.type", "LOCAL"}};
  for (const auto& [key, value] : tags) all[key] = value;
  for (const auto& [key, value] : all) RAYD_RETURN_IF_ERROR(run.SetTag(key, value));
  return run;
}

Result<MlflowRun> MlflowStore::ReopenRun(const std::string& experiment_id, const std::string& key,
                                         const std::string& value) const {
  fs::path experiment_dir = fs::path(root_) / experiment_id;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(experiment_dir, ec)) {
    if (!entry.is_directory()) continue;
    std::optional<std::string> tag = ReadFile(entry.path() / "tags" / MlflowKey(key));
    if (!tag || *tag != value) continue;
    std::optional<YAML::Node> meta = ReadMeta(entry.path());
    if (!meta) continue;
    MlflowRun run;
    run.dir_ = entry.path().string();
    run.run_id_ = MetaString(*meta, "run_id");
    run.experiment_id_ = experiment_id;
    run.run_name_ = MetaString(*meta, "run_name");
    run.artifact_uri_ = MetaString(*meta, "artifact_uri");
    run.user_id_ = MetaString(*meta, "user_id");
    try {
      run.start_ms_ = (*meta)["start_time"].as<int64_t>();
    } catch (const YAML::Exception&) {
      run.start_ms_ = MlflowNowMs();
    }
    if (run.run_id_.empty()) continue;
    RAYD_RETURN_IF_ERROR(run.WriteMeta());  // RUNNING again, no end time
    return run;
  }
  return Status::NotFound("no MLflow run with tag " + key + "=" + value + " in experiment " +
                          experiment_id);
}

Result<MlflowRun> StartMlflowRun(const std::string& tracking_uri,
                                 const std::string& experiment_name, const std::string& run_name,
                                 const std::string& run_dir,
                                 const std::map<std::string, std::string>& params,
                                 const std::map<std::string, std::string>& tags) {
  RAYD_ASSIGN_OR_RETURN(MlflowStore store, MlflowStore::Open(tracking_uri));
  RAYD_ASSIGN_OR_RETURN(std::string experiment, store.GetOrCreateExperiment(experiment_name));
  Result<MlflowRun> run = store.ReopenRun(experiment, kRunDirTag, run_dir);
  if (!run.ok()) {
    if (run.status().code() != StatusCode::kNotFound) return run.status();
    std::map<std::string, std::string> all = tags;
    all[kRunDirTag] = run_dir;
    run = store.CreateRun(experiment, run_name, all);
    if (!run.ok()) return run.status();
    RAYD_RETURN_IF_ERROR(run->LogParams(params));
  }
  for (const auto& [key, value] : tags) RAYD_RETURN_IF_ERROR(run->SetTag(key, value));
  return run;
}

Status LogMlflowResult(const MlflowRun& run, const std::map<std::string, double>& metrics) {
  auto iteration = metrics.find("training_iteration");
  auto timestamp = metrics.find("timestamp");
  const int64_t step =
      iteration != metrics.end() && std::isfinite(iteration->second)
          ? static_cast<int64_t>(iteration->second)
          : 0;
  const int64_t at_ms = timestamp != metrics.end() && std::isfinite(timestamp->second)
                            ? static_cast<int64_t>(std::llround(timestamp->second * 1000))
                            : MlflowNowMs();
  return run.LogMetrics(metrics, at_ms, step);
}

}  // namespace rayd::train
