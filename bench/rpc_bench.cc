// RPC round trip over Unix and TCP sockets next to the raw loopback TCP round trip, measured
// in one run (compare ratios: these machines are small and noisy).
//
//   rpc_bench [calls]      prints median and p99 round trips in microseconds, and pipelined
//                          calls per second.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "rayd/base/machine_limits.h"
#include "rayd/base/rpc.h"

using namespace rayd;
using namespace std::chrono_literals;

namespace {

struct Figures {
  double median_us, p99_us;
};

Figures Summarise(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples[samples.size() * 99 / 100]};
}

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// A PING server on its own thread, listening on `address`.
class PingServer {
 public:
  explicit PingServer(const std::string& address) {
    std::promise<std::string> bound;
    thread_ = std::thread([&] {
      EventLoop loop;
      loop_ = &loop;
      rpc::Dispatcher dispatcher;
      dispatcher.Register(proto::Method::PING, [](const rpc::CallPtr& c) { c->Reply(); });
      rpc::RpcServer server(loop, rpc::Options{"bench", "bench"}, dispatcher);
      if (!server.Listen(address).ok()) std::abort();
      bound.set_value(server.bound_addresses()[0]);
      loop.Run();
      server.Close();
    });
    address_ = bound.get_future().get();
  }
  ~PingServer() {
    loop_->Stop();
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  std::thread thread_;
  EventLoop* loop_ = nullptr;
  std::string address_;
};

struct RpcFigures {
  Figures round_trip;
  double pipelined_per_s;
};

RpcFigures RpcRoundTrip(const std::string& listen, int calls) {
  PingServer server(listen);
  EventLoop loop;
  rpc::RpcClient client(loop, server.address(), rpc::Options{"bench", "bench"});
  client.Connect();
  if (!rpc::CallAndWait(loop, client, proto::Method::PING, nullptr, 5000ms).ok()) std::abort();
  std::vector<double> samples;
  for (int i = 0; i < calls; ++i) {
    auto t0 = Clock::now();
    bool done = false;
    client.Call(proto::Method::PING, nullptr, 5000ms,
                [&](const Status&, capnp::AnyPointer::Reader) { done = true; });
    while (!done) uv_run(loop.uv(), UV_RUN_ONCE);
    samples.push_back(Micros(Clock::now() - t0));
  }
  // Pipelined: keep a window of calls in flight.
  const int total = calls * 5, window = 256;
  int sent = 0, completed = 0;
  std::function<void()> send_one = [&] {
    ++sent;
    client.Call(proto::Method::PING, nullptr, 10000ms,
                [&](const Status&, capnp::AnyPointer::Reader) {
                  ++completed;
                  if (sent < total) send_one();
                });
  };
  auto t0 = Clock::now();
  for (int i = 0; i < window; ++i) send_one();
  loop.RunUntil([&] { return completed == total; }, 120000ms);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return {Summarise(samples), total / seconds};
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::stoi(argv[1]) : 20000;
  char dir[] = "/tmp/rayd-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  auto raw = Summarise(LoopbackRoundTripsUs(calls));
  auto tcp = RpcRoundTrip("127.0.0.1:0", calls);
  auto unix_socket = RpcRoundTrip(std::string("unix:") + dir + "/bench.sock", calls);
  std::printf("%-28s %12s %12s %16s\n", "round trip (8-byte ping)", "median_us", "p99_us",
              "pipelined_calls/s");
  std::printf("%-28s %12.1f %12.1f %16s\n", "raw loopback TCP", raw.median_us, raw.p99_us, "-");
  std::printf("%-28s %12.1f %12.1f %16.0f\n", "rayd RPC over TCP", tcp.round_trip.median_us,
              tcp.round_trip.p99_us, tcp.pipelined_per_s);
  std::printf("%-28s %12.1f %12.1f %16.0f\n", "rayd RPC over Unix socket",
              unix_socket.round_trip.median_us, unix_socket.round_trip.p99_us,
              unix_socket.pipelined_per_s);
  std::printf("RPC/raw TCP median ratio: %.2f\n", tcp.round_trip.median_us / raw.median_us);
  unlink((std::string(dir) + "/bench.sock").c_str());
  rmdir(dir);
  return 0;
}
