#include "autoscaler/node_provider.h"

#include <cctype>
#include <charconv>
#include <optional>
#include <vector>

#include "autoscaler/providers.h"

namespace rayd::autoscaler {
namespace {

bool IsPredefined(std::string_view name) {
  return name == scheduler::kCPU || name == scheduler::kGPU || name == scheduler::kMemory ||
         name == scheduler::kObjectStoreMemory;
}

Status WrongKind(const std::string& where, const std::string& name, const char* wanted) {
  return Status::InvalidArgument(where + "." + name + ": must be " + wanted);
}

// A non-negative integer; nullopt when `text` is anything else.
std::optional<long> ParseCount(std::string_view text) {
  long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value < 0) {
    return std::nullopt;
  }
  return value;
}

// "H", "H:M" or "H:M:S" (with `days`), else "M", "M:S" or "H:M:S", in seconds.
std::optional<double> ParseClock(std::string_view text, bool after_days) {
  std::vector<long> parts;
  while (true) {
    const size_t colon = text.find(':');
    auto part = ParseCount(text.substr(0, colon));
    if (!part) return std::nullopt;
    parts.push_back(*part);
    if (colon == std::string_view::npos) break;
    text.remove_prefix(colon + 1);
  }
  if (parts.size() > 3) return std::nullopt;
  // Without days the units start at minutes for one or two parts (Slurm's "M" and "M:S").
  static constexpr long kFromHours[] = {3600, 60, 1};
  static constexpr long kFromMinutes[] = {60, 1};
  const long* units = (after_days || parts.size() == 3) ? kFromHours : kFromMinutes;
  double seconds = 0;
  for (size_t i = 0; i < parts.size(); ++i) seconds += static_cast<double>(parts[i] * units[i]);
  return seconds;
}

}  // namespace

Result<std::unique_ptr<NodeProvider>> MakeNodeProvider(const AutoscalerConfig& config,
                                                       const ProviderContext& context) {
  if (context.loop == nullptr) return Status::InvalidArgument("a node provider needs a loop");
  if (config.provider_type == "local") return MakeLocalProvider(config, context);
  if (config.provider_type == "slurm") return MakeSlurmProvider(config, context);
  if (config.provider_type == "command") return MakeCommandProvider(config, context);
  return Status::InvalidArgument("provider.type: unknown provider '" + config.provider_type +
                                 "' (local, slurm or command)");
}

std::vector<std::string> StartArgs(const NodeTypeConfig& type, const ProviderContext& context,
                                   const std::string& instance_id) {
  const scheduler::ResourceSet& r = type.resources;
  // CPU and GPU always: a node has what its type says, not what its machine detects.
  std::vector<std::string> args = {"--address",  context.gcs_address,
                                   "--num-cpus", r.Get(scheduler::kCPU).ToString(),
                                   "--num-gpus", r.Get(scheduler::kGPU).ToString()};
  if (r.Get(scheduler::kMemory).units() > 0) {
    args.insert(args.end(), {"--memory", r.Get(scheduler::kMemory).ToString()});
  }
  if (r.Get(scheduler::kObjectStoreMemory).units() > 0) {
    args.insert(args.end(),
                {"--object-store-memory", r.Get(scheduler::kObjectStoreMemory).ToString()});
  }
  scheduler::ResourceSet custom;
  for (const auto& [name, amount] : r) {
    if (!IsPredefined(name)) custom.Set(name, amount);
  }
  if (!custom.IsEmpty()) args.insert(args.end(), {"--resources", custom.ToJson()});
  // Last, so that a script can append the instance label to it.
  std::string labels = std::string(kNodeTypeLabel) + "=" + type.name;
  for (const auto& [key, value] : type.labels) {
    if (key != kNodeTypeLabel && key != kInstanceLabel) labels += "," + key + "=" + value;
  }
  if (!instance_id.empty()) labels += std::string(",") + kInstanceLabel + "=" + instance_id;
  args.insert(args.end(), {"--labels", labels});
  return args;
}

Result<std::string> StringKey(const nlohmann::json& keys, const std::string& where,
                              const std::string& name, const std::string& fallback) {
  if (!keys.is_object() || !keys.contains(name)) return fallback;
  const auto& value = keys.at(name);
  if (!value.is_string()) return WrongKind(where, name, "a string");
  return value.get<std::string>();
}

Result<double> NumberKey(const nlohmann::json& keys, const std::string& where,
                         const std::string& name, double fallback) {
  if (!keys.is_object() || !keys.contains(name)) return fallback;
  const auto& value = keys.at(name);
  if (!value.is_number()) return WrongKind(where, name, "a number");
  return value.get<double>();
}

Result<std::vector<std::string>> StringListKey(const nlohmann::json& keys, const std::string& where,
                                               const std::string& name, bool allow_string) {
  std::vector<std::string> out;
  if (!keys.is_object() || !keys.contains(name)) return out;
  const auto& value = keys.at(name);
  const char* wanted = allow_string ? "a string or a list of strings" : "a list of strings";
  if (allow_string && value.is_string()) return std::vector<std::string>{value.get<std::string>()};
  if (!value.is_array()) return WrongKind(where, name, wanted);
  for (const auto& item : value) {
    if (!item.is_string()) return WrongKind(where, name, wanted);
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<double> ParseSlurmDuration(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) return ParseClock(text, /*after_days=*/false);
  auto days = ParseCount(text.substr(0, dash));
  auto rest = ParseClock(text.substr(dash + 1), /*after_days=*/true);
  if (!days || !rest) return std::nullopt;
  return static_cast<double>(*days) * 86400 + *rest;
}

}  // namespace rayd::autoscaler
