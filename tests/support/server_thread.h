#pragma once
// ServerThread: an RPC server on its own thread and event loop, as in a daemon, for tests whose
// clients run on the test thread. `setup` runs on the server thread before it listens: it
// registers handlers and may create objects that live as long as the loop (return them through
// the `keep` list so they die on the server thread, before the loop).

#include <any>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "rayd/base/rpc.h"

namespace rayd::testing {

inline constexpr char kTestToken[] = "test-token-0123456789";

class ServerThread {
 public:
  using Keep = std::vector<std::shared_ptr<void>>;
  using Setup = std::function<void(rpc::Dispatcher&, EventLoop&, Keep&)>;

  explicit ServerThread(Setup setup, std::vector<std::string> listen = {"127.0.0.1:0"},
                        rpc::Limits limits = {}) {
    std::promise<Result<std::vector<std::string>>> bound;
    thread_ = std::thread([this, setup, listen, limits, &bound] {
      EventLoop loop;
      loop_ = &loop;
      Keep keep;
      rpc::Dispatcher dispatcher;
      setup(dispatcher, loop, keep);
      rpc::RpcServer server(loop, rpc::Options{kTestToken, "test-server", limits}, dispatcher);
      for (const auto& address : listen) {
        Status s = server.Listen(address);
        if (!s.ok()) {
          bound.set_value(s);
          return;
        }
      }
      bound.set_value(server.bound_addresses());
      loop.Run();
      server.Close();
      keep.clear();
    });
    auto result = bound.get_future().get();
    if (!result.ok()) {
      thread_.join();
      throw std::runtime_error(result.status().ToString());
    }
    addresses_ = *result;
  }
  ~ServerThread() {
    loop_->Stop();
    thread_.join();
  }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

  const std::string& address(size_t i = 0) const { return addresses_.at(i); }
  int port() const { return rpc::ParseEndpoint(addresses_.at(0))->port; }
  // Runs `fn` on the server thread and waits for it.
  void RunOnLoop(std::function<void()> fn) {
    std::promise<void> done;
    loop_->Post([&] {
      fn();
      done.set_value();
    });
    done.get_future().get();
  }

 private:
  std::thread thread_;
  EventLoop* loop_ = nullptr;
  std::vector<std::string> addresses_;
};

}  // namespace rayd::testing
