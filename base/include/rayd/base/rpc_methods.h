#pragma once
// Every remote method's request and reply types, declared once. The typed RPC calls
// (RpcClient::Call<M>, Connection::Call<M>) and handlers (Dispatcher::Handle<M>, Incoming<M>)
// derive their parameter and result types from this table, so a caller that builds the wrong
// request, or a handler that reads the wrong one, does not compile.
//
// proto::Method (rpc.capnp) numbers the methods on the wire; a method used without a line
// here fails to compile (MethodSpec<M> is incomplete).

#include "rayd/protocol/core.capnp.h"
#include "rayd/protocol/gcs.capnp.h"
#include "rayd/protocol/rpc.capnp.h"

namespace rayd::rpc {

template <proto::Method M>
struct MethodSpec;  // Request, Reply: the Cap'n Proto structs of method M

template <proto::Method M>
using RequestOf = typename MethodSpec<M>::Request;
template <proto::Method M>
using ReplyOf = typename MethodSpec<M>::Reply;

#define RAYD_RPC_METHOD(method, request, reply)     \
  template <>                                        \
  struct MethodSpec<proto::Method::method> {         \
    using Request = proto::request;                  \
    using Reply = proto::reply;                      \
  };

// Any service.
RAYD_RPC_METHOD(PING, Empty, Empty)

// The GCS.
RAYD_RPC_METHOD(REGISTER_NODE, RegisterNodeRequest, RegisterNodeReply)
RAYD_RPC_METHOD(HEARTBEAT, HeartbeatRequest, HeartbeatReply)
RAYD_RPC_METHOD(GET_ALL_NODES, GetAllNodesRequest, GetAllNodesReply)
RAYD_RPC_METHOD(UNREGISTER_NODE, UnregisterNodeRequest, Empty)
RAYD_RPC_METHOD(ADD_JOB, AddJobRequest, AddJobReply)
RAYD_RPC_METHOD(MARK_JOB_FINISHED, MarkJobFinishedRequest, Empty)
RAYD_RPC_METHOD(GET_ALL_JOBS, Empty, GetAllJobsReply)
RAYD_RPC_METHOD(KV_PUT, KvPutRequest, KvPutReply)
RAYD_RPC_METHOD(KV_GET, KvGetRequest, KvGetReply)
RAYD_RPC_METHOD(KV_DEL, KvDelRequest, KvDelReply)
RAYD_RPC_METHOD(KV_KEYS, KvKeysRequest, KvKeysReply)
RAYD_RPC_METHOD(KV_EXISTS, KvGetRequest, KvExistsReply)
RAYD_RPC_METHOD(GET_CLUSTER_INFO, Empty, ClusterInfo)
RAYD_RPC_METHOD(WORKER_FAILED, WorkerFailedRequest, Empty)
RAYD_RPC_METHOD(CREATE_ACTOR, CreateActorRequest, CreateActorReply)
RAYD_RPC_METHOD(GET_ACTOR, GetActorRequest, GetActorReply)
RAYD_RPC_METHOD(KILL_ACTOR, KillActorRequest, Empty)
RAYD_RPC_METHOD(GET_ALL_ACTORS, Empty, GetAllActorsReply)
RAYD_RPC_METHOD(JOB_DRIVER_EXITED, JobDriverRequest, Empty)
RAYD_RPC_METHOD(CREATE_PLACEMENT_GROUP, CreatePlacementGroupRequest, CreatePlacementGroupReply)
RAYD_RPC_METHOD(REMOVE_PLACEMENT_GROUP, RemovePlacementGroupRequest, Empty)
RAYD_RPC_METHOD(GET_PLACEMENT_GROUP, GetPlacementGroupRequest, GetPlacementGroupReply)
RAYD_RPC_METHOD(GET_ALL_PLACEMENT_GROUPS, Empty, GetAllPlacementGroupsReply)

// The head (job submission).
RAYD_RPC_METHOD(SUBMIT_JOB, SubmitJobRequest, JobSubmissionReply)
RAYD_RPC_METHOD(GET_JOB_SUBMISSION, JobSubmissionRequest, JobSubmissionReply)
RAYD_RPC_METHOD(LIST_JOB_SUBMISSIONS, Empty, ListJobSubmissionsReply)
RAYD_RPC_METHOD(STOP_JOB_SUBMISSION, JobSubmissionRequest, JobSubmissionReply)
RAYD_RPC_METHOD(READ_JOB_LOGS, ReadJobLogsRequest, ReadJobLogsReply)
RAYD_RPC_METHOD(DRAIN_NODE, DrainNodeRequest, Empty)

// A node daemon.
RAYD_RPC_METHOD(GET_NODE_INFO, Empty, NodeInfo)
RAYD_RPC_METHOD(REQUEST_LEASE, RequestLeaseRequest, RequestLeaseReply)
RAYD_RPC_METHOD(RETURN_LEASE, ReturnLeaseRequest, Empty)
RAYD_RPC_METHOD(REGISTER_WORKER, RegisterWorkerRequest, RegisterWorkerReply)
RAYD_RPC_METHOD(KILL_WORKER, KillWorkerRequest, Empty)
RAYD_RPC_METHOD(JOB_FINISHED, JobFinishedRequest, Empty)
RAYD_RPC_METHOD(GET_WORKERS, Empty, GetWorkersReply)
RAYD_RPC_METHOD(STORE_CREATE, StoreCreateRequest, StoreCreateReply)
RAYD_RPC_METHOD(STORE_SEAL, StoreObjectRequest, Empty)
RAYD_RPC_METHOD(STORE_ABORT, StoreObjectRequest, Empty)
RAYD_RPC_METHOD(STORE_GET, StoreGetRequest, StoreGetReply)
RAYD_RPC_METHOD(STORE_RELEASE, StoreObjectRequest, Empty)
RAYD_RPC_METHOD(STORE_DELETE, StoreDeleteRequest, Empty)
RAYD_RPC_METHOD(STORE_LIST, Empty, StoreListReply)
RAYD_RPC_METHOD(PREPARE_BUNDLES, PrepareBundlesRequest, Empty)
RAYD_RPC_METHOD(COMMIT_BUNDLES, CommitBundlesRequest, Empty)
RAYD_RPC_METHOD(CANCEL_BUNDLES, CancelBundlesRequest, Empty)
RAYD_RPC_METHOD(SET_WORKER_BLOCKED, SetWorkerBlockedRequest, Empty)
RAYD_RPC_METHOD(REPORT_METRICS, ReportMetricsRequest, Empty)

// A core worker: an executor, or the owner of objects.
RAYD_RPC_METHOD(PUSH_TASK, PushTaskRequest, PushTaskReply)
RAYD_RPC_METHOD(GET_OBJECT, GetObjectRequest, GetObjectReply)
RAYD_RPC_METHOD(ADD_OBJECT_LOCATION, AddObjectLocationRequest, Empty)
RAYD_RPC_METHOD(ADD_BORROWER, BorrowerRequest, Empty)
RAYD_RPC_METHOD(REMOVE_BORROWER, BorrowerRequest, Empty)

#undef RAYD_RPC_METHOD

}  // namespace rayd::rpc
