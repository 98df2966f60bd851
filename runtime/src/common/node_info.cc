#include "common/node_info.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "rayd/scheduler/placement.h"

namespace rayd::runtime {

using scheduler::FixedPoint;
using scheduler::ResourceSet;

void ResourcesToProto(const ResourceSet& set, capnp::List<proto::ResourceAmount>::Builder list) {
  unsigned i = 0;
  for (const auto& [name, amount] : set) {
    list[i].setName(name);
    list[i].setUnits(amount.units());
    ++i;
  }
}

void LabelsToProto(const std::map<std::string, std::string>& labels,
                   capnp::List<proto::Label>::Builder list) {
  unsigned i = 0;
  for (const auto& [key, value] : labels) {
    list[i].setKey(key);
    list[i].setValue(value);
    ++i;
  }
}

scheduler::Labels LabelsFromProto(capnp::List<proto::Label>::Reader list) {
  scheduler::Labels labels;
  for (auto label : list) labels[label.getKey()] = label.getValue();
  return labels;
}

ResourceSet ResourcesFromProto(capnp::List<proto::ResourceAmount>::Reader list) {
  ResourceSet set;
  for (auto r : list) set.Set(r.getName().cStr(), FixedPoint::FromUnits(r.getUnits()));
  return set;
}

void DemandsToProto(const std::vector<ResourceDemand>& demands,
                    capnp::List<proto::ResourceDemand>::Builder out) {
  for (unsigned i = 0; i < demands.size(); ++i) {
    const auto& d = demands[i];
    FillResources(d.resources, [&](unsigned n) { return out[i].initResources(n); });
    out[i].setCount(static_cast<uint32_t>(d.count));
    out[i].setWaitingSinceMs(d.waiting_since_ms);
  }
}

std::vector<ResourceDemand> DemandsFromProto(capnp::List<proto::ResourceDemand>::Reader in) {
  std::vector<ResourceDemand> out;
  for (auto d : in) {
    out.push_back({ResourcesFromProto(d.getResources()), static_cast<int>(d.getCount()),
                   d.getWaitingSinceMs()});
  }
  return out;
}

void NodeInfoToProto(const NodeInfo& info, proto::NodeInfo::Builder out) {
  out.setNodeId(info.node_id.Hex());
  out.setAddress(info.address);
  out.setHostname(info.hostname);
  out.setIp(info.ip);
  out.setIsHead(info.is_head);
  out.setState(info.alive ? proto::NodeState::ALIVE : proto::NodeState::DEAD);
  FillResources(info.total, [&](unsigned n) { return out.initTotal(n); });
  FillResources(info.available, [&](unsigned n) { return out.initAvailable(n); });
  FillLabels(info.labels, [&](unsigned n) { return out.initLabels(n); });
  out.setStartTimeMs(info.start_time_ms);
  out.setEndTimeMs(info.end_time_ms);
  out.setLastHeartbeatMs(info.last_heartbeat_ms);
  out.setDeathReason(info.death_reason);
  out.setPid(info.pid);
  out.setSessionDir(info.session_dir);
  out.setStoreSocket(info.store_socket);
  out.setTransferAddress(info.transfer_address);
  out.setObjectStoreBytes(info.object_store_bytes);
  DemandsToProto(info.infeasible,
                 out.initInfeasible(static_cast<unsigned>(info.infeasible.size())));
  DemandsToProto(info.queued, out.initQueued(static_cast<unsigned>(info.queued.size())));
  out.setPrimaryObjects(info.primary_objects);
  out.setDrainDeadlineMs(info.drain_deadline_ms);
  out.setDrainReason(info.drain_reason);
}

Result<NodeInfo> NodeInfoFromProto(proto::NodeInfo::Reader in) {
  NodeInfo info;
  RAYD_ASSIGN_OR_RETURN(info.node_id, NodeId::FromHex(in.getNodeId().cStr()));
  info.address = in.getAddress();
  info.hostname = in.getHostname();
  info.ip = in.getIp();
  info.is_head = in.getIsHead();
  info.alive = in.getState() == proto::NodeState::ALIVE;
  info.total = ResourcesFromProto(in.getTotal());
  info.available = ResourcesFromProto(in.getAvailable());
  info.labels = LabelsFromProto(in.getLabels());
  info.start_time_ms = in.getStartTimeMs();
  info.end_time_ms = in.getEndTimeMs();
  info.last_heartbeat_ms = in.getLastHeartbeatMs();
  info.death_reason = in.getDeathReason();
  info.pid = in.getPid();
  info.session_dir = in.getSessionDir();
  info.store_socket = in.getStoreSocket();
  info.transfer_address = in.getTransferAddress();
  info.object_store_bytes = in.getObjectStoreBytes();
  info.infeasible = DemandsFromProto(in.getInfeasible());
  info.queued = DemandsFromProto(in.getQueued());
  info.primary_objects = in.getPrimaryObjects();
  info.drain_deadline_ms = in.getDrainDeadlineMs();
  info.drain_reason = in.getDrainReason();
  return info;
}

const char* ActorStateName(proto::ActorState state) {
  switch (state) {
    case proto::ActorState::PENDING_CREATION:
      return "PENDING_CREATION";
    case proto::ActorState::ALIVE:
      return "ALIVE";
    case proto::ActorState::RESTARTING:
      return "RESTARTING";
    case proto::ActorState::DEAD:
      return "DEAD";
  }
  return "DEAD";
}

const char* PlacementGroupStateName(proto::PlacementGroupState state) {
  switch (state) {
    case proto::PlacementGroupState::PENDING:
      return "PENDING";
    case proto::PlacementGroupState::CREATED:
      return "CREATED";
    case proto::PlacementGroupState::RESCHEDULING:
      return "RESCHEDULING";
    case proto::PlacementGroupState::REMOVED:
      return "REMOVED";
    case proto::PlacementGroupState::FAILED:
      return "FAILED";
  }
  return "FAILED";
}

const char* PlacementStrategyName(proto::PlacementStrategy strategy) {
  // The wire enum and the scheduler's share one order.
  return scheduler::GroupStrategyName(static_cast<scheduler::GroupStrategy>(strategy));
}

internal::PlacementGroupInfo PlacementGroupFromProto(proto::PlacementGroupInfo::Reader in) {
  internal::PlacementGroupInfo info;
  info.id = in.getPlacementGroupId();
  info.name = in.getName();
  info.ray_namespace = in.getNamespace();
  info.job_id = in.getJobId();
  info.strategy = static_cast<int>(in.getStrategy());
  info.state = PlacementGroupStateName(in.getState());
  for (auto bundle : in.getBundles()) {
    std::map<std::string, double> amounts;
    for (const auto& [name, amount] : ResourcesFromProto(bundle.getResources())) {
      amounts[name] = amount.ToDouble();
    }
    info.bundles.push_back(std::move(amounts));
    info.bundle_nodes.push_back(bundle.getNodeId());
  }
  info.detached = in.getDetached();
  info.cause = in.getCause();
  return info;
}

namespace {
nlohmann::json UnitsJson(const ResourceSet& set) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, amount] : set) j[name] = amount.units();
  return j;
}
ResourceSet UnitsFromJson(const nlohmann::json& j) {
  ResourceSet set;
  for (const auto& [name, units] : j.items()) set.Set(name, FixedPoint::FromUnits(units.get<int64_t>()));
  return set;
}
}  // namespace

std::string NodeInfoToJson(const NodeInfo& info) {
  nlohmann::json j = {
      {"node_id", info.node_id.Hex()},
      {"address", info.address},
      {"hostname", info.hostname},
      {"ip", info.ip},
      {"is_head", info.is_head},
      {"alive", info.alive},
      {"total_units", UnitsJson(info.total)},
      {"available_units", UnitsJson(info.available)},
      {"labels", info.labels},
      {"start_time_ms", info.start_time_ms},
      {"end_time_ms", info.end_time_ms},
      {"last_heartbeat_ms", info.last_heartbeat_ms},
      {"death_reason", info.death_reason},
      {"pid", info.pid},
      {"session_dir", info.session_dir},
      {"store_socket", info.store_socket},
      {"transfer_address", info.transfer_address},
      {"object_store_bytes", info.object_store_bytes},
      {"drain_deadline_ms", info.drain_deadline_ms},
      {"drain_reason", info.drain_reason},
  };
  return j.dump();
}

Result<NodeInfo> NodeInfoFromJson(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    NodeInfo info;
    RAYD_ASSIGN_OR_RETURN(info.node_id, NodeId::FromHex(j.at("node_id").get<std::string>()));
    info.address = j.at("address").get<std::string>();
    info.hostname = j.at("hostname").get<std::string>();
    info.ip = j.at("ip").get<std::string>();
    info.is_head = j.at("is_head").get<bool>();
    info.alive = j.at("alive").get<bool>();
    info.total = UnitsFromJson(j.at("total_units"));
    info.available = UnitsFromJson(j.at("available_units"));
    info.labels = j.at("labels").get<scheduler::Labels>();
    info.start_time_ms = j.at("start_time_ms").get<int64_t>();
    info.end_time_ms = j.at("end_time_ms").get<int64_t>();
    info.last_heartbeat_ms = j.at("last_heartbeat_ms").get<int64_t>();
    info.death_reason = j.at("death_reason").get<std::string>();
    info.pid = j.at("pid").get<int>();
    info.session_dir = j.at("session_dir").get<std::string>();
    info.store_socket = j.value("store_socket", std::string());
    info.transfer_address = j.value("transfer_address", std::string());
    info.object_store_bytes = j.value("object_store_bytes", uint64_t{0});
    info.drain_deadline_ms = j.value("drain_deadline_ms", int64_t{0});
    info.drain_reason = j.value("drain_reason", std::string());
    return info;
  } catch (const nlohmann::json::exception& e) {
    return Status::Internal(std::string("corrupt node record in the GCS store: ") + e.what());
  }
}

std::string ChooseDriverNode(const std::vector<NodeInfo>& nodes, const std::string& hostname,
                             const std::set<std::string>& local_addresses) {
  std::string by_ip_and_name, by_ip, by_name, head;
  auto first = [](std::string& slot, const std::string& address) {
    if (slot.empty()) slot = address;
  };
  for (const NodeInfo& n : nodes) {
    if (!n.alive) continue;
    const bool same_ip = local_addresses.contains(n.ip);
    const bool same_name = n.hostname == hostname;
    if (n.is_head) first(head, n.address);
    if (same_ip && same_name) first(by_ip_and_name, n.address);
    if (same_ip) first(by_ip, n.address);
    if (same_name) first(by_name, n.address);
  }
  for (const std::string* choice : {&by_ip_and_name, &by_ip, &by_name, &head}) {
    if (!choice->empty()) return *choice;
  }
  return "";
}

std::set<std::string> LocalAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) out.insert(text);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace rayd::runtime

namespace rayd {

std::string DrainNoticePath(const std::string& session_dir, const std::string& node_id_hex) {
  return session_dir + "/drain-" + node_id_hex + ".json";
}

std::string DrainNoticeJson(const DrainNotice& notice) {
  return nlohmann::json{{"deadline_ms", notice.deadline_ms}, {"reason", notice.reason}}.dump();
}

std::optional<DrainNotice> ReadDrainNotice(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    return DrainNotice{j.at("deadline_ms").get<int64_t>(), j.value("reason", std::string())};
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // written atomically, so only a foreign file reads so
  }
}

}  // namespace rayd
