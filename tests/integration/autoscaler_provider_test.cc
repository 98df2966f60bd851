// The autoscaler's node providers against a real head (`rayd start --head`, no resources of its
// own): the local provider's nodes join with their type's resources and labels, are listed,
// terminated (their process groups gone) and adopted by a second provider; the command
// provider drives small shell scripts that start real nodes, and reports their failures (a
// non-zero exit, output that is no JSON, a command past its time limit) with their output.
//
// Each test has its own temp root and port (RaydSandbox); nodes live under that root, so the
// sandbox's `rayd stop --force` ends whatever a failed test leaves. Tests wait by running the
// provider's loop until its callback comes, and poll the cluster with deadlines.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autoscaler/node_provider.h"
#include "autoscaler/providers.h"
#include "autoscaler/run_command.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"
#include "rayd_sandbox.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using rayd::EventLoop;
using rayd::Result;
using rayd::Status;
using rayd::autoscaler::AutoscalerConfig;
using rayd::autoscaler::Instance;
using rayd::autoscaler::kInstanceLabel;
using rayd::autoscaler::kNodeTypeLabel;
using rayd::autoscaler::NodeProvider;
using rayd::autoscaler::NodeTypeConfig;
using rayd::autoscaler::ProviderContext;
using rayd::testing::ProcessGone;
using rayd::testing::WaitFor;
using Instances = Result<std::vector<Instance>>;

constexpr auto kJoinTimeout = 30s;  // a node started by a provider joins the head
constexpr auto kCallTimeout = 30s;  // a provider call answers

// Runs `loop` until the callback `start` hands over fires; REQUIREs that it does.
template <typename T>
T Await(EventLoop& loop, const std::function<void(std::function<void(T)>)>& start,
        std::chrono::milliseconds timeout = kCallTimeout) {
  std::optional<T> got;
  start([&got](T value) { got.emplace(std::move(value)); });
  REQUIRE(loop.RunUntil([&] { return got.has_value(); }, timeout));
  return std::move(*got);
}

bool GroupGone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

// A head with no resources of its own, and what a provider needs to add nodes to it.
class ProviderCluster : public rayd::testing::RaydSandbox {
 public:
  ProviderCluster() : RaydSandbox(RAYD_BINARY) {
    const int port = rayd::testing::FreeTcpPort();
    Start({"--head", "--port", std::to_string(port), "--num-cpus", "0", "--num-gpus", "0"});
    address_ = "127.0.0.1:" + std::to_string(port);
    auto token = rayd::session::ReadTrimmed(rayd::session::LatestHeadSession(root()) + "/token");
    REQUIRE(token.ok());
    token_ = *token;
    std::filesystem::create_directories(root() + "/autoscaler");
  }

  ProviderContext Context() {
    return {&loop_, address_, token_, RAYD_BINARY, root() + "/autoscaler", root()};
  }
  EventLoop& loop() { return loop_; }
  const std::string& token() const { return token_; }

  // The alive node whose instance label is `id`, once it has joined; nullopt at the deadline.
  std::optional<rayd::NodeInfo> WaitJoined(const std::string& id) {
    std::optional<rayd::NodeInfo> found;
    WaitFor([&] { return (found = AliveNode(id)).has_value(); }, kJoinTimeout);
    return found;
  }
  // True once no alive node has the instance label `id`.
  bool WaitLeft(const std::string& id) {
    return WaitFor([&] { return !AliveNode(id).has_value(); }, kJoinTimeout);
  }

 private:
  std::optional<rayd::NodeInfo> AliveNode(const std::string& id) {
    auto view = rayd::FetchClusterView(address_, token_, rayd::Millis(5000));
    if (!view.ok()) return std::nullopt;
    for (const auto& node : view->nodes) {
      auto label = node.labels.find(kInstanceLabel);
      if (node.alive && label != node.labels.end() && label->second == id) return node;
    }
    return std::nullopt;
  }

  std::string address_;
  std::string token_;
  EventLoop loop_;
};

NodeTypeConfig CpuType(const std::string& name, double cpus) {
  NodeTypeConfig type;
  type.name = name;
  type.resources = rayd::scheduler::ResourceSet{{"CPU", cpus}, {"widget", 3}};
  type.labels = {{"zone", "z1"}};
  type.max_nodes = 4;
  type.provider = {{"flavour", "small"}};
  return type;
}

AutoscalerConfig LocalConfig(const NodeTypeConfig& type) {
  AutoscalerConfig config;
  config.provider_type = "local";
  config.max_nodes = 4;
  config.node_types = {type};
  return config;
}

int PidOf(const Instance& instance) {
  return nlohmann::json::parse(instance.handle).at("pid").get<int>();
}

std::vector<Instance> ListOk(EventLoop& loop, NodeProvider& provider) {
  auto listed = Await<Instances>(loop, [&](auto done) { provider.List(done); });
  INFO(listed.status().ToString());
  REQUIRE(listed.ok());
  return *listed;
}

}  // namespace

TEST_CASE("local provider: a node joins with its type, is listed, adopted and terminated",
          "[integration]") {
  ProviderCluster cluster;
  const NodeTypeConfig type = CpuType("cpu2", 2);
  auto made = rayd::autoscaler::MakeNodeProvider(LocalConfig(type), cluster.Context());
  REQUIRE(made.ok());
  std::unique_ptr<NodeProvider> provider = std::move(*made);
  CHECK(provider->type() == "local");

  auto created =
      Await<Instances>(cluster.loop(), [&](auto done) { provider->Create(type, 1, done); });
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  REQUIRE(created->size() == 1);
  const Instance instance = created->front();
  CHECK(instance.id.starts_with("local-"));
  CHECK(instance.node_type == "cpu2");
  CHECK(instance.state == Instance::State::kRunning);
  const int pid = PidOf(instance);
  REQUIRE(pid > 0);

  auto node = cluster.WaitJoined(instance.id);
  REQUIRE(node.has_value());
  CHECK(node->total.Get("CPU").ToDouble() == 2);
  CHECK(node->total.Get("GPU").ToDouble() == 0);
  CHECK(node->total.Get("widget").ToDouble() == 3);
  CHECK(node->labels.at(kNodeTypeLabel) == "cpu2");
  CHECK(node->labels.at("zone") == "z1");
  CHECK(node->pid == pid);
  // Its session is under the head's root; the token is not on its command line.
  CHECK(node->session_dir.starts_with(cluster.root() + "/session_"));
  const std::string cmdline = rayd::testing::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  CHECK(cmdline.find(cluster.token()) == std::string::npos);
  CHECK(std::filesystem::exists(cluster.Context().log_dir + "/autoscaler-node-" + instance.id +
                                ".log"));

  auto listed = ListOk(cluster.loop(), *provider);
  REQUIRE(listed.size() == 1);
  CHECK(listed.front().id == instance.id);
  CHECK(listed.front().state == Instance::State::kRunning);

  // A restarted head: the first provider goes, the node stays; a second one adopts it, and
  // ignores an instance whose pid runs something else and one whose pid is gone.
  provider.reset();
  CHECK_FALSE(ProcessGone(pid));
  made = rayd::autoscaler::MakeNodeProvider(LocalConfig(type), cluster.Context());
  REQUIRE(made.ok());
  provider = std::move(*made);
  Instance impostor = instance;
  impostor.id = "local-0badf00d";
  impostor.handle = nlohmann::json{{"pid", ::getpid()}}.dump();
  Instance vanished = instance;
  vanished.id = "local-00000000";
  vanished.handle = R"({"pid": 999999999})";
  provider->Adopt({instance, impostor, vanished});
  listed = ListOk(cluster.loop(), *provider);
  REQUIRE(listed.size() == 1);
  CHECK(listed.front().id == instance.id);
  CHECK(listed.front().node_type == "cpu2");

  auto terminated =
      Await<Status>(cluster.loop(), [&](auto done) { provider->Terminate(instance, done); });
  INFO(terminated.ToString());
  CHECK(terminated.ok());
  CHECK(ProcessGone(pid));
  CHECK(WaitFor([&] { return GroupGone(pid); }, 10s));
  CHECK(cluster.WaitLeft(instance.id));
  CHECK(ListOk(cluster.loop(), *provider).empty());
  // Terminating what is gone is fine.
  terminated =
      Await<Status>(cluster.loop(), [&](auto done) { provider->Terminate(instance, done); });
  CHECK(terminated.ok());
}

TEST_CASE("local provider: a node that exits by itself leaves the list", "[integration]") {
  ProviderCluster cluster;
  NodeTypeConfig type = CpuType("cpu1", 1);
  type.resources.Set("object_store_memory", rayd::scheduler::FixedPoint::FromWhole(64 << 20));
  auto made = rayd::autoscaler::MakeNodeProvider(LocalConfig(type), cluster.Context());
  REQUIRE(made.ok());
  NodeProvider& provider = **made;
  auto created =
      Await<Instances>(cluster.loop(), [&](auto done) { provider.Create(type, 2, done); });
  REQUIRE(created.ok());
  REQUIRE(created->size() == 2);
  const Instance& doomed = created->at(0);
  const Instance& kept = created->at(1);
  CHECK(doomed.id != kept.id);
  REQUIRE(cluster.WaitJoined(doomed.id).has_value());
  REQUIRE(cluster.WaitJoined(kept.id).has_value());

  ::kill(PidOf(doomed), SIGKILL);
  std::vector<Instance> listed;
  // Each List runs the loop, which delivers the node's exit.
  REQUIRE(WaitFor(
      [&] {
        listed = ListOk(cluster.loop(), provider);
        return listed.size() == 1;
      },
      kCallTimeout));
  CHECK(listed.front().id == kept.id);

  auto terminated =
      Await<Status>(cluster.loop(), [&](auto done) { provider.Terminate(kept, done); });
  CHECK(terminated.ok());
  CHECK(cluster.WaitLeft(kept.id));
}

namespace {

// Scripts for the command provider in a directory of their own: create starts real nodes in
// the background (pid files: "PID TYPE"), list reports the live ones, terminate stops one.
class CommandScripts {
 public:
  explicit CommandScripts(const std::string& root) : dir_(root + "/scripts") {
    std::filesystem::create_directories(dir_);
    Write("create.sh", R"sh(
type="$1" count="$2"
env | grep '^RAYD_' | sort >"$DIR/create.env"
printf '{"instances": ['
i=0
while [ "$i" -lt "$count" ]; do
  id="cmd-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
  eval "set -- $RAYD_START_ARGS,rayd.io/autoscaler-instance=$id"
  "$RAYD" start --block --temp-dir "$ROOT" "$@" >"$DIR/$id.log" 2>&1 </dev/null &
  echo "$! $type" >"$DIR/$id.pid"
  [ "$i" -gt 0 ] && printf ','
  printf '{"id": "%s", "detail": "pid %s"}' "$id" "$!"
  i=$((i + 1))
done
printf ']}\n'
)sh");
    Write("list.sh", R"sh(
printf '{"instances": ['
sep=''
for f in "$DIR"/cmd-*.pid; do
  [ -e "$f" ] || continue
  read -r pid type <"$f"
  alive "$pid" || continue
  printf '%s{"id": "%s", "node_type": "%s", "detail": "pid %s", "seconds_left": 3600}' \
    "$sep" "$(basename "$f" .pid)" "$type" "$pid"
  sep=','
done
printf ']}\n'
)sh");
    Write("terminate.sh", R"sh(
f="$DIR/$1.pid"
[ -e "$f" ] || exit 0
read -r pid type <"$f"
kill -TERM "$pid" 2>/dev/null
i=0
while alive "$pid" && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
alive "$pid" && kill -KILL "$pid"
rm -f "$f"
)sh");
    Write("fail.sh", "echo 'looking for capacity'\necho 'no capacity in zone z9' >&2\nexit 1\n");
    Write("garbage.sh", "echo 'hello, this is not JSON'\n");
    Write("no_id.sh", R"(echo '{"instances": [{"name": "x"}]}')");
    Write("hang.sh",
          "echo $$ >\"$DIR/hang.pid\"\nsleep 60 &\necho $! >\"$DIR/hang-child.pid\"\n"
          "echo 'waiting for the cloud'\nwait\n");
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  void Write(const std::string& name, const std::string& body) {
    std::ofstream out(Path(name));
    out << "#!/bin/sh\n"
        << "DIR='" << dir_ << "' RAYD='" << RAYD_BINARY << "' ROOT='"
        << std::filesystem::path(dir_).parent_path().string() << "'\n"
        << "alive() { [ -r \"/proc/$1/stat\" ] && ! grep -q ') Z ' \"/proc/$1/stat\"; }\n"
        << body;
    out.close();
    ::chmod(Path(name).c_str(), 0755);
  }

  std::string dir_;
};

AutoscalerConfig CommandConfig(const CommandScripts& scripts, const std::string& create,
                               double timeout_s = 60) {
  AutoscalerConfig config;
  config.provider_type = "command";
  config.provider = {
      {"create", scripts.Path(create)},
      {"terminate", nlohmann::json::array({"/bin/sh", scripts.Path("terminate.sh")})},
      {"list", scripts.Path("list.sh")},
      {"timeout_s", timeout_s}};
  config.max_nodes = 4;
  config.node_types = {CpuType("cpu1", 1)};
  return config;
}

}  // namespace

TEST_CASE("command provider: scripts create, list and terminate real nodes", "[integration]") {
  ProviderCluster cluster;
  CommandScripts scripts(cluster.root());
  const AutoscalerConfig config = CommandConfig(scripts, "create.sh");
  const NodeTypeConfig& type = config.node_types.front();
  auto made = rayd::autoscaler::MakeNodeProvider(config, cluster.Context());
  REQUIRE(made.ok());
  NodeProvider& provider = **made;
  CHECK(provider.type() == "command");

  auto created =
      Await<Instances>(cluster.loop(), [&](auto done) { provider.Create(type, 2, done); });
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  REQUIRE(created->size() == 2);
  for (const auto& instance : *created) {
    INFO(instance.id);
    CHECK(instance.id.starts_with("cmd-"));
    CHECK(instance.node_type == "cpu1");
    CHECK(instance.detail.starts_with("pid "));
    auto node = cluster.WaitJoined(instance.id);
    INFO(rayd::testing::ReadFile(scripts.dir() + "/" + instance.id + ".log"));
    REQUIRE(node.has_value());
    CHECK(node->total.Get("CPU").ToDouble() == 1);
    CHECK(node->total.Get("widget").ToDouble() == 3);
    CHECK(node->labels.at(kNodeTypeLabel) == "cpu1");
    CHECK(node->labels.at("zone") == "z1");
  }
  const std::string env = rayd::testing::ReadFile(scripts.dir() + "/create.env");
  CHECK(env.find("RAYD_NODE_TYPE=cpu1\n") != std::string::npos);
  CHECK(env.find("RAYD_NODE_COUNT=2\n") != std::string::npos);
  CHECK(env.find("RAYD_TOKEN=" + cluster.token() + "\n") != std::string::npos);
  CHECK(env.find("RAYD_HEAD_ADDRESS=" + cluster.Context().gcs_address + "\n") != std::string::npos);
  CHECK(env.find(R"(RAYD_NODE_CONFIG={"flavour":"small"})") != std::string::npos);
  CHECK(env.find("RAYD_START_ARGS=--address ") != std::string::npos);

  auto listed = ListOk(cluster.loop(), provider);
  REQUIRE(listed.size() == 2);
  for (const auto& instance : listed) {
    CHECK(instance.node_type == "cpu1");
    CHECK(instance.state == Instance::State::kRunning);
    CHECK(instance.seconds_left == 3600);
  }

  for (const auto& instance : *created) {
    auto terminated =
        Await<Status>(cluster.loop(), [&](auto done) { provider.Terminate(instance, done); });
    INFO(terminated.ToString());
    CHECK(terminated.ok());
    CHECK(cluster.WaitLeft(instance.id));
  }
  CHECK(ListOk(cluster.loop(), provider).empty());
}

TEST_CASE("command provider: failures name the command and show its output", "[integration]") {
  rayd::testing::TempDir root;
  CommandScripts scripts(root.path());
  EventLoop loop;
  ProviderContext context{&loop, "127.0.0.1:1", "secret", RAYD_BINARY, root.path(), root.path()};
  const NodeTypeConfig type = CpuType("cpu1", 1);
  auto create_with = [&](const std::string& script, double timeout_s = 60) {
    auto made =
        rayd::autoscaler::MakeNodeProvider(CommandConfig(scripts, script, timeout_s), context);
    REQUIRE(made.ok());
    std::unique_ptr<NodeProvider> provider = std::move(*made);
    return Await<Instances>(loop, [&](auto done) { provider->Create(type, 1, done); }).status();
  };

  SECTION("a non-zero exit") {
    Status s = create_with("fail.sh");
    INFO(s.ToString());
    CHECK(s.code() == rayd::StatusCode::kUnavailable);
    CHECK(s.message().find(scripts.Path("fail.sh") + " cpu1 1") != std::string::npos);
    CHECK(s.message().find("exited with status 1") != std::string::npos);
    CHECK(s.message().find("no capacity in zone z9") != std::string::npos);
    CHECK(s.message().find("looking for capacity") != std::string::npos);
  }
  SECTION("output that is not JSON") {
    Status s = create_with("garbage.sh");
    INFO(s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(s.message().find("no JSON") != std::string::npos);
    CHECK(s.message().find("hello, this is not JSON") != std::string::npos);
  }
  SECTION("an instance without an id") {
    Status s = create_with("no_id.sh");
    INFO(s.ToString());
    CHECK_FALSE(s.ok());
    CHECK(s.message().find("without an \"id\"") != std::string::npos);
  }
  SECTION("a command past its time limit is killed with its process group") {
    const auto start = std::chrono::steady_clock::now();
    Status s = create_with("hang.sh", 1);
    const auto took = std::chrono::steady_clock::now() - start;
    INFO(s.ToString());
    CHECK(s.code() == rayd::StatusCode::kDeadlineExceeded);
    CHECK(s.message().find("did not finish within 1 s") != std::string::npos);
    CHECK(s.message().find("waiting for the cloud") != std::string::npos);
    CHECK(took < 20s);
    const int script = std::atoi(rayd::testing::ReadFile(scripts.dir() + "/hang.pid").c_str());
    const int child = std::atoi(rayd::testing::ReadFile(scripts.dir() + "/hang-child.pid").c_str());
    REQUIRE(script > 0);
    REQUIRE(child > 0);
    CHECK(WaitFor([&] { return ProcessGone(script) && ProcessGone(child); }, 10s));
  }
  SECTION("a missing command is refused when the provider is made") {
    AutoscalerConfig config = CommandConfig(scripts, "create.sh");
    config.provider.erase("list");
    auto made = rayd::autoscaler::MakeNodeProvider(config, context);
    REQUIRE_FALSE(made.ok());
    CHECK(made.status().message().find("provider.list") != std::string::npos);
  }
  SECTION("a command that cannot run") {
    Status s = create_with("does-not-exist.sh");
    INFO(s.ToString());
    CHECK(s.code() == rayd::StatusCode::kUnavailable);
    CHECK(s.message().find("does-not-exist.sh") != std::string::npos);
  }
}

TEST_CASE("provider helpers: start flags, Slurm durations, shell quoting", "[integration]") {
  using rayd::autoscaler::ParseSlurmDuration;
  CHECK(ParseSlurmDuration("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4);
  CHECK(ParseSlurmDuration("02:03:04") == 2 * 3600 + 3 * 60 + 4);
  CHECK(ParseSlurmDuration("3:04") == 3 * 60 + 4);
  CHECK(ParseSlurmDuration("45") == 45 * 60);
  CHECK(ParseSlurmDuration("2-12") == 2 * 86400 + 12 * 3600);
  CHECK(ParseSlurmDuration("2-12:30") == 2 * 86400 + 12 * 3600 + 30 * 60);
  CHECK_FALSE(ParseSlurmDuration("UNLIMITED"));
  CHECK_FALSE(ParseSlurmDuration("NOT_SET"));
  CHECK_FALSE(ParseSlurmDuration("INVALID"));
  CHECK_FALSE(ParseSlurmDuration(""));
  CHECK_FALSE(ParseSlurmDuration("1:2:3:4"));

  using rayd::autoscaler::ShellQuote;
  CHECK(ShellQuote("--num-cpus") == "--num-cpus");
  CHECK(ShellQuote(R"({"tpu":1})") == R"('{"tpu":1}')");
  CHECK(ShellQuote("it's") == R"('it'\''s')");
  CHECK(ShellQuote("") == "''");
  CHECK(rayd::autoscaler::LastLines("a\nb\nc\n", 2) == "b\nc");
  CHECK(rayd::autoscaler::LastLines("a\nb\nc", 5) == "a\nb\nc");

  NodeTypeConfig type = CpuType("gpu", 8);
  type.resources.Set("GPU", rayd::scheduler::FixedPoint::FromDouble(0.5));
  type.resources.Set("memory", rayd::scheduler::FixedPoint::FromWhole(1 << 30));
  ProviderContext context{nullptr, "10.0.0.1:6380", "t", "rayd", "/tmp", ""};
  using V = std::vector<std::string>;
  CHECK(rayd::autoscaler::StartArgs(type, context, "") ==
        V{"--address", "10.0.0.1:6380", "--num-cpus", "8", "--num-gpus", "0.5", "--memory",
          "1073741824", "--resources", R"({"widget":3})", "--labels",
          "rayd.io/node-type=gpu,zone=z1"});
  CHECK(rayd::autoscaler::StartArgs(type, context, "42").back() ==
        "rayd.io/node-type=gpu,zone=z1,rayd.io/autoscaler-instance=42");
}
