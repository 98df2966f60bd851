#pragma once
// Autoscaler: the head's loop that starts and stops nodes from demand (ARCHITECTURE.md §15).
//
// How it works
// - Every update_interval_s it reads the cluster from its host (the head: nodes, waiting
//   placement groups, actors and tasks, the Tuner's queued trials and explicit requests) and
//   the provider's instances, reconciles the two, asks Decide (policy.h) what to do, and does
//   it: Create for launches, the cluster's drain for idle nodes, Terminate once a drained node
//   has left. One update runs at a time.
// - An instance is launching from Create until a node carrying its instance label joins;
//   running until drained; draining until its node is gone; then terminated and forgotten.
// - A launch that has not joined within launch_timeout_s, or whose Create failed, is
//   terminated and its type waits before launching again (10 s, doubling per failure in a row,
//   at most 5 min); the provider's words are kept for `rayd status`. Creates in flight count
//   as launching, so the same demand never launches twice.
// - A node whose provider says it will end soon (a Slurm job near its time limit) is drained
//   first. An instance the provider no longer lists is forgotten (its node, if any, is left
//   to the failure detector).
// - Every instance is stored through the host (the GCS store): a head restarted from Redis
//   loads them, hands them to the provider (Adopt) and counts them, instead of launching again.
// - After every update it publishes its state (types, instances, waiting demand, why demand
//   launches nothing, the last events) as JSON for `rayd status`, the dashboard and /metrics.
//
// Threading: the loop's thread only. The host and the provider must outlive the autoscaler.

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoscaler/config.h"
#include "autoscaler/node_provider.h"
#include "autoscaler/policy.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/runtime/cluster.h"

namespace rayd::autoscaler {

// The cluster as the head sees it at one update.
struct ClusterReading {
  std::vector<NodeInfo> nodes;        // alive ones (draining included)
  std::vector<DemandUnit> waiting;    // work waiting for room or for a node that fits
  std::vector<DemandUnit> requested;  // floors (RequestResources)
};

// What the autoscaler needs of the head; head/ implements it over the GCS.
class AutoscalerHost {
 public:
  virtual ~AutoscalerHost() = default;
  virtual void Read(std::function<void(Result<ClusterReading>)> done) = 0;
  // Marks the node as leaving (`rayd drain`): it takes nothing new and goes once idle, or at
  // the deadline (unix ms).
  virtual Status Drain(const std::string& node_id, int64_t deadline_ms,
                       const std::string& reason) = 0;
  // The autoscaler's own records (instance id -> JSON), kept across head restarts.
  virtual void SaveRecord(const std::string& key, const std::string& value) = 0;
  virtual void DeleteRecord(const std::string& key) = 0;
  virtual void LoadRecords(std::function<void(Result<std::map<std::string, std::string>>)> done) = 0;
  // Its state after each update (the JSON AutoscalerState documents).
  virtual void Publish(const nlohmann::json& state) = 0;
};

class Autoscaler {
 public:
  Autoscaler(EventLoop& loop, AutoscalerConfig config, std::unique_ptr<NodeProvider> provider,
             AutoscalerHost& host);
  ~Autoscaler();
  Autoscaler(const Autoscaler&) = delete;
  Autoscaler& operator=(const Autoscaler&) = delete;

  // Loads the stored instances, adopts them, and starts updating. `done` once adopted.
  void Start(std::function<void(Status)> done);
  // Runs one update now (tests; the timer runs them otherwise). `done` after it.
  void UpdateNow(std::function<void()> done = nullptr);
  // The cluster is being stopped (`rayd stop`): stops updating and terminates every instance
  // it launched; `done` once the provider has answered for each.
  void Shutdown(std::function<void()> done);

  const AutoscalerConfig& config() const { return config_; }

 private:
  struct Tracked {
    Instance instance;
    enum class Phase { kLaunching, kRunning, kDraining } phase = Phase::kLaunching;
    int64_t launched_ms = 0;
    std::string node_id;       // once joined
    std::string reason;        // what launched it
    int64_t idle_since_ms = 0;  // 0 while busy (or not joined)
    bool listed = false;       // the provider has listed it at least once
  };
  struct Backoff {
    int failures = 0;
    int64_t until_ms = 0;
    std::string last_error;
  };

  void Schedule();
  void Update(std::function<void()> done);
  void OnRead(Result<ClusterReading> reading, Result<std::vector<Instance>> listed,
              std::function<void()> done);
  // Matches nodes and provider instances to the tracked instances; terminates the ones whose
  // node left or that never joined.
  void Reconcile(const ClusterReading& reading, const std::vector<Instance>* listed);
  PolicyInput MakeInput(const ClusterReading& reading) const;
  void Carry(const Decision& decision);
  void CreateNodes(const NodeTypeConfig& type, int count, const std::string& reason);
  void TerminateTracked(const std::string& id, const std::string& why);
  void Fail(const std::string& type, const std::string& error);
  void Save(const Tracked& t);
  void Event(std::string text);
  nlohmann::json State(const ClusterReading& reading, const Decision& decision) const;

  EventLoop& loop_;
  AutoscalerConfig config_;
  std::unique_ptr<NodeProvider> provider_;
  AutoscalerHost& host_;
  std::map<std::string, Tracked> tracked_;        // by instance id
  std::map<std::string, int> creating_;           // node type -> nodes in Create calls
  std::map<std::string, Backoff> backoff_;        // by node type
  std::deque<nlohmann::json> events_;             // the newest last
  std::map<std::string, int64_t> counters_;       // launched, terminated, launch_failures, drained
  bool updating_ = false;
  Timer timer_;
  LifetimeGuard guard_;
};

}  // namespace rayd::autoscaler
