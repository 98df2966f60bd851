#pragma once
// MetricsReporter: sends the process's application metrics (rayd/api/metric.h) to its node
// daemon, which serves them on its /metrics: every series' whole state, once a period, when
// anything changed since the last report (a failed report is sent again next time).
//
// Threading: the loop's thread only (created, used and destroyed there).

#include <string>

#include "common/client_pool.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/lifetime_guard.h"

namespace rayd::core {

class MetricsReporter {
 public:
  // `process` names the reporter on the node (a worker id, or "driver-<job id>"). `loop` and
  // `clients` must outlive the reporter.
  MetricsReporter(EventLoop& loop, ClientPool& clients, std::string node_address,
                  std::string process, Millis period);

 private:
  void Report();

  ClientPool& clients_;
  std::string node_address_;
  std::string process_;
  uint64_t reported_version_ = 0;
  Timer timer_;
  LifetimeGuard guard_;  // for replies that arrive after the reporter is gone
};

}  // namespace rayd::core
