#pragma once
// The one RPC layer every rayd service uses: Cap'n Proto frames over libuv streams (TCP across
// machines, Unix sockets within one).
//
// How it works
// - A Connection wraps one connected stream. Either side may send requests; each request has
//   an id, a method (proto::Method), a deadline, and params; the answer is a Response with a
//   status code, message and result.
// - Calls and handlers are typed: each method's request and reply are declared once
//   (rpc_methods.h), and Call<M>, CallAndWait<M>, Dispatcher::Handle<M> and Incoming<M> take
//   them from there, so a caller or handler that builds or reads another message does not
//   compile. The untyped Call and Register underneath are this layer's own.
// - Every connection opens with the handshake every rayd channel shares (handshake.h: protocol
//   version, role, HMAC proofs of the cluster token both ways). Nothing else is accepted
//   before it completes; a wrong token is refused, logged, and the connection closed.
// - Frames are length-checked from the segment table before any allocation; readers apply
//   traversal and nesting limits. A malformed frame closes that connection only. Frames are
//   written from their own segments (no flattening copy) whenever the socket takes them at once.
// - RpcServer accepts connections; RpcClient keeps one connection to an address, reconnecting
//   with exponential backoff, and queues calls made while disconnected until their deadline.
//
// Threading: everything here belongs to one EventLoop and is used on its thread only.
// Callbacks (replies, handlers) run on that thread.

#include <capnp/any.h>
#include <capnp/message.h>

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/base/handshake.h"
#include "rayd/base/lifetime_guard.h"
#include "rayd/base/rpc_methods.h"
#include "rayd/base/status.h"
#include "rayd/protocol/rpc.capnp.h"

namespace rayd::rpc {

// "unix:/path/to/sock" or "host:port" (TCP; host may be a name or an IPv4/IPv6 literal,
// IPv6 in brackets: "[::1]:6380").
struct Endpoint {
  enum class Kind { kTcp, kUnix };
  Kind kind = Kind::kTcp;
  std::string host;  // TCP
  int port = 0;      // TCP
  std::string path;  // Unix
  std::string ToString() const;
};
Result<Endpoint> ParseEndpoint(std::string_view address);

struct Limits {
  size_t max_frame_bytes = 256u << 20;  // frames above this close the connection
  int nesting_limit = 64;
};

struct Options {
  std::string token;  // the cluster token both sides must hold
  std::string role;   // our role, shown to the peer: "gcs", "node", "cli", "driver", ...
  Limits limits;
  Millis handshake_timeout{10000};
};

// Fills the params of a request or the result of a reply. May be empty (nothing to fill).
using FillFn = std::function<void(capnp::AnyPointer::Builder)>;
// Gets the outcome of a call: the status and, when ok, the result (valid during the call only).
using ReplyFn = std::function<void(const Status&, capnp::AnyPointer::Reader)>;

class Connection;

namespace internal {

// Adapts a typed request filler (taking M's request builder) to the wire's FillFn. `fill` is
// used before the call returns (requests are serialised at once), so it is held by reference.
template <proto::Method M, typename Fill>
FillFn FillRequest(Fill& fill) {
  return [&fill](capnp::AnyPointer::Builder b) { fill(b.initAs<RequestOf<M>>()); };
}

// Adapts a typed completion to the wire's ReplyFn. `done` takes (status, M's reply reader) or,
// for callers that need only the outcome, (status). The reader is valid during the call only,
// and is the default (empty) reply when the status is not ok.
template <proto::Method M, typename Done>
ReplyFn ReadReply(Done done) {
  using Reader = typename ReplyOf<M>::Reader;
  return [done = std::move(done)](const Status& s, capnp::AnyPointer::Reader r) mutable {
    if constexpr (std::is_invocable_v<Done&, const Status&, Reader>) {
      done(s, s.ok() ? r.getAs<ReplyOf<M>>() : Reader());
    } else {
      done(s);
    }
  };
}

// The typed calls, Call<M>, of a class with the untyped Call(method, fill, timeout, cb)
// (Connection, RpcClient): M's request and reply types come from its MethodSpec.
template <typename Self>
class TypedCalls {
 public:
  template <proto::Method M, typename Fill, typename Done>
    requires std::invocable<Fill&, typename RequestOf<M>::Builder>
  void Call(Fill&& fill, Millis timeout, Done done) {
    self().Call(M, FillRequest<M>(fill), timeout, ReadReply<M>(std::move(done)));
  }
  template <proto::Method M, typename Done>
  void Call(Millis timeout, Done done) {
    self().Call(M, nullptr, timeout, ReadReply<M>(std::move(done)));
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }
};

}  // namespace internal

// A request received from a peer. Handlers reply exactly once, now or later (keeping the
// shared_ptr). Replying after the connection closed does nothing.
// The part of a connection's writing that threads other than its loop's may use: defined in
// rpc_connection.cc.
class ConnectionWriter;

class IncomingCall {
 public:
  IncomingCall(std::weak_ptr<Connection> connection, std::shared_ptr<ConnectionWriter> writer,
               uint64_t id, proto::Method method, std::unique_ptr<capnp::MessageReader> message,
               std::shared_ptr<void> storage);
  ~IncomingCall();  // a call dropped without a reply answers Internal

  proto::Method method() const { return method_; }
  capnp::AnyPointer::Reader params() const;
  template <typename T>
  typename T::Reader Params() const {
    return params().getAs<T>();
  }
  // The connection it came on, or null once closed.
  std::shared_ptr<Connection> connection() const { return connection_.lock(); }

  void Reply(const FillFn& fill = nullptr);
  void Fail(const Status& status);
  bool replied() const { return replied_; }
  // Reply from any thread (the others above belong to the loop's): the reply is built here and
  // written straight onto the socket when nothing is queued ahead of it, saving the loop
  // thread a wake-up; else it is queued for the loop, in order. A worker's task thread answers
  // PUSH_TASK so. The call must not be replied to or failed from elsewhere meanwhile.
  void ReplyFromAnyThread(const FillFn& fill);

 private:
  std::weak_ptr<Connection> connection_;
  std::shared_ptr<ConnectionWriter> writer_;
  uint64_t id_;
  proto::Method method_;
  std::shared_ptr<void> storage_;  // co-owns the bytes `message_` reads
  std::unique_ptr<capnp::MessageReader> message_;
  bool replied_ = false;
};
using CallPtr = std::shared_ptr<IncomingCall>;
using Handler = std::function<void(const CallPtr&)>;

// Method table of a service. Shared read-only by every connection of a server or client; it
// must outlive them.
class Dispatcher {
 public:
  // Serves method M: `handler` takes an Incoming<M> (below).
  template <proto::Method M, typename H>
  void Handle(H handler);

  void Register(proto::Method method, Handler handler);
  const Handler* Find(proto::Method method) const;

 private:
  std::map<uint16_t, Handler> handlers_;
};

// A received call of method M, typed by its MethodSpec: params() reads M's request and Reply
// fills M's reply. Cheap to copy (it shares the call); keep a copy to reply later.
template <proto::Method M>
class Incoming {
 public:
  explicit Incoming(CallPtr call) : call_(std::move(call)) {}

  typename RequestOf<M>::Reader params() const { return call_->params().getAs<RequestOf<M>>(); }
  // `fill` takes M's reply builder.
  template <typename Fill>
  void Reply(Fill&& fill) const {
    call_->Reply([&](capnp::AnyPointer::Builder b) { fill(b.initAs<ReplyOf<M>>()); });
  }
  void Reply() const { call_->Reply(); }
  template <typename Fill>
  void ReplyFromAnyThread(Fill&& fill) const {
    call_->ReplyFromAnyThread([&](capnp::AnyPointer::Builder b) { fill(b.initAs<ReplyOf<M>>()); });
  }
  void Fail(const Status& status) const { call_->Fail(status); }
  bool replied() const { return call_->replied(); }
  std::shared_ptr<Connection> connection() const { return call_->connection(); }

 private:
  CallPtr call_;
};

template <proto::Method M, typename H>
void Dispatcher::Handle(H handler) {
  Register(M, [handler = std::move(handler)](const CallPtr& call) { handler(Incoming<M>(call)); });
}

// One connected, authenticated stream. Created by RpcServer or RpcClient; it keeps itself
// alive while its socket is open, so owners may hold it by shared_ptr or weak_ptr.
class Connection : public std::enable_shared_from_this<Connection>,
                   public internal::TypedCalls<Connection> {
 public:
  enum class Side { kAccepting, kConnecting };
  using ReadyFn = std::function<void(Connection&)>;
  using ClosedFn = std::function<void(Connection&, const Status&)>;

  // Takes ownership of `stream` (a connected, initialized uv_tcp_t or uv_pipe_t allocated with
  // new). `dispatcher` may be null (no methods served) and must outlive the connection.
  Connection(EventLoop& loop, uv_stream_t* stream, Side side, Options options,
             const Dispatcher* dispatcher, std::string peer_address);
  ~Connection();

  // Starts the handshake. `on_ready` runs once authenticated; `on_closed` runs once when the
  // connection closes for any reason (including a failed handshake) with that reason.
  void Start(ReadyFn on_ready, ClosedFn on_closed);

  // Sends a request; `cb` runs exactly once: with the reply, DeadlineExceeded after `timeout`
  // (zero: no deadline), or Unavailable if the connection closes first. Calls made before the
  // handshake completes are sent once it does.
  void Call(proto::Method method, const FillFn& fill, Millis timeout, ReplyFn cb);
  // Typed: `fill` takes M's request builder; `done` takes (status, M's reply reader) or
  // (status). The overload without `fill` sends an empty request.
  using internal::TypedCalls<Connection>::Call;
  // Sends a request built by BuildRequest (its id and timeout are set here).
  void Send(std::unique_ptr<capnp::MallocMessageBuilder> request, Millis timeout, ReplyFn cb);

  // Closes the connection; pending calls fail with Unavailable carrying `reason`.
  void Close(const Status& reason);

  bool ready() const { return state_ == State::kReady; }
  bool closed() const { return state_ == State::kClosed; }
  const std::string& peer_role() const { return peer_role_; }
  const std::string& peer_address() const { return peer_address_; }
  uint64_t id() const { return id_; }
  size_t pending_calls() const { return pending_.size(); }

  // Internal to the RPC layer.
  void SendResponse(uint64_t id, const Status& status, const FillFn& fill);
  void FlushDeferred();  // on the loop: queues what other threads could not write at once

 private:
  enum class State { kHandshake, kReady, kClosed };
  struct Pending {
    proto::Method method;
    ReplyFn cb;
    Clock::time_point deadline;  // max() when none
  };
  struct InboundFrame;

  void Send(capnp::MessageBuilder& message);
  // Queues bytes behind earlier writes; under writer_->mu. A failure is returned, for the
  // caller to Close with once it has let go of the lock.
  Status WriteLocked(std::string bytes);
  void OnRead(ssize_t nread, const uv_buf_t* buf);
  Status ParseFrames();
  Status OnFrame(std::unique_ptr<capnp::MessageReader> message, std::shared_ptr<void> storage);
  Status OnHandshakeFrame(proto::Frame::Reader frame);
  void OnRequest(proto::Frame::Reader frame, std::unique_ptr<capnp::MessageReader> message,
                 std::shared_ptr<void> storage);
  void OnResponse(proto::Frame::Reader frame);
  void BecomeReady();
  void ArmDeadlineTimer();
  void ExpireDeadlines();

  EventLoop& loop_;
  uv_stream_t* stream_;  // owned; freed after uv_close
  Side side_;
  Options options_;
  const Dispatcher* dispatcher_;
  std::string peer_address_;
  uint64_t id_;
  State state_ = State::kHandshake;
  // Every write goes through it, under its mutex: the loop's and other threads' (above).
  std::shared_ptr<ConnectionWriter> writer_;
  std::string peer_role_;
  Handshake handshake_;
  std::shared_ptr<Connection> self_;  // keeps us alive while the stream is open
  ReadyFn on_ready_;
  ClosedFn on_closed_;

  std::string inbuf_;      // bytes received and not yet parsed into frames
  size_t inbuf_pos_ = 0;   // parse position in inbuf_
  std::vector<char> read_chunk_;

  uint64_t next_request_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_;
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> unsent_;  // before handshake
  std::unique_ptr<Timer> deadline_timer_;
  std::unique_ptr<Timer> handshake_timer_;
};

// Accepts connections on one or more addresses and serves `dispatcher`'s methods on them.
class RpcServer {
 public:
  // `loop` and `dispatcher` must outlive the server.
  RpcServer(EventLoop& loop, Options options, const Dispatcher& dispatcher);
  ~RpcServer();  // stops listening and closes every connection

  // Binds and listens. TCP port 0 picks a free port. Errors are one line, e.g.
  // "cannot listen on 127.0.0.1:6380: address already in use".
  Status Listen(const std::string& address);
  // The addresses actually bound, in Listen order ("127.0.0.1:43121", "unix:/...").
  const std::vector<std::string>& bound_addresses() const { return bound_; }
  int tcp_port() const { return tcp_port_; }

  // Runs when an authenticated connection closes (e.g. to notice a dead driver).
  void SetOnConnectionClosed(Connection::ClosedFn fn) { on_closed_ = std::move(fn); }
  size_t num_connections() const { return connections_.size(); }
  void Close();

 private:
  static void OnNewConnection(uv_stream_t* server, int status);

  EventLoop& loop_;
  Options options_;
  const Dispatcher& dispatcher_;
  std::vector<uv_stream_t*> listeners_;  // owned; freed after uv_close
  std::vector<std::string> bound_;
  int tcp_port_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections_;
  Connection::ClosedFn on_closed_;
};

// Sets up a connected TCP socket the way every rayd connection is set up (the RPC layer's, the
// object transfer channel's): no Nagle delay, and the kernel's dead-peer detection — keepalive
// probes on an idle connection and TCP_USER_TIMEOUT on unacknowledged data — so that a peer
// behind a cut link or on a powered-off host fails its connection in about kDeadPeerTimeoutMs
// instead of TCP's ~15 minutes. The kernel answers both, so a busy peer never trips them.
inline constexpr int kDeadPeerTimeoutMs = 6000;
void TuneTcpSocket(int fd);

struct ReconnectBackoff {
  Millis initial{100};
  Millis max{5000};
  // A call made while disconnected fails (Unavailable) once it has waited this long for a
  // connection, whatever its own deadline: for peers that may be gone for good (0: never).
  Millis give_up_after{0};
};

// Keeps one connection to `address`, reconnecting with exponential backoff (with jitter) for
// as long as it lives. A refused token (PermissionDenied) stops reconnecting: retrying can't
// help. Calls made while disconnected wait for the next connection until their deadline.
class RpcClient : public internal::TypedCalls<RpcClient> {
 public:
  using Backoff = ReconnectBackoff;
  // `loop` (and `dispatcher`, which may be null) must outlive the client.
  RpcClient(EventLoop& loop, std::string address, Options options,
            const Dispatcher* dispatcher = nullptr, Backoff backoff = ReconnectBackoff());
  ~RpcClient();  // fails queued calls with Cancelled and closes the connection

  // Runs on every change: connected (status ok) or disconnected (why). Set before Connect().
  void SetOnStateChange(std::function<void(const Status&)> fn) { on_state_ = std::move(fn); }
  void Connect();

  void Call(proto::Method method, const FillFn& fill, Millis timeout, ReplyFn cb);
  using internal::TypedCalls<RpcClient>::Call;  // typed, as Connection::Call<M>

  bool connected() const { return conn_ && conn_->ready(); }
  const Status& last_error() const { return last_error_; }
  const std::string& address() const { return address_; }
  int attempts() const { return attempts_; }

 private:
  struct Queued {
    std::unique_ptr<capnp::MallocMessageBuilder> request;
    Clock::time_point deadline;  // the call's own
    ReplyFn cb;
    Clock::time_point give_up;   // waiting for a connection ends here (Backoff::give_up_after)
  };
  void StartAttempt();
  void OnAttemptFailed(const Status& why);
  void OnConnected(uv_stream_t* stream);
  void FlushQueue();
  void ExpireQueue();

  EventLoop& loop_;
  std::string address_;
  Options options_;
  const Dispatcher* dispatcher_;
  Backoff backoff_;
  Millis next_delay_;
  std::shared_ptr<Connection> conn_;
  LifetimeGuard guard_;  // for in-flight uv and connection callbacks
  std::vector<Queued> queue_;
  Timer retry_timer_;
  Timer queue_timer_;
  Status last_error_ = Status::Unavailable("not connected yet");
  std::function<void(const Status&)> on_state_;
  int attempts_ = 0;
  bool stopped_ = false;
};

// A request frame with `method` and params filled by `fill`, ready for Connection::Send. Params
// are serialised at once, so `fill` may capture references that die right after the call.
std::unique_ptr<capnp::MallocMessageBuilder> BuildRequest(proto::Method method,
                                                          const FillFn& fill);

// For one-shot tools and tests: calls and runs `loop` until the reply arrives. `on_result`
// reads the result while it is valid.
Status CallAndWait(EventLoop& loop, RpcClient& client, proto::Method method, const FillFn& fill,
                   Millis timeout,
                   const std::function<void(capnp::AnyPointer::Reader)>& on_result = nullptr);

// Typed: `fill` takes M's request builder (nullptr: an empty request); `on_result` M's reply
// reader.
template <proto::Method M, typename Fill, typename OnResult = std::nullptr_t>
Status CallAndWait(EventLoop& loop, RpcClient& client, Fill&& fill, Millis timeout,
                   OnResult&& on_result = nullptr) {
  FillFn raw_fill;
  if constexpr (!std::is_same_v<std::decay_t<Fill>, std::nullptr_t>) {
    raw_fill = internal::FillRequest<M>(fill);
  }
  std::function<void(capnp::AnyPointer::Reader)> raw_result;
  if constexpr (!std::is_same_v<std::decay_t<OnResult>, std::nullptr_t>) {
    raw_result = [&](capnp::AnyPointer::Reader r) { on_result(r.getAs<ReplyOf<M>>()); };
  }
  return CallAndWait(loop, client, M, raw_fill, timeout, raw_result);
}

}  // namespace rayd::rpc
