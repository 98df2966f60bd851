#pragma once
// The public C++ API of rayd: the one header users include. Names and shapes follow Ray's C++
// API under `rayd::`.
//
//   #include <rayd/api.h>
//   int Plus(int a, int b) { return a + b; }
//   RAYD_REMOTE(Plus);                                   // rayd/api/remote.h
//
//   int main(int argc, char** argv) {
//     rayd::Init(rayd::RaydConfig{}, argc, argv);        // embedded local cluster
//     rayd::ObjectRef<int> sum = rayd::Task(Plus).Remote(1, 2);
//     int three = *rayd::Get(sum);
//     rayd::Shutdown();
//   }
//
// Values: arguments, return values and Put values are serialised with msgpack-cxx. Built-in
// types and standard containers work as they are; your own types opt in with MSGPACK_DEFINE:
//
//   struct Point {
//     double x = 0, y = 0;
//     MSGPACK_DEFINE(x, y);
//   };
//
// ObjectRef<T> and ActorHandle<T> serialise too, so they can be arguments or parts of values.
//
// Errors reach the caller as exceptions derived from rayd::RaydError (rayd/api/errors.h).
//
//   header                 what
//   rayd/api/config.h      RaydConfig
//   rayd/api/errors.h      RaydError, RemoteError, ActorDiedError, ObjectLostError,
//                          TimeoutError, InfeasibleError
//   rayd/api/object_ref.h  ObjectRef<T>
//   rayd/api/objects.h     Put, Get, Wait, WaitResult<T>
//   rayd/api/task_caller.h Task(f) -> TaskCaller
//   rayd/api/actor.h       Actor(factory) -> ActorCreator, ActorHandle<T>, GetActor<T>
//   rayd/api/placement_group.h  CreatePlacementGroup, PlacementGroup, RemovePlacementGroup
//   rayd/api/remote.h      RAYD_REMOTE
//   rayd/api/overload.h    RAYD_FUNC (one overload of a function or method)
//   rayd/api/runtime_env.h RuntimeEnv (env_vars for a job, task or actor)
//   rayd/api/metric.h      Gauge, Counter, Histogram, Sum (application metrics on /metrics)
//   rayd/api/kv.h          KvPut, KvGet, KvDel (the cluster's key-value store)
//   rayd/api/logging.h     RAYDLOG(INFO) << ... (Ray's RAYLOG: log lines from user code)
//   rayd/api/network.h     GetNodeIpAddressFromPerspective (this host's IP toward an address)

#include <map>
#include <string>
#include <vector>

#include "rayd/api/actor.h"
#include "rayd/api/autoscaler.h"
#include "rayd/api/config.h"
#include "rayd/api/errors.h"
#include "rayd/api/kv.h"
#include "rayd/api/logging.h"
#include "rayd/api/metric.h"
#include "rayd/api/network.h"
#include "rayd/api/object_ref.h"
#include "rayd/api/objects.h"
#include "rayd/api/overload.h"
#include "rayd/api/placement_group.h"
#include "rayd/api/reference_counts.h"
#include "rayd/api/remote.h"
#include "rayd/api/runtime_env.h"
#include "rayd/api/task_caller.h"
#include "rayd/api/task_options.h"
#include "rayd/internal/runtime.h"

namespace rayd {

// Connects this program to a cluster (config.address, else RAYD_ADDRESS), or starts an
// embedded one (or, with config.local_mode, none: everything runs in this process), and makes
// it the driver of a new job. `argc`/`argv` let a driver executable that is re-run as a worker
// recognise it: call Init before anything else in main (in a worker it serves tasks and never
// returns). Throws RaydError when the cluster cannot be reached, RuntimeEnvError for a runtime
// env rayd cannot honour. A second Init, while initialised, does nothing (as in Ray).
void Init(RaydConfig config, int argc, char** argv);
void Init(RaydConfig config = {});

// Ends the job: drops this driver's refs and non-detached actors and, for an embedded
// cluster, stops it. Does nothing when not initialised.
void Shutdown();

// True after Init in a driver, and always inside workers.
bool IsInitialized();

// True when Init ran with RaydConfig::local_mode.
bool IsLocalMode();

// The job's namespace (RaydConfig::ray_namespace, or the anonymous one Init made up). Throws
// RaydError when not initialised.
std::string GetNamespace();

// Inside an actor's factory or method: whether this instance is a restart (its worker died and
// the factory ran again, within max_restarts). False outside actors.
bool WasCurrentActorRestarted();

// Inside an actor's method: ends the actor for good once the method returns control (it is
// not restarted, whatever its max_restarts); the call itself and later ones fail with
// ActorDiedError. Throws RaydError outside an actor's method. Does not return.
[[noreturn]] void ExitActor();

// The GPU ids assigned to the calling worker (empty on a driver that reserved none). Throws
// RaydError when not initialised.
inline std::vector<int> GetGpuIds() { return internal::RequireRuntime().GetGpuIds(); }

// The id of the node this process runs on, as hex. Throws RaydError when not initialised.
inline std::string GetNodeId() { return internal::RequireRuntime().GetNodeId(); }

// The resources of the cluster's alive nodes, summed ({"CPU": 8, "GPU": 2, ...}), as
// ray.cluster_resources() gives them; AvailableResources: what is not reserved right now (as
// of the nodes' last heartbeats), on nodes that take new work (not those `rayd drain` is taking
// away). Driver only; throws RaydError when not initialised or the
// head cannot be reached.
std::map<std::string, double> ClusterResources();
std::map<std::string, double> AvailableResources();

}  // namespace rayd
