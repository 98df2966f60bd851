#pragma once
// Task specs (with their scheduling options), object values and placement-group requests as
// plain values, and their one conversion to Cap'n Proto.

#include <map>
#include <string>
#include <vector>

#include "rayd/internal/runtime.h"
#include "rayd/protocol/core.capnp.h"
#include "rayd/scheduler/resources.h"

namespace rayd::core {

using internal::ObjectValue;
using internal::SchedulingOptions;
using internal::TaskArg;

struct TaskSpec {
  using Kind = proto::TaskSpec::Kind;
  TaskId task_id;
  JobId job_id;
  std::string function_name;
  std::vector<TaskArg> args;
  ObjectId return_id;
  std::string caller_address;
  scheduler::ResourceSet resources;
  int max_retries = 0;
  std::string name;
  Kind kind = Kind::NORMAL;
  ActorId actor_id;
  int max_concurrency = 1;
  int attempt = 0;
  SchedulingOptions scheduling;
  // Caller side only (not on the wire): environment variables its worker must have (the
  // task's runtime env), on top of the job's launch environment.
  std::map<std::string, std::string> env;
  // Caller side only: its result can be made again by running it again (lineage), decided at
  // submission, before its ref arguments are resolved (core/reference_counter.h).
  bool reconstructable = false;
};

void ToProto(const TaskSpec& spec, proto::TaskSpec::Builder out);
Result<TaskSpec> FromProto(proto::TaskSpec::Reader in);

void ToProto(const SchedulingOptions& options, proto::SchedulingOptions::Builder out);
SchedulingOptions FromProto(proto::SchedulingOptions::Reader in);

// Placement groups. The checks CreatePlacementGroup makes before asking the GCS: at least one
// bundle, none empty (after dropping zero amounts), every amount finite and not negative, a
// known strategy. InvalidArgument names the bundle and resource.
Status ValidatePlacementGroup(const internal::PlacementGroupOptions& options);
// The group as CREATE_PLACEMENT_GROUP carries it (state, nodes and times are the GCS's).
void ToProto(const internal::PlacementGroupOptions& options, const std::string& id,
             const JobId& job_id, const std::string& ray_namespace,
             proto::PlacementGroupInfo::Builder out);
// Groups the GCS reports are read with runtime::PlacementGroupFromProto (common/node_info.h).

void ToProto(const ObjectValue& value, proto::ObjectValue::Builder out);
ObjectValue FromProto(proto::ObjectValue::Reader in);
void ToProto(const internal::ObjectLocation& location, proto::ObjectLocation::Builder out);
internal::ObjectLocation FromProto(proto::ObjectLocation::Reader in);

ObjectValue ErrorValue(internal::ErrorKind kind, std::string message, std::string type = "");

// Converts a {name: amount} map from the API to a ResourceSet (amounts in fixed point).
scheduler::ResourceSet ToResourceSet(const std::map<std::string, double>& amounts);

}  // namespace rayd::core
