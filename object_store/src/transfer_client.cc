// TransferClient: fetches objects from TransferServers, one shared connection per peer.
// The wire format and the zero-copy scheme are described at the top of transfer.cc.
//
// Invariants
// - Every live fetch is in `fetches_` and, once it has a connection, in that connection's
//   `fetches_` set; a fetch ends (its `done` runs) exactly once, in Finish().
// - A connection in `peers_` is open. Closing one removes it from `peers_`, ends or re-homes
//   its fetches, and lets the handle's close callback free it. Replies for fetches that
//   already ended are read into a scratch buffer and dropped, never into their old `dest`.

#include <spdlog/spdlog.h>

#include <array>
#include <set>
#include <unordered_map>
#include <vector>

#include "rayd/base/lifetime_guard.h"
#include "rayd/object_store/transfer.h"
#include "transfer_wire.h"

namespace rayd::object_store {

using namespace wire;  // NOLINT: this file implements the format

class PeerConn;

// The client's state; TransferClient::Impl is this (the nested name is private to the class).
struct ClientCore {
  using Allocate = TransferClient::Allocate;
  ClientCore(EventLoop& l, std::string t, TransferOptions o);
  ~ClientCore();

  struct FetchState {
    uint64_t id = 0;
    std::string peer;
    ObjectId object;
    Allocate allocate;
    std::function<void(Status)> done;
    PeerConn* conn = nullptr;  // the connection its requests go on
    bool reused_conn = false;  // conn was already up when the fetch joined it
    bool retried = false;
    bool stat_done = false;
    bool allocated = false;
    uint8_t* dest = nullptr;
    uint64_t size = 0;
    uint64_t next_offset = 0;  // first byte not yet requested
    uint64_t received = 0;     // bytes of completed chunks
    int in_flight = 0;
    Clock::time_point last_progress;
    std::unique_ptr<Timer> timer;
  };

  void Start(FetchState& f);
  Result<PeerConn*> Connect(const std::string& peer);
  void Finish(uint64_t fetch_id, Status status);
  FetchState* Find(uint64_t fetch_id) {
    auto it = fetches.find(fetch_id);
    return it == fetches.end() ? nullptr : it->second.get();
  }
  void OnTimer(uint64_t fetch_id);
  void OnStat(uint64_t fetch_id, const Reply& reply);
  void OnAllocated(uint64_t fetch_id, Result<uint8_t*> dest);
  void OnChunkDone(uint64_t fetch_id, uint64_t length);
  void OnReadFailed(uint64_t fetch_id, WireStatus status);
  void IssueReads(FetchState& f);
  void OnPeerClosed(PeerConn* conn, const Status& why);

  EventLoop& loop;
  std::string token;
  TransferOptions options;
  uint64_t chunk_size;
  LifetimeGuard guard;  // for allocation callbacks that answer after the client is gone
  bool destroying = false;
  uint64_t next_fetch_id = 1;
  std::unordered_map<uint64_t, std::unique_ptr<FetchState>> fetches;
  std::unordered_map<std::string, PeerConn*> peers;  // open connections; each frees itself
};

namespace {

// A request frame; owned by libuv from uv_write until its callback.
struct ClientWrite {
  uv_write_t req;  // first member: the callback casts back
  std::string bytes;
};

}  // namespace

// One connection to a peer's TransferServer. Lives until its handle's close callback;
// `client_` is null once it is closing.
class PeerConn {
 public:
  PeerConn(ClientCore* client, std::string address)
      : client_(client),
        address_(std::move(address)),
        tcp_(new uv_tcp_t),
        handshake_(rpc::Handshake::Side::kConnecting, client->token, "transfer", "transfer",
                   address_) {
    uv_tcp_init(client_->loop.uv(), tcp_);
    tcp_->data = this;
    connect_.data = this;
  }

  Status Connect(const sockaddr_storage& addr) {
    int rc = uv_tcp_connect(&connect_, tcp_, reinterpret_cast<const sockaddr*>(&addr),
                            [](uv_connect_t* req, int status) {
                              static_cast<PeerConn*>(req->data)->OnConnect(status);
                            });
    if (rc != 0) return Status::Unavailable(ConnectError(rc));
    return Status::Ok();
  }

  // Closes the socket now (nothing more is read into any `dest`) and frees this later.
  void Close() {
    if (client_ == nullptr) return;
    client_ = nullptr;
    uv_close(reinterpret_cast<uv_handle_t*>(tcp_), [](uv_handle_t* h) {
      delete static_cast<PeerConn*>(h->data);
      delete reinterpret_cast<uv_tcp_t*>(h);
    });
  }

  // Sends (or queues until authenticated) a request for `fetch_id`.
  void Send(MsgType type, uint64_t fetch_id, const ObjectId& id, uint64_t offset, uint64_t length) {
    if (client_ == nullptr) return;
    const uint64_t tag = next_tag_++;
    outstanding_[tag] = Outstanding{type, fetch_id, offset, length};
    std::array<uint8_t, kRequestSize> frame;
    EncodeRequest(Request{type, tag, id, offset, length}, frame.data());
    if (state_ == State::kReady) {
      WriteBytes(std::string(reinterpret_cast<const char*>(frame.data()), frame.size()));
    } else {
      unsent_.push_back(frame);
    }
  }

  bool ready() const { return state_ == State::kReady; }
  const std::string& address() const { return address_; }
  std::set<uint64_t>& fetches() { return fetches_; }

 private:
  enum class State { kConnecting, kHandshake, kReady };
  struct Outstanding {
    MsgType type;
    uint64_t fetch_id;
    uint64_t offset;
    uint64_t length;
  };

  std::string ConnectError(int rc) const {
    return "cannot connect to transfer peer " + address_ + ": " + uv_strerror(rc);
  }

  // Ends this connection: `why` reaches every fetch on it.
  void Fail(const Status& why) {
    if (client_ == nullptr) return;
    ClientCore* client = client_;
    Close();
    client->OnPeerClosed(this, why);
  }
  void ProtocolError(const std::string& what) {
    spdlog::warn("transfer peer {}: protocol error: {}", address_, what);
    Fail(Status::Unavailable("protocol error from transfer peer " + address_ + ": " + what));
  }

  void OnConnect(int status) {
    if (client_ == nullptr) return;  // closed meanwhile (UV_ECANCELED)
    if (status != 0) {
      Fail(Status::Unavailable(ConnectError(status)));
      return;
    }
    TuneSocket(tcp_);
    state_ = State::kHandshake;
    need_ = sizeof(capnp::word);  // a frame's first word: its segment table begins
    uv_read_start(
        AsStream(tcp_),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) { static_cast<PeerConn*>(h->data)->Alloc(buf); },
        [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
          static_cast<PeerConn*>(s->data)->OnRead(nread);
        });
  }

  // The zero-copy point: payload bytes go straight to their fetch's destination.
  void Alloc(uv_buf_t* buf) {
    if (!in_payload_) {
      buf->base = reinterpret_cast<char*>(header_ + have_);
      buf->len = need_ - have_;
      return;
    }
    const uint64_t left = payload_.length - payload_done_;
    auto* f = client_ != nullptr ? client_->Find(payload_.fetch_id) : nullptr;
    if (f != nullptr && f->dest != nullptr) {
      buf->base = reinterpret_cast<char*>(f->dest + payload_.offset + payload_done_);
      buf->len = left;
      return;
    }
    if (!discard_) discard_ = std::make_unique<uint8_t[]>(kDiscardSize);
    buf->base = reinterpret_cast<char*>(discard_.get());
    buf->len = std::min<uint64_t>(left, kDiscardSize);
  }

  void OnRead(ssize_t nread) {
    if (nread == 0 || client_ == nullptr) return;
    if (nread < 0) {
      const bool handshaking = state_ != State::kReady;
      Fail(Status::Unavailable("transfer peer " + address_ + " closed the connection" +
                               (handshaking ? " during the handshake" : "") + ": " +
                               uv_strerror(static_cast<int>(nread))));
      return;
    }
    if (in_payload_) {
      payload_done_ += static_cast<uint64_t>(nread);
      if (auto* f = client_->Find(payload_.fetch_id)) f->last_progress = Clock::now();
      if (payload_done_ == payload_.length) {
        in_payload_ = false;
        client_->OnChunkDone(payload_.fetch_id, payload_.length);
      }
      return;
    }
    have_ += static_cast<size_t>(nread);
    if (have_ < need_) return;
    if (state_ == State::kHandshake) return OnHandshakeBytes();
    have_ = 0;
    if (state_ == State::kReady) OnReply();
  }

  // A handshake frame arrives in pieces: its segment table says how long it is.
  void OnHandshakeBytes() {
    auto size = HandshakeFrameSize(header_, have_);
    if (!size.ok()) return ProtocolError(size.status().message());
    if (*size > have_) {
      need_ = *size;
      return;
    }
    rpc::Handshake::Step step = FeedHandshake(handshake_, header_, *size);
    have_ = 0;
    need_ = sizeof(capnp::word);
    if (step.reply) WriteBytes(FlattenFrame(*step.reply));
    if (!step.status.ok()) {
      if (step.status.code() == StatusCode::kPermissionDenied) {
        return Fail(Status::PermissionDenied("transfer peer " + address_ + ": " +
                                             step.status.message()));
      }
      return ProtocolError(step.status.message());
    }
    if (!handshake_.done()) return;
    state_ = State::kReady;
    need_ = kReplySize;
    for (auto& frame : unsent_) {
      WriteBytes(std::string(reinterpret_cast<const char*>(frame.data()), frame.size()));
    }
    unsent_.clear();
  }

  void OnReply() {
    auto reply = DecodeReply(header_);
    if (!reply.ok()) return ProtocolError(reply.status().message());
    auto it = outstanding_.find(reply->tag);
    if (it == outstanding_.end()) {
      return ProtocolError("reply for unknown tag " + std::to_string(reply->tag));
    }
    const Outstanding o = it->second;
    outstanding_.erase(it);
    if (o.type != reply->type) return ProtocolError("reply type does not match its request");
    if (o.type == MsgType::kStat) return client_->OnStat(o.fetch_id, *reply);
    if (reply->status != WireStatus::kOk) return client_->OnReadFailed(o.fetch_id, reply->status);
    if (reply->value != o.length) {
      return ProtocolError("read reply of " + std::to_string(reply->value) + " bytes for " +
                           std::to_string(o.length) + " asked");
    }
    if (o.length == 0) return client_->OnChunkDone(o.fetch_id, 0);
    payload_ = o;
    payload_done_ = 0;
    in_payload_ = true;
  }

  void WriteBytes(std::string bytes) {
    auto* w = new ClientWrite{{}, std::move(bytes)};
    uv_buf_t buf = uv_buf_init(w->bytes.data(), static_cast<unsigned>(w->bytes.size()));
    int rc = uv_write(&w->req, AsStream(tcp_), &buf, 1, [](uv_write_t* req, int status) {
      auto* self = static_cast<PeerConn*>(req->handle->data);
      delete reinterpret_cast<ClientWrite*>(req);
      if (status != 0 && status != UV_ECANCELED) {
        self->Fail(Status::Unavailable("write to transfer peer " + self->address_ +
                                       " failed: " + uv_strerror(status)));
      }
    });
    if (rc != 0) {
      delete w;
      Fail(Status::Unavailable("write to transfer peer " + address_ +
                               " failed: " + uv_strerror(rc)));
    }
  }

  static constexpr size_t kDiscardSize = 256 << 10;

  ClientCore* client_;  // null once closing
  std::string address_;
  uv_tcp_t* tcp_;  // owned; freed with this in the close callback
  uv_connect_t connect_;
  State state_ = State::kConnecting;
  rpc::Handshake handshake_;
  uint8_t header_[kMaxHandshakeFrame];  // a reply header, or a handshake frame
  size_t have_ = 0;  // bytes of the current header received
  size_t need_ = 0;  // size of the current header
  bool in_payload_ = false;
  Outstanding payload_{};  // the READ whose payload is arriving
  uint64_t payload_done_ = 0;
  uint64_t next_tag_ = 1;
  std::unordered_map<uint64_t, Outstanding> outstanding_;  // by tag
  std::vector<std::array<uint8_t, kRequestSize>> unsent_;  // until authenticated
  std::set<uint64_t> fetches_;
  std::unique_ptr<uint8_t[]> discard_;  // payloads of fetches that already ended
};

ClientCore::ClientCore(EventLoop& l, std::string t, TransferOptions o)
    : loop(l),
      token(std::move(t)),
      options(o),
      chunk_size(std::clamp<uint64_t>(o.chunk_size, 1, kMaxChunk)) {
  options.max_chunks_in_flight = std::max(1, options.max_chunks_in_flight);
}

ClientCore::~ClientCore() {
  guard.Invalidate();
  destroying = true;
  for (auto& [address, conn] : peers) conn->Close();
  peers.clear();
  std::vector<uint64_t> ids;
  for (auto& [id, f] : fetches) ids.push_back(id);
  for (uint64_t id : ids) Finish(id, Status::Cancelled("transfer client destroyed"));
}

Result<PeerConn*> ClientCore::Connect(const std::string& peer) {
  auto it = peers.find(peer);
  if (it != peers.end()) return it->second;
  auto addr = Resolve(peer);
  if (!addr.ok()) return addr.status().WithContext("transfer peer " + peer);
  auto* conn = new PeerConn(this, peer);
  Status s = conn->Connect(*addr);
  if (!s.ok()) {
    conn->Close();
    return s;
  }
  peers[peer] = conn;
  return conn;
}

void ClientCore::Start(FetchState& f) {
  auto conn = Connect(f.peer);
  if (!conn.ok()) return Finish(f.id, conn.status());
  f.conn = *conn;
  f.reused_conn = f.conn->ready();
  f.conn->fetches().insert(f.id);
  f.conn->Send(MsgType::kStat, f.id, f.object, 0, 0);
}

void ClientCore::Finish(uint64_t fetch_id, Status status) {
  auto it = fetches.find(fetch_id);
  if (it == fetches.end()) return;
  std::unique_ptr<FetchState> f = std::move(it->second);
  fetches.erase(it);
  if (f->conn != nullptr) f->conn->fetches().erase(fetch_id);
  auto done = std::move(f->done);
  f.reset();
  done(std::move(status));
}

void ClientCore::OnTimer(uint64_t fetch_id) {
  FetchState* f = Find(fetch_id);
  if (f == nullptr) return;
  const auto idle = Clock::now() - f->last_progress;
  if (idle < options.timeout) {
    auto left = std::chrono::ceil<Millis>(options.timeout - idle);
    f->timer->Start(left, Millis(0), [this, fetch_id] { OnTimer(fetch_id); });
    return;
  }
  Finish(fetch_id, Status::DeadlineExceeded("fetching object " + f->object.Hex() + " from " +
                                            f->peer + ": no progress for " +
                                            std::to_string(options.timeout.count()) + " ms"));
}

void ClientCore::OnStat(uint64_t fetch_id, const Reply& reply) {
  FetchState* f = Find(fetch_id);
  if (f == nullptr) return;
  if (reply.status == WireStatus::kNotFound) {
    return Finish(fetch_id, Status::NotFound("object " + f->object.Hex() +
                                             " not found on transfer peer " + f->peer));
  }
  if (reply.status != WireStatus::kOk) {
    return Finish(fetch_id, Status::Internal("transfer peer " + f->peer +
                                             " failed to look up object " + f->object.Hex()));
  }
  f->stat_done = true;
  f->size = reply.value;
  f->last_progress = Clock::now();
  auto allocate = std::move(f->allocate);
  allocate(f->size, guard([this, fetch_id](Result<uint8_t*> dest) {
    OnAllocated(fetch_id, std::move(dest));
  }));
}

void ClientCore::OnAllocated(uint64_t fetch_id, Result<uint8_t*> dest) {
  FetchState* f = Find(fetch_id);
  if (f == nullptr || f->allocated) return;  // ended meanwhile, or a second `give`
  if (!dest.ok()) return Finish(fetch_id, dest.status());
  if (f->size > 0 && *dest == nullptr) {
    return Finish(fetch_id, Status::InvalidArgument("allocator gave no memory for object " +
                                                    f->object.Hex()));
  }
  f->allocated = true;
  f->dest = *dest;
  f->last_progress = Clock::now();
  if (f->size == 0) return Finish(fetch_id, Status::Ok());
  IssueReads(*f);
}

void ClientCore::IssueReads(FetchState& fetch) {
  // Looked up again after each Send: a failed write ends the connection and its fetches.
  const uint64_t id = fetch.id;
  for (FetchState* f = &fetch; f != nullptr && f->conn != nullptr; f = Find(id)) {
    if (f->in_flight >= options.max_chunks_in_flight || f->next_offset >= f->size) return;
    const uint64_t offset = f->next_offset;
    const uint64_t length = std::min(chunk_size, f->size - offset);
    f->next_offset += length;
    ++f->in_flight;
    f->conn->Send(MsgType::kRead, id, f->object, offset, length);
  }
}

void ClientCore::OnChunkDone(uint64_t fetch_id, uint64_t length) {
  FetchState* f = Find(fetch_id);
  if (f == nullptr) return;
  f->received += length;
  --f->in_flight;
  f->last_progress = Clock::now();
  if (f->received == f->size) return Finish(fetch_id, Status::Ok());
  IssueReads(*f);
}

void ClientCore::OnReadFailed(uint64_t fetch_id, WireStatus status) {
  FetchState* f = Find(fetch_id);
  if (f == nullptr) return;
  if (status == WireStatus::kNotFound) {
    return Finish(fetch_id, Status::NotFound("object " + f->object.Hex() + " left transfer peer " +
                                             f->peer + " during the fetch"));
  }
  Finish(fetch_id, Status::Internal("transfer peer " + f->peer + " failed to read object " +
                                    f->object.Hex()));
}

void ClientCore::OnPeerClosed(PeerConn* conn, const Status& why) {
  auto it = peers.find(conn->address());
  if (it != peers.end() && it->second == conn) peers.erase(it);
  if (destroying) return;
  std::vector<uint64_t> ids(conn->fetches().begin(), conn->fetches().end());
  conn->fetches().clear();
  for (uint64_t id : ids) {
    FetchState* f = Find(id);
    if (f == nullptr) continue;
    f->conn = nullptr;
    // A pooled connection may have died idle without us noticing yet: a fetch that had only
    // sent its STAT on it gets one more try on a fresh connection.
    if (why.code() == StatusCode::kUnavailable && f->reused_conn && !f->stat_done && !f->retried) {
      f->retried = true;
      Start(*f);
    } else {
      Finish(id, why);
    }
  }
}

struct TransferClient::Impl : ClientCore {
  using ClientCore::ClientCore;
};

TransferClient::TransferClient(EventLoop& loop, std::string token, TransferOptions options)
    : impl_(std::make_unique<Impl>(loop, std::move(token), options)) {}

TransferClient::~TransferClient() = default;

void TransferClient::Fetch(const std::string& peer, const ObjectId& id, Allocate allocate,
                           std::function<void(Status)> done) {
  if (impl_->destroying) return done(Status::Cancelled("transfer client destroyed"));
  auto f = std::make_unique<ClientCore::FetchState>();
  f->id = impl_->next_fetch_id++;
  f->peer = peer;
  f->object = id;
  f->allocate = std::move(allocate);
  f->done = std::move(done);
  f->last_progress = Clock::now();
  f->timer = std::make_unique<Timer>(impl_->loop);
  const uint64_t fetch_id = f->id;
  ClientCore* impl = impl_.get();
  f->timer->Start(impl->options.timeout, Millis(0), [impl, fetch_id] { impl->OnTimer(fetch_id); });
  ClientCore::FetchState& ref = *f;
  impl->fetches.emplace(fetch_id, std::move(f));
  impl->Start(ref);
}

}  // namespace rayd::object_store
