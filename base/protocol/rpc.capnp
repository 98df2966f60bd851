@0x934c1d578300386b;
# The frame every rayd connection carries, and the handshake that opens it.
# Frames use Cap'n Proto's standard stream framing (segment table, then segments).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("rayd::proto");

const protocolVersion :UInt32 = 2;  # 2: proofs are tagged by channel (handshake.h)

# Every remote method of every service. Append only: the number is on the wire.
enum Method {
  ping @0;                 # any service; empty params, empty result
  registerNode @1;         # GCS: RegisterNodeRequest -> RegisterNodeReply
  heartbeat @2;            # GCS: HeartbeatRequest -> HeartbeatReply
  getAllNodes @3;          # GCS: GetAllNodesRequest -> GetAllNodesReply
  unregisterNode @4;       # GCS: UnregisterNodeRequest -> empty
  addJob @5;               # GCS: AddJobRequest -> AddJobReply
  markJobFinished @6;      # GCS: MarkJobFinishedRequest -> empty
  getAllJobs @7;           # GCS: empty -> GetAllJobsReply
  kvPut @8;                # GCS: KvPutRequest -> KvPutReply
  kvGet @9;                # GCS: KvGetRequest -> KvGetReply
  kvDel @10;               # GCS: KvDelRequest -> KvDelReply
  kvKeys @11;              # GCS: KvKeysRequest -> KvKeysReply
  kvExists @12;            # GCS: KvGetRequest -> KvExistsReply
  getClusterInfo @13;      # GCS: empty -> ClusterInfo
  getNodeInfo @14;         # node: empty -> NodeInfo
  pushTask @15;            # core worker: PushTaskRequest -> PushTaskReply
  getObject @16;           # core worker (owner): GetObjectRequest -> GetObjectReply
  requestLease @17;        # node: RequestLeaseRequest -> RequestLeaseReply
  returnLease @18;         # node: ReturnLeaseRequest -> empty
  registerWorker @19;      # node: RegisterWorkerRequest -> RegisterWorkerReply
  killWorker @20;          # node: KillWorkerRequest -> empty
  jobFinished @21;         # node: JobFinishedRequest -> empty (kills the job's workers)
  getWorkers @22;          # node: empty -> GetWorkersReply
  workerFailed @23;        # GCS: WorkerFailedRequest -> empty
  createActor @24;         # GCS: CreateActorRequest -> CreateActorReply
  getActor @25;            # GCS: GetActorRequest -> GetActorReply
  killActor @26;           # GCS: KillActorRequest -> empty
  getAllActors @27;        # GCS: empty -> GetAllActorsReply
  jobDriverExited @28;     # GCS: JobDriverRequest -> empty (clean driver exit)
  storeCreate @29;         # node: StoreCreateRequest -> StoreCreateReply (space in the arena)
  storeSeal @30;           # node: StoreObjectRequest -> empty
  storeAbort @31;          # node: StoreObjectRequest -> empty
  storeGet @32;            # node: StoreGetRequest -> StoreGetReply (pinned for the caller)
  storeRelease @33;        # node: StoreObjectRequest -> empty (drops one pin)
  storeDelete @34;         # node: StoreDeleteRequest -> empty (the owner freed the objects)
  storeList @35;           # node: empty -> StoreListReply
  addObjectLocation @36;   # core worker (owner): AddObjectLocationRequest -> empty
  addBorrower @37;         # core worker (owner): BorrowerRequest -> empty
  removeBorrower @38;      # core worker (owner): BorrowerRequest -> empty
  createPlacementGroup @39;   # GCS: CreatePlacementGroupRequest -> CreatePlacementGroupReply
  removePlacementGroup @40;   # GCS: RemovePlacementGroupRequest -> empty
  getPlacementGroup @41;      # GCS: GetPlacementGroupRequest -> GetPlacementGroupReply
  getAllPlacementGroups @42;  # GCS: empty -> GetAllPlacementGroupsReply
  prepareBundles @43;         # node: PrepareBundlesRequest -> empty (all reserved, or none)
  commitBundles @44;          # node: CommitBundlesRequest -> empty
  cancelBundles @45;          # node: CancelBundlesRequest -> empty (frees, kills their workers)
  setWorkerBlocked @46;       # node: SetWorkerBlockedRequest -> empty (a task waits in Get)
  reportMetrics @47;          # node: ReportMetricsRequest -> empty (a worker's app metrics)
  submitJob @48;              # head: SubmitJobRequest -> JobSubmissionReply (`rayd job submit`)
  getJobSubmission @49;       # head: JobSubmissionRequest -> JobSubmissionReply
  listJobSubmissions @50;     # head: empty -> ListJobSubmissionsReply
  stopJobSubmission @51;      # head: JobSubmissionRequest -> JobSubmissionReply
  readJobLogs @52;            # head: ReadJobLogsRequest -> ReadJobLogsReply
  drainNode @53;              # GCS: DrainNodeRequest -> empty (`rayd drain`)
}

# Server -> client, first frame on a connection.
struct Hello {
  protocolVersion @0 :UInt32;
  nonce @1 :Data;          # 32 random bytes
  role @2 :Text;           # "gcs", "node", ...
}

# Client -> server: proves the token without sending it.
struct Auth {
  protocolVersion @0 :UInt32;
  role @1 :Text;           # "node", "driver", "cli", "worker"
  proof @2 :Data;          # HMAC-SHA256(token, "rayd-client" || server nonce)
  nonce @3 :Data;          # 32 random bytes for the server's proof
}

# Server -> client: the verdict; on success the server proves the token too.
struct AuthResult {
  ok @0 :Bool;
  message @1 :Text;
  proof @2 :Data;          # HMAC-SHA256(token, "rayd-server" || client nonce)
}

struct Request {
  method @0 :Method;
  timeoutMs @1 :UInt32;    # 0 = none; the server may drop work whose caller gave up
  params @2 :AnyPointer;
}

struct Response {
  code @0 :UInt8;          # rayd::StatusCode; 0 = ok
  message @1 :Text;
  result @2 :AnyPointer;
}

struct Frame {
  id @0 :UInt64;           # request id; a response carries its request's id
  union {
    hello @1 :Hello;
    auth @2 :Auth;
    authResult @3 :AuthResult;
    request @4 :Request;
    response @5 :Response;
  }
}

struct Empty {}
