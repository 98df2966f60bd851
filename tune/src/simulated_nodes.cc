#include "simulated_nodes.h"

#include <algorithm>

namespace rayd::tune::internal {

SimulatedNodes::SimulatedNodes(const TuneConfig::Simulated::Autoscaler& model) : model_(model) {
  model_.workers_per_node = std::max(model_.workers_per_node, 1);
  ready_ = model_.min_nodes;
  launched_at_.assign(static_cast<size_t>(ready_), 0.0);
  idle_since_.assign(static_cast<size_t>(ready_), 0.0);
  peak_ = ready_;
}

void SimulatedNodes::Launch(double now, int count) {
  for (int i = 0; i < count; ++i) {
    launching_.push_back(now + model_.launch_latency_s);
    launched_at_.push_back(now);
  }
  launches_ += count;
  peak_ = std::max(peak_, Alive());
}

void SimulatedNodes::Want(double now, int workers) {
  const int k = model_.workers_per_node;
  const int needed = std::min(model_.max_nodes, (workers + k - 1) / k);
  if (needed > Alive()) Launch(now, needed - Alive());
}

void SimulatedNodes::Used(double now, int used) {
  const int k = model_.workers_per_node;
  busy_ = std::min(ready_, (used + k - 1) / k);
  const size_t idle = static_cast<size_t>(ready_ - busy_);
  while (idle_since_.size() > idle) idle_since_.pop_back();  // the most recently idle works again
  while (idle_since_.size() < idle) idle_since_.push_back(now);
}

double SimulatedNodes::NextEvent() const {
  double next = std::numeric_limits<double>::infinity();
  if (!launching_.empty()) next = launching_.front();
  if (!idle_since_.empty() && ready_ > model_.min_nodes) {
    next = std::min(next, idle_since_.front() + model_.idle_timeout_s);
  }
  return next;
}

void SimulatedNodes::Advance(double now) {
  while (!launching_.empty() && launching_.front() <= now) {
    launching_.pop_front();
    ++ready_;
    idle_since_.push_back(now);  // idle until Used says otherwise
  }
  while (!idle_since_.empty() && ready_ > model_.min_nodes &&
         idle_since_.front() + model_.idle_timeout_s <= now) {
    idle_since_.pop_front();
    --ready_;
    // The node that goes is the oldest launched still alive: nodes are interchangeable, and
    // what the sweep pays is the same whichever one's launch time is retired.
    const auto oldest = std::min_element(launched_at_.begin(), launched_at_.end());
    ended_seconds_ += now - *oldest;
    launched_at_.erase(oldest);
  }
}

double SimulatedNodes::NodeSeconds(double now) const {
  double total = ended_seconds_;
  for (double t : launched_at_) total += now - t;
  return total;
}

}  // namespace rayd::tune::internal
