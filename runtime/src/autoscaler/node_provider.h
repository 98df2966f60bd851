#pragma once
// NodeProvider: how the autoscaler starts and stops nodes. One interface, one file per kind:
//
//   local    (local_provider.cc)    each node a real `rayd start --address HEAD --block` child
//                                   of the head, in its own process group, with the type's
//                                   resources; for laptops, tests and CI.
//   slurm    (slurm_provider.cc)    each node one Slurm job: `sbatch --parsable` of a script
//                                   that runs `rayd start --block` for the type (partition,
//                                   --gres=gpu:N, --cpus-per-task, time limit); `scancel` ends
//                                   it; `squeue` lists the jobs (a queued job is still coming;
//                                   its time left is reported so the node can be drained first).
//   command  (command_provider.cc)  a site's own executables, each printing JSON on stdout:
//                                     create TYPE COUNT -> {"instances": [{"id": "..."}, ...]}
//                                     terminate ID      -> anything (exit status 0: done)
//                                     list              -> {"instances": [{"id", "node_type",
//                                                          "state": "pending"|"running",
//                                                          "detail"}, ...]}
//                                   with the environment below, so that any cloud CLI or
//                                   in-house system fits without rayd knowing it.
//
// Joining: every node a provider starts must carry the labels
//   rayd.io/node-type=TYPE,rayd.io/autoscaler-instance=ID
// (plus the type's own labels); that is how the autoscaler matches nodes to instances. The
// local and slurm providers add them; a command provider's create script gets them, with
// everything else `rayd start` needs, in its environment:
//   RAYD_HEAD_ADDRESS  host:port of the head      RAYD_TOKEN     the cluster token
//   RAYD_NODE_TYPE     the type                   RAYD_NODE_COUNT how many
//   RAYD_START_ARGS    the flags for `rayd start` (--address, --num-cpus, --num-gpus,
//                      --resources, --labels rayd.io/node-type=TYPE,...) without the instance
//                      label, which the script appends as ",rayd.io/autoscaler-instance=ID"
//                      (--labels comes last); shell-quoted, so run them with `eval`:
//                        eval "rayd start --block $RAYD_START_ARGS,rayd.io/autoscaler-instance=$ID"
//   RAYD_NODE_CONFIG   the type's `provider:` keys, as JSON
// over the head's own environment (less its RAYD_ variables but RAYD_TEMP_DIR and
// RAYD_LOG_LEVEL: a cloud CLI keeps its credentials, sbatch its SLURM_CONF). The command
// provider's `timeout_s` key (default 120) bounds each command; a list entry may also carry
// "seconds_left" (a number).
//
// Errors are values: a provider command that fails (exit status, unreadable JSON, a timeout)
// gives a Status whose message carries the command and the end of its output, for `rayd
// status` to show. No call is retried here; the autoscaler decides when to try again.
//
// Threading: the loop's thread only; every callback runs there, later (never inside the call).
// Destroying a provider cancels its callbacks; nodes it started keep running (the head may be
// restarting: a new provider adopts them).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoscaler/config.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/status.h"

namespace rayd::autoscaler {

inline constexpr char kNodeTypeLabel[] = "rayd.io/node-type";
inline constexpr char kInstanceLabel[] = "rayd.io/autoscaler-instance";

struct Instance {
  std::string id;         // the provider's: "local-3f2a...", a Slurm job id, a script's id
  std::string node_type;
  enum class State {
    kPending,  // asked for, not started yet (a queued Slurm job)
    kRunning,  // started (it may not have joined the cluster yet)
  };
  State state = State::kPending;
  std::string detail;  // the provider's words: Slurm's state and reason, a script's "detail"
  // Seconds before the provider itself ends it (a Slurm job's time limit); nullopt: no limit.
  std::optional<double> seconds_left;
  // What the provider needs to find the instance again after a head restart (local: the pid),
  // as JSON text; the autoscaler stores it with the instance and hands it to Adopt.
  std::string handle;
};

class NodeProvider {
 public:
  virtual ~NodeProvider() = default;
  virtual std::string type() const = 0;  // "local", "slurm", "command"

  // Starts `count` nodes of `type`. The instances, or why none started (a partial create
  // reports what did start and logs the rest).
  using CreateDone = std::function<void(Result<std::vector<Instance>>)>;
  virtual void Create(const NodeTypeConfig& type, int count, CreateDone done) = 0;
  // Ends the instance (its node has been drained, or never joined). Ok if it is already gone.
  virtual void Terminate(const Instance& instance, std::function<void(Status)> done) = 0;
  // The instances that exist now (queued or running), with their state and time left.
  using ListDone = std::function<void(Result<std::vector<Instance>>)>;
  virtual void List(ListDone done) = 0;
  // After a head restart: the instances this cluster had launched (as stored), so that List
  // and Terminate know them again. Those that are gone are left out of the next List.
  virtual void Adopt(const std::vector<Instance>& instances) = 0;
};

// What every provider needs to start nodes that join this cluster.
struct ProviderContext {
  EventLoop* loop = nullptr;
  std::string gcs_address;  // host:port nodes join (the head's TCP address)
  std::string token;
  std::string rayd_binary;  // the `rayd` to run; a provider's `rayd_binary` key overrides it
  std::string log_dir;      // where nodes' and commands' output goes (exists)
  // The head's temp root (the parent of its session directory): local nodes keep their
  // sessions there, so that `rayd stop` for the head's root stops them too. "": the default.
  std::string temp_root;
};

// The provider `config.provider_type` names. InvalidArgument for an unknown type or bad keys.
Result<std::unique_ptr<NodeProvider>> MakeNodeProvider(const AutoscalerConfig& config,
                                                       const ProviderContext& context);

// The `rayd start` flags that make a node of `type` join the cluster at context.gcs_address,
// with the type's resources and labels plus the node-type label (the instance label is the
// caller's to add: `instance_id` "" leaves it out).
std::vector<std::string> StartArgs(const NodeTypeConfig& type, const ProviderContext& context,
                                   const std::string& instance_id);

}  // namespace rayd::autoscaler
