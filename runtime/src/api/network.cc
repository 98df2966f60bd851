// rayd::GetNodeIpAddressFromPerspective: a UDP connect toward the address, then getsockname.

#include "rayd/api/network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

namespace rayd {
namespace {

constexpr char kLoopback[] = "127.0.0.1";

// Splits "host:port" or "[v6 host]:port"; false when either part is missing.
bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string::npos || address.compare(close, 2, "]:") != 0) return false;
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) return false;
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
  return !host->empty() && !port->empty();
}

// The local address a UDP socket connected to `peer` is bound to; "" when nothing routes.
std::string LocalAddressToward(const addrinfo& peer) {
  const int fd = socket(peer.ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string ip;
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  char text[INET6_ADDRSTRLEN] = {0};
  if (connect(fd, peer.ai_addr, peer.ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    const void* raw = local.ss_family == AF_INET6
                          ? static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                          : static_cast<const void*>(
                                &reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) ip = text;
  }
  close(fd);
  return ip;
}

}  // namespace

std::string GetNodeIpAddressFromPerspective(const std::string& address) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) return kLoopback;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return kLoopback;
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  for (const int family : {AF_INET, AF_INET6}) {
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      if (a->ai_family != family) continue;
      std::string ip = LocalAddressToward(*a);
      if (!ip.empty()) return ip;
    }
  }
  return kLoopback;
}

}  // namespace rayd
