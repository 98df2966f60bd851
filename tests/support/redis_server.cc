#include "redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string_view>
#include <vector>

#ifndef REDIS_SERVER_BINARY
#error "REDIS_SERVER_BINARY must name the redis-server executable"
#endif

namespace rayd::testing {
namespace {

constexpr std::chrono::milliseconds kStartTimeout{10000};
constexpr std::chrono::milliseconds kStopTimeout{10000};

// True when something on 127.0.0.1:port answers PING like a Redis that is ready to serve:
// "+PONG", or "-NOAUTH" when it wants a password ("-LOADING" means not yet).
bool AnswersPing(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval timeout{.tv_sec = 1, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ready = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    constexpr std::string_view kPing = "PING\r\n";
    if (send(fd, kPing.data(), kPing.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(kPing.size())) {
      char buf[64];
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      std::string_view reply(buf, n > 0 ? static_cast<size_t>(n) : 0);
      ready = reply.starts_with("+PONG") || reply.starts_with("-NOAUTH");
    }
  }
  close(fd);
  return ready;
}

}  // namespace

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options)) {
  // Another process may take the port between FreeTcpPort() and redis' bind(): then try again
  // with a new port, a few times.
  for (int attempt = 1;; ++attempt) {
    port_ = FreeTcpPort();
    try {
      Start();
      return;
    } catch (const std::exception&) {
      if (attempt == 3) throw;
    }
  }
}

RedisServer::~RedisServer() { Kill(); }

std::string RedisServer::Address() const { return "redis://127.0.0.1:" + std::to_string(port_); }

std::string RedisServer::output() const {
  return process_ != nullptr ? process_->output() : last_output_;
}

void RedisServer::Start() {
  // No snapshots: a test server keeps data on disk only when asked to (appendonly).
  std::vector<std::string> argv = {REDIS_SERVER_BINARY, "--port", std::to_string(port_)};
  argv.insert(argv.end(), {"--bind", "127.0.0.1", "--save", "", "--daemonize", "no"});
  argv.insert(argv.end(), {"--dir", dir_.path()});
  if (options_.appendonly) {
    argv.insert(argv.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  } else {
    argv.insert(argv.end(), {"--appendonly", "no"});
  }
  if (!options_.password.empty()) argv.insert(argv.end(), {"--requirepass", options_.password});
  process_ = std::make_unique<ChildProcess>(argv);

  // Poll with a deadline; stop early if the server exits (a taken port, a bad option).
  bool exited = false;
  bool ready = WaitFor(
      [&] {
        exited = !process_->running();
        return exited || AnswersPing(port_);
      },
      kStartTimeout);
  if (ready && !exited) return;
  std::string what = exited
                         ? "exited at startup (code " + std::to_string(process_->exit_code()) + ")"
                         : "did not answer PING within 10 s";
  Kill();
  throw std::runtime_error("redis-server on port " + std::to_string(port_) + " " + what +
                           "; its output:\n" + last_output_);
}

void RedisServer::Stop() {
  if (process_ == nullptr) return;
  process_->Signal(SIGTERM);
  process_->WaitExit(kStopTimeout);  // if it did not exit, Kill() below uses SIGKILL
  Kill();
}

void RedisServer::Kill() {
  if (process_ == nullptr) return;
  last_output_ = process_->output();
  process_.reset();  // SIGKILL to the group, and reaps
}

void RedisServer::Restart() {
  Stop();
  Start();
}

}  // namespace rayd::testing
