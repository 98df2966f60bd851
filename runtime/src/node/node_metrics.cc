// NodeDaemon::MetricsText: what a node's /metrics serves.

#include <map>

#include "common/prometheus.h"
#include "node/node_daemon.h"

namespace rayd::node {
namespace {

// A family with one sample labelled by the node.
struct Figure {
  const char* type;
  const char* name;
  const char* help;
  double value;
};

}  // namespace

std::string NodeDaemon::MetricsText() const {
  prometheus::Text text;
  const std::string node = node_id_.Hex();

  text.Family("rayd_node_resource_capacity", "gauge", "The node's resources (memory in bytes).");
  for (const auto& [name, amount] : config_.total) {
    text.Sample("rayd_node_resource_capacity", {{"node_id", node}, {"resource", name}},
                amount.ToDouble());
  }
  text.Family("rayd_node_resource_available", "gauge",
              "The node's resources not held by leases or bundles.");
  for (const auto& [name, amount] : config_.total) {
    text.Sample("rayd_node_resource_available", {{"node_id", node}, {"resource", name}},
                lease_manager_.available().Get(name).ToDouble());
  }

  std::map<std::string, int> workers{{"STARTING", 0}, {"IDLE", 0}, {"LEASED", 0}, {"DEAD", 0}};
  for (const auto& [worker_id, worker] : pool_.workers()) ++workers[WorkerStateName(worker->state)];
  text.Family("rayd_node_workers", "gauge", "Worker processes of the node by state.");
  for (const auto& [state, count] : workers) {
    text.Sample("rayd_node_workers", {{"node_id", node}, {"state", state}}, count);
  }
  text.Family("rayd_node_leases_granted_total", "counter",
              "Worker leases granted since start: for tasks (a lease runs a driver's tasks on "
              "one worker until it is returned) and for actors.");
  text.Sample("rayd_node_leases_granted_total", {{"node_id", node}, {"kind", "task"}},
              static_cast<double>(lease_manager_.task_leases_granted()));
  text.Sample("rayd_node_leases_granted_total", {{"node_id", node}, {"kind", "actor"}},
              static_cast<double>(lease_manager_.actor_leases_granted()));

  std::vector<Figure> figures = {
      {"gauge", "rayd_node_leases", "Worker leases granted and not yet returned.",
       static_cast<double>(lease_manager_.num_leases())},
      {"gauge", "rayd_node_lease_requests_queued",
       "Lease requests (tasks and actors) waiting for resources or a worker.",
       static_cast<double>(lease_manager_.num_queued())},
      {"gauge", "rayd_node_bundles", "Placement-group bundles reserved on the node.",
       static_cast<double>(lease_manager_.num_bundles())},
  };
  if (objects_) {
    const object_store::StoreStats s = objects_->Stats();
    figures.insert(figures.end(), {
        {"gauge", "rayd_object_store_capacity_bytes", "Size of the shared-memory object store.",
         static_cast<double>(s.capacity)},
        {"gauge", "rayd_object_store_used_bytes", "Bytes of the store held by objects.",
         static_cast<double>(s.used)},
        {"gauge", "rayd_object_store_peak_used_bytes",
         "The most bytes the store has held at once since it started.",
         static_cast<double>(s.peak_used)},
        {"gauge", "rayd_object_store_objects", "Objects in the store (in memory or spilled).",
         static_cast<double>(s.num_objects)},
        {"gauge", "rayd_object_store_spilled_objects", "Objects now held only in spill files.",
         static_cast<double>(s.num_spilled)},
        {"gauge", "rayd_object_store_spilled_bytes", "Bytes now held in spill files.",
         static_cast<double>(s.spilled_bytes)},
        {"counter", "rayd_object_store_spilled_total", "Objects spilled to disk since start.",
         static_cast<double>(s.total_spilled)},
        {"counter", "rayd_object_store_restored_total", "Objects read back from disk since start.",
         static_cast<double>(s.total_restored)},
        {"counter", "rayd_object_store_evicted_total", "Secondary copies evicted since start.",
         static_cast<double>(s.total_evicted)},
    });
  }
  for (const Figure& f : figures) {
    text.Family(f.name, f.type, f.help);
    text.Sample(f.name, {{"node_id", node}}, f.value);
  }
  app_metrics_.Render(text, node);
  return text.str();
}

}  // namespace rayd::node
