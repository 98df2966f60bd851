#pragma once
// RedisServer: a real redis-server (REDIS_SERVER_BINARY) for tests, on a free loopback port, in
// a fresh temp dir. The constructor returns once the server answers PING; the destructor kills
// the server's process group, reaps it and removes the temp dir. Failures to start throw
// std::runtime_error carrying the server's output.
//
// Not thread-safe; use from the test's thread.

#include <memory>
#include <string>

#include "test_util.h"

namespace rayd::testing {

struct RedisServerOptions {
  std::string password;     // non-empty: --requirepass
  bool appendonly = false;  // keep data across Kill()/Stop() + Restart() (fsync on every write)
};

class RedisServer {
 public:
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  // "redis://127.0.0.1:PORT" (no password, whatever the options).
  std::string Address() const;
  const std::string& dir() const { return dir_.path(); }
  bool running() const { return process_ != nullptr; }
  // What the server printed so far (its log), for failure messages.
  std::string output() const;

  // SIGTERM, then waits for it to exit (SIGKILL after 10 s). No-op when not running.
  void Stop();
  // SIGKILL to its process group, then reaps it. No-op when not running.
  void Kill();
  // Stops it if running and starts it again on the same port; returns once it answers PING.
  // The data survives only with `appendonly`.
  void Restart();

 private:
  // Starts redis-server on port_ and waits until it answers; throws on failure.
  void Start();

  const RedisServerOptions options_;
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;  // null when not running
  std::string last_output_;                // output of the last process, once it has exited
};

}  // namespace rayd::testing
