// RpcServer: listens, accepts, and owns the accepted connections until they close.

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rayd/base/logging.h"
#include "rayd/base/rpc.h"
#include "rpc_internal.h"

namespace rayd::rpc {

RpcServer::RpcServer(EventLoop& loop, Options options, const Dispatcher& dispatcher)
    : loop_(loop), options_(std::move(options)), dispatcher_(dispatcher) {
  IgnoreSigpipe();
}

RpcServer::~RpcServer() { Close(); }

Status RpcServer::Listen(const std::string& address) {
  RAYD_ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(address));
  auto fail = [&](const char* what, int rc) {
    return Status::Unavailable("cannot listen on " + ep.ToString() + ": " + what + ": " +
                               uv_strerror(rc));
  };
  uv_stream_t* stream = nullptr;
  int rc = 0;
  if (ep.kind == Endpoint::Kind::kTcp) {
    auto* tcp = new uv_tcp_t;
    uv_tcp_init(loop_.uv(), tcp);
    stream = reinterpret_cast<uv_stream_t*>(tcp);
    auto addr = ResolveTcp(ep);
    if (!addr.ok()) {
      CloseAndFree(stream);
      return addr.status();
    }
    rc = uv_tcp_bind(tcp, reinterpret_cast<const sockaddr*>(&*addr), 0);
    if (rc == 0) rc = uv_listen(stream, 1024, &RpcServer::OnNewConnection);
    if (rc != 0) {
      CloseAndFree(stream);
      if (rc == UV_EADDRINUSE) {
        return Status::AlreadyExists("cannot listen on " + ep.ToString() +
                                     ": address already in use");
      }
      return fail("bind", rc);
    }
    sockaddr_storage bound{};
    int len = sizeof(bound);
    uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&bound), &len);
    tcp_port_ = ntohs(bound.ss_family == AF_INET
                          ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                          : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    ep.port = tcp_port_;
  } else {
    auto* pipe = new uv_pipe_t;
    uv_pipe_init(loop_.uv(), pipe, 0);
    stream = reinterpret_cast<uv_stream_t*>(pipe);
    ::unlink(ep.path.c_str());  // a stale socket from a crashed daemon of this session
    rc = uv_pipe_bind(pipe, ep.path.c_str());
    if (rc == 0) {
      ::chmod(ep.path.c_str(), 0600);
      rc = uv_listen(stream, 1024, &RpcServer::OnNewConnection);
    }
    if (rc != 0) {
      CloseAndFree(stream);
      return fail("bind", rc);
    }
  }
  stream->data = this;
  listeners_.push_back(stream);
  bound_.push_back(ep.ToString());
  return Status::Ok();
}

void RpcServer::OnNewConnection(uv_stream_t* listener, int status) {
  auto* self = static_cast<RpcServer*>(listener->data);
  if (status != 0) {
    spdlog::warn("accept failed: {}", uv_strerror(status));
    return;
  }
  uv_stream_t* client;
  if (listener->type == UV_TCP) {
    auto* tcp = new uv_tcp_t;
    uv_tcp_init(self->loop_.uv(), tcp);
    client = reinterpret_cast<uv_stream_t*>(tcp);
  } else {
    auto* pipe = new uv_pipe_t;
    uv_pipe_init(self->loop_.uv(), pipe, 0);
    client = reinterpret_cast<uv_stream_t*>(pipe);
  }
  if (uv_accept(listener, client) != 0) {
    CloseAndFree(client);
    return;
  }
  PrepareStream(client);
  auto conn = std::make_shared<Connection>(self->loop_, client, Connection::Side::kAccepting,
                                           self->options_, &self->dispatcher_, PeerName(client));
  self->connections_.emplace(conn->id(), conn);
  conn->Start(nullptr, [self](Connection& c, const Status& why) {
    const bool was_authenticated = !c.peer_role().empty();
    auto node = self->connections_.extract(c.id());
    if (was_authenticated && self->on_closed_) self->on_closed_(c, why);
  });
}

void RpcServer::Close() {
  for (auto* listener : listeners_) CloseAndFree(listener);
  listeners_.clear();
  auto connections = std::move(connections_);
  connections_.clear();
  for (auto& [id, conn] : connections) conn->Close(Status::Cancelled("server shutting down"));
}

}  // namespace rayd::rpc
