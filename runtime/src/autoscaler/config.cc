// Autoscaler file loading. How it works: yaml-cpp parses the text into a node tree; a parser
// walks it section by section, checking each map's keys against the keys it allows and each
// scalar against what its field needs, and returns the first problem as InvalidArgument naming
// the source, the line and the dotted key path. Then Resolve fills in the max_nodes defaults
// and checks the counts against each other. Scalars are typed by the YAML 1.2 core schema: a
// quoted scalar is always a string, so `min_nodes: "2"` is not an integer.
//
// yaml-cpp throws; ParseAutoscalerConfig is the one place that catches YAML::Exception. The
// walk itself reports with Status values.

#include "autoscaler/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

namespace rayd::autoscaler {
namespace {

using scheduler::FixedPoint;
using Keys = std::vector<std::string_view>;

const Keys kTopKeys = {"provider",          "max_nodes",        "idle_timeout_s", "upscaling_speed",
                       "update_interval_s", "launch_timeout_s", "node_types"};
const Keys kTypeKeys = {"resources", "labels", "min_nodes", "max_nodes", "cost", "provider"};
const Keys kProviderTypes = {"local", "slurm", "command"};
const Keys kLocalKeys = {"type", "rayd_binary", "object_store_memory"};
const Keys kSlurmKeys = {"type",        "partition",   "time_limit",
                         "sbatch_args", "rayd_binary", "drain_before_limit_s"};
const Keys kSlurmTypeKeys = {"partition", "time_limit", "sbatch_args", "rayd_binary"};
const Keys kCommandKeys = {"type", "create", "terminate", "list", "timeout_s"};
// Bounds on a `provider:` map converted to JSON: aliases can make the tree cyclic or
// exponentially large, and the conversion is the only walk here that follows them arbitrarily.
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxJsonValues = 100'000;

std::string JoinKeys(const Keys& keys) {
  std::string out;
  for (std::string_view key : keys) out += (out.empty() ? "" : ", ") + std::string(key);
  return out;
}

bool HasKey(const Keys& keys, std::string_view name) {
  return std::find(keys.begin(), keys.end(), name) != keys.end();
}

// A value, the node of its key (a null node for the root and list items) and its dotted path.
struct Field {
  YAML::Node key;
  YAML::Node value;
  std::string path;

  std::string Name() const { return key.Scalar(); }
};
using Fields = std::vector<Field>;  // a map's entries, in file order

const Field* FindField(const Fields& fields, std::string_view name) {
  for (const Field& f : fields) {
    if (f.Name() == name) return &f;
  }
  return nullptr;
}

bool IsPlain(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// A plain scalar that reads as a T in full: an int64_t ("3", "+3", "-3") or a finite double
// ("2", "0.5", "1e3"); nullopt for anything else.
template <typename T>
std::optional<T> Plain(const YAML::Node& node) {
  if (!IsPlain(node)) return std::nullopt;
  std::string_view s = node.Scalar();
  if (s.size() > 1 && s[0] == '+' && s[1] != '-') s.remove_prefix(1);
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if (!std::isfinite(static_cast<double>(v))) return std::nullopt;
  return v;
}

// Scalars by the YAML 1.2 core schema: plain booleans, nulls, integers and finite numbers are
// typed; everything else, quoted or not, is a string.
nlohmann::json ScalarToJson(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (!IsPlain(node)) return s;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
  if (std::optional<int64_t> i = Plain<int64_t>(node)) return *i;
  if (std::optional<double> d = Plain<double>(node)) return *d;
  return s;
}

std::string DescribeNode(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return "\"" + node.Scalar() + "\"";
  return "nothing";
}

class ConfigParser {
 public:
  explicit ConfigParser(std::string source) : source_(std::move(source)) {}

  Result<AutoscalerConfig> Parse(const YAML::Node& root);

 private:
  // "SOURCE:LINE: PATH: reason". The line is the value's; a null value has none in yaml-cpp,
  // so it falls back to its key's.
  Status Fail(const Field& f, const std::string& reason) const {
    int line = f.value.IsNull() ? -1 : f.value.Mark().line;
    if (line < 0) line = f.key.Mark().line;
    std::string where = source_ + ":" + std::to_string(std::max(line, 0) + 1) + ": ";
    return Status::InvalidArgument(where + (f.path.empty() ? "" : f.path + ": ") + reason);
  }
  // A problem with `parent` as a whole (a key missing from it): blamed on its key's line.
  Status FailAt(const Field& parent, std::string_view name, const std::string& reason) const {
    std::string path = (parent.path.empty() ? "" : parent.path + ".") + std::string(name);
    if (parent.key.Mark().line >= 0) return Fail({parent.key, YAML::Node(), path}, reason);
    return Fail({YAML::Node(), parent.value, path}, reason);
  }

  // A map's entries (null counts as empty); with `allowed`, any other key is an error.
  Result<Fields> Map(const Field& f, const Keys* allowed) const {
    Fields out;
    if (f.value.IsNull()) return out;
    if (!f.value.IsMap()) return Fail(f, "expected a map, got " + DescribeNode(f.value));
    for (auto it = f.value.begin(); it != f.value.end(); ++it) {
      if (!it->first.IsScalar()) return Fail(f, "a key must be a string");
      const std::string name = it->first.Scalar();
      Field child{it->first, it->second, f.path.empty() ? name : f.path + "." + name};
      Field at_key{child.key, child.key, child.path};
      if (allowed != nullptr && !HasKey(*allowed, child.Name())) {
        return Fail(at_key, "unknown key (allowed: " + JoinKeys(*allowed) + ")");
      }
      if (FindField(out, child.Name()) != nullptr) return Fail(at_key, "duplicate key");
      out.push_back(std::move(child));
    }
    return out;
  }

  Result<std::string> String(const Field& f) const {
    if (!f.value.IsScalar()) return Fail(f, "expected a string, got " + DescribeNode(f.value));
    if (f.value.Scalar().empty()) return Fail(f, "must not be empty");
    return f.value.Scalar();
  }

  Result<int> Count(const Field& f, int min) const {
    std::optional<int64_t> v = Plain<int64_t>(f.value);
    if (!v || *v < min || *v > std::numeric_limits<int>::max()) {
      return Fail(f, std::string(min == 0 ? "expected a non-negative" : "expected a positive") +
                         " integer, got " + DescribeNode(f.value));
    }
    return static_cast<int>(*v);
  }

  Result<double> Number(const Field& f, bool allow_zero) const {
    std::optional<double> v = Plain<double>(f.value);
    if (!v || *v < 0 || (*v == 0 && !allow_zero)) {
      return Fail(f, std::string(allow_zero ? "expected a non-negative" : "expected a positive") +
                         " number, got " + DescribeNode(f.value));
    }
    return *v;
  }
  Result<double> Positive(const Field& f) const { return Number(f, false); }
  Result<int> NodeCount(const Field& f) const { return Count(f, 0); }
  Result<int> PositiveCount(const Field& f) const { return Count(f, 1); }

  // Sets `out` from the entry `name` of `map` when there is one.
  template <typename T, typename Read>
  Status Optional(const Fields& map, std::string_view name, T& out, Read read) const {
    const Field* f = FindField(map, name);
    if (f == nullptr) return Status::Ok();
    auto r = (this->*read)(*f);
    if (!r.ok()) return r.status();
    out = std::move(r).value();
    return Status::Ok();
  }

  Result<nlohmann::json> ToJson(const Field& f, int depth = 0);
  Result<nlohmann::json> StringList(const Field& f, bool scalar_allowed) const;
  Result<nlohmann::json> ProviderKeys(const Fields& map) const;
  Status ParseProvider(const Field& f, AutoscalerConfig& config);
  Result<NodeTypeConfig> ParseNodeType(const Field& f, const std::string& provider_type);
  Result<scheduler::ResourceSet> ParseResources(const Field& f) const;
  Status Resolve(const Field& root, const Fields& top, const Fields& types,
                 AutoscalerConfig& config) const;

  std::string source_;
  size_t json_values_ = 0;
};

Result<nlohmann::json> ConfigParser::ToJson(const Field& f, int depth) {
  if (depth > kMaxJsonDepth || ++json_values_ > kMaxJsonValues) {
    return Fail(f, "nested too deep or too large (a cyclic alias?)");
  }
  nlohmann::json out;
  if (f.value.IsSequence()) {
    out = nlohmann::json::array();
    for (size_t i = 0; i < f.value.size(); ++i) {
      RAYD_ASSIGN_OR_RETURN(
          auto item, ToJson({{}, f.value[i], f.path + "[" + std::to_string(i) + "]"}, depth + 1));
      out.push_back(std::move(item));
    }
  } else if (f.value.IsMap()) {
    out = nlohmann::json::object();
    RAYD_ASSIGN_OR_RETURN(Fields map, Map(f, nullptr));
    for (const Field& child : map) {
      RAYD_ASSIGN_OR_RETURN(out[child.Name()], ToJson(child, depth + 1));
    }
  } else if (f.value.IsScalar()) {
    out = ScalarToJson(f.value);
  }
  return out;  // null for a null value
}

// A non-empty string (when `scalar_allowed`) or a non-empty list of them, as JSON strings even
// where they read as numbers (`[--nodes, 2]` gives "2").
Result<nlohmann::json> ConfigParser::StringList(const Field& f, bool scalar_allowed) const {
  nlohmann::json out = nlohmann::json::array();
  if (scalar_allowed && f.value.IsScalar()) {
    RAYD_ASSIGN_OR_RETURN(out, String(f));
    return out;
  }
  if (!f.value.IsSequence() || f.value.size() == 0) {
    return Fail(f, std::string(scalar_allowed ? "expected a string or " : "expected ") +
                       "a non-empty list of strings, got " + DescribeNode(f.value));
  }
  for (size_t i = 0; i < f.value.size(); ++i) {
    RAYD_ASSIGN_OR_RETURN(std::string item,
                          String({{}, f.value[i], f.path + "[" + std::to_string(i) + "]"}));
    out.push_back(std::move(item));
  }
  return out;
}

// The keys a provider (or, for slurm, a node type) may set, checked, as JSON without `type`:
// names and arguments as strings, amounts as numbers.
Result<nlohmann::json> ConfigParser::ProviderKeys(const Fields& map) const {
  nlohmann::json out = nlohmann::json::object();
  for (const Field& f : map) {
    const std::string name = f.Name();
    if (name == "type") continue;
    nlohmann::json& value = out[name];
    if (name == "sbatch_args" || name == "create" || name == "terminate" || name == "list") {
      RAYD_ASSIGN_OR_RETURN(value, StringList(f, name != "sbatch_args"));
    } else if (name == "object_store_memory" && !Plain<double>(f.value)) {
      RAYD_ASSIGN_OR_RETURN(std::string text, String(f));
      Result<int64_t> bytes = scheduler::ParseByteSize(text);
      if (!bytes.ok()) return Fail(f, bytes.status().message());
      value = text;
    } else if (name == "object_store_memory" || name == "drain_before_limit_s" ||
               name == "timeout_s") {
      RAYD_RETURN_IF_ERROR(Number(f, true).status());
      value = ScalarToJson(f.value);  // an integer stays one
    } else {
      RAYD_ASSIGN_OR_RETURN(value, String(f));  // partition, time_limit, rayd_binary
    }
  }
  return out;
}

Status ConfigParser::ParseProvider(const Field& f, AutoscalerConfig& config) {
  RAYD_ASSIGN_OR_RETURN(Fields map, Map(f, nullptr));
  const Field* type = FindField(map, "type");
  if (type == nullptr) return FailAt(f, "type", "required");
  RAYD_ASSIGN_OR_RETURN(config.provider_type, String(*type));
  if (!HasKey(kProviderTypes, config.provider_type)) {
    return Fail(*type, "expected one of " + JoinKeys(kProviderTypes) + ", got " +
                           DescribeNode(type->value));
  }
  const Keys& allowed = config.provider_type == "local"   ? kLocalKeys
                        : config.provider_type == "slurm" ? kSlurmKeys
                                                          : kCommandKeys;
  RAYD_ASSIGN_OR_RETURN(map, Map(f, &allowed));
  if (config.provider_type == "command") {
    for (std::string_view name : {"create", "terminate", "list"}) {
      if (FindField(map, name) == nullptr) {
        return FailAt(f, name, "required by the command provider (an executable or a list)");
      }
    }
  }
  RAYD_ASSIGN_OR_RETURN(config.provider, ProviderKeys(map));
  return Status::Ok();
}

// Amounts >= 0; memory resources may also be byte strings ("4GiB").
Result<scheduler::ResourceSet> ConfigParser::ParseResources(const Field& f) const {
  RAYD_ASSIGN_OR_RETURN(Fields map, Map(f, nullptr));
  scheduler::ResourceSet out;
  for (const Field& r : map) {
    std::optional<double> amount = Plain<double>(r.value);
    if (!amount && scheduler::IsMemoryResource(r.Name()) && r.value.IsScalar()) {
      Result<int64_t> bytes = scheduler::ParseByteSize(r.value.Scalar());
      if (!bytes.ok()) return Fail(r, bytes.status().message());
      amount = static_cast<double>(*bytes);
    }
    if (amount > static_cast<double>(FixedPoint::kMaxWhole)) {
      return Fail(r, "expected at most " + std::to_string(FixedPoint::kMaxWhole));
    }
    if (!amount || *amount < 0) {
      return Fail(r, "expected a non-negative number" +
                         std::string(scheduler::IsMemoryResource(r.Name()) ? " or byte size" : "") +
                         ", got " + DescribeNode(r.value));
    }
    out.Set(r.Name(), FixedPoint::FromDouble(*amount));
  }
  if (out.IsEmpty()) return Fail(f, "expected at least one positive amount");
  return out;
}

Result<NodeTypeConfig> ConfigParser::ParseNodeType(const Field& f,
                                                   const std::string& provider_type) {
  NodeTypeConfig type;
  type.name = f.Name();
  RAYD_ASSIGN_OR_RETURN(Fields map, Map(f, &kTypeKeys));
  const Field* resources = FindField(map, "resources");
  if (resources == nullptr) return FailAt(f, "resources", "required");
  RAYD_ASSIGN_OR_RETURN(type.resources, ParseResources(*resources));
  if (const Field* labels = FindField(map, "labels")) {
    RAYD_ASSIGN_OR_RETURN(Fields entries, Map(*labels, nullptr));
    for (const Field& label : entries) {
      // A label's value may be empty, as in --labels.
      const YAML::Node& value = label.value;
      if (!value.IsScalar()) return Fail(label, "expected a string, got " + DescribeNode(value));
      type.labels[label.Name()] = value.Scalar();
    }
  }
  RAYD_RETURN_IF_ERROR(Optional(map, "min_nodes", type.min_nodes, &ConfigParser::NodeCount));
  RAYD_RETURN_IF_ERROR(Optional(map, "max_nodes", type.max_nodes, &ConfigParser::NodeCount));
  RAYD_RETURN_IF_ERROR(Optional(map, "cost", type.cost, &ConfigParser::Positive));
  if (const Field* provider = FindField(map, "provider")) {
    RAYD_ASSIGN_OR_RETURN(Fields keys,
                          Map(*provider, provider_type == "slurm" ? &kSlurmTypeKeys : nullptr));
    RAYD_ASSIGN_OR_RETURN(type.provider,
                          provider_type == "slurm" ? ProviderKeys(keys) : ToJson(*provider));
  }
  return type;
}

// max_nodes defaults (a type's: the cluster's; the cluster's: the sum of the types'), then the
// counts against each other.
Status ConfigParser::Resolve(const Field& root, const Fields& top, const Fields& types,
                             AutoscalerConfig& config) const {
  const Field* cluster_max = FindField(top, "max_nodes");
  int64_t sum_max = 0, sum_min = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    NodeTypeConfig& type = config.node_types[i];
    RAYD_ASSIGN_OR_RETURN(Fields map, Map(types[i], nullptr));
    const Field* type_max = FindField(map, "max_nodes");
    if (type_max == nullptr && cluster_max == nullptr) {
      return FailAt(types[i], "max_nodes", "required (the cluster's or every node type's)");
    }
    if (type_max == nullptr) type.max_nodes = config.max_nodes;
    if (type.min_nodes > type.max_nodes) {  // so min_nodes > 0 was given
      return Fail(
          *FindField(map, "min_nodes"),
          std::to_string(type.min_nodes) + " is above max_nodes " + std::to_string(type.max_nodes));
    }
    if (cluster_max != nullptr && type.max_nodes > config.max_nodes) {
      return Fail(*type_max, std::to_string(type.max_nodes) + " is above the cluster's max_nodes " +
                                 std::to_string(config.max_nodes));
    }
    sum_max += type.max_nodes;
    sum_min += type.min_nodes;
  }
  if (cluster_max == nullptr) {
    if (sum_max < 1 || sum_max > std::numeric_limits<int>::max()) {
      return FailAt(
          root, "max_nodes",
          "the node types' max_nodes sum to " + std::to_string(sum_max) + "; give the cluster's");
    }
    config.max_nodes = static_cast<int>(sum_max);
  } else if (sum_min > config.max_nodes) {
    return Fail(*cluster_max, std::to_string(config.max_nodes) +
                                  " is below the node types' min_nodes, which sum to " +
                                  std::to_string(sum_min));
  }
  return Status::Ok();
}

Result<AutoscalerConfig> ConfigParser::Parse(const YAML::Node& root_node) {
  const Field root{YAML::Node(), root_node, ""};
  RAYD_ASSIGN_OR_RETURN(Fields top, Map(root, &kTopKeys));
  AutoscalerConfig config;
  const Field* provider = FindField(top, "provider");
  if (provider == nullptr) return FailAt(root, "provider", "required");
  RAYD_RETURN_IF_ERROR(ParseProvider(*provider, config));
  RAYD_RETURN_IF_ERROR(Optional(top, "max_nodes", config.max_nodes, &ConfigParser::PositiveCount));
  RAYD_RETURN_IF_ERROR(
      Optional(top, "idle_timeout_s", config.idle_timeout_s, &ConfigParser::Positive));
  RAYD_RETURN_IF_ERROR(
      Optional(top, "upscaling_speed", config.upscaling_speed, &ConfigParser::Positive));
  RAYD_RETURN_IF_ERROR(
      Optional(top, "update_interval_s", config.update_interval_s, &ConfigParser::Positive));
  RAYD_RETURN_IF_ERROR(
      Optional(top, "launch_timeout_s", config.launch_timeout_s, &ConfigParser::Positive));
  const Field* node_types = FindField(top, "node_types");
  if (node_types == nullptr) return FailAt(root, "node_types", "required");
  RAYD_ASSIGN_OR_RETURN(Fields types, Map(*node_types, nullptr));
  if (types.empty()) return Fail(*node_types, "expected at least one node type");
  for (const Field& f : types) {
    if (f.Name().empty()) return Fail(f, "a node type needs a non-empty name");
    RAYD_ASSIGN_OR_RETURN(NodeTypeConfig type, ParseNodeType(f, config.provider_type));
    config.node_types.push_back(std::move(type));
  }
  RAYD_RETURN_IF_ERROR(Resolve(root, top, types, config));
  return config;
}

}  // namespace

const NodeTypeConfig* AutoscalerConfig::FindType(const std::string& name) const {
  for (const NodeTypeConfig& type : node_types) {
    if (type.name == name) return &type;
  }
  return nullptr;
}

Result<AutoscalerConfig> ParseAutoscalerConfig(const std::string& text, const std::string& source) {
  try {
    return ConfigParser(source).Parse(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source + ":" + std::to_string(std::max(e.mark.line, 0) + 1) +
                                   ": YAML error: " + e.msg);
  }
}

Result<AutoscalerConfig> LoadAutoscalerConfig(const std::string& path) {
  std::ifstream in(path);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec)) {
    return Status::NotFound("cannot read autoscaler config " + path + ": " +
                            (in ? "a directory" : std::strerror(errno)));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::NotFound("cannot read autoscaler config " + path);
  return ParseAutoscalerConfig(text, path);
}

}  // namespace rayd::autoscaler
