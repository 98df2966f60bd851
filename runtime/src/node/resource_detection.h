#pragma once
// What this machine has: CPUs, memory, GPUs. Flags override each value.

#include <cstdint>

#include "rayd/runtime/cluster.h"

namespace rayd::node {

// CPUs this process may run on (its affinity mask).
int DetectCpus();
// MemTotal from /proc/meminfo, in bytes.
int64_t DetectTotalMemoryBytes();
// CUDA devices when built with CUDA and a driver answers; otherwise 0 (a CUDA error such as
// "no driver" means no GPUs, not a failure).
int DetectGpus();

// The node's total resources: detected values unless `options` sets them, plus custom ones.
// memory defaults to 70% of RAM and object_store_memory to 30%, as in Ray.
scheduler::ResourceSet ResolveNodeResources(const NodeResourceOptions& options);

// Workers a node prestarts for a job's first task lease: one per further CPU, at most 3.
int DefaultPrestartWorkers(const scheduler::ResourceSet& total);

}  // namespace rayd::node
