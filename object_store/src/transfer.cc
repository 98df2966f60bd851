// TransferServer and TransferClient: the raw data path between node daemons.
//
// How it works
// - Wire format (all integers little-endian, fixed sizes, validated before use):
//     Handshake: the one every rayd connection opens with (rayd/base/handshake.h, proofs
//       tagged "transfer"): Hello, Auth and AuthResult as Cap'n Proto stream frames of at most
//       1 KiB. A refusal's AuthResult says why; then the server closes.
//     Request (client -> server, 48 B): magic u8 0xD7, version u8, type u8 (1 STAT, 2 READ),
//       u8 0, u32 0, u64 tag, 16-byte object id, u64 offset, u64 length (READ only).
//     Reply  (server -> client, 32 B): magic u8 0xD7, version u8, type u8, status u8
//       (0 ok, 1 not found, 2 error), u32 0, u64 tag, u64 value (STAT: object size; READ:
//       payload length, the payload follows), u64 0.
//   The server answers in request order. A READ outside the object, an unknown type, a bad
//   magic/version or a length above kMaxChunk closes the connection (logged).
// - Zero copy: the server writes each READ payload with uv_write straight from the pinned
//   bytes Source returned (one pin per READ, released once that write completes or the
//   connection closes). The client's libuv alloc callback hands out `dest + offset` while a
//   payload is arriving and a header buffer sized exactly to the missing header bytes
//   otherwise, so payload bytes never land anywhere else.
// - The client keeps one connection per peer address, shared by every fetch to that peer and
//   re-made on demand once it drops. Connection objects free themselves in their handle's
//   close callback, so libuv callbacks never see freed memory.

#include "rayd/object_store/transfer.h"

#include <spdlog/spdlog.h>

#include <unordered_set>

#include "transfer_wire.h"

namespace rayd::object_store {

using namespace wire;  // NOLINT: this file implements the format

// =============================================================================================
// Server
// =============================================================================================

class ServerConn;

// The server's state; TransferServer::Impl is this (the nested name is private to the class).
struct ServerCore {
  ServerCore(EventLoop& l, std::string t, TransferServer::Source s)
      : loop(l), token(std::move(t)), source(std::move(s)) {}
  ~ServerCore();
  static void OnConnection(uv_stream_t* listener, int status);

  EventLoop& loop;
  std::string token;
  TransferServer::Source source;
  uv_tcp_t* listener = nullptr;  // owned; freed by its close callback
  std::string address;
  // Open connections. Each frees itself in its handle's close callback after leaving here.
  std::unordered_set<ServerConn*> conns;
};

// One small frame and, for a READ reply, the pinned payload behind it. Owned by libuv from
// uv_write until its callback. (Not in an anonymous namespace: ServerConn holds them.)
struct ServerWrite {
  uv_write_t req;  // first member: the callback casts back
  uint8_t bytes[kMaxSmallFrame];
  std::function<void()> release;  // the pin of the payload, if any
  ServerConn* conn = nullptr;
  bool close_after = false;
};

// One accepted connection. Lives until its handle's close callback; `server_` is null once it
// is closing. Invariant: every pin in a ServerWrite of `writes_` is released exactly once,
// either by the write callback or by Close (the socket is shut by then, so libuv will not read
// the payload again).
class ServerConn {
 public:
  ServerConn(ServerCore* server, uv_tcp_t* tcp)
      : server_(server),
        tcp_(tcp),
        peer_(PeerName(tcp)),
        handshake_(rpc::Handshake::Side::kAccepting, server->token, "transfer", "transfer",
                   peer_) {
    tcp_->data = this;
  }

  void Start() {
    WriteOwned(FlattenFrame(*handshake_.Start()), /*close_after=*/false);
    handshake_timer_ = std::make_unique<Timer>(server_->loop);
    handshake_timer_->Start(kHandshakeTimeout, Millis(0),
                            [this] { Close("no handshake within 10 s", spdlog::level::warn); });
    StartReading();
  }

  // Closes the socket now (pins are released here) and frees this in the close callback.
  void Close(const std::string& reason, spdlog::level::level_enum level) {
    if (server_ == nullptr) return;
    spdlog::log(level, "transfer connection from {} closed: {}", peer_, reason);
    server_->conns.erase(this);
    server_ = nullptr;
    handshake_timer_.reset();
    uv_close(reinterpret_cast<uv_handle_t*>(tcp_), [](uv_handle_t* h) {
      delete static_cast<ServerConn*>(h->data);
      delete reinterpret_cast<uv_tcp_t*>(h);
    });
    for (ServerWrite* w : writes_) {
      auto release = std::move(w->release);
      w->release = nullptr;
      if (release) release();
    }
  }

 private:
  enum class State { kHandshake, kReady, kRefusing };

  static std::string PeerName(uv_tcp_t* tcp) {
    sockaddr_storage addr{};
    int len = sizeof(addr);
    char ip[INET6_ADDRSTRLEN] = "?";
    if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
    if (addr.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      uv_ip4_name(in, ip, sizeof(ip));
      return std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
    }
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    uv_ip6_name(in6, ip, sizeof(ip));
    return "[" + std::string(ip) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }

  void StartReading() {
    reading_ = true;
    uv_read_start(
        AsStream(tcp_),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
          auto* self = static_cast<ServerConn*>(h->data);
          buf->base = reinterpret_cast<char*>(self->in_ + self->in_len_);
          buf->len = sizeof(self->in_) - self->in_len_;
        },
        [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
          static_cast<ServerConn*>(s->data)->OnRead(nread);
        });
  }

  ServerWrite* NewWrite() {
    auto* w = new ServerWrite;
    w->conn = this;
    return w;
  }

  // Sends `frame_size` bytes of w->bytes, then `payload_size` bytes at `payload` (kept alive by
  // w->release until the write completes).
  void Write(ServerWrite* w, size_t frame_size, const uint8_t* payload, size_t payload_size) {
    uv_buf_t bufs[2];
    bufs[0].base = reinterpret_cast<char*>(w->bytes);
    bufs[0].len = frame_size;
    bufs[1].base = const_cast<char*>(reinterpret_cast<const char*>(payload));
    bufs[1].len = payload_size;
    writes_.insert(w);
    int rc = uv_write(&w->req, AsStream(tcp_), bufs, payload_size > 0 ? 2 : 1, &OnWritten);
    if (rc != 0) {
      writes_.erase(w);
      if (w->release) w->release();
      delete w;
      Close(std::string("write failed: ") + uv_strerror(rc), spdlog::level::info);
      return;
    }
    if (reading_ && writes_.size() >= kMaxQueuedWrites) {
      uv_read_stop(AsStream(tcp_));
      reading_ = false;
    }
  }

  static void OnWritten(uv_write_t* req, int status) {
    std::unique_ptr<ServerWrite> w(reinterpret_cast<ServerWrite*>(req));
    if (w->release) w->release();
    ServerConn* self = w->conn;
    self->writes_.erase(w.get());
    if (self->server_ == nullptr) return;
    if (status != 0) {
      self->Close(std::string("write failed: ") + uv_strerror(status), spdlog::level::info);
    } else if (w->close_after) {
      self->Close("handshake refused", spdlog::level::info);
    } else if (!self->reading_ && self->writes_.size() < kMaxQueuedWrites / 2) {
      self->StartReading();
    }
  }

  void OnRead(ssize_t nread) {
    if (nread == 0 || server_ == nullptr) return;
    if (nread < 0) {
      Close(nread == UV_EOF ? "peer closed" : uv_strerror(static_cast<int>(nread)),
            spdlog::level::debug);
      return;
    }
    in_len_ += static_cast<size_t>(nread);
    size_t pos = 0;
    while (server_ != nullptr && state_ != State::kRefusing) {
      size_t need = kRequestSize;
      if (state_ == State::kHandshake) {
        auto size = HandshakeFrameSize(in_ + pos, in_len_ - pos);
        if (!size.ok()) {
          Close("protocol error: " + size.status().message(), spdlog::level::warn);
          return;
        }
        need = *size;
      }
      if (in_len_ - pos < need) break;
      Status s = state_ == State::kHandshake ? OnHandshake(in_ + pos, need) : OnRequest(in_ + pos);
      pos += need;
      if (!s.ok()) {
        Close("protocol error: " + s.message(), spdlog::level::warn);
        return;
      }
    }
    if (server_ == nullptr) return;
    std::memmove(in_, in_ + pos, in_len_ - pos);
    in_len_ -= pos;
  }

  Status OnHandshake(const uint8_t* frame, size_t size) {
    rpc::Handshake::Step step = FeedHandshake(handshake_, frame, size);
    if (step.status.ok()) {
      if (step.reply) WriteOwned(FlattenFrame(*step.reply), /*close_after=*/false);
      if (handshake_.done()) {
        handshake_timer_.reset();
        state_ = State::kReady;
      }
      return Status::Ok();
    }
    if (!step.reply) return step.status;
    // Tell the client why before closing, so it can report the reason.
    spdlog::warn("transfer connection from {}: {}", peer_, step.status.message());
    handshake_timer_.reset();
    state_ = State::kRefusing;
    uv_read_stop(AsStream(tcp_));
    reading_ = false;
    WriteOwned(FlattenFrame(*step.reply), /*close_after=*/true);
    return Status::Ok();
  }

  // Sends `bytes` (a handshake frame), kept alive until written.
  void WriteOwned(std::string bytes, bool close_after) {
    auto owned = std::make_shared<std::string>(std::move(bytes));
    auto* w = NewWrite();
    w->release = [owned] {};
    w->close_after = close_after;
    Write(w, 0, reinterpret_cast<const uint8_t*>(owned->data()), owned->size());
  }

  Status OnRequest(const uint8_t* frame) {
    RAYD_ASSIGN_OR_RETURN(Request r, DecodeRequest(frame));
    auto pinned = server_->source(r.id);
    Reply reply{r.type, WireStatus::kOk, r.tag, 0};
    if (!pinned.ok()) {
      reply.status = pinned.status().code() == StatusCode::kNotFound ? WireStatus::kNotFound
                                                                     : WireStatus::kError;
      if (reply.status == WireStatus::kError) {
        spdlog::warn("transfer source failed for {}: {}", r.id.Hex(), pinned.status().ToString());
      }
      auto* w = NewWrite();
      EncodeReply(reply, w->bytes);
      Write(w, kReplySize, nullptr, 0);
      return Status::Ok();
    }
    PinnedBytes bytes = std::move(pinned).value();
    if (r.type == MsgType::kStat) {
      reply.value = bytes.size;
      if (bytes.release) bytes.release();
      auto* w = NewWrite();
      EncodeReply(reply, w->bytes);
      Write(w, kReplySize, nullptr, 0);
      return Status::Ok();
    }
    if (r.offset > bytes.size || r.length > bytes.size - r.offset) {
      if (bytes.release) bytes.release();
      return Status::InvalidArgument("read of [" + std::to_string(r.offset) + ", +" +
                                     std::to_string(r.length) + ") outside object " + r.id.Hex() +
                                     " of " + std::to_string(bytes.size) + " bytes");
    }
    reply.value = r.length;
    auto* w = NewWrite();
    EncodeReply(reply, w->bytes);
    w->release = std::move(bytes.release);
    Write(w, kReplySize, bytes.data + r.offset, r.length);
    return Status::Ok();
  }

  ServerCore* server_;  // null once closing
  uv_tcp_t* tcp_;       // owned; freed with this in the close callback
  std::string peer_;
  State state_ = State::kHandshake;
  rpc::Handshake handshake_;
  uint8_t in_[4096];
  size_t in_len_ = 0;
  bool reading_ = false;
  std::unordered_set<ServerWrite*> writes_;  // issued, callback not yet run
  std::unique_ptr<Timer> handshake_timer_;
};

ServerCore::~ServerCore() {
  if (listener != nullptr) {
    uv_close(reinterpret_cast<uv_handle_t*>(listener),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_tcp_t*>(h); });
  }
  auto open = conns;
  for (ServerConn* c : open) c->Close("server shutting down", spdlog::level::debug);
}

void ServerCore::OnConnection(uv_stream_t* listener, int status) {
  auto* self = static_cast<ServerCore*>(listener->data);
  if (status != 0) {
    spdlog::warn("transfer accept failed: {}", uv_strerror(status));
    return;
  }
  auto* tcp = new uv_tcp_t;
  uv_tcp_init(self->loop.uv(), tcp);
  if (uv_accept(listener, AsStream(tcp)) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(tcp),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_tcp_t*>(h); });
    return;
  }
  TuneSocket(tcp);
  auto* conn = new ServerConn(self, tcp);
  self->conns.insert(conn);
  conn->Start();
}

struct TransferServer::Impl : ServerCore {
  using ServerCore::ServerCore;
};

TransferServer::TransferServer(EventLoop& loop, std::string token, Source source)
    : impl_(std::make_unique<Impl>(loop, std::move(token), std::move(source))) {}

TransferServer::~TransferServer() = default;

Status TransferServer::Listen(const std::string& address) {
  if (impl_->listener != nullptr) {
    return Status::AlreadyExists("transfer server already listens on " + impl_->address);
  }
  RAYD_ASSIGN_OR_RETURN(sockaddr_storage addr, Resolve(address));
  auto* tcp = new uv_tcp_t;
  uv_tcp_init(impl_->loop.uv(), tcp);
  tcp->data = static_cast<ServerCore*>(impl_.get());
  int rc = uv_tcp_bind(tcp, reinterpret_cast<const sockaddr*>(&addr), 0);
  if (rc == 0) rc = uv_listen(AsStream(tcp), 128, &ServerCore::OnConnection);
  if (rc != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(tcp),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_tcp_t*>(h); });
    return Status::Unavailable("cannot listen on " + address + ": " + uv_strerror(rc));
  }
  sockaddr_storage bound{};
  int len = sizeof(bound);
  uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&bound), &len);
  rpc::Endpoint ep = *rpc::ParseEndpoint(address);
  ep.port = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  impl_->listener = tcp;
  impl_->address = ep.ToString();
  return Status::Ok();
}

const std::string& TransferServer::address() const { return impl_->address; }

}  // namespace rayd::object_store
