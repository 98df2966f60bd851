// The local provider: each node a `rayd start --address GCS --block` child of the head, on
// this machine.
//
// How it works: a node is a child process leading its own process group (so that SIGTERM
// reaches the node daemon and its workers together), with the type's resources and labels,
// its output in log_dir/autoscaler-node-<id>.log, and its session under the head's temp root
// (so `rayd stop` for that root stops it as it stops the head; a node's session never becomes
// the root's "latest head"). Its token travels in RAYD_TOKEN, never on its command line. Ids
// are "local-<8 hex>"; the id is on the node's command line (its instance label), which is how
// a restarted head's provider tells the node from a process that reused its pid.
//
// Invariants: nodes_ holds the nodes that run as far as this provider knows: a child leaves
// it when libuv reports its exit, an adopted node when it is seen gone (List, or the poll
// while it is being terminated).

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "autoscaler/providers.h"
#include "autoscaler/run_command.h"
#include "rayd/base/ids.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/base/process.h"
#include "rayd/runtime/session.h"

namespace rayd::autoscaler {
namespace {

constexpr auto kTerminateGrace = Millis(10000);  // SIGTERM, then SIGKILL
constexpr auto kAdoptedPoll = Millis(100);       // how often a terminating adopted node is seen

std::string NewInstanceId() {
  uint8_t bytes[4];
  internal::FillRandom(bytes, sizeof bytes);
  return "local-" + internal::ToHex(bytes, sizeof bytes);
}

// Whether `pid` runs with `id` on its command line.
bool RunsInstance(int pid, const std::string& id) {
  if (session::ProcessStartTicks(pid) == 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(id) != std::string::npos;
}

class LocalProvider final : public NodeProvider {
 public:
  LocalProvider(const ProviderContext& context, std::string binary, int64_t object_store_memory)
      : context_(context),
        binary_(std::move(binary)),
        object_store_memory_(object_store_memory),
        adopted_poll_(*context.loop) {}
  ~LocalProvider() override;

  std::string type() const override { return "local"; }
  void Create(const NodeTypeConfig& type, int count, CreateDone done) override;
  void Terminate(const Instance& instance, std::function<void(Status)> done) override;
  void List(ListDone done) override;
  void Adopt(const std::vector<Instance>& instances) override;

 private:
  struct Node {
    Instance instance;
    int pid = 0;
    uint64_t start_ticks = 0;                          // with pid, names the process
    uv_process_t* process = nullptr;                   // a child of this provider; nullptr: adopted
    std::unique_ptr<Timer> kill_timer;                 // set once it is being terminated
    std::vector<std::function<void(Status)>> on_gone;  // Terminate's callbacks
  };

  Result<Instance> Launch(const NodeTypeConfig& type);
  static void OnExit(uv_process_t* process, int64_t exit_status, int term_signal);
  // Forgets the node and tells whoever waits for its end. With `kill_group`, what it left in
  // its group is killed: only for a child whose exit libuv just reported (an adopted node's
  // pid may have been reused by the time it is seen gone).
  void Gone(const std::string& id, const std::string& why, bool kill_group);
  bool Alive(const Node& node) const {
    return node.process != nullptr || session::ProcessStartTicks(node.pid) == node.start_ticks;
  }
  void PollAdopted();
  void Later(std::function<void()> fn) { context_.loop->Post(guard_(std::move(fn))); }

  const ProviderContext context_;
  const std::string binary_;
  const int64_t object_store_memory_;  // a node's default; 0: its own
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  Timer adopted_poll_;   // runs while an adopted node is being terminated
  LifetimeGuard guard_;  // last: invalidated first
};

LocalProvider::~LocalProvider() {
  guard_.Invalidate();
  // The nodes keep running (a restarted head adopts them); only the handles go.
  for (auto& [id, node] : nodes_) {
    if (node->process) CloseProcessHandle(node->process);
  }
}

void LocalProvider::Create(const NodeTypeConfig& type, int count, CreateDone done) {
  std::vector<Instance> started;
  Status first_error;
  for (int i = 0; i < count; ++i) {
    auto instance = Launch(type);
    if (instance.ok()) {
      started.push_back(*instance);
    } else {
      spdlog::warn("autoscaler: a local {} node did not start: {}", type.name,
                   instance.status().ToString());
      if (first_error.ok()) first_error = instance.status();
    }
  }
  Later([done = std::move(done), started = std::move(started), first_error] {
    if (started.empty() && !first_error.ok()) return done(first_error);
    done(started);
  });
}

Result<Instance> LocalProvider::Launch(const NodeTypeConfig& type) {
  Instance instance;
  instance.id = NewInstanceId();
  instance.node_type = type.name;
  instance.state = Instance::State::kRunning;
  NodeTypeConfig shaped = type;
  if (object_store_memory_ > 0 &&
      shaped.resources.Get(scheduler::kObjectStoreMemory).units() == 0) {
    shaped.resources.Set(scheduler::kObjectStoreMemory,
                         scheduler::FixedPoint::FromWhole(object_store_memory_));
  }
  SpawnOptions options;
  options.argv = {binary_, "start"};
  for (auto& arg : StartArgs(shaped, context_, instance.id)) options.argv.push_back(arg);
  options.argv.push_back("--block");
  if (!context_.temp_root.empty())
    options.argv.insert(options.argv.end(), {"--temp-dir", context_.temp_root});
  options.env = ChildEnvironment({{"RAYD_TOKEN", context_.token}});
  options.own_process_group = true;
  options.on_exit = &LocalProvider::OnExit;
  options.data = this;
  const std::string log_path = context_.log_dir + "/autoscaler-node-" + instance.id + ".log";
  options.log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (options.log_fd < 0) {
    return Status::Internal("cannot open " + log_path + ": " + std::strerror(errno));
  }
  auto spawned = SpawnProcess(*context_.loop, options);
  ::close(options.log_fd);
  RAYD_RETURN_IF_ERROR(spawned.status());

  auto node = std::make_unique<Node>();
  node->process = *spawned;
  node->pid = node->process->pid;
  node->start_ticks = session::ProcessStartTicks(node->pid);
  instance.handle = nlohmann::json{{"pid", node->pid}}.dump();
  instance.detail = "pid " + std::to_string(node->pid) + ", log " + log_path;
  node->instance = instance;
  spdlog::info("autoscaler: started local {} node {} (pid {}): {}", type.name, instance.id,
               node->pid, DescribeCommand(options.argv));
  nodes_.emplace(instance.id, std::move(node));
  return instance;
}

void LocalProvider::OnExit(uv_process_t* process, int64_t exit_status, int term_signal) {
  auto* self = static_cast<LocalProvider*>(process->data);
  if (self == nullptr) return;
  for (auto& [id, node] : self->nodes_) {
    if (node->process != process) continue;
    CloseProcessHandle(process);
    node->process = nullptr;
    node->start_ticks = 0;  // gone: not to be taken for an adopted node that runs
    const std::string why = term_signal != 0 ? "was killed by signal " + std::to_string(term_signal)
                                             : "exited with code " + std::to_string(exit_status);
    return self->Gone(id, why, /*kill_group=*/true);
  }
  CloseProcessHandle(process);
}

void LocalProvider::Gone(const std::string& id, const std::string& why, bool kill_group) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  std::unique_ptr<Node> node = std::move(it->second);
  nodes_.erase(it);
  if (kill_group) ::kill(-node->pid, SIGKILL);
  if (node->kill_timer) {
    spdlog::info("autoscaler: local node {} (pid {}) {} after it was terminated", id, node->pid,
                 why);
  } else {
    spdlog::warn(
        "autoscaler: local node {} (pid {}) ended by itself: it {} (log: "
        "{}/autoscaler-node-{}.log)",
        id, node->pid, why, context_.log_dir, id);
  }
  auto waiters = std::move(node->on_gone);
  node.reset();
  for (auto& done : waiters) done(Status::Ok());  // last: one may destroy this provider
}

void LocalProvider::Terminate(const Instance& instance, std::function<void(Status)> done) {
  if (!nodes_.contains(instance.id)) Adopt({instance});  // e.g. stored, not adopted yet
  auto it = nodes_.find(instance.id);
  if (it == nodes_.end()) {
    return Later([done = std::move(done)] { done(Status::Ok()); });  // already gone
  }
  Node& node = *it->second;
  node.on_gone.push_back(std::move(done));
  if (node.kill_timer) return;  // being terminated already
  spdlog::info("autoscaler: terminating local node {} (pid {})", instance.id, node.pid);
  ::kill(-node.pid, SIGTERM);
  node.kill_timer = std::make_unique<Timer>(*context_.loop);
  node.kill_timer->Start(kTerminateGrace, Millis(0), [this, id = instance.id] {
    auto found = nodes_.find(id);
    if (found == nodes_.end()) return;
    spdlog::warn("autoscaler: local node {} still runs {} ms after SIGTERM; killing it", id,
                 kTerminateGrace.count());
    ::kill(-found->second->pid, SIGKILL);
  });
  if (node.process == nullptr && !adopted_poll_.active()) {
    adopted_poll_.Start(kAdoptedPoll, kAdoptedPoll, [this] { PollAdopted(); });
  }
}

void LocalProvider::PollAdopted() {
  std::vector<std::string> gone;
  bool waiting = false;
  for (const auto& [id, node] : nodes_) {
    if (node->process || !node->kill_timer) continue;
    if (Alive(*node)) {
      waiting = true;
    } else {
      gone.push_back(id);
    }
  }
  if (!waiting) adopted_poll_.Stop();
  auto watch = guard_.watch();
  for (const auto& id : gone) {
    if (!watch.alive()) return;  // a callback destroyed this provider
    auto it = nodes_.find(id);
    if (it == nodes_.end()) continue;
    // Reaps it if it is a child of this process after all (an earlier provider's).
    ::waitpid(it->second->pid, nullptr, WNOHANG);
    Gone(id, "exited", /*kill_group=*/false);
  }
}

void LocalProvider::List(ListDone done) {
  std::vector<std::string> gone;
  std::vector<Instance> instances;
  for (const auto& [id, node] : nodes_) {
    if (Alive(*node)) {
      instances.push_back(node->instance);
    } else {
      gone.push_back(id);
    }
  }
  for (const auto& id : gone) {
    auto it = nodes_.find(id);
    if (it != nodes_.end() && it->second->on_gone.empty()) {
      ::waitpid(it->second->pid, nullptr, WNOHANG);
      Gone(id, "exited", /*kill_group=*/false);  // no callbacks to run: safe inside the call
    }
  }
  Later([done = std::move(done), instances = std::move(instances)] { done(instances); });
}

void LocalProvider::Adopt(const std::vector<Instance>& instances) {
  for (const auto& instance : instances) {
    if (nodes_.contains(instance.id)) continue;
    const auto handle = nlohmann::json::parse(instance.handle, nullptr, false);
    const int pid =
        handle.is_object() && handle.contains("pid") && handle["pid"].is_number_integer()
            ? handle["pid"].get<int>()
            : 0;
    if (pid <= 0 || !RunsInstance(pid, instance.id)) {
      spdlog::info("autoscaler: local node {} no longer runs; not adopted", instance.id);
      continue;
    }
    auto node = std::make_unique<Node>();
    node->pid = pid;
    node->start_ticks = session::ProcessStartTicks(pid);
    node->instance = instance;
    node->instance.state = Instance::State::kRunning;
    spdlog::info("autoscaler: adopted local {} node {} (pid {})", instance.node_type, instance.id,
                 pid);
    nodes_.emplace(instance.id, std::move(node));
  }
}

}  // namespace

Result<std::unique_ptr<NodeProvider>> MakeLocalProvider(const AutoscalerConfig& config,
                                                        const ProviderContext& context) {
  RAYD_ASSIGN_OR_RETURN(std::string binary,
                        StringKey(config.provider, "provider", "rayd_binary", context.rayd_binary));
  if (binary.empty()) {
    return Status::InvalidArgument("provider.rayd_binary: no rayd binary to start nodes with");
  }
  int64_t object_store_memory = 0;
  if (config.provider.contains("object_store_memory")) {
    const auto& value = config.provider.at("object_store_memory");
    auto bytes = value.is_number_integer() ? Result<int64_t>(value.get<int64_t>())
                 : value.is_string()       ? scheduler::ParseByteSize(value.get<std::string>())
                                           : Status::InvalidArgument("a byte count or a size");
    if (!bytes.ok() || *bytes < 0) {
      return Status::InvalidArgument("provider.object_store_memory: " +
                                     (bytes.ok() ? "must be >= 0" : bytes.status().message()));
    }
    object_store_memory = *bytes;
  }
  return std::unique_ptr<NodeProvider>(
      std::make_unique<LocalProvider>(context, std::move(binary), object_store_memory));
}

}  // namespace rayd::autoscaler
