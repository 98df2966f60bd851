// RpcClient: one connection to one address, re-established with backoff; calls queue while
// it is down.

#include <spdlog/spdlog.h>

#include <cstring>
#include <random>

#include "rayd/base/logging.h"
#include "rayd/base/rpc.h"
#include "rpc_internal.h"

namespace rayd::rpc {
namespace {
// Connecting to a free port of this machine's ephemeral range can connect the socket to
// itself (TCP simultaneous open). It then holds the very port a restarting server needs: treat
// it as refused.
bool IsSelfConnection(uv_stream_t* stream) {
  if (stream->type != UV_TCP) return false;
  sockaddr_storage local{}, peer{};
  int local_len = sizeof(local), peer_len = sizeof(peer);
  auto* tcp = reinterpret_cast<uv_tcp_t*>(stream);
  if (uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}
}  // namespace


RpcClient::RpcClient(EventLoop& loop, std::string address, Options options,
                     const Dispatcher* dispatcher, Backoff backoff)
    : loop_(loop),
      address_(std::move(address)),
      options_(std::move(options)),
      dispatcher_(dispatcher),
      backoff_(backoff),
      next_delay_(backoff.initial),
      retry_timer_(loop),
      queue_timer_(loop) {
  IgnoreSigpipe();
}

RpcClient::~RpcClient() {
  guard_.Invalidate();
  stopped_ = true;
  auto queue = std::move(queue_);
  queue_.clear();
  for (auto& q : queue) q.cb(Status::Cancelled("client destroyed"), capnp::AnyPointer::Reader());
  if (conn_) conn_->Close(Status::Cancelled("client destroyed"));
}

void RpcClient::Connect() { StartAttempt(); }

void RpcClient::StartAttempt() {
  if (stopped_) return;
  ++attempts_;
  auto ep = ParseEndpoint(address_);
  if (!ep.ok()) {
    stopped_ = true;
    OnAttemptFailed(ep.status());
    return;
  }
  struct ConnectRequest {
    uv_connect_t req;
    LifetimeGuard::Watch client_alive;
    RpcClient* client;
  };
  auto* request = new ConnectRequest{{}, guard_.watch(), this};
  auto on_connect = [](uv_connect_t* req, int status) {
    auto* request = reinterpret_cast<ConnectRequest*>(req);
    std::unique_ptr<ConnectRequest> owned(request);
    if (!request->client_alive.alive() || status == UV_ECANCELED) {
      // The loop's destructor may have closed the socket already.
      if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(req->handle))) CloseAndFree(req->handle);
      return;
    }
    RpcClient* self = request->client;
    if (status == 0 && IsSelfConnection(req->handle)) status = UV_ECONNREFUSED;
    if (status != 0) {
      CloseAndFree(req->handle);
      self->OnAttemptFailed(Status::Unavailable("cannot connect to " + self->address_ + ": " +
                                                uv_strerror(status)));
      return;
    }
    self->OnConnected(req->handle);
  };
  if (ep->kind == Endpoint::Kind::kTcp) {
    auto addr = ResolveTcp(*ep);
    if (!addr.ok()) {
      delete request;
      OnAttemptFailed(addr.status());
      return;
    }
    auto* tcp = new uv_tcp_t;
    uv_tcp_init(loop_.uv(), tcp);
    int rc = uv_tcp_connect(&request->req, tcp, reinterpret_cast<const sockaddr*>(&*addr),
                            on_connect);
    if (rc != 0) {
      delete request;
      CloseAndFree(reinterpret_cast<uv_stream_t*>(tcp));
      OnAttemptFailed(
          Status::Unavailable("cannot connect to " + address_ + ": " + uv_strerror(rc)));
    }
  } else {
    auto* pipe = new uv_pipe_t;
    uv_pipe_init(loop_.uv(), pipe, 0);
    uv_pipe_connect(&request->req, pipe, ep->path.c_str(), on_connect);
  }
}

void RpcClient::OnConnected(uv_stream_t* stream) {
  PrepareStream(stream);
  conn_ = std::make_shared<Connection>(loop_, stream, Connection::Side::kConnecting, options_,
                                       dispatcher_, address_);
  conn_->Start(
      [this](Connection&) {
        next_delay_ = backoff_.initial;
        last_error_ = Status::Ok();
        FlushQueue();
        if (on_state_) on_state_(Status::Ok());
      },
      guard_([this](Connection& c, const Status& why) {
        const bool was_ready = last_error_.ok();
        conn_.reset();
        if (why.code() == StatusCode::kPermissionDenied) stopped_ = true;
        if (was_ready) {
          spdlog::info("lost connection to {}: {}", address_, why.message());
          last_error_ = why;
          if (on_state_) on_state_(why);
          retry_timer_.Start(next_delay_, Millis(0), [this] { StartAttempt(); });
        } else {
          OnAttemptFailed(why);
        }
      }));
}

void RpcClient::OnAttemptFailed(const Status& why) {
  last_error_ = why;
  if (stopped_) {
    // Nothing queued can ever be sent now.
    auto queue = std::move(queue_);
    queue_.clear();
    for (auto& q : queue) q.cb(why, capnp::AnyPointer::Reader());
  }
  if (on_state_) on_state_(why);
  if (stopped_) return;
  // Full jitter over [delay/2, delay], then double up to the cap.
  static thread_local std::mt19937 rng{std::random_device{}()};
  auto delay = next_delay_;
  std::uniform_int_distribution<int64_t> jitter(delay.count() / 2, delay.count());
  retry_timer_.Start(Millis(jitter(rng)), Millis(0), [this] { StartAttempt(); });
  next_delay_ = std::min(next_delay_ * 2, backoff_.max);
}

void RpcClient::Call(proto::Method method, const FillFn& fill, Millis timeout, ReplyFn cb) {
  if (connected()) {
    conn_->Call(method, fill, timeout, std::move(cb));
    return;
  }
  if (stopped_) {
    cb(last_error_, capnp::AnyPointer::Reader());
    return;
  }
  const auto now = Clock::now();
  const auto deadline = timeout.count() > 0 ? now + timeout : Clock::time_point::max();
  const auto give_up = backoff_.give_up_after.count() > 0 ? now + backoff_.give_up_after
                                                          : Clock::time_point::max();
  queue_.push_back({BuildRequest(method, fill), deadline, std::move(cb), give_up});
  if (!queue_timer_.active()) queue_timer_.Start(Millis(20), Millis(20), [this] { ExpireQueue(); });
}

void RpcClient::FlushQueue() {
  auto queue = std::move(queue_);
  queue_.clear();
  queue_timer_.Stop();
  const auto now = Clock::now();
  for (auto& q : queue) {
    Millis left{0};
    if (q.deadline != Clock::time_point::max()) {
      left = std::max(Millis(1), std::chrono::duration_cast<Millis>(q.deadline - now));
    }
    if (connected()) {
      conn_->Send(std::move(q.request), left, std::move(q.cb));
    } else {
      queue_.push_back(std::move(q));  // lost the connection again meanwhile
    }
  }
  if (!queue_.empty() && !queue_timer_.active()) {
    queue_timer_.Start(Millis(20), Millis(20), [this] { ExpireQueue(); });
  }
}

void RpcClient::ExpireQueue() {
  const auto now = Clock::now();
  std::vector<Queued> expired;
  std::erase_if(queue_, [&](Queued& q) {
    if (q.deadline > now && q.give_up > now) return false;
    expired.push_back(std::move(q));
    return true;
  });
  if (queue_.empty()) queue_timer_.Stop();
  for (auto& q : expired) {
    if (q.deadline <= now) {
      q.cb(Status::DeadlineExceeded("no connection to " + address_ + " before the deadline (" +
                                    last_error_.message() + ")"),
           capnp::AnyPointer::Reader());
    } else {
      q.cb(Status::Unavailable("no connection to " + address_ + " for " +
                               std::to_string(backoff_.give_up_after.count()) + " ms (" +
                               last_error_.message() + ")"),
           capnp::AnyPointer::Reader());
    }
  }
}

Status CallAndWait(EventLoop& loop, RpcClient& client, proto::Method method, const FillFn& fill,
                   Millis timeout,
                   const std::function<void(capnp::AnyPointer::Reader)>& on_result) {
  bool done = false;
  Status result = Status::DeadlineExceeded("no reply");
  client.Call(method, fill, timeout, [&](const Status& s, capnp::AnyPointer::Reader reply) {
    done = true;
    result = s;
    if (s.ok() && on_result) on_result(reply);
  });
  // The call's own deadline ends the wait; the margin only guards against a lost callback.
  loop.RunUntil([&] { return done; }, timeout + Millis(1000));
  return result;
}

}  // namespace rayd::rpc
