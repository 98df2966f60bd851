// The Slurm provider: each node one batch job.
//
// How it works: Create writes a batch script for the type under log_dir (it `exec`s `rayd
// start --block` with the type's flags, the instance label being $SLURM_JOB_ID) and submits
// it once per node with `sbatch --parsable`; the job id sbatch prints is the instance id. The
// token reaches the job in RAYD_TOKEN, through sbatch's environment (sbatch passes the caller's
// on by default), never on a command line. Terminate is `scancel ID`. List runs `squeue` for
// the user's jobs named rayd-<type> and keeps those this provider submitted or adopted: a
// queued job is pending, a running one running, with Slurm's state and reason as detail and its
// time left (for a queued job, its whole limit). A job squeue no longer shows is forgotten.
//
// Keys: partition, time_limit, sbatch_args, rayd_binary; a type's `provider:` keys override
// the provider's.

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "autoscaler/providers.h"
#include "autoscaler/run_command.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/runtime/session.h"

namespace rayd::autoscaler {
namespace {

constexpr auto kCommandTimeout = Millis(60000);  // one sbatch, squeue or scancel
constexpr char kJobPrefix[] = "rayd-";

struct SlurmKeys {
  std::string partition;
  std::string time_limit;
  std::vector<std::string> sbatch_args;
  std::string rayd_binary;
};

// `base` with the keys in `keys` (a provider map that `where` names) over it.
Result<SlurmKeys> ResolveKeys(SlurmKeys base, const nlohmann::json& keys,
                              const std::string& where) {
  RAYD_ASSIGN_OR_RETURN(base.partition, StringKey(keys, where, "partition", base.partition));
  RAYD_ASSIGN_OR_RETURN(base.time_limit, StringKey(keys, where, "time_limit", base.time_limit));
  RAYD_ASSIGN_OR_RETURN(base.rayd_binary, StringKey(keys, where, "rayd_binary", base.rayd_binary));
  if (keys.is_object() && keys.contains("sbatch_args")) {
    RAYD_ASSIGN_OR_RETURN(base.sbatch_args, StringListKey(keys, where, "sbatch_args"));
  }
  if (!base.time_limit.empty() && !ParseSlurmDuration(base.time_limit)) {
    return Status::InvalidArgument(where + ".time_limit: \"" + base.time_limit +
                                   "\" is no Slurm time (HH:MM:SS, D-HH:MM:SS or minutes)");
  }
  if (base.rayd_binary.empty()) {
    return Status::InvalidArgument(where + ".rayd_binary: no rayd binary for the nodes to run");
  }
  return base;
}

// The batch script for one node of `type`.
std::string BatchScript(const NodeTypeConfig& type, const ProviderContext& context,
                        const std::string& rayd_binary) {
  std::ostringstream script;
  script << "#!/bin/sh\n"
         << "# Written by rayd's autoscaler: one node of type " << type.name
         << " for the cluster at " << context.gcs_address << ".\n"
         << "# The token arrives in RAYD_TOKEN, from sbatch's environment.\n"
         << "exec " << ShellQuote(rayd_binary) << " start --block";
  const std::vector<std::string> args = StartArgs(type, context, "");
  for (size_t i = 0; i < args.size(); ++i) {
    script << " " << ShellQuote(args[i]);
    if (i > 0 && args[i - 1] == "--labels") {
      script << "," << kInstanceLabel << "=\"$SLURM_JOB_ID\"";
    }
  }
  script << "\n";
  return script.str();
}

std::string Ceil(scheduler::FixedPoint amount, double unit = 1) {
  return std::to_string(static_cast<int64_t>(std::ceil(amount.ToDouble() / unit)));
}

std::vector<std::string> SbatchArgv(const NodeTypeConfig& type, const SlurmKeys& keys,
                                    const std::string& log_dir, const std::string& script) {
  const scheduler::ResourceSet& r = type.resources;
  std::vector<std::string> argv = {
      "sbatch", "--parsable", std::string("--job-name=") + kJobPrefix + type.name, "--nodes=1"};
  if (!keys.partition.empty()) argv.push_back("--partition=" + keys.partition);
  if (!keys.time_limit.empty()) argv.push_back("--time=" + keys.time_limit);
  if (r.Get(scheduler::kGPU).units() > 0)
    argv.push_back("--gres=gpu:" + Ceil(r.Get(scheduler::kGPU)));
  const std::string cpus = Ceil(r.Get(scheduler::kCPU));
  argv.push_back("--cpus-per-task=" + (cpus == "0" ? std::string("1") : cpus));
  if (r.Get(scheduler::kMemory).units() > 0) {
    argv.push_back("--mem=" + Ceil(r.Get(scheduler::kMemory), 1024.0 * 1024) + "M");
  }
  argv.insert(argv.end(), keys.sbatch_args.begin(), keys.sbatch_args.end());
  argv.push_back("--output=" + log_dir + "/slurm-%j.out");
  argv.push_back(script);
  return argv;
}

// Slurm's job states: those of a job still to run, and of one running.
bool IsQueued(const std::string& state) {
  static const std::set<std::string> kQueued = {"PENDING", "REQUEUED", "REQUEUE_HOLD",
                                                "REQUEUE_FED", "RESV_DEL_HOLD"};
  return kQueued.contains(state);
}
bool IsRunning(const std::string& state) {
  static const std::set<std::string> kRunning = {"RUNNING", "CONFIGURING", "SUSPENDED",
                                                 "STOPPED", "SIGNALING",   "RESIZING"};
  return kRunning.contains(state);
}

class SlurmProvider final : public NodeProvider {
 public:
  SlurmProvider(const ProviderContext& context, SlurmKeys keys)
      : context_(context), keys_(std::move(keys)), runner_(*context.loop) {}

  std::string type() const override { return "slurm"; }
  void Create(const NodeTypeConfig& type, int count, CreateDone done) override;
  void Terminate(const Instance& instance, std::function<void(Status)> done) override;
  void List(ListDone done) override;
  void Adopt(const std::vector<Instance>& instances) override {
    for (const auto& instance : instances) jobs_[instance.id] = instance.node_type;
  }

 private:
  struct Batch;  // one Create's submissions
  void Submitted(Batch& batch, const std::vector<std::string>& argv, Result<CommandResult> ran);
  CommandSpec Spec(std::vector<std::string> argv) const;
  // Reads squeue's lines into the instances this provider knows.
  std::vector<Instance> ParseQueue(const std::string& out) const;

  const ProviderContext context_;
  const SlurmKeys keys_;
  std::map<std::string, std::string> jobs_;  // job id -> node type: submitted or adopted
  CommandRunner runner_;  // last: destroyed first, with the callbacks that use the above
};

struct SlurmProvider::Batch {
  std::string type;
  int left = 0;
  std::vector<Instance> started;
  Status first_error;
  CreateDone done;
};

CommandSpec SlurmProvider::Spec(std::vector<std::string> argv) const {
  CommandSpec spec;
  spec.argv = std::move(argv);
  spec.env = ChildEnvironment({{"RAYD_TOKEN", context_.token}});
  spec.timeout = kCommandTimeout;
  spec.scratch_dir = context_.log_dir;
  return spec;
}

void SlurmProvider::Create(const NodeTypeConfig& type, int count, CreateDone done) {
  auto keys = ResolveKeys(keys_, type.provider, "node_types." + type.name + ".provider");
  const std::string script = context_.log_dir + "/autoscaler-slurm-" + type.name + ".sh";
  Status written = keys.ok() ? session::WriteFileWithMode(
                                   script, BatchScript(type, context_, keys->rayd_binary), 0700)
                             : keys.status();
  if (!written.ok()) return runner_.Later([written, done] { done(written); });
  if (count <= 0) return runner_.Later([done] { done(std::vector<Instance>{}); });
  // Co-owned by the `count` submissions' callbacks; the last one to finish reports.
  auto batch = std::make_shared<Batch>();
  batch->type = type.name;
  batch->left = count;
  batch->done = std::move(done);
  const std::vector<std::string> argv = SbatchArgv(type, *keys, context_.log_dir, script);
  for (int i = 0; i < count; ++i) {
    runner_.Run(Spec(argv), [this, batch, argv](Result<CommandResult> ran) {
      Submitted(*batch, argv, std::move(ran));
    });
  }
}

void SlurmProvider::Submitted(Batch& batch, const std::vector<std::string>& argv,
                              Result<CommandResult> ran) {
  Status failed = !ran.ok()             ? ran.status()
                  : ran->exit_code != 0 ? CommandFailure(argv, *ran)
                                        : Status::Ok();
  std::string job_id;
  if (failed.ok()) {
    job_id = ran->out.substr(0, ran->out.find_first_of(";\r\n"));  // "ID" or "ID;CLUSTER"
    if (job_id.empty() || job_id.find_first_not_of("0123456789") != std::string::npos) {
      failed = Status::Internal(DescribeCommand(argv) + " printed no job id: \"" +
                                LastLines(ran->out) + "\"");
    }
  }
  if (failed.ok()) {
    Instance instance;
    instance.id = job_id;
    instance.node_type = batch.type;
    instance.state = Instance::State::kPending;
    instance.detail = "submitted";
    instance.handle = nlohmann::json{{"job_id", job_id}}.dump();
    jobs_[job_id] = batch.type;
    batch.started.push_back(instance);
    spdlog::info("autoscaler: submitted Slurm job {} for a {} node", job_id, batch.type);
  } else {
    spdlog::warn("autoscaler: a Slurm job for a {} node was not submitted: {}", batch.type,
                 failed.ToString());
    if (batch.first_error.ok()) batch.first_error = failed;
  }
  if (--batch.left > 0) return;
  if (batch.started.empty()) return batch.done(batch.first_error);
  batch.done(std::move(batch.started));
}

void SlurmProvider::Terminate(const Instance& instance, std::function<void(Status)> done) {
  std::vector<std::string> argv = {"scancel", instance.id};
  runner_.Run(Spec(argv), [this, argv, id = instance.id,
                           done = std::move(done)](Result<CommandResult> ran) {
    if (!ran.ok()) return done(ran.status());
    // A job Slurm no longer knows, or one already ending, is as good as ended.
    const bool gone = ran->err.find("Invalid job id") != std::string::npos ||
                      ran->err.find("already completing or completed") != std::string::npos;
    if (ran->exit_code != 0 && !gone) return done(CommandFailure(argv, *ran));
    jobs_.erase(id);
    spdlog::info("autoscaler: cancelled Slurm job {}", id);
    done(Status::Ok());
  });
}

std::vector<Instance> SlurmProvider::ParseQueue(const std::string& out) const {
  std::vector<Instance> instances;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;  // id | state | time left | reason
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, '|');) f.push_back(field);
    if (f.size() < 4) continue;
    auto known = jobs_.find(f[0]);
    if (known == jobs_.end() || (!IsQueued(f[1]) && !IsRunning(f[1]))) continue;
    Instance instance;
    instance.id = f[0];
    instance.node_type = known->second;
    instance.state = IsQueued(f[1]) ? Instance::State::kPending : Instance::State::kRunning;
    instance.detail = f[1] + (f[3].empty() || f[3] == "None" ? "" : " (" + f[3] + ")");
    instance.seconds_left = ParseSlurmDuration(f[2]);
    instance.handle = nlohmann::json{{"job_id", f[0]}}.dump();
    instances.push_back(instance);
  }
  return instances;
}

void SlurmProvider::List(ListDone done) {
  std::set<std::string> known, names;  // a reply may show gone only the jobs known before
  for (const auto& [id, type] : jobs_) {
    known.insert(id);
    names.insert(kJobPrefix + type);
  }
  std::string name_list;
  for (const auto& name : names) name_list += (name_list.empty() ? "" : ",") + name;
  if (known.empty()) return runner_.Later([done] { done(std::vector<Instance>{}); });
  const std::vector<std::string> argv = {"squeue", "--noheader",
                                         "--user=" + std::to_string(::getuid()),
                                         "--name=" + name_list, "--format=%i|%T|%L|%r"};
  runner_.Run(Spec(argv), [this, argv, known = std::move(known),
                           done = std::move(done)](Result<CommandResult> ran) {
    if (!ran.ok()) return done(ran.status());
    if (ran->exit_code != 0) return done(CommandFailure(argv, *ran));
    std::vector<Instance> instances = ParseQueue(ran->out);
    std::set<std::string> listed;
    for (const auto& instance : instances) listed.insert(instance.id);
    for (const auto& id : known) {
      if (!listed.contains(id)) jobs_.erase(id);
    }
    done(std::move(instances));
  });
}

}  // namespace

Result<std::unique_ptr<NodeProvider>> MakeSlurmProvider(const AutoscalerConfig& config,
                                                        const ProviderContext& context) {
  SlurmKeys defaults;
  defaults.rayd_binary = context.rayd_binary;
  RAYD_ASSIGN_OR_RETURN(SlurmKeys keys, ResolveKeys(defaults, config.provider, "provider"));
  for (const auto& type : config.node_types) {
    RAYD_RETURN_IF_ERROR(
        ResolveKeys(keys, type.provider, "node_types." + type.name + ".provider").status());
  }
  return std::unique_ptr<NodeProvider>(std::make_unique<SlurmProvider>(context, std::move(keys)));
}

}  // namespace rayd::autoscaler
