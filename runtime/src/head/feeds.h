#pragma once
// Dashboard feeds as the head serves them (the layout: rayd/runtime/cluster.h). Pure functions
// over what publishers wrote, so a malformed feed costs a warning and that feed's part only,
// never the dashboard: no member is trusted to have the type the layout says.

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/prometheus.h"

namespace rayd::head {

// Every value under `prefix` that is a JSON object, parsed, by the rest of its key; others
// are skipped with a warning.
std::map<std::string, nlohmann::json> ParseFeeds(const std::map<std::string, std::string>& values,
                                                 const std::string& prefix);
// The values under `prefix` parsed, as one object by the rest of their keys; values that do not
// parse are left out.
nlohmann::json ParsedByKey(const std::map<std::string, std::string>& values,
                           const std::string& prefix);
// A summary as the list of feeds shows it: without the members its "detail_only" names.
nlohmann::json ListedSummary(const nlohmann::json& summary);
// Adds the samples every feed asks /metrics to export (its "metrics" member), one family per
// name, in name order. Samples with a name Prometheus would refuse, a type other than gauge
// or counter, or no numeric value are skipped with a warning naming their feed; so are
// samples whose type disagrees with the family's first.
void AddFeedMetrics(const std::map<std::string, nlohmann::json>& feeds, prometheus::Text& text);

}  // namespace rayd::head
