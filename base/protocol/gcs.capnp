@0x86e413423d6e4092;
# Messages of the GCS service (in the head daemon).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("rayd::proto");

# A named quantity in fixed point: amount = units / 10000.
struct ResourceAmount {
  name @0 :Text;
  units @1 :Int64;
}

struct Label {
  key @0 :Text;
  value @1 :Text;
}

enum NodeState {
  alive @0;
  dead @1;
}

struct NodeInfo {
  nodeId @0 :Text;               # 32 hex digits
  address @1 :Text;              # the node daemon's RPC address, host:port
  hostname @2 :Text;
  ip @3 :Text;
  isHead @4 :Bool;
  state @5 :NodeState;
  total @6 :List(ResourceAmount);
  available @7 :List(ResourceAmount);
  labels @8 :List(Label);
  startTimeMs @9 :Int64;         # unix epoch ms
  endTimeMs @10 :Int64;          # when declared dead; 0 while alive
  deathReason @11 :Text;
  pid @12 :Int32;
  sessionDir @13 :Text;
  lastHeartbeatMs @14 :Int64;    # unix epoch ms, as the GCS saw it
  storeSocket @15 :Text;         # Unix socket that hands out the object store arena
  transferAddress @16 :Text;     # host:port of the object transfer channel
  objectStoreBytes @17 :UInt64;  # arena size
  infeasible @18 :List(ResourceDemand);  # waiting for a node that could ever satisfy them
  # `rayd drain`: the node is leaving. Nothing new is placed on it; at drainDeadlineMs its
  # workers are stopped and the node goes. 0: not draining.
  drainDeadlineMs @19 :Int64;    # unix epoch ms
  drainReason @20 :Text;
  queued @21 :List(ResourceDemand);      # waiting here for room (from heartbeats)
  primaryObjects @22 :UInt32;            # primary object copies in its store (from heartbeats)
}

struct ResourceDemand {
  resources @0 :List(ResourceAmount);
  count @1 :UInt32;
  waitingSinceMs @2 :Int64;
}

struct RegisterNodeRequest {
  node @0 :NodeInfo;
}
struct RegisterNodeReply {
  clusterId @0 :Text;
}

struct HeartbeatRequest {
  nodeId @0 :Text;
  available @1 :List(ResourceAmount);
  infeasible @2 :List(ResourceDemand);
  # Requests that fit this node but wait for room (not those for a placement group's bundle):
  # demand an autoscaler may launch nodes for.
  queued @3 :List(ResourceDemand);
  # Primary object copies in this node's store (the copies owners count on): work an autoscaler
  # must not drain away.
  primaryObjects @4 :UInt32;
}
struct HeartbeatReply {
  # unknown: the GCS has no such node (it lost its state): register again under the same id.
  # dead: the node was declared dead; it must rejoin as a new node.
  status @0 :Status;
  drainDeadlineMs @1 :Int64;     # non-zero: this node is being drained (DrainNodeRequest)
  drainReason @2 :Text;
  enum Status {
    ok @0;
    unknown @1;
    dead @2;
  }
}

struct UnregisterNodeRequest {
  nodeId @0 :Text;
  reason @1 :Text;
}

# A preemption notice: the node stops taking work now and leaves at the deadline (its workers
# stopped), or as soon as nothing runs on it.
struct DrainNodeRequest {
  nodeId @0 :Text;
  deadlineMs @1 :Int64;          # unix epoch ms
  reason @2 :Text;
}

struct GetAllNodesRequest {
  onlyAlive @0 :Bool;
}
struct GetAllNodesReply {
  nodes @0 :List(NodeInfo);
}

struct JobInfo {
  jobId @0 :Text;
  driverPid @1 :Int32;
  driverHost @2 :Text;
  entrypoint @3 :Text;
  startTimeMs @4 :Int64;
  endTimeMs @5 :Int64;
  isDead @6 :Bool;
}
struct AddJobRequest {
  job @0 :JobInfo;
}
struct AddJobReply {
  jobId @0 :Text;
}
struct MarkJobFinishedRequest {
  jobId @0 :Text;
}
struct GetAllJobsReply {
  jobs @0 :List(JobInfo);
}

struct KvPutRequest {
  namespace @0 :Text;
  key @1 :Text;
  value @2 :Data;
  overwrite @3 :Bool;
}
struct KvPutReply {
  added @0 :Bool;                # false: the key existed (and was overwritten only if asked)
}
struct KvGetRequest {
  namespace @0 :Text;
  key @1 :Text;
}
struct KvGetReply {
  found @0 :Bool;
  value @1 :Data;
}
struct KvDelRequest {
  namespace @0 :Text;
  key @1 :Text;
  byPrefix @2 :Bool;
}
struct KvDelReply {
  deleted @0 :UInt32;
}
struct KvKeysRequest {
  namespace @0 :Text;
  prefix @1 :Text;
}
struct KvKeysReply {
  keys @0 :List(Text);
}
struct KvExistsReply {
  exists @0 :Bool;
}

struct ClusterInfo {
  clusterId @0 :Text;
  gcsAddress @1 :Text;
  storage @2 :Text;              # "memory" or "redis://host:port"
  startTimeMs @3 :Int64;
  heartbeatPeriodMs @4 :UInt32;
  heartbeatMissedLimit @5 :UInt32;
  dashboardUrl @6 :Text;         # "http://host:port/"; "" while the head serves none
}

# Jobs submitted with `rayd job submit`: a driver command the head runs for the user, in a
# working directory shipped with the request (Ray Jobs' model).
struct JobSubmission {
  submissionId @0 :Text;
  entrypoint @1 :List(Text);     # argv, or one shell command line
  status @2 :Text;               # PENDING RUNNING SUCCEEDED FAILED STOPPED
  message @3 :Text;              # why it is in its status, in one line
  pid @4 :Int32;                 # its driver's process (0 before it started)
  exitCode @5 :Int32;            # -1: none (killed by a signal, or never ran)
  startTimeMs @6 :Int64;
  endTimeMs @7 :Int64;           # 0 while it runs
  workingDir @8 :Text;           # where it runs on the head
  logPath @9 :Text;              # its driver's stdout and stderr, on the head
  runtimeEnvJson @10 :Text;
  driverStartTicks @11 :UInt64;  # /proc/PID/stat starttime: tells its process from a reused pid
}
struct PackedFile {
  path @0 :Text;                 # relative, '/'-separated, no '..'
  mode @1 :UInt32;               # permission bits
  data @2 :Data;
  isDirectory @3 :Bool;
}
struct SubmitJobRequest {
  submissionId @0 :Text;         # empty: the head names it
  entrypoint @1 :List(Text);
  runtimeEnvJson @2 :Text;       # {"env_vars": {...}} (empty: none)
  files @3 :List(PackedFile);    # the working directory's contents
}
struct JobSubmissionRequest {
  submissionId @0 :Text;
}
struct JobSubmissionReply {
  job @0 :JobSubmission;
}
struct ListJobSubmissionsReply {
  jobs @0 :List(JobSubmission);
}
struct ReadJobLogsRequest {
  submissionId @0 :Text;
  offset @1 :UInt64;
  maxBytes @2 :UInt32;
  fromEnd @3 :Bool;              # the last maxBytes (offset unused)
}
struct ReadJobLogsReply {
  data @0 :Data;
  nextOffset @1 :UInt64;
  job @2 :JobSubmission;         # its status when the bytes were read
}
