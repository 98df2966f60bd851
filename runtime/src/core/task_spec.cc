#include "core/task_spec.h"

#include "common/node_info.h"

namespace rayd::core {
namespace {

capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}
std::string FromData(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}
template <typename Id>
std::string IdHex(const Id& id) {
  return id.IsNil() ? "" : id.Hex();
}
template <typename Id>
Result<Id> IdFrom(capnp::Text::Reader text) {
  if (text.size() == 0) return Id::Nil();
  return Id::FromHex(text.cStr());
}

}  // namespace

void ToProto(const TaskSpec& spec, proto::TaskSpec::Builder out) {
  out.setTaskId(IdHex(spec.task_id));
  out.setJobId(IdHex(spec.job_id));
  out.setFunctionName(spec.function_name);
  auto args = out.initArgs(static_cast<unsigned>(spec.args.size()));
  for (unsigned i = 0; i < spec.args.size(); ++i) {
    const auto& a = spec.args[i];
    args[i].setKind(static_cast<uint8_t>(a.kind));
    if (a.kind == TaskArg::Kind::kValue) {
      args[i].setValue(AsData(a.value));
    } else {
      args[i].setObjectId(a.ref.Hex());
      args[i].setOwnerAddress(a.owner_address);
    }
  }
  out.setReturnId(IdHex(spec.return_id));
  out.setCallerAddress(spec.caller_address);
  runtime::FillResources(spec.resources, [&](unsigned n) { return out.initResources(n); });
  out.setMaxRetries(spec.max_retries);
  out.setName(spec.name);
  out.setKind(spec.kind);
  out.setActorId(IdHex(spec.actor_id));
  out.setMaxConcurrency(spec.max_concurrency);
  out.setAttempt(spec.attempt);
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
  return spec;
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
