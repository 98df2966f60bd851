#pragma once
// The search space a table of recorded curves offers (search_replay_bench, mo_search_bench):
// each config path the table varies becomes a choice among the values recorded for it, and
// each it keeps a constant, so that every config a searcher can propose was recorded.

#include <rayd/tune/search_space.h>
#include <rayd/tune/simulator.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace rayd::bench {

namespace replay_space_detail {
inline void Leaves(const nlohmann::json& config, std::vector<std::string>& path,
                   std::map<std::vector<std::string>, std::set<nlohmann::json>>& out) {
  if (!config.is_object()) {
    out[path].insert(config);
    return;
  }
  for (const auto& [key, value] : config.items()) {
    path.push_back(key);
    Leaves(value, path, out);
    path.pop_back();
  }
}
}  // namespace replay_space_detail

inline tune::ParamSpace SpaceOf(const tune::RecordedCurves& curves) {
  std::map<std::vector<std::string>, std::set<nlohmann::json>> values;
  for (const tune::RecordedCurve& curve : curves.curves()) {
    std::vector<std::string> path;
    replay_space_detail::Leaves(curve.config, path, values);
  }
  tune::ParamSpace space;
  for (const auto& [path, seen] : values) {
    if (seen.size() == 1) {
      space.push_back({path, *seen.begin()});
    } else {
      space.push_back({path, tune::Domain::Choice({seen.begin(), seen.end()})});
    }
  }
  return space;
}

}  // namespace rayd::bench
