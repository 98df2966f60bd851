#include "head/feeds.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "rayd/runtime/cluster.h"

namespace rayd::head {
namespace {

// Member `key` of `j` if `j` is an object holding one of type `type`, else `fallback`.
const nlohmann::json& Member(const nlohmann::json& j, const char* key, nlohmann::json::value_t type,
                             const nlohmann::json& fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->type() == type ? *it : fallback;
}

std::string StringMember(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kEmpty = "";
  return Member(j, key, nlohmann::json::value_t::string, kEmpty).get<std::string>();
}

bool ValidMetricName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

bool ValidLabelName(const std::string& name) {
  return ValidMetricName(name) && name.find(':') == std::string::npos && !name.starts_with("__");
}

}  // namespace

std::map<std::string, nlohmann::json> ParseFeeds(const std::map<std::string, std::string>& values,
                                                 const std::string& prefix) {
  std::map<std::string, nlohmann::json> feeds;
  for (const auto& [key, value] : values) {
    auto summary = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (summary.is_discarded() || !summary.is_object()) {
      spdlog::warn("dashboard: {} in KV namespace {} is not a JSON object", key, kFeedKvNamespace);
      continue;
    }
    feeds.emplace(key.substr(prefix.size()), std::move(summary));
  }
  return feeds;
}

nlohmann::json ParsedByKey(const std::map<std::string, std::string>& values,
                           const std::string& prefix) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : values) {
    nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) out[key.substr(prefix.size())] = std::move(parsed);
  }
  return out;
}

nlohmann::json ListedSummary(const nlohmann::json& summary) {
  static const nlohmann::json kNone = nlohmann::json::array();
  nlohmann::json listed = summary;
  if (!listed.is_object()) return listed;
  for (const auto& member : Member(summary, "detail_only", nlohmann::json::value_t::array, kNone)) {
    if (member.is_string()) listed.erase(member.get<std::string>());
  }
  return listed;
}

void AddFeedMetrics(const std::map<std::string, nlohmann::json>& feeds, prometheus::Text& text) {
  static const nlohmann::json kNone = nlohmann::json::array();
  static const nlohmann::json kNoLabels = nlohmann::json::object();
  struct Family {
    std::string type, help;
    std::vector<std::pair<prometheus::Labels, double>> samples;
  };
  std::map<std::string, Family> families;
  for (const auto& [feed, summary] : feeds) {
    for (const auto& m : Member(summary, "metrics", nlohmann::json::value_t::array, kNone)) {
      const std::string name = StringMember(m, "name");
      const std::string type = StringMember(m, "type");
      const auto value = m.is_object() ? m.find("value") : m.end();
      if (!ValidMetricName(name) || (type != "gauge" && type != "counter") ||
          value == m.end() || !value->is_number()) {
        spdlog::warn("dashboard: feed {} has a malformed metric sample: {}", feed, m.dump());
        continue;
      }
      Family& family = families[name];
      if (family.type.empty()) {
        family.type = type;
        // HELP text escapes backslashes and line breaks (the exposition format's rule).
        for (char c : StringMember(m, "help")) {
          if (c == '\\') {
            family.help += "\\\\";
          } else if (c == '\n') {
            family.help += "\\n";
          } else {
            family.help += c;
          }
        }
      } else if (family.type != type) {
        spdlog::warn("dashboard: feed {} exports {} as a {}, already a {}", feed, name, type,
                     family.type);
        continue;
      }
      prometheus::Labels labels;
      const auto& given = Member(m, "labels", nlohmann::json::value_t::object, kNoLabels);
      for (const auto& [key, label] : given.items()) {
        if (label.is_string() && ValidLabelName(key)) {
          labels.emplace_back(key, label.get<std::string>());
        }
      }
      family.samples.emplace_back(std::move(labels), value->get<double>());
    }
  }
  for (const auto& [name, family] : families) {
    text.Family(name, family.type, family.help);
    for (const auto& [labels, value] : family.samples) text.Sample(name, labels, value);
  }
}

}  // namespace rayd::head
