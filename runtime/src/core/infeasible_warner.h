#pragma once
// InfeasibleWarner: puts a warning in this process's log (the driver's, or a worker's) when
// something it asked for cannot be placed on any node of the cluster as it stands, as Ray's
// driver prints "cannot be scheduled right now". Such a request is not refused at once: it
// waits up to the cluster's infeasible timeout for a node that can hold it to join, then fails
// with InfeasibleError. The warning is what tells a user why nothing is happening meanwhile.
//
// Watch() is cheap and called on every new request shape; after a short delay (nodes still
// joining should not raise a false alarm) one GET_ALL_NODES answers every shape watched so far,
// and each shape that fits no alive node's total resources is warned about once.
//
// Threading: the core worker's event loop only.

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/task_submitter.h"
#include "rayd/base/event_loop.h"
#include "rayd/scheduler/resources.h"

namespace rayd::core {

class InfeasibleWarner {
 public:
  // `ctx` must outlive the warner; nothing is checked once it is stopping.
  explicit InfeasibleWarner(SubmitterContext& ctx) : ctx_(ctx), timer_(ctx.loop) {}

  // `what` names the request in the warning ("task Foo", "placement group 'g' bundle 2");
  // one warning per `kind` ("task", "actor", "placement group") and demand.
  void Watch(std::string_view kind, std::string what, scheduler::ResourceSet demand);

 private:
  struct Watched {
    std::string what;
    scheduler::ResourceSet demand;
  };
  void Check();

  SubmitterContext& ctx_;
  Timer timer_;
  std::vector<Watched> pending_;  // waiting for the next check
  std::set<std::string> seen_;    // kind + demand watched already
};

}  // namespace rayd::core
