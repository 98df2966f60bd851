#pragma once
// AutoscalerSandbox: a TuneSandbox whose head has no CPU of its own and runs an autoscaler
// (`rayd start --head --autoscaler`), with readers of `rayd status --format json`: the nodes
// the autoscaler launched and its recent decisions. Header-only (Catch2 assertions).

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tune_sandbox.h"

namespace rayd::testing {

inline constexpr char kInstanceLabel[] = "rayd.io/autoscaler-instance";

class AutoscalerSandbox : public TuneSandbox {
 public:
  AutoscalerSandbox() : TuneSandbox(RAYD_BINARY) {}

  // A head with no CPU of its own and the autoscaler `config` (YAML text).
  // `extra`: more flags for `rayd start` (a port and Redis, for a head that restarts).
  void StartHead(const std::string& config, std::vector<std::string> extra = {"--port", "0"}) {
    const std::string path = WriteYaml("autoscaler.yaml", config);
    std::vector<std::string> args = {"--head", "--num-cpus", "0", "--dashboard-port", "0",
                                     "--autoscaler", path};
    args.insert(args.end(), extra.begin(), extra.end());
    Start(args);
    std::smatch m;
    const std::string out = last_start_output();
    REQUIRE(std::regex_search(out, m, std::regex(R"(Cluster address: (\S+))")));
    address_ = m[1];
  }
  const std::string& address() const { return address_; }

  // `rayd status --format json`, or null when it fails.
  nlohmann::json Status() {
    std::string out;
    if (Run({"status", "--format", "json"}, &out, std::chrono::seconds(20)) != 0) return nullptr;
    auto j = nlohmann::json::parse(out, nullptr, false);
    return j.is_discarded() ? nlohmann::json(nullptr) : j;
  }

 private:
  std::string address_;
};

// The alive nodes the autoscaler launched.
inline std::set<std::string> LaunchedNodes(const nlohmann::json& status) {
  std::set<std::string> ids;
  if (!status.is_object()) return ids;
  for (const nlohmann::json& n : status.value("nodes", nlohmann::json::array())) {
    if (n.value("state", "") == "ALIVE" && n.value("labels", nlohmann::json::object()).contains(kInstanceLabel)) {
      ids.insert(n.value("node_id", ""));
    }
  }
  return ids;
}

inline std::vector<std::string> Events(const nlohmann::json& status) {
  std::vector<std::string> out;
  if (!status.is_object() || !status.contains("autoscaler")) return out;
  for (const nlohmann::json& e : status["autoscaler"].value("events", nlohmann::json::array())) {
    out.push_back(e.value("text", ""));
  }
  return out;
}

inline std::string Joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace rayd::testing
