// The command provider: a site's own executables create, terminate and list nodes; rayd runs
// them (no shell) with its arguments appended and the environment node_provider.h documents,
// and reads JSON from their stdout. Each command is bounded by the `timeout_s` key (default
// 120 s); on it the command's process group is killed. Destroying the provider kills the
// commands still running the same way.

#include <spdlog/spdlog.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autoscaler/providers.h"
#include "autoscaler/run_command.h"

namespace rayd::autoscaler {
namespace {

using nlohmann::json;

constexpr double kDefaultTimeoutS = 120;

Status BadOutput(const std::vector<std::string>& argv, const CommandResult& result,
                 const std::string& why) {
  std::string message = DescribeCommand(argv) + " printed " + why;
  if (!LastLines(result.out).empty()) message += "; its stdout ends:\n" + LastLines(result.out);
  if (!LastLines(result.err).empty()) message += "; its stderr ends:\n" + LastLines(result.err);
  return Status::Internal(message);
}

// One entry of an "instances" list, or why it is unreadable.
Result<Instance> ParseInstance(const json& entry, const std::string& default_type) {
  if (!entry.is_object()) return Status::InvalidArgument("an instance that is not an object");
  Instance instance;
  const json* id = entry.contains("id") ? &entry.at("id") : nullptr;
  if (!id || !id->is_string() || id->get<std::string>().empty()) {
    return Status::InvalidArgument("an instance without an \"id\" (a non-empty string): " +
                                   entry.dump());
  }
  instance.id = id->get<std::string>();
  for (const char* name : {"node_type", "state", "detail"}) {
    if (entry.contains(name) && !entry.at(name).is_string()) {
      return Status::InvalidArgument("instance " + instance.id + ": \"" + name +
                                     "\" is not a string");
    }
  }
  instance.node_type = entry.value("node_type", default_type);
  const std::string state = entry.value("state", "running");
  if (state != "pending" && state != "running") {
    return Status::InvalidArgument("instance " + instance.id + ": state \"" + state +
                                   "\" (pending or running)");
  }
  instance.state = state == "pending" ? Instance::State::kPending : Instance::State::kRunning;
  instance.detail = entry.value("detail", "");
  if (entry.contains("seconds_left") && entry.at("seconds_left").is_number()) {
    instance.seconds_left = entry.at("seconds_left").get<double>();
  }
  instance.handle = entry.dump();
  return instance;
}

// {"instances": [...]} on stdout. Entries without a node type take `types`' (by id), else
// `default_type`.
Result<std::vector<Instance>> ParseInstances(const std::vector<std::string>& argv,
                                             const CommandResult& result,
                                             const std::string& default_type,
                                             const std::map<std::string, std::string>& types) {
  const json doc = json::parse(result.out, nullptr, false);
  if (doc.is_discarded()) return BadOutput(argv, result, "no JSON on its stdout");
  if (!doc.is_object() || !doc.contains("instances") || !doc.at("instances").is_array()) {
    return BadOutput(argv, result, "JSON without an \"instances\" list");
  }
  std::vector<Instance> instances;
  for (const auto& entry : doc.at("instances")) {
    std::string type = default_type;
    if (entry.is_object() && entry.contains("id") && entry.at("id").is_string()) {
      auto known = types.find(entry.at("id").get<std::string>());
      if (known != types.end()) type = known->second;
    }
    auto instance = ParseInstance(entry, type);
    if (!instance.ok()) return BadOutput(argv, result, instance.status().message());
    instances.push_back(*instance);
  }
  return instances;
}

class CommandProvider final : public NodeProvider {
 public:
  struct Commands {
    std::vector<std::string> create, terminate, list;
    Millis timeout;
  };
  CommandProvider(const ProviderContext& context, Commands commands)
      : context_(context), commands_(std::move(commands)), runner_(*context.loop) {}

  std::string type() const override { return "command"; }
  void Create(const NodeTypeConfig& type, int count, CreateDone done) override;
  void Terminate(const Instance& instance, std::function<void(Status)> done) override;
  void List(ListDone done) override;
  void Adopt(const std::vector<Instance>& instances) override {
    for (const auto& instance : instances) types_[instance.id] = instance.node_type;
  }

 private:
  CommandSpec Spec(std::vector<std::string> argv, std::map<std::string, std::string> env) const;

  const ProviderContext context_;
  const Commands commands_;
  std::map<std::string, std::string> types_;  // instance id -> node type, as created or adopted
  CommandRunner runner_;  // last: destroyed first, with the callbacks that use the above
};

CommandSpec CommandProvider::Spec(std::vector<std::string> argv,
                                  std::map<std::string, std::string> env) const {
  env["RAYD_HEAD_ADDRESS"] = context_.gcs_address;
  env["RAYD_TOKEN"] = context_.token;
  CommandSpec spec;
  spec.argv = std::move(argv);
  spec.env = ChildEnvironment(env);
  spec.timeout = commands_.timeout;
  spec.scratch_dir = context_.log_dir;
  return spec;
}

void CommandProvider::Create(const NodeTypeConfig& type, int count, CreateDone done) {
  std::vector<std::string> argv = commands_.create;
  argv.insert(argv.end(), {type.name, std::to_string(count)});
  std::string start_args;
  for (const auto& arg : StartArgs(type, context_, "")) {
    start_args += (start_args.empty() ? "" : " ") + ShellQuote(arg);
  }
  CommandSpec spec = Spec(argv, {{"RAYD_NODE_TYPE", type.name},
                                 {"RAYD_NODE_COUNT", std::to_string(count)},
                                 {"RAYD_START_ARGS", start_args},
                                 {"RAYD_NODE_CONFIG", type.provider.dump()}});
  runner_.Run(std::move(spec),
              [this, argv, type = type.name, done = std::move(done)](Result<CommandResult> ran) {
                if (!ran.ok()) return done(ran.status());
                if (ran->exit_code != 0) return done(CommandFailure(argv, *ran));
                auto instances = ParseInstances(argv, *ran, type, {});
                if (!instances.ok()) return done(instances.status());
                for (auto& instance : *instances) {
                  if (instance.node_type != type) {
                    spdlog::warn("autoscaler: {} reported instance {} of type {}; taken as {}",
                                 DescribeCommand(argv), instance.id, instance.node_type, type);
                    instance.node_type = type;
                  }
                  types_[instance.id] = type;
                }
                done(std::move(instances));
              });
}

void CommandProvider::Terminate(const Instance& instance, std::function<void(Status)> done) {
  std::vector<std::string> argv = commands_.terminate;
  argv.push_back(instance.id);
  CommandSpec spec = Spec(argv, {{"RAYD_NODE_TYPE", instance.node_type}});
  runner_.Run(std::move(spec),
              [this, argv, id = instance.id, done = std::move(done)](Result<CommandResult> ran) {
                if (!ran.ok()) return done(ran.status());
                if (ran->exit_code != 0) return done(CommandFailure(argv, *ran));
                types_.erase(id);
                done(Status::Ok());
              });
}

void CommandProvider::List(ListDone done) {
  std::set<std::string> known;  // the ids a reply may show gone: those known before it ran
  for (const auto& [id, type] : types_) known.insert(id);
  runner_.Run(Spec(commands_.list, {}), [this, argv = commands_.list, known = std::move(known),
                                         done = std::move(done)](Result<CommandResult> ran) {
    if (!ran.ok()) return done(ran.status());
    if (ran->exit_code != 0) return done(CommandFailure(argv, *ran));
    auto instances = ParseInstances(argv, *ran, "", types_);
    if (!instances.ok()) return done(instances.status());
    std::set<std::string> listed;
    for (const auto& instance : *instances) {
      listed.insert(instance.id);
      if (!instance.node_type.empty()) types_[instance.id] = instance.node_type;
    }
    for (const auto& id : known) {
      if (!listed.contains(id)) types_.erase(id);
    }
    done(std::move(instances));
  });
}

}  // namespace

Result<std::unique_ptr<NodeProvider>> MakeCommandProvider(const AutoscalerConfig& config,
                                                          const ProviderContext& context) {
  CommandProvider::Commands commands;
  for (auto [name, argv] :
       {std::pair{"create", &commands.create}, std::pair{"terminate", &commands.terminate},
        std::pair{"list", &commands.list}}) {
    RAYD_ASSIGN_OR_RETURN(*argv, StringListKey(config.provider, "provider", name, true));
    if (argv->empty() || argv->front().empty()) {
      return Status::InvalidArgument(std::string("provider.") + name +
                                     ": the command provider needs its " + name + " command");
    }
  }
  RAYD_ASSIGN_OR_RETURN(double timeout_s,
                        NumberKey(config.provider, "provider", "timeout_s", kDefaultTimeoutS));
  if (!(timeout_s > 0)) return Status::InvalidArgument("provider.timeout_s: must be > 0");
  commands.timeout = Millis(static_cast<int64_t>(timeout_s * 1000));
  return std::unique_ptr<NodeProvider>(
      std::make_unique<CommandProvider>(context, std::move(commands)));
}

}  // namespace rayd::autoscaler
