@0xaa24f35a240361e6;
# Tasks, actors, objects, workers and leases: what drivers, workers, node daemons and the GCS
# say to each other to run user code.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("rayd::proto");

using Gcs = import "gcs.capnp";

# ---- Values ------------------------------------------------------------------------------------

# An object's content: msgpack bytes, or why there is none (rayd::internal::ErrorKind).
struct ObjectValue {
  data @0 :Data;
  errorKind @1 :UInt8;           # 0 = none (a value)
  errorType @2 :Text;            # remote exception type, for errorKind = remote
  errorMessage @3 :Text;
  # A value too large to inline lives in node object stores instead: `data` is empty.
  inStore @4 :Bool;
  size @5 :UInt64;               # its size in bytes
  locations @6 :List(ObjectLocation);  # nodes holding a copy (the first: the primary)
  # The refs inside the value (rayd::internal::NestedRef). In a task's reply: the worker has
  # registered the caller as their borrower, and the caller keeps them while the value lives.
  nested @7 :List(NestedRef);
}

struct NestedRef {
  objectId @0 :Text;
  ownerAddress @1 :Text;
}

struct ObjectLocation {
  nodeId @0 :Text;
  nodeAddress @1 :Text;          # the node daemon's RPC address
  transferAddress @2 :Text;      # its object transfer channel
}

struct TaskArg {
  kind @0 :UInt8;                # rayd::internal::TaskArg::Kind: 0 value, 1 ref, 2 ref-as-ref
  value @1 :Data;
  objectId @2 :Text;
  ownerAddress @3 :Text;
}

struct TaskSpec {
  taskId @0 :Text;
  jobId @1 :Text;
  functionName @2 :Text;
  args @3 :List(TaskArg);
  returnId @4 :Text;             # the object the result is stored under, owned by the caller
  callerAddress @5 :Text;        # the caller's core worker (owner of returnId)
  resources @6 :List(Gcs.ResourceAmount);
  maxRetries @7 :Int32;
  name @8 :Text;
  kind @9 :Kind;
  actorId @10 :Text;             # actor creation and actor tasks
  maxConcurrency @11 :Int32;     # actor creation
  attempt @12 :Int32;            # 0 for the first try
  scheduling @13 :SchedulingOptions;
  enum Kind {
    normal @0;
    actorCreation @1;
    actorTask @2;
  }
}

# Where a task or actor may run, beyond its resources. The default (all empty) lets the
# scheduler choose any node.
struct SchedulingOptions {
  placementGroupId @0 :Text;     # run inside this group's bundles (its resources come from them)
  bundleIndex @1 :Int32 = -1;    # which bundle; -1: any bundle of the group
  labelSelector @2 :List(Gcs.Label);  # the node must carry every key=value
  nodeAffinity @3 :Text;         # a node id: run there...
  affinitySoft @4 :Bool;         # ...or, when soft, prefer it and fall back to the others
}

# ---- Core worker service (every driver and worker serves it) ---------------------------------

struct PushTaskRequest {
  spec @0 :TaskSpec;
}
struct PushTaskReply {
  value @0 :ObjectValue;
}

# Owner side: the value of an object this process owns, once it exists (the call waits).
struct GetObjectRequest {
  objectId @0 :Text;
}
struct GetObjectReply {
  value @0 :ObjectValue;
}

# ---- Node daemon: workers and leases -----------------------------------------------------------

# The command and environment a node daemon runs a job's workers with.
struct WorkerLaunch {
  argv @0 :List(Text);           # argv[0] is the executable (the driver itself, re-run)
  env @1 :List(Gcs.Label);       # extra environment (code search path, ...)
}

struct RequestLeaseRequest {
  jobId @0 :Text;
  resources @1 :List(Gcs.ResourceAmount);
  launch @2 :WorkerLaunch;
  forActor @3 :Bool;             # an actor's worker: it is never shared after the lease
  grantOrReject @4 :Bool;        # set on a spilled-back request: don't spill again
  scheduling @5 :SchedulingOptions;  # a placement-group lease is served from the bundle only
}
struct RequestLeaseReply {
  union {
    granted @0 :Lease;
    spillback @1 :Spillback;     # ask this node instead
  }
  struct Lease {
    leaseId @0 :Text;
    workerId @1 :Text;
    workerAddress @2 :Text;      # the leased worker's core worker service
    nodeId @3 :Text;
    gpuIds @4 :List(Int32);
    # Whether the node could grant another lease of this shape right now: when it could not,
    # the submitter may queue tasks behind busy workers (no lease can be had for them).
    moreRoom @5 :Bool;
  }
  struct Spillback {
    nodeId @0 :Text;
    nodeAddress @1 :Text;
  }
}

struct ReturnLeaseRequest {
  leaseId @0 :Text;
  killWorker @1 :Bool;           # the worker is unusable (or held an actor): end it
}

struct RegisterWorkerRequest {
  workerId @0 :Text;
  address @1 :Text;              # its core worker service
  pid @2 :Int32;
}
struct RegisterWorkerReply {
  nodeId @0 :Text;
  gcsAddress @1 :Text;
}

# Worker -> its node: the task it runs waits in Get/Wait (blocked) or runs again. While blocked
# the lease's CPUs go back to the node, so the tasks it waits for can be leased (Ray's rule);
# unblocking takes them back when they are free.
struct SetWorkerBlockedRequest {
  workerId @0 :Text;
  blocked @1 :Bool;
}

# Worker -> its node: the application metrics recorded in the worker (rayd/api/metric.h), the
# whole current state of each series, served on the node's /metrics.
struct MetricSeries {
  name @0 :Text;
  description @1 :Text;
  unit @2 :Text;
  kind @3 :UInt8;                # 0 gauge, 1 counter, 2 sum, 3 histogram
  tags @4 :List(Gcs.Label);
  value @5 :Float64;             # gauge: last value; counter, sum: total; histogram: sum
  count @6 :UInt64;              # histogram: observations
  boundaries @7 :List(Float64);  # histogram: upper bounds of the buckets, ascending
  buckets @8 :List(UInt64);      # histogram: observations per bucket (boundaries + 1, not cumulative)
  updatedMs @9 :Int64;           # unix ms of its last change (the newest gauge value wins)
}
struct ReportMetricsRequest {
  workerId @0 :Text;
  series @1 :List(MetricSeries);
}

struct KillWorkerRequest {
  workerId @0 :Text;
  reason @1 :Text;
}

struct JobFinishedRequest {
  jobId @0 :Text;
}

struct WorkerInfo {
  workerId @0 :Text;
  jobId @1 :Text;
  nodeId @2 :Text;
  pid @3 :Int32;
  address @4 :Text;
  state @5 :Text;                # STARTING, IDLE, LEASED, DEAD
  actorId @6 :Text;
  exitReason @7 :Text;
}
struct GetWorkersReply {
  workers @0 :List(WorkerInfo);
}

# Node -> GCS: a worker process ended.
struct WorkerFailedRequest {
  workerId @0 :Text;
  nodeId @1 :Text;
  jobId @2 :Text;
  reason @3 :Text;
}

# ---- GCS: actors -------------------------------------------------------------------------------

enum ActorState {
  pendingCreation @0;
  alive @1;
  restarting @2;
  dead @3;
}

struct ActorInfo {
  actorId @0 :Text;
  jobId @1 :Text;
  name @2 :Text;
  namespace @3 :Text;
  className @4 :Text;            # the factory's name
  state @5 :ActorState;
  address @6 :Text;              # its worker's core worker service, while alive
  nodeId @7 :Text;
  workerId @8 :Text;
  numRestarts @9 :Int32;
  maxRestarts @10 :Int32;
  detached @11 :Bool;
  deathCause @12 :Text;
  pid @13 :Int32;
}

struct CreateActorRequest {
  spec @0 :TaskSpec;             # kind = actorCreation; carries actorId
  name @1 :Text;
  namespace @2 :Text;
  maxRestarts @3 :Int32;
  detached @4 :Bool;
  launch @5 :WorkerLaunch;
}
struct CreateActorReply {
  actorId @0 :Text;
}

struct GetActorRequest {
  actorId @0 :Text;              # or, when empty, by name:
  name @1 :Text;
  namespace @2 :Text;
  waitUntilSettled @3 :Bool;     # wait while pending or restarting (until alive or dead)
}
struct GetActorReply {
  found @0 :Bool;
  actor @1 :ActorInfo;
}

struct KillActorRequest {
  actorId @0 :Text;
  noRestart @1 :Bool;
}

struct GetAllActorsReply {
  actors @0 :List(ActorInfo);
}

# Driver -> GCS: this job is done (also implied when the driver's connection drops).
struct JobDriverRequest {
  jobId @0 :Text;
}

# ---- Node daemon: the shared-memory object store ------------------------------------------------
# Object bytes never travel in these messages: clients map the node's arena (its descriptor is
# handed out on NodeInfo.storeSocket) and read and write objects in place.

struct StoreCreateRequest {
  objectId @0 :Text;
  size @1 :UInt64;
  owner @2 :Text;                # the owner's core worker address
  callerIsOwner @3 :Bool;        # a Put: the owner is the process on this connection
}
struct StoreCreateReply {
  offset @0 :UInt64;             # where to write `size` bytes in the arena; then seal
}

struct StoreObjectRequest {
  objectId @0 :Text;
}

struct StoreGetRequest {
  objectId @0 :Text;
  size @1 :UInt64;
  locations @2 :List(ObjectLocation);  # where to pull it from when this node has no copy
  owner @3 :Text;                # told about the new copy once pulled
}
struct StoreGetReply {
  offset @0 :UInt64;
  size @1 :UInt64;
}

struct StoreDeleteRequest {
  objectIds @0 :List(Text);
}

struct StoreObjectInfo {
  objectId @0 :Text;
  size @1 :UInt64;
  state @2 :Text;                # CREATING, SEALED, SPILLED
  primary @3 :Bool;
  pins @4 :Int32;
  owner @5 :Text;
  spillPath @6 :Text;
}
struct StoreListReply {
  objects @0 :List(StoreObjectInfo);
  capacity @1 :UInt64;
  used @2 :UInt64;
  spilledBytes @3 :UInt64;
  totalEvicted @4 :UInt64;
  totalSpilled @5 :UInt64;
  totalRestored @6 :UInt64;
  peakUsed @7 :UInt64;           # the most bytes allocated at once since the store started
}

struct AddObjectLocationRequest {
  objectId @0 :Text;
  location @1 :ObjectLocation;
}

# Borrower -> owner: this process keeps (or no longer keeps) refs to these objects after the
# task that gave them to it ended; the owner frees nothing a borrower still holds.
struct BorrowerRequest {
  objectIds @0 :List(Text);
  borrower @1 :Text;             # the borrower's core worker address
}

# ---- GCS: placement groups ---------------------------------------------------------------------

enum PlacementStrategy {
  pack @0;
  spread @1;
  strictPack @2;
  strictSpread @3;
}

enum PlacementGroupState {
  pending @0;                    # waiting for room (or for a node that could ever hold it)
  created @1;                    # every bundle is reserved on its node
  rescheduling @2;               # a node holding some bundles died; they are being placed again
  removed @3;                    # removed by its user, or its job ended
  failed @4;                     # infeasible for longer than the infeasible timeout
}

struct PlacementBundle {
  index @0 :UInt32;
  resources @1 :List(Gcs.ResourceAmount);
  labelSelector @2 :List(Gcs.Label);
  nodeId @3 :Text;               # where it is reserved; empty while unplaced
  nodeAddress @4 :Text;          # that node daemon's RPC address
}

struct PlacementGroupInfo {
  placementGroupId @0 :Text;     # 32 hex digits
  name @1 :Text;
  namespace @2 :Text;
  jobId @3 :Text;
  strategy @4 :PlacementStrategy;
  state @5 :PlacementGroupState;
  bundles @6 :List(PlacementBundle);
  detached @7 :Bool;
  createTimeMs @8 :Int64;        # unix epoch ms
  readyTimeMs @9 :Int64;         # when it was (last) created; 0 until then
  cause @10 :Text;               # why it is pending (the scheduler's reason), removed or failed
}

struct CreatePlacementGroupRequest {
  group @0 :PlacementGroupInfo;  # id chosen by the caller; state, nodes and times ignored
}
struct CreatePlacementGroupReply {
  placementGroupId @0 :Text;
}

struct RemovePlacementGroupRequest {
  placementGroupId @0 :Text;
}

struct GetPlacementGroupRequest {
  placementGroupId @0 :Text;     # or, when empty, by name:
  name @1 :Text;
  namespace @2 :Text;
  waitUntilReady @3 :Bool;       # hold the reply while pending or rescheduling
}
struct GetPlacementGroupReply {
  found @0 :Bool;
  group @1 :PlacementGroupInfo;
}

struct GetAllPlacementGroupsReply {
  groups @0 :List(PlacementGroupInfo);
}

# ---- Node daemon: bundle reservations (two-phase, driven by the GCS) ---------------------------

struct BundleReservation {
  index @0 :UInt32;
  resources @1 :List(Gcs.ResourceAmount);
}

# Reserves every listed bundle of the group on this node, or none (ResourceExhausted, naming
# what did not fit). Repeating a prepare of bundles already held here is a no-op success.
# With commit set the bundles are usable at once (a group that lies on one node needs no
# second phase).
#
# `nodeId` (in Prepare, Commit and Cancel) names the node incarnation the GCS means (hex). A
# daemon that has since rejoined under a new id refuses the call (NotFound) instead of
# acting for its dead incarnation: a prepare queued on a connection that outlived a link cut
# would otherwise reserve bundles that no attempt of the GCS tracks. Empty: any incarnation.
struct PrepareBundlesRequest {
  placementGroupId @0 :Text;
  bundles @1 :List(BundleReservation);
  commit @2 :Bool;
  nodeId @3 :Text;
}

# Makes the group's prepared bundles on this node usable by leases.
struct CommitBundlesRequest {
  placementGroupId @0 :Text;
  nodeId @1 :Text;
}

# Frees the listed bundles of the group on this node (all of them when `indexes` is empty),
# prepared or committed: the workers leased from them are killed and queued leases for them
# fail. Unknown groups and bundles are a no-op success.
struct CancelBundlesRequest {
  placementGroupId @0 :Text;
  indexes @1 :List(UInt32);
  reason @2 :Text;
  nodeId @3 :Text;
}
