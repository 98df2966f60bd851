// Endpoint parsing, socket address helpers and process settings shared by RpcServer and
// RpcClient.

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <charconv>
#include <csignal>
#include <mutex>

#include "rayd/base/rpc.h"
#include "rpc_internal.h"

namespace rayd::rpc {

std::string Endpoint::ToString() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<Endpoint> ParseEndpoint(std::string_view address) {
  Endpoint ep;
  if (address.starts_with("unix:")) {
    ep.kind = Endpoint::Kind::kUnix;
    ep.path = std::string(address.substr(5));
    if (ep.path.empty()) return Status::InvalidArgument("empty Unix socket path in 'unix:'");
    return ep;
  }
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument("address '" + std::string(address) +
                                   "' is not HOST:PORT or unix:PATH");
  }
  std::string_view host = address.substr(0, colon);
  if (host.starts_with("[") && host.ends_with("]")) host = host.substr(1, host.size() - 2);
  std::string_view port_text = address.substr(colon + 1);
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return Status::InvalidArgument("address '" + std::string(address) + "' has an invalid port '" +
                                   std::string(port_text) + "'");
  }
  ep.host = std::string(host);
  ep.port = port;
  return ep;
}

Result<sockaddr_storage> ResolveTcp(const Endpoint& ep) {
  sockaddr_storage addr{};
  if (uv_ip4_addr(ep.host.c_str(), ep.port, reinterpret_cast<sockaddr_in*>(&addr)) == 0)
    return addr;
  if (uv_ip6_addr(ep.host.c_str(), ep.port, reinterpret_cast<sockaddr_in6*>(&addr)) == 0)
    return addr;
  // A host name: resolve it (blocking, once per connection attempt; names are rare here).
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(ep.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::Unavailable("cannot resolve host '" + ep.host + "': " + gai_strerror(rc));
  }
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (addr.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(static_cast<uint16_t>(ep.port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(static_cast<uint16_t>(ep.port));
  }
  return addr;
}

std::string PeerName(uv_stream_t* stream) {
  if (stream->type != UV_TCP) return "local";
  sockaddr_storage addr{};
  int len = sizeof(addr);
  if (uv_tcp_getpeername(reinterpret_cast<uv_tcp_t*>(stream), reinterpret_cast<sockaddr*>(&addr),
                         &len) != 0) {
    return "unknown";
  }
  char ip[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    uv_ip4_name(in, ip, sizeof(ip));
    port = ntohs(in->sin_port);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    uv_ip6_name(in6, ip, sizeof(ip));
    port = ntohs(in6->sin6_port);
  }
  return std::string(ip) + ":" + std::to_string(port);
}

void TuneTcpSocket(int fd) {
  // Idle 2 s, then a probe a second: 4 unanswered probes make ~6 s.
  const int on = 1, idle_s = 2, interval_s = 1, probes = 4, user_timeout_ms = kDeadPeerTimeoutMs;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

void PrepareStream(uv_stream_t* stream) {
  if (stream->type != UV_TCP) return;
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(stream), &fd) == 0) TuneTcpSocket(fd);
}

void CloseAndFree(uv_stream_t* stream) {
  uv_close(reinterpret_cast<uv_handle_t*>(stream), [](uv_handle_t* h) {
    if (h->type == UV_TCP) {
      delete reinterpret_cast<uv_tcp_t*>(h);
    } else {
      delete reinterpret_cast<uv_pipe_t*>(h);
    }
  });
}

}  // namespace rayd::rpc
