#include "common/task_spec.h"

#include <cmath>
#include <sstream>

#include "common/node_info.h"
#include "rayd/base/capnp_bytes.h"

namespace rayd::core {
namespace {

// Sets an id field to the id's hex digits, written in place (a nil id stays empty). `init`
// is the field's init function: it sizes the text.
template <typename Id, typename Init>
void SetId(const Id& id, Init init) {
  if (!id.IsNil()) id.WriteHex(init(2 * Id::kSize).begin());
}
template <typename Id>
Result<Id> IdFrom(capnp::Text::Reader text) {
  if (text.size() == 0) return Id::Nil();
  return Id::FromHex(text.cStr());
}

std::string FormatAmount(double amount) {
  std::ostringstream out;
  out << amount;
  return out.str();
}

}  // namespace

void ToProto(const TaskSpec& spec, proto::TaskSpec::Builder out) {
  SetId(spec.task_id, [&](unsigned n) { return out.initTaskId(n); });
  SetId(spec.job_id, [&](unsigned n) { return out.initJobId(n); });
  out.setFunctionName(spec.function_name);
  auto args = out.initArgs(static_cast<unsigned>(spec.args.size()));
  for (unsigned i = 0; i < spec.args.size(); ++i) {
    const auto& a = spec.args[i];
    args[i].setKind(static_cast<uint8_t>(a.kind));
    if (a.kind == TaskArg::Kind::kValue) {
      args[i].setValue(AsData(a.value));
    } else {
      SetId(a.ref, [&](unsigned n) { return args[i].initObjectId(n); });
      args[i].setOwnerAddress(a.owner_address);
    }
  }
  SetId(spec.return_id, [&](unsigned n) { return out.initReturnId(n); });
  out.setCallerAddress(spec.caller_address);
  runtime::FillResources(spec.resources, [&](unsigned n) { return out.initResources(n); });
  out.setMaxRetries(spec.max_retries);
  out.setName(spec.name);
  out.setKind(spec.kind);
  SetId(spec.actor_id, [&](unsigned n) { return out.initActorId(n); });
  out.setMaxConcurrency(spec.max_concurrency);
  out.setAttempt(spec.attempt);
  ToProto(spec.scheduling, out.initScheduling());
}

Result<TaskSpec> FromProto(proto::TaskSpec::Reader in) {
  TaskSpec spec;
  RAYD_ASSIGN_OR_RETURN(spec.task_id, IdFrom<TaskId>(in.getTaskId()));
  RAYD_ASSIGN_OR_RETURN(spec.job_id, IdFrom<JobId>(in.getJobId()));
  spec.function_name = in.getFunctionName();
  for (auto a : in.getArgs()) {
    TaskArg arg;
    if (a.getKind() > 2) return Status::InvalidArgument("unknown argument kind");
    arg.kind = static_cast<TaskArg::Kind>(a.getKind());
    if (arg.kind == TaskArg::Kind::kValue) {
      arg.value = FromData(a.getValue());
    } else {
      RAYD_ASSIGN_OR_RETURN(arg.ref, ObjectId::FromHex(a.getObjectId().cStr()));
      arg.owner_address = a.getOwnerAddress();
    }
    spec.args.push_back(std::move(arg));
  }
  RAYD_ASSIGN_OR_RETURN(spec.return_id, IdFrom<ObjectId>(in.getReturnId()));
  spec.caller_address = in.getCallerAddress();
  spec.resources = runtime::ResourcesFromProto(in.getResources());
  spec.max_retries = in.getMaxRetries();
  spec.name = in.getName();
  spec.kind = in.getKind();
  RAYD_ASSIGN_OR_RETURN(spec.actor_id, IdFrom<ActorId>(in.getActorId()));
  spec.max_concurrency = in.getMaxConcurrency();
  spec.attempt = in.getAttempt();
  spec.scheduling = FromProto(in.getScheduling());
  return spec;
}

void ToProto(const SchedulingOptions& options, proto::SchedulingOptions::Builder out) {
  out.setPlacementGroupId(options.placement_group_id);
  out.setBundleIndex(options.bundle_index);
  runtime::FillLabels(options.label_selector, [&](unsigned n) { return out.initLabelSelector(n); });
  out.setNodeAffinity(options.node_affinity);
  out.setAffinitySoft(options.affinity_soft);
}

SchedulingOptions FromProto(proto::SchedulingOptions::Reader in) {
  SchedulingOptions options;
  options.placement_group_id = in.getPlacementGroupId();
  options.bundle_index = in.getBundleIndex();
  options.label_selector = runtime::LabelsFromProto(in.getLabelSelector());
  options.node_affinity = in.getNodeAffinity();
  options.affinity_soft = in.getAffinitySoft();
  return options;
}

Status ValidatePlacementGroup(const internal::PlacementGroupOptions& options) {
  if (options.bundles.empty()) {
    return Status::InvalidArgument("a placement group needs at least one bundle");
  }
  if (options.strategy < 0 || options.strategy > 3) {
    return Status::InvalidArgument("unknown placement strategy " +
                                   std::to_string(options.strategy) +
                                   " (0 PACK, 1 SPREAD, 2 STRICT_PACK, 3 STRICT_SPREAD)");
  }
  if (!options.bundle_label_selector.empty() &&
      options.bundle_label_selector.size() != options.bundles.size()) {
    return Status::InvalidArgument(
        "bundle_label_selector has " + std::to_string(options.bundle_label_selector.size()) +
        " entries for " + std::to_string(options.bundles.size()) + " bundles");
  }
  for (size_t b = 0; b < options.bundles.size(); ++b) {
    const std::string bundle = "bundle " + std::to_string(b);
    for (const auto& [name, amount] : options.bundles[b]) {
      if (name.empty()) return Status::InvalidArgument(bundle + " names a resource without a name");
      if (!std::isfinite(amount)) {
        return Status::InvalidArgument(bundle + ": " + name + " is not a finite amount (" +
                                       FormatAmount(amount) + ")");
      }
      if (amount < 0) {
        return Status::InvalidArgument(bundle + ": " + name + " is negative (" +
                                       FormatAmount(amount) + ")");
      }
    }
    if (ToResourceSet(options.bundles[b]).IsEmpty()) {
      return Status::InvalidArgument(bundle + " is empty");
    }
  }
  return Status::Ok();
}

void ToProto(const internal::PlacementGroupOptions& options, const std::string& id,
             const JobId& job_id, const std::string& ray_namespace,
             proto::PlacementGroupInfo::Builder out) {
  out.setPlacementGroupId(id);
  out.setName(options.name);
  out.setNamespace(ray_namespace);
  out.setJobId(job_id.Hex());
  out.setStrategy(static_cast<proto::PlacementStrategy>(options.strategy));
  out.setDetached(options.detached);
  auto bundles = out.initBundles(static_cast<unsigned>(options.bundles.size()));
  for (unsigned b = 0; b < options.bundles.size(); ++b) {
    bundles[b].setIndex(b);
    runtime::FillResources(ToResourceSet(options.bundles[b]),
                           [&](unsigned n) { return bundles[b].initResources(n); });
    if (b < options.bundle_label_selector.size()) {
      runtime::FillLabels(options.bundle_label_selector[b],
                          [&](unsigned n) { return bundles[b].initLabelSelector(n); });
    }
  }
}

void ToProto(const internal::ObjectLocation& l, proto::ObjectLocation::Builder out) {
  out.setNodeId(l.node_id);
  out.setNodeAddress(l.node_address);
  out.setTransferAddress(l.transfer_address);
}

internal::ObjectLocation FromProto(proto::ObjectLocation::Reader in) {
  return {in.getNodeId(), in.getNodeAddress(), in.getTransferAddress()};
}

void ToProto(const ObjectValue& value, proto::ObjectValue::Builder out) {
  // Values read in place are never sent on: only their store marker travels.
  if (!value.shared) out.setData(AsData(value.data));
  out.setErrorKind(static_cast<uint8_t>(value.error));
  if (value.error != internal::ErrorKind::kNone) {
    out.setErrorType(value.error_type);
    out.setErrorMessage(value.error_message);
  }
  if (value.in_store) {
    out.setInStore(true);
    out.setSize(value.size);
    auto list = out.initLocations(static_cast<unsigned>(value.locations.size()));
    for (unsigned i = 0; i < value.locations.size(); ++i) ToProto(value.locations[i], list[i]);
  }
  if (!value.nested.empty()) {
    auto nested = out.initNested(static_cast<unsigned>(value.nested.size()));
    for (unsigned i = 0; i < value.nested.size(); ++i) {
      nested[i].setObjectId(value.nested[i].id.Hex());
      nested[i].setOwnerAddress(value.nested[i].owner_address);
    }
  }
}

ObjectValue FromProto(proto::ObjectValue::Reader in) {
  ObjectValue v;
  v.data = FromData(in.getData());
  v.error = static_cast<internal::ErrorKind>(in.getErrorKind());
  v.error_type = in.getErrorType();
  v.error_message = in.getErrorMessage();
  v.in_store = in.getInStore();
  v.size = in.getSize();
  for (auto l : in.getLocations()) v.locations.push_back(FromProto(l));
  for (auto n : in.getNested()) {
    if (auto id = ObjectId::FromHex(n.getObjectId().cStr()); id.ok()) {
      v.nested.push_back({*id, n.getOwnerAddress()});
    }
  }
  return v;
}

ObjectValue ErrorValue(internal::ErrorKind kind, std::string message, std::string type) {
  ObjectValue v;
  v.error = kind;
  v.error_message = std::move(message);
  v.error_type = std::move(type);
  return v;
}

scheduler::ResourceSet ToResourceSet(const std::map<std::string, double>& amounts) {
  scheduler::ResourceSet set;
  for (const auto& [name, amount] : amounts)
    set.Set(name, scheduler::FixedPoint::FromDouble(amount));
  return set;
}

}  // namespace rayd::core
