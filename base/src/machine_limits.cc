#include "rayd/base/machine_limits.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace rayd {

std::vector<double> LoopbackRoundTripsUs(int samples) {
  using BenchClock = std::chrono::steady_clock;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::thread echo([listener] {
    int fd = accept(listener, nullptr, nullptr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char buf[8];
    while (recv(fd, buf, 8, MSG_WAITALL) == 8) send(fd, buf, 8, 0);
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<double> us;
  us.reserve(samples);
  char buf[8] = {0};
  for (int i = 0; i < samples; ++i) {
    auto t0 = BenchClock::now();
    send(fd, buf, 8, 0);
    recv(fd, buf, 8, MSG_WAITALL);
    us.push_back(std::chrono::duration<double, std::micro>(BenchClock::now() - t0).count());
  }
  close(fd);
  echo.join();
  close(listener);
  return us;
}

double MemcpyGBps() {
  using BenchClock = std::chrono::steady_clock;
  const size_t n = 256u << 20;
  std::vector<char> a(n, 1), b(n, 2);
  std::memcpy(b.data(), a.data(), n);  // warm both
  const int reps = 4;
  const auto t0 = BenchClock::now();
  for (int i = 0; i < reps; ++i) {
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), n);
  }
  return reps * n / std::chrono::duration<double>(BenchClock::now() - t0).count() / 1e9;
}

}  // namespace rayd
