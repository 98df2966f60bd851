// The "Autoscaler:" section of `rayd status`: the state the head's autoscaler publishes as the
// dashboard feed ("autoscaler", "cluster"), printed for people.

#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "rayd/base/event_loop.h"

namespace rayd::cli {
namespace {

constexpr size_t kEventsShown = 8;

std::string ClockTime(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

}  // namespace

void PrintAutoscalerStatus(const nlohmann::json& state) {
  using nlohmann::json;
  const int64_t age_s = (NowUnixMs() - state.value("updated_ms", int64_t{0})) / 1000;
  std::cout << "\nAutoscaler (" << state.value("provider", "?") << " provider, at most "
            << state.value("max_nodes", 0) << " nodes, idle timeout "
            << state.value("idle_timeout_s", 0.0) << " s; updated " << age_s << " s ago):\n";
  for (const json& t : state.value("node_types", json::array())) {
    std::cout << " " << t.value("name", "?") << " " << t.value("resources", "") << ": "
              << t.value("running", 0) << " running, " << t.value("launching", 0)
              << " launching, " << t.value("draining", 0) << " draining (min "
              << t.value("min_nodes", 0) << ", max " << t.value("max_nodes", 0) << ")";
    if (t.contains("paused_s")) {
      std::cout << "\n   launches paused for " << t.value("paused_s", 0)
                << " s after: " << t.value("last_error", "");
    }
    std::cout << "\n";
  }
  const json waiting = state.value("waiting", json::array());
  const json requested = state.value("requested", json::array());
  if (!waiting.empty() || !requested.empty()) std::cout << " Demand:\n";
  for (const json* list : {&waiting, &requested}) {
    for (const json& d : *list) {
      const int count = d.value("count", 1);
      std::cout << "  " << (count > 1 ? std::to_string(count) + " x " : "")
                << d.value("source", "?") << ": " << d.value("shape", "")
                << (list == &requested ? " (requested)" : "") << "\n";
    }
  }
  const json unmet = state.value("unmet", json::array());
  if (!unmet.empty()) std::cout << " Launching nothing for:\n";
  for (const json& u : unmet) {
    std::cout << "  " << u.value("source", "?") << ": " << u.value("reason", "") << "\n";
  }
  const json events = state.value("events", json::array());
  if (!events.empty()) std::cout << " Recent decisions:\n";
  const size_t from = events.size() > kEventsShown ? events.size() - kEventsShown : 0;
  for (size_t i = from; i < events.size(); ++i) {
    std::cout << "  " << ClockTime(events[i].value("time_ms", int64_t{0})) << " "
              << events[i].value("text", "") << "\n";
  }
}

}  // namespace rayd::cli
