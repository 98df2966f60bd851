// Status, ids, the token helpers, the event loop's cross-thread posting, file appends, and
// directories owned by a live process.

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "rayd/base/auth.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/files.h"
#include "rayd/base/ids.h"
#include "rayd/base/status.h"
#include "test_util.h"

namespace rayd {
namespace {

using namespace std::chrono_literals;

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  RAYD_ASSIGN_OR_RETURN(int half, Half(x));
  RAYD_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

TEST_CASE("Status and Result carry codes and messages", "[base]") {
  int out = 0;
  CHECK(Quarter(8, &out).ok());
  CHECK(out == 2);
  Status s = Quarter(6, &out);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.ToString() == "InvalidArgument: 3 is odd");
  CHECK(s.WithContext("quartering").message() == "quartering: 3 is odd");
}

TEST_CASE("ids are random and round-trip through hex", "[base]") {
  NodeId a = NodeId::FromRandom(), b = NodeId::FromRandom();
  CHECK(a != b);
  CHECK(a.Hex().size() == 32);
  auto parsed = NodeId::FromHex(a.Hex());
  REQUIRE(parsed.ok());
  CHECK(*parsed == a);
  CHECK_FALSE(NodeId::FromHex("xyz").ok());
  CHECK_FALSE(NodeId::FromHex(std::string(32, 'g')).ok());
  CHECK(NodeId::Nil().IsNil());
}

TEST_CASE("HMAC matches RFC 4231 test case 2", "[base][auth]") {
  std::string mac = HmacSha256("Jefe", "what do ya want for nothing?");
  static const unsigned char expected[] = {
      0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
      0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  CHECK(mac == std::string(reinterpret_cast<const char*>(expected), sizeof(expected)));
  CHECK(ConstantTimeEquals(mac, mac));
  CHECK_FALSE(ConstantTimeEquals(mac, mac.substr(1)));
  CHECK(GenerateToken().size() == 64);
  CHECK(GenerateToken() != GenerateToken());
}

TEST_CASE("Post runs work from other threads on the loop, in order", "[base][loop]") {
  EventLoop loop;
  std::vector<int> seen;
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) loop.Post([&seen, i] { seen.push_back(i); });
  });
  REQUIRE(loop.RunUntil([&] { return seen.size() == 1000; }, 10000ms));
  producer.join();
  for (int i = 0; i < 1000; ++i) REQUIRE(seen[i] == i);
}

TEST_CASE("a thread and a running loop hand work back and forth with no wake-up lost",
          "[base][loop]") {
  // Each round trip is a Post that the running loop must wake for while it sleeps: a lost
  // doorbell hangs a round until its deadline. Four more threads post at once beside it.
  EventLoop loop;
  std::thread runner([&] { loop.Run(); });
  std::atomic<int> from_producers{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) loop.Post([&] { from_producers.fetch_add(1); });
    });
  }
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0;
  bool all_answered = true;
  for (int i = 1; i <= 20000 && all_answered; ++i) {
    loop.Post([&] {
      std::lock_guard lock(mu);
      ++answered;
      cv.notify_one();
    });
    std::unique_lock lock(mu);
    all_answered = cv.wait_for(lock, 10s, [&] { return answered == i; });
  }
  for (auto& t : producers) t.join();
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool drained = false;
  loop.Post([&] {
    std::lock_guard lock(done_mu);
    drained = true;
    done_cv.notify_one();
  });
  {
    std::unique_lock lock(done_mu);
    CHECK(done_cv.wait_for(lock, 10s, [&] { return drained; }));
  }
  loop.Stop();
  runner.join();
  CHECK(all_answered);
  CHECK(answered == 20000);
  CHECK(from_producers.load() == 20000);
}

TEST_CASE("Stop from another thread ends Run", "[base][loop]") {
  EventLoop loop;
  Timer keepalive(loop);
  keepalive.Start(1000ms, 1000ms, [] {});
  std::thread stopper([&] { loop.Stop(); });
  loop.Run();  // returns only because of Stop
  stopper.join();
  SUCCEED();
}

TEST_CASE("timers fire once or repeatedly and can be stopped", "[base][loop]") {
  EventLoop loop;
  Timer once(loop), repeat(loop);
  int a = 0, b = 0;
  once.Start(5ms, 0ms, [&] { ++a; });
  repeat.Start(1ms, 1ms, [&] {
    if (++b == 5) repeat.Stop();
  });
  REQUIRE(loop.RunUntil([&] { return a == 1 && b == 5; }, 5000ms));
  CHECK_FALSE(repeat.active());
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("AppendFile writes a batch at Flush, follows a replaced file after Close", "[base]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rayd_append_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "log.txt").string();
  {
    AppendFile file(path);
    REQUIRE(file.Append("a\n").ok());
    REQUIRE(file.Append("b\n").ok());
    CHECK_FALSE(std::filesystem::exists(path));  // nothing written before the flush
    REQUIRE(file.Flush().ok());                    // creates the parent directories
    CHECK(Contents(path) == "a\nb\n");
    REQUIRE(file.Flush().ok());  // nothing new: nothing written
    CHECK(Contents(path) == "a\nb\n");
    // Another writer replaces the file by a rename: after Close, appends go to the new one.
    REQUIRE(file.Close().ok());
    REQUIRE(WriteFileAtomically(path, "header\n", /*durable=*/false).ok());
    REQUIRE(file.Append("c\n").ok());
    AppendFile moved = std::move(file);
    REQUIRE(moved.Flush().ok());
    CHECK(Contents(path) == "header\nc\n");
    // A batch past kFlushAt goes out on its own; the destructor writes the rest.
    REQUIRE(moved.Append(std::string(AppendFile::kFlushAt, 'x')).ok());
    CHECK(Contents(path).size() == 9 + AppendFile::kFlushAt);
    REQUIRE(moved.Append("tail\n").ok());
  }
  const std::string all = Contents(path);
  CHECK(all.size() == 9 + AppendFile::kFlushAt + 5);
  CHECK(all.substr(all.size() - 5) == "tail\n");
  // A file that cannot be opened is an error naming it, not a crash.
  AppendFile nowhere("/proc/rayd_no_such_dir/log.txt");
  REQUIRE(nowhere.Append("x").ok());
  Status failed = nowhere.Flush();
  CHECK_FALSE(failed.ok());
  CHECK(failed.message().find("/proc/rayd_no_such_dir/log.txt") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// A process that makes the owned directory `path` and then, told by `how`: exits (its lock goes
// with it), or waits on the pipe `hold` until it is killed or the pipe closes, or starts a child
// that runs cat on it and exits itself (the child, which inherited the lock, keeps the
// directory live). Writes a byte to `ready` once the directory is made and its waiters have
// started.
enum class Owner { kExits, kWaits, kChildWaits };
pid_t StartOwner(const std::string& path, Owner how, int ready, const int hold[2]) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::close(hold[1]);  // so that the test closing its own end ends the wait
  if (!MakeOwnedDirectory(path).ok()) ::_exit(1);
  std::ofstream(path + "/checkpoint.part") << "half a checkpoint";
  char byte = 0;
  if (how == Owner::kChildWaits && ::fork() == 0) {
    // A program of its own, as a command rank's is: the lock must outlive the exec.
    ::dup2(hold[0], STDIN_FILENO);
    ::dup2(::open("/dev/null", O_WRONLY), STDOUT_FILENO);
    (void)!::write(ready, &byte, 1);
    ::execl("/bin/cat", "cat", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (how != Owner::kChildWaits) (void)!::write(ready, &byte, 1);
  if (how == Owner::kWaits) (void)!::read(hold[0], &byte, 1);
  ::_exit(0);
}

TEST_CASE("a starting node removes the worker directories of dead processes, never a live one's",
          "[base]") {
  namespace fs = std::filesystem;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the orphaned grandchild is this process's to reap
  testing::TempDir parent;
  const fs::path base = parent.path();
  int ready[2], hold[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(hold) == 0);
  char byte = 0;
  const pid_t exited = StartOwner(base / "rayd-worker-exited", Owner::kExits, ready[1], hold);
  const pid_t waiting = StartOwner(base / "rayd-worker-waiting", Owner::kWaits, ready[1], hold);
  const pid_t parent_of =
      StartOwner(base / "rayd-worker-grandchild", Owner::kChildWaits, ready[1], hold);
  for (int i = 0; i < 3; ++i) REQUIRE(::read(ready[0], &byte, 1) == 1);
  for (const pid_t pid : {exited, parent_of}) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  REQUIRE(MakeOwnedDirectory(base / "rayd-worker-mine").ok());  // this process: live
  CHECK_FALSE(MakeOwnedDirectory(base / "rayd-worker-mine").ok());
  fs::create_directories(base / "rayd-worker-unlocked" / "sub");  // no owner ever locked it
  fs::create_directories(base / "elsewhere");
  std::ofstream(base / "rayd-worker-file") << "a file, not a directory";
  fs::create_directory_symlink(base / "elsewhere", base / "rayd-worker-link");

  std::vector<std::string> removed = RemoveDeadOwnedDirectories(base, "rayd-worker-");
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{base / "rayd-worker-exited",
                                            base / "rayd-worker-unlocked"});
  for (const char* kept : {"rayd-worker-waiting", "rayd-worker-grandchild", "rayd-worker-mine",
                           "rayd-worker-file", "rayd-worker-link", "elsewhere"}) {
    INFO(kept);
    CHECK(fs::exists(base / kept));
  }
  CHECK(fs::exists(base / "rayd-worker-waiting" / "checkpoint.part"));

  // Once the waiting owners die (SIGKILLed, as a node's workers are when it is), the next
  // sweep removes theirs; the grandchild is not this process's to reap, so it is waited for.
  REQUIRE(::kill(waiting, SIGKILL) == 0);
  REQUIRE(::waitpid(waiting, nullptr, 0) == waiting);
  ::close(hold[1]);  // the grandchild's cat reads the end of its input: it exits
  CHECK(testing::WaitFor(
      [&] {
        RemoveDeadOwnedDirectories(base, "rayd-worker-");
        return !fs::exists(base / "rayd-worker-grandchild");
      },
      std::chrono::seconds(10)));
  CHECK_FALSE(fs::exists(base / "rayd-worker-waiting"));
  CHECK(fs::exists(base / "rayd-worker-mine"));
  for (const int fd : {ready[0], ready[1], hold[0]}) ::close(fd);
  while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
  }
}

}  // namespace
}  // namespace rayd
