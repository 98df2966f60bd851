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
// Sets up a connected stream: TuneTcpSocket for TCP, nothing for Unix sockets.
void PrepareStream(uv_stream_t* stream);
// uv_close, then frees the uv_tcp_t / uv_pipe_t allocated with new.
void CloseAndFree(uv_stream_t* stream);
// A peer that closes while we write must be an error value (EPIPE), not a SIGPIPE that ends
// the process: unless the program installed its own SIGPIPE handling, sets it to ignored.
// Every client and server calls it; it acts once per process.
void IgnoreSigpipe();

}  // namespace rayd::rpc
