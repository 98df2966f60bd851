#pragma once
// SimulatedNodes: the autoscaled cluster of `rayd tune --simulate` (TuneConfig::simulate.
// autoscaler), on the replay's simulated clock. Nodes are interchangeable: each holds
// workers_per_node workers; runs take workers from the ready nodes as a pool, so ceil(used /
// workers_per_node) nodes are busy and the rest idle. What it models of the real autoscaler:
//   - launches when work waits: enough nodes, with those launching, for every worker in use or
//     wanted, up to max_nodes; each ready launch_latency_s later, paid for from its launch;
//   - an idle node terminated after idle_timeout_s (the longest idle first; a node needed
//     again takes the most recently idle one), never below min_nodes, which are ready at 0.
// Not modelled: launch failures, upscaling_speed, bin-packing over node types.
//
// Threading: the replay's (one thread).

#include <rayd/tune/tuner.h>

#include <deque>
#include <limits>
#include <vector>

namespace rayd::tune::internal {

class SimulatedNodes {
 public:
  explicit SimulatedNodes(const TuneConfig::Simulated::Autoscaler& model);

  int ReadyWorkers() const { return ready_ * model_.workers_per_node; }
  // `workers` are wanted in all (in use and waiting): launches what is missing, at `now`.
  void Want(double now, int workers);
  // The runs now use `used` workers: nodes past what that needs start (or stop) being idle.
  void Used(double now, int used);
  // When the next launch becomes ready or an idle node's timeout ends; +inf when none.
  double NextEvent() const;
  // Moves the clock to `now` (<= NextEvent()): launches ready by then join, idle nodes past the
  // timeout go.
  void Advance(double now);

  // Node-seconds paid up to `now`, the most nodes at once (launching included), launches.
  double NodeSeconds(double now) const;
  int peak() const { return peak_; }
  int launches() const { return launches_; }

 private:
  int Alive() const { return ready_ + static_cast<int>(launching_.size()); }
  void Launch(double now, int count);

  TuneConfig::Simulated::Autoscaler model_;
  int ready_ = 0;
  int busy_ = 0;                    // ready nodes the runs' workers need
  std::deque<double> launching_;    // when each launch is ready, soonest first
  std::deque<double> idle_since_;   // per idle ready node, oldest first
  std::vector<double> launched_at_;  // of the nodes alive now
  double ended_seconds_ = 0;        // node-seconds of nodes already gone
  int peak_ = 0;
  int launches_ = 0;
};

}  // namespace rayd::tune::internal
