#pragma once
// The provider kinds behind MakeNodeProvider (node_provider.h), one file each, and the small
// pieces they share: reading provider keys, and Slurm's duration format.

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autoscaler/node_provider.h"

namespace rayd::autoscaler {

// Each checks its keys' values (InvalidArgument naming the key) and needs context.loop.
Result<std::unique_ptr<NodeProvider>> MakeLocalProvider(const AutoscalerConfig& config,
                                                        const ProviderContext& context);
Result<std::unique_ptr<NodeProvider>> MakeSlurmProvider(const AutoscalerConfig& config,
                                                        const ProviderContext& context);
Result<std::unique_ptr<NodeProvider>> MakeCommandProvider(const AutoscalerConfig& config,
                                                          const ProviderContext& context);

// Provider keys, from a `provider:` map that `where` names in errors ("provider",
// "node_types.gpu.provider"). A missing key gives the fallback; a value of the wrong kind,
// InvalidArgument.
Result<std::string> StringKey(const nlohmann::json& keys, const std::string& where,
                              const std::string& name, const std::string& fallback = "");
Result<double> NumberKey(const nlohmann::json& keys, const std::string& where,
                         const std::string& name, double fallback);
// A list of strings; with `allow_string` one string stands for a list of one.
Result<std::vector<std::string>> StringListKey(const nlohmann::json& keys, const std::string& where,
                                               const std::string& name, bool allow_string = false);

// A duration as Slurm prints it (squeue's %L, a time limit): "D-HH:MM:SS", "HH:MM:SS",
// "MM:SS", "D-HH", "D-HH:MM" or "MM", in seconds; nullopt for "UNLIMITED", "NOT_SET",
// "INVALID" and anything else it cannot read.
std::optional<double> ParseSlurmDuration(std::string_view text);

}  // namespace rayd::autoscaler
