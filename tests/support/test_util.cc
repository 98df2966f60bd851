#include "test_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace rayd::testing {

TempDir::TempDir() {
  std::string tmpl = "/tmp/rayd-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    throw std::runtime_error("bind to port 0 failed");
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& output_path) {
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    // Only stdin, stdout and stderr, as a shell starts a program: descriptors inherited from
    // the test (and ctest) shift the numbers the program's own descriptors get, which hid a
    // bug that only showed when rayd ran from a shell (a command's lost stderr).
    close_range(3, ~0U, 0);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

std::string TempOutputPath() {
  std::string tmpl = "/tmp/rayd-test-out-XXXXXX";
  int fd = mkstemp(tmpl.data());
  if (fd >= 0) close(fd);
  return tmpl;
}
}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& extra_env)
    : output_path_(TempOutputPath()) {
  pid_ = Spawn(argv, extra_env, output_path_);
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  } else {
    kill(-pid_, SIGKILL);  // anything the child left in its group
  }
  unlink(output_path_.c_str());
}

void ChildProcess::Signal(int signal) {
  if (kill(-pid_, signal) != 0) kill(pid_, signal);
}

bool ChildProcess::WaitExit(std::chrono::milliseconds timeout) {
  return WaitFor([this] { return !running(); }, timeout);
}

bool ChildProcess::running() {
  if (reaped_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

HttpReply HttpGet(int port, const std::string& path, const std::string& extra_headers) {
  HttpReply reply;
  int fd = ConnectLoopback(port);
  if (fd < 0) return reply;
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    ::close(fd);
    return reply;
  }
  std::string raw;
  char buf[65536];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.headers = raw.substr(0, end);
  reply.body = raw.substr(end + 4);
  return reply;
}

CpuBurners::CpuBurners(int count) {
  for (int i = 0; i < count; ++i) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      // Async-signal-safe from here on (the parent may have threads): spin until killed.
      volatile uint64_t spins = 0;
      for (;;) spins = spins + 1;
    }
    pids_.push_back(pid);
  }
}

CpuBurners::~CpuBurners() {
  for (pid_t pid : pids_) kill(pid, SIGKILL);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
}

bool ProcessGone(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream in(dir + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z') {
    return false;
  }
  // A zombie leader's other threads may still be exiting, holding its sockets open (a port a
  // restarted daemon wants): gone means every thread is.
  std::error_code ec;
  size_t threads = 0;
  for (auto it = std::filesystem::directory_iterator(dir + "/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++threads;
  }
  return threads <= 1;
}

bool IsRaydProcess(pid_t pid) {
  if (pid <= 0 || ProcessGone(pid)) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string argv0;
  std::getline(in, argv0, '\0');
  return argv0.find("rayd") != std::string::npos;
}

std::vector<pid_t> DaemonPids(const std::string& root) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    for (const char* file : {"/head.pid", "/node.pid"}) {
      long pid = std::atol(ReadFile(e.path().string() + file).c_str());
      if (pid > 0) pids.push_back(static_cast<pid_t>(pid));
    }
  }
  return pids;
}

int RunCommand(const std::vector<std::string>& argv, std::string* output,
               const std::map<std::string, std::string>& extra_env,
               std::chrono::milliseconds timeout) {
  ChildProcess child(argv, extra_env);
  if (!child.WaitExit(timeout)) {
    if (output) *output = child.output() + "\n[timed out]";
    return -1;
  }
  if (output) *output = child.output();
  return child.exit_code();
}

}  // namespace rayd::testing
