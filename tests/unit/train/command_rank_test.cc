// Command ranks without a cluster: each launcher profile's environment (what torchrun,
// DeepSpeed, TF_CONFIG and JAX expect, and rayd's own variables), and RunCommandRank itself on
// real processes: a report through the wire, a failure's reason with the last lines of
// stderr, and a stop that ends the command's whole process group, grandchildren included.

#include "launch/command_rank.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/batch_slots.h"
#include "launch/launcher_env.h"
#include "launch/shared_pages.h"
#include "test_util.h"

namespace rayd::train::internal {
namespace {

using Catch::Matchers::Contains;
using rayd::testing::ReadFile;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;
using namespace std::chrono_literals;

// Rank 2 of 4: two nodes of two ranks each, in its second attempt.
RankLaunch Rank2(const std::string& launcher) {
  return {.launcher = launcher,
          .world_rank = 2,
          .world_size = 4,
          .local_rank = 0,
          .local_world_size = 2,
          .node_rank = 1,
          .num_nodes = 2,
          .endpoints = {"10.0.0.1:29500", "10.0.0.1:29501", "10.0.0.2:29502", "10.0.0.2:29503"},
          .trial_id = "abc12_00003",
          .trial_dir = "/results/exp/trial",
          .restart_count = 1,
          .max_restarts = 3,
          .report_address = "127.0.0.1:4000",
          .report_token = "t0k",
          .config_file = "/tmp/x/config.json",
          .python_dir = "/opt/rayd/python",
          .gpus = "5",
          .cpus = 4};
}

Environment Compose(const RankLaunch& rank, const Environment& inherited = {},
                    const Environment& command = {}) {
  Result<LaunchEnv> env = ComposeLaunchEnv(rank, inherited, command);
  REQUIRE(env.ok());
  return env->env;
}

TEST_CASE("the torch profile sets what torchrun sets", "[train][command]") {
  Environment env = Compose(Rank2("torch"), {{"PATH", "/bin"}, {"PYTHONPATH", "/mine"}});
  const Environment expected = {{"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "29500"},
                                {"RANK", "2"},
                                {"WORLD_SIZE", "4"},
                                {"LOCAL_RANK", "0"},
                                {"LOCAL_WORLD_SIZE", "2"},
                                {"NODE_RANK", "1"},
                                {"GROUP_RANK", "1"},
                                {"GROUP_WORLD_SIZE", "2"},
                                {"ROLE_NAME", "default"},
                                {"ROLE_RANK", "2"},
                                {"ROLE_WORLD_SIZE", "4"},
                                {"TORCHELASTIC_RUN_ID", "abc12_00003"},
                                {"TORCHELASTIC_RESTART_COUNT", "1"},
                                {"TORCHELASTIC_MAX_RESTARTS", "3"},
                                {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
                                // rayd's own, whatever the launcher.
                                {"RAYD_TRIAL_ID", "abc12_00003"},
                                {"RAYD_TRIAL_DIR", "/results/exp/trial"},
                                {"RAYD_WORLD_RANK", "2"},
                                {"RAYD_WORLD_SIZE", "4"},
                                {"RAYD_LOCAL_RANK", "0"},
                                {"RAYD_LOCAL_WORLD_SIZE", "2"},
                                {"RAYD_NODE_RANK", "1"},
                                {"RAYD_REPORT_ADDR", "127.0.0.1:4000"},
                                {"RAYD_REPORT_TOKEN", "t0k"},
                                {"RAYD_CONFIG_FILE", "/tmp/x/config.json"},
                                {"CUDA_VISIBLE_DEVICES", "5"},
                                {"OMP_NUM_THREADS", "4"},
                                {"MALLOC_MMAP_THRESHOLD_", "33554432"},
                                {"MALLOC_TRIM_THRESHOLD_", "67108864"},
                                {"PYTHONPATH", "/opt/rayd/python:/mine"},
                                {"PATH", "/bin"}};
  CHECK(env == expected);
}

TEST_CASE("a rank keeps the memory it frees unless its environment tunes malloc itself",
          "[train][command]") {
  CHECK(Compose(Rank2("none")).at("MALLOC_TRIM_THRESHOLD_") == "67108864");
  // Any malloc setting of the user's, inherited or the trainable's, and rayd adds none.
  for (const Environment& user : std::vector<Environment>{
           {{"MALLOC_TRIM_THRESHOLD_", "0"}},
           {{"MALLOC_MMAP_THRESHOLD_", "131072"}},
           {{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}}}) {
    const Environment inherited = Compose(Rank2("none"), user);
    const Environment own = Compose(Rank2("none"), {}, user);
    for (const Environment* env : {&inherited, &own}) {
      CHECK(env->size() == Compose(Rank2("none")).size() - 2 + 1);
      CHECK(env->find(user.begin()->first)->second == user.begin()->second);
    }
  }
  // Tunables of something else do not count.
  CHECK(Compose(Rank2("none"), {{"GLIBC_TUNABLES", "glibc.cpu.x86_shstk=off"}})
            .count("MALLOC_MMAP_THRESHOLD_") == 1);
}

TEST_CASE("a trainable's own PYTHONPATH comes after rayd's client, not instead of it",
          "[train][command]") {
  Environment env = Compose(Rank2("none"), {{"PYTHONPATH", "/inherited"}},
                            {{"PYTHONPATH", "/my/packages"}, {"OTHER", "x"}});
  CHECK(env["PYTHONPATH"] == "/opt/rayd/python:/my/packages");
  CHECK(env["OTHER"] == "x");
}

TEST_CASE("deepspeed, tensorflow, jax and none profiles", "[train][command]") {
  Result<LaunchEnv> deepspeed = ComposeLaunchEnv(Rank2("deepspeed"), {}, {});
  REQUIRE(deepspeed.ok());
  CHECK(deepspeed->env.at("CROSS_RANK") == "1");
  CHECK(deepspeed->env.at("CROSS_SIZE") == "2");
  CHECK(deepspeed->env.at("LOCAL_SIZE") == "2");
  CHECK(deepspeed->env.at("MASTER_PORT") == "29500");  // torch's too
  CHECK(deepspeed->extra_args == std::vector<std::string>{"--local_rank=0"});

  Environment tf = Compose(Rank2("tensorflow"));
  CHECK(nlohmann::json::parse(tf.at("TF_CONFIG")) ==
        nlohmann::json::parse(R"({"cluster": {"worker": ["10.0.0.1:29500", "10.0.0.1:29501",
                                   "10.0.0.2:29502", "10.0.0.2:29503"]},
                                  "task": {"type": "worker", "index": 2}})"));
  CHECK(tf.count("MASTER_ADDR") == 0);

  Environment jax = Compose(Rank2("jax"));
  CHECK(jax.at("JAX_COORDINATOR_ADDRESS") == "10.0.0.1:29500");
  CHECK(jax.at("JAX_NUM_PROCESSES") == "4");
  CHECK(jax.at("JAX_PROCESS_ID") == "2");

  Environment none = Compose(Rank2("none"));
  CHECK(none.count("RANK") == 0);
  CHECK(none.at("RAYD_WORLD_RANK") == "2");

  Result<LaunchEnv> unknown = ComposeLaunchEnv(Rank2("mpirun"), {}, {});
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Contains("unknown launcher 'mpirun'"));
}

TEST_CASE(
    "the command's env wins, the worker's own variables are not passed on, no GPU hides "
    "them all",
    "[train][command]") {
  RankLaunch rank = Rank2("torch");
  rank.gpus = "";
  rank.cpus = 0.5;
  rank.checkpoint_dir = "/tmp/ckpt";
  Environment env = Compose(rank, {{"HOME", "/root"}}, {{"OMP_NUM_THREADS", "8"}, {"RANK", "x"}});
  CHECK(env.at("OMP_NUM_THREADS") == "8");
  CHECK(env.at("RANK") == "x");
  CHECK(env.at("CUDA_VISIBLE_DEVICES").empty());
  CHECK(env.at("RAYD_CHECKPOINT_DIR") == "/tmp/ckpt");
  CHECK(env.at("HOME") == "/root");
  CHECK(Compose(Rank2("torch")).count("RAYD_CHECKPOINT_DIR") == 0);

  ::setenv("RAYD_TOKEN", "secret", 1);
  ::setenv("RAYD_WORKER_MODE", "1", 1);
  Environment inherited = InheritedEnvironment();
  ::unsetenv("RAYD_TOKEN");
  ::unsetenv("RAYD_WORKER_MODE");
  CHECK(inherited.count("RAYD_TOKEN") == 0);
  CHECK(inherited.count("RAYD_WORKER_MODE") == 0);
  CHECK(inherited.count("PATH") == 1);
}

// A single-rank command run here, with `script` as its bash program.
struct LocalRank {
  TempDir dir;
  CommandRank rank;
  int stop_pipe[2] = {-1, -1};
  std::atomic<bool> stop{false};
  std::vector<std::map<std::string, double>> reports;

  explicit LocalRank(const std::string& script) {
    REQUIRE(::pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) == 0);
    rank.command = {.argv = {"/bin/bash", "-c", script},
                    .launcher = "none",
                    .working_dir = dir.path(),
                    .stop_grace_s = 1};
    rank.launch = {.launcher = "none", .endpoints = {"127.0.0.1:1"}, .trial_id = "t"};
    rank.config_json = R"({"x": 1})";
    rank.log_path = dir.path() + "/rank_0.log";
  }
  ~LocalRank() {
    ::close(stop_pipe[0]);
    ::close(stop_pipe[1]);
  }

  Result<bool> Run() {
    return RunCommandRank(
        rank,
        [this](const std::map<std::string, double>& metrics, const std::optional<std::string>&) {
          reports.push_back(metrics);
          return Status::Ok();
        },
        stop_pipe[0], [this] { return stop.load(); });
  }
  void Stop() {
    stop = true;
    (void)!::write(stop_pipe[1], "x", 1);
  }
};

constexpr char kReport[] = R"(exec 3<>/dev/tcp/${RAYD_REPORT_ADDR%:*}/${RAYD_REPORT_ADDR##*:}
printf '{"token":"%s","metrics":{"loss":0.5}}\n' "$RAYD_REPORT_TOKEN" >&3
read -r reply <&3; echo "reply $reply"; cat "$RAYD_CONFIG_FILE"; echo)";

TEST_CASE(
    "a command rank reports over the wire and finishes, and a failure names its exit and "
    "stderr",
    "[train][command]") {
  LocalRank ok(kReport);
  Result<bool> ran = ok.Run();
  REQUIRE(ran.ok());
  CHECK(*ran);
  REQUIRE(ok.reports.size() == 1);
  CHECK(ok.reports[0].at("loss") == 0.5);
  const std::string log = ReadFile(ok.rank.log_path);
  CHECK_THAT(log, Contains("reply {\"ok\": true}"));
  CHECK_THAT(log, Contains("{\"x\": 1}"));

  LocalRank failing("echo one >&2; echo two >&2; exit 3");
  Result<bool> failed = failing.Run();
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.status().message(),
             Contains("exited with status 3") && Contains("stderr:\n  one\n  two"));

  LocalRank killed("kill -9 $$");
  Result<bool> died = killed.Run();
  REQUIRE_FALSE(died.ok());
  CHECK_THAT(died.status().message(), Contains("was killed by signal 9 (SIGKILL)"));
}

TEST_CASE("stopping a command rank ends its whole process group, children included",
          "[train][command]") {
  // A child that ignores SIGTERM, and a grandchild: SIGKILL after the grace period takes both.
  LocalRank rank(R"(trap '' TERM; bash -c 'trap "" TERM; sleep 300' & echo $! > pids;
                    sleep 300 & echo $! >> pids; wait)");
  std::thread stopper([&] {
    WaitFor([&] { return ReadFile(rank.dir.path() + "/pids").size() > 2; }, 10s);
    rank.Stop();
  });
  Result<bool> ran = rank.Run();
  stopper.join();
  REQUIRE(ran.ok());
  CHECK_FALSE(*ran);  // stopped, not finished
  std::ifstream pids(rank.dir.path() + "/pids");
  int count = 0;
  for (pid_t pid; pids >> pid; ++count) {
    CHECK((::kill(pid, 0) != 0 ||
           rayd::testing::ReadFile("/proc/" + std::to_string(pid) + "/stat").find(") Z ") !=
               std::string::npos));
  }
  CHECK(count == 2);
}

}  // namespace
}  // namespace rayd::train::internal

namespace rayd::train::internal {
namespace {

// A memfd of `bytes`, mapped shared (as the object store maps its arena) or private.
struct Memfd {
  explicit Memfd(size_t bytes, bool shared) : size(bytes) {
    fd = ::memfd_create("rayd-test", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
    REQUIRE(map != MAP_FAILED);
  }
  ~Memfd() {
    ::munmap(map, size);
    ::close(fd);
  }
  uint8_t* at(size_t offset) const { return static_cast<uint8_t*>(map) + offset; }
  size_t size;
  int fd = -1;
  void* map = nullptr;
};

TEST_CASE("batch slots are reused once released, mapped elsewhere as the same pages, and bounded",
          "[train][data]") {
  BatchSlots slots(/*max_slots=*/3, /*max_bytes=*/size_t{1} << 20);
  std::optional<BatchSlots::Slot> a = slots.Take(200'000, /*lease=*/1);
  REQUIRE(a.has_value());
  CHECK(a->capacity >= 200'000);
  CHECK(a->path == "/proc/" + std::to_string(::getpid()) + "/fd/" +
                       a->path.substr(a->path.rfind('/') + 1));
  // What the server writes is what another mapping of the path (the rank's process) reads, and
  // the other way round.
  a->data[1234] = 42;
  const int fd = ::open(a->path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto* other = static_cast<uint8_t*>(
      ::mmap(nullptr, a->capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  REQUIRE(other != MAP_FAILED);
  CHECK(other[1234] == 42);
  other[7] = 9;
  CHECK(a->data[7] == 9);
  ::munmap(other, a->capacity);

  // A leased slot is not handed out again; a released one is (the same memfd, no new one).
  std::optional<BatchSlots::Slot> b = slots.Take(200'000, 2);
  REQUIRE(b.has_value());
  CHECK(b->id != a->id);
  slots.Release(1);
  std::optional<BatchSlots::Slot> again = slots.Take(150'000, 3);
  REQUIRE(again.has_value());
  CHECK(again->id == a->id);
  CHECK(slots.size() == 2);
  // Every slot leased and no more allowed: the batch goes another way.
  REQUIRE(slots.Take(100, 4).has_value());
  CHECK(slots.size() == 3);
  CHECK_FALSE(slots.Take(100, 5).has_value());
  CHECK(slots.leased() == 3);
  // A bigger batch with only a small slot free: that one is made again bigger, under a new id,
  // while the bytes allowed hold it; past them, none.
  slots.Release(2);
  std::optional<BatchSlots::Slot> big = slots.Take(600'000, 6);
  REQUIRE(big.has_value());
  CHECK(big->capacity >= 600'000);
  CHECK(big->id != b->id);
  CHECK(big->id > again->id);
  slots.Release(6);
  CHECK_FALSE(slots.Take(900'000, 7).has_value());
  // A lease not held releases nothing; the process gone, every slot is free.
  slots.Release(12345);
  CHECK(slots.leased() == 2);
  slots.ReleaseAll();
  CHECK(slots.leased() == 0);
}

TEST_CASE("a batch's pages are found in a shared memfd mapping and nowhere else",
          "[train][data]") {
  SharedPages pages;
  std::vector<uint8_t> heap(1 << 20);
  // The heap first: nothing to share, now and on the next look (which reads no maps).
  CHECK_FALSE(pages.Find(heap.data(), heap.size()).has_value());
  CHECK_FALSE(pages.Find(heap.data() + 10, 100).has_value());
  // A memfd mapped after that look is found, with the descriptor's path and the offset.
  Memfd shared(1 << 20, /*shared=*/true);
  std::optional<SharedPages::Location> where = pages.Find(shared.at(4096 + 100), 50);
  REQUIRE(where.has_value());
  CHECK(where->path == "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(shared.fd));
  CHECK(where->offset == 4096 + 100);
  // The pages at that path are the same pages.
  *shared.at(4096 + 100) = 42;
  const int again = ::open(where->path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(again >= 0);
  uint8_t byte = 0;
  CHECK(::pread(again, &byte, 1, static_cast<off_t>(where->offset)) == 1);
  ::close(again);
  CHECK(byte == 42);
  // A range running past the mapping's end, and a private mapping, are not shared.
  CHECK_FALSE(pages.Find(shared.at((1 << 20) - 10), 100).has_value());
  Memfd private_map(1 << 16, /*shared=*/false);
  CHECK_FALSE(pages.Find(private_map.at(0), 10).has_value());
  // The heap still is not, with a shared mapping known.
  CHECK_FALSE(pages.Find(heap.data(), 16).has_value());
}

}  // namespace
}  // namespace rayd::train::internal
