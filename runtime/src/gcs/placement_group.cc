#include "gcs/placement_group.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/node_info.h"

namespace rayd::gcs {

using State = proto::PlacementGroupState;


bool Ended(State state) { return state == State::REMOVED || state == State::FAILED; }
bool Settled(State state) { return state == State::CREATED || Ended(state); }

State GroupStateFromName(const std::string& name) {
  for (State state :
       {State::PENDING, State::CREATED, State::RESCHEDULING, State::REMOVED, State::FAILED}) {
    if (name == runtime::PlacementGroupStateName(state)) return state;
  }
  return State::FAILED;
}

constexpr proto::PlacementStrategy kStrategies[] = {
    proto::PlacementStrategy::PACK, proto::PlacementStrategy::SPREAD,
    proto::PlacementStrategy::STRICT_PACK, proto::PlacementStrategy::STRICT_SPREAD};

bool KnownStrategy(proto::PlacementStrategy strategy) {
  return std::find(std::begin(kStrategies), std::end(kStrategies), strategy) !=
         std::end(kStrategies);
}

Result<proto::PlacementStrategy> GroupStrategyFromName(const std::string& name) {
  for (proto::PlacementStrategy strategy : kStrategies) {
    if (name == runtime::PlacementStrategyName(strategy)) return strategy;
  }
  return Status::Internal("unknown placement strategy '" + name + "'");
}

Result<std::vector<PlacementGroup::Bundle>> PlacementGroup::BundlesFromProto(
    capnp::List<proto::PlacementBundle>::Reader list) {
  if (list.size() == 0) {
    return Status::InvalidArgument("placement group needs at least one bundle");
  }
  std::vector<Bundle> out;
  for (auto b : list) {
    const std::string which = "bundle " + std::to_string(out.size());
    for (auto amount : b.getResources()) {
      if (amount.getUnits() < 0) {
        return Status::InvalidArgument(which + " asks for a negative amount of " +
                                       std::string(amount.getName().cStr()));
      }
    }
    Bundle bundle;
    bundle.resources = runtime::ResourcesFromProto(b.getResources());
    if (bundle.resources.IsEmpty()) {
      return Status::InvalidArgument(
          which + " is empty: every bundle needs a positive amount of some resource");
    }
    bundle.label_selector = runtime::LabelsFromProto(b.getLabelSelector());
    out.push_back(std::move(bundle));
  }
  return out;
}

std::string PlacementGroup::ToJson() const {
  nlohmann::json list = nlohmann::json::array();
  for (const Bundle& bundle : bundles) {
    list.push_back({{"resources", nlohmann::json::parse(bundle.resources.ToJson())},
                    {"label_selector", bundle.label_selector},
                    {"node_id", bundle.committed ? bundle.node.Hex() : ""}});
  }
  nlohmann::json j = {{"placement_group_id", id},
                      {"name", name},
                      {"namespace", ray_namespace},
                      {"job_id", job_id},
                      {"strategy", runtime::PlacementStrategyName(strategy)},
                      {"state", runtime::PlacementGroupStateName(state)},
                      {"detached", detached},
                      {"create_time_ms", create_time_ms},
                      {"ready_time_ms", ready_time_ms},
                      {"cause", cause},
                      {"bundles", std::move(list)}};
  return j.dump();
}

Result<std::unique_ptr<PlacementGroup>> PlacementGroup::FromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Internal("not a JSON object");
  auto group = std::make_unique<PlacementGroup>();
  try {
    group->id = j.at("placement_group_id").get<std::string>();
    group->name = j.value("name", "");
    group->ray_namespace = j.value("namespace", "");
    group->job_id = j.value("job_id", "");
    RAYD_ASSIGN_OR_RETURN(group->strategy, GroupStrategyFromName(j.value("strategy", "")));
    group->state = GroupStateFromName(j.value("state", "FAILED"));
    group->detached = j.value("detached", false);
    group->create_time_ms = j.value("create_time_ms", int64_t{0});
    group->ready_time_ms = j.value("ready_time_ms", int64_t{0});
    group->cause = j.value("cause", "");
    for (const auto& b : j.at("bundles")) {
      Bundle bundle;
      RAYD_ASSIGN_OR_RETURN(bundle.resources,
                            scheduler::ResourceSet::FromJson(b.at("resources").dump()));
      bundle.label_selector = b.value("label_selector", scheduler::Labels());
      if (auto node = NodeId::FromHex(b.value("node_id", "")); node.ok()) {
        bundle.node = *node;
        bundle.committed = true;
      }
      group->bundles.push_back(std::move(bundle));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Internal(e.what());
  }
  return group;
}

}  // namespace rayd::gcs
