#pragma once
// Helpers private to the RPC layer.

#include <sys/socket.h>
#include <uv.h>

#include <cstring>
#include <string>

#include "rayd/base/rpc.h"

namespace rayd::rpc {

// Resolves a TCP endpoint to a socket address (numeric hosts without a lookup).
Result<sockaddr_storage> ResolveTcp(const Endpoint& ep);
// "ip:port" of a TCP stream's peer; "local" for Unix sockets.
std::string PeerName(uv_stream_t* stream);
// Sets up a connected stream: for TCP, no Nagle delay, and dead-peer detection by the kernel
// (keepalive probes on an idle connection, TCP_USER_TIMEOUT on unacknowledged data), so that a
// peer behind a cut link or a powered-off machine fails its connection in about
// kDeadPeerTimeout instead of TCP's ~15 minutes. The kernel answers both, so a busy peer
// process never trips them. Nothing for Unix sockets.
inline constexpr int kDeadPeerTimeoutMs = 6000;
void PrepareStream(uv_stream_t* stream);
// uv_close, then frees the uv_tcp_t / uv_pipe_t allocated with new.
void CloseAndFree(uv_stream_t* stream);

}  // namespace rayd::rpc
