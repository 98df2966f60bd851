// Connection: framing, handshake, request/response matching and deadlines on one stream.

#include <sys/socket.h>
#include <sys/uio.h>

#include <capnp/serialize.h>
#include <kj/exception.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "rayd/base/auth.h"
#include "rayd/base/frame.h"
#include "rayd/base/logging.h"
#include "rayd/base/rpc.h"

#include <algorithm>
#include <bit>

namespace rayd::rpc {
namespace {

// The first segment of a request or response: Cap'n Proto zeroes it whole when it is
// allocated, so its default (8 KiB) cost more than building the message did. Most frames
// (a task, a lease, a reply) fit in 1 KiB; larger ones grow into further segments.
constexpr unsigned kFirstSegmentWords = 128;

constexpr size_t kReadChunk = 64 * 1024;

std::atomic<uint64_t> g_next_connection_id{1};

std::string MethodName(proto::Method m) {
  return "method " + std::to_string(static_cast<uint16_t>(m));
}

// Owns the bytes of one received frame, word-aligned as Cap'n Proto readers require.
struct FrameBytes {
  kj::Array<capnp::word> words;
};

// One message in Cap'n Proto's stream framing, as buffers over the message's own segments:
// the segment count less one and each segment's size in words (u32, little-endian), padded
// to a word, then the segments. Nothing is copied unless a message has more segments than
// fit the table (then it is flattened once).
class OutgoingFrame {
 public:
  explicit OutgoingFrame(capnp::MessageBuilder& message) {
    static_assert(std::endian::native == std::endian::little);
    auto segments = message.getSegmentsForOutput();
    if (segments.size() > kMaxSegments) {
      flat_ = capnp::messageToFlatArray(segments);
      auto bytes = flat_.asBytes();
      bufs_[0] = uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(bytes.begin())),
                             bytes.size());
      count_ = 1;
      total_ = bytes.size();
      return;
    }
    table_[0] = static_cast<uint32_t>(segments.size() - 1);
    const size_t table_bytes = (segments.size() / 2 + 1) * sizeof(capnp::word);
    bufs_[0] = uv_buf_init(reinterpret_cast<char*>(table_), table_bytes);
    total_ = table_bytes;
    for (size_t i = 0; i < segments.size(); ++i) {
      table_[i + 1] = static_cast<uint32_t>(segments[i].size());
      auto bytes = segments[i].asBytes();
      bufs_[i + 1] = uv_buf_init(const_cast<char*>(reinterpret_cast<const char*>(bytes.begin())),
                                 bytes.size());
      total_ += bytes.size();
    }
    count_ = static_cast<unsigned>(segments.size() + 1);
  }
  OutgoingFrame(const OutgoingFrame&) = delete;
  OutgoingFrame& operator=(const OutgoingFrame&) = delete;

  uv_buf_t* bufs() { return bufs_; }
  unsigned count() const { return count_; }
  size_t total() const { return total_; }
  // Appends the bytes after the first `skip` to `out`.
  void AppendTo(std::string& out, size_t skip = 0) const {
    out.reserve(out.size() + total_ - skip);
    for (unsigned i = 0; i < count_; ++i) {
      const size_t take = std::min<size_t>(skip, bufs_[i].len);
      out.append(bufs_[i].base + take, bufs_[i].len - take);
      skip -= take;
    }
  }

 private:
  static constexpr size_t kMaxSegments = 15;
  uint32_t table_[kMaxSegments + 1] = {};
  uv_buf_t bufs_[kMaxSegments + 1];
  unsigned count_ = 0;
  size_t total_ = 0;
  kj::Array<capnp::word> flat_;
};

// A response frame to call `id`: `status`, and when ok what `fill` writes.
void BuildResponse(capnp::MessageBuilder& message, uint64_t id, const Status& status,
                   const FillFn& fill) {
  auto frame = message.initRoot<proto::Frame>();
  frame.setId(id);
  auto response = frame.initResponse();
  response.setCode(static_cast<uint8_t>(status.code()));
  if (!status.ok()) response.setMessage(status.message());
  if (fill) fill(response.getResult());
}

}  // namespace

// --- ConnectionWriter -------------------------------------------------------------------------

// The socket's write side, shared by the loop (Connection::Send) and threads that reply from
// elsewhere (IncomingCall::ReplyFromAnyThread). Its mutex orders every write: a thread writes
// straight onto the socket only while libuv holds nothing queued and nothing waits in
// `deferred`; otherwise its bytes join `deferred`, which the loop queues with uv_write
// (Connection::FlushDeferred), and the loop's own frames follow them there until it has.
class ConnectionWriter {
 public:
  ConnectionWriter(EventLoop& loop, std::weak_ptr<Connection> connection)
      : loop_(loop), connection_(std::move(connection)) {}

  std::mutex mu;
  int fd = -1;            // the socket once ready; -1 before, and from Close on
  int uv_writes = 0;      // uv_write requests libuv has not finished
  std::string deferred;   // bytes for the loop to queue, in order; a flush is posted if any

  // From any thread but the loop's.
  void Send(OutgoingFrame& frame) {
    std::unique_lock lock(mu);
    if (fd < 0) return;  // closed, or not ready: a reply then has no one to go to
    size_t skip = 0;
    if (uv_writes == 0 && deferred.empty()) {
      msghdr msg{};
      msg.msg_iov = reinterpret_cast<iovec*>(frame.bufs());  // uv_buf_t is iovec's layout
      msg.msg_iovlen = frame.count();
      ssize_t n;
      do {
        n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      } while (n < 0 && errno == EINTR);
      if (n == static_cast<ssize_t>(frame.total())) return;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        const std::string why = std::strerror(errno);
        lock.unlock();
        loop_.Post([connection = connection_, why] {
          if (auto c = connection.lock()) {
            c->Close(Status::Unavailable("write to " + c->peer_address() + " failed: " + why));
          }
        });
        return;
      }
      skip = n > 0 ? static_cast<size_t>(n) : 0;
    }
    const bool post = deferred.empty();
    frame.AppendTo(deferred, skip);
    lock.unlock();
    if (post) {
      loop_.Post([connection = connection_] {
        if (auto c = connection.lock()) c->FlushDeferred();
      });
    }
  }

 private:
  EventLoop& loop_;
  std::weak_ptr<Connection> connection_;
};

// --- IncomingCall -----------------------------------------------------------------------------

IncomingCall::IncomingCall(std::weak_ptr<Connection> connection,
                           std::shared_ptr<ConnectionWriter> writer, uint64_t id,
                           proto::Method method, std::unique_ptr<capnp::MessageReader> message,
                           std::shared_ptr<void> storage)
    : connection_(std::move(connection)),
      writer_(std::move(writer)),
      id_(id),
      method_(method),
      storage_(std::move(storage)),
      message_(std::move(message)) {}

IncomingCall::~IncomingCall() {
  if (!replied_) Fail(Status::Internal("the handler dropped the call without replying"));
}

capnp::AnyPointer::Reader IncomingCall::params() const {
  return message_->getRoot<proto::Frame>().getRequest().getParams();
}

void IncomingCall::Reply(const FillFn& fill) {
  if (replied_) return;
  replied_ = true;
  if (auto conn = connection_.lock()) conn->SendResponse(id_, Status::Ok(), fill);
}

void IncomingCall::ReplyFromAnyThread(const FillFn& fill) {
  if (replied_) return;
  replied_ = true;
  capnp::MallocMessageBuilder message(kFirstSegmentWords);
  BuildResponse(message, id_, Status::Ok(), fill);
  OutgoingFrame frame(message);
  writer_->Send(frame);
}

void IncomingCall::Fail(const Status& status) {
  if (replied_) return;
  replied_ = true;
  RAYD_CHECK(!status.ok());
  if (auto conn = connection_.lock()) conn->SendResponse(id_, status, nullptr);
}

// --- Dispatcher -------------------------------------------------------------------------------

void Dispatcher::Register(proto::Method method, Handler handler) {
  handlers_[static_cast<uint16_t>(method)] = std::move(handler);
}

const Handler* Dispatcher::Find(proto::Method method) const {
  auto it = handlers_.find(static_cast<uint16_t>(method));
  return it == handlers_.end() ? nullptr : &it->second;
}

// --- Connection -------------------------------------------------------------------------------

Connection::Connection(EventLoop& loop, uv_stream_t* stream, Side side, Options options,
                       const Dispatcher* dispatcher, std::string peer_address)
    : loop_(loop),
      stream_(stream),
      side_(side),
      options_(std::move(options)),
      dispatcher_(dispatcher),
      peer_address_(std::move(peer_address)),
      id_(g_next_connection_id++),
      handshake_(side == Side::kAccepting ? Handshake::Side::kAccepting
                                          : Handshake::Side::kConnecting,
                 options_.token, options_.role, "rpc", peer_address_),
      read_chunk_(kReadChunk) {
  stream_->data = this;
}

Connection::~Connection() { RAYD_CHECK(state_ == State::kClosed || self_ == nullptr); }

void Connection::Start(ReadyFn on_ready, ClosedFn on_closed) {
  on_ready_ = std::move(on_ready);
  on_closed_ = std::move(on_closed);
  self_ = shared_from_this();
  writer_ = std::make_shared<ConnectionWriter>(loop_, weak_from_this());
  handshake_timer_ = std::make_unique<Timer>(loop_);
  handshake_timer_->Start(options_.handshake_timeout, Millis(0), [this] {
    Close(Status::DeadlineExceeded("handshake with " + peer_address_ + " did not finish in " +
                                   std::to_string(options_.handshake_timeout.count()) + " ms"));
  });
  int rc = uv_read_start(
      stream_,
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* self = static_cast<Connection*>(h->data);
        *buf = uv_buf_init(self->read_chunk_.data(), self->read_chunk_.size());
      },
      [](uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
        static_cast<Connection*>(s->data)->OnRead(nread, buf);
      });
  if (rc != 0) {
    Close(Status::Unavailable(std::string("cannot read from ") + peer_address_ + ": " +
                              uv_strerror(rc)));
    return;
  }
  if (auto hello = handshake_.Start()) Send(*hello);
}

void Connection::Send(capnp::MessageBuilder& message) {
  if (state_ == State::kClosed) return;
  // Most frames go out at once with uv_try_write, copying and allocating nothing; what the
  // socket does not take now is copied and queued with uv_write (which keeps the order:
  // uv_try_write refuses while anything is queued), and so is everything while bytes from
  // another thread wait for the loop (ConnectionWriter).
  OutgoingFrame frame(message);
  Status failed;
  {
    std::lock_guard lock(writer_->mu);
    if (!writer_->deferred.empty()) {
      frame.AppendTo(writer_->deferred);
      return;
    }
    const int written = uv_try_write(stream_, frame.bufs(), frame.count());
    if (written == static_cast<int>(frame.total())) return;
    if (written < 0 && written != UV_EAGAIN && written != UV_ENOSYS) {
      failed = Status::Unavailable(std::string("write to ") + peer_address_ +
                                   " failed: " + uv_strerror(written));
    } else {
      std::string rest;
      frame.AppendTo(rest, written > 0 ? static_cast<size_t>(written) : 0);
      failed = WriteLocked(std::move(rest));
    }
  }
  if (!failed.ok()) Close(failed);
}

void Connection::FlushDeferred() {
  Status failed;
  {
    std::lock_guard lock(writer_->mu);
    if (writer_->deferred.empty() || state_ == State::kClosed) return;
    std::string bytes;
    bytes.swap(writer_->deferred);
    failed = WriteLocked(std::move(bytes));
  }
  if (!failed.ok()) Close(failed);
}

Status Connection::WriteLocked(std::string bytes) {
  struct WriteRequest {
    uv_write_t req;
    std::string bytes;
  };
  auto* w = new WriteRequest{{}, std::move(bytes)};
  uv_buf_t buf = uv_buf_init(w->bytes.data(), w->bytes.size());
  w->req.data = this;
  int rc = uv_write(&w->req, stream_, &buf, 1, [](uv_write_t* req, int status) {
    auto* w = reinterpret_cast<WriteRequest*>(req);
    auto* self = static_cast<Connection*>(req->data);
    {
      std::lock_guard lock(self->writer_->mu);
      --self->writer_->uv_writes;
    }
    if (status != 0 && status != UV_ECANCELED) {
      self->Close(Status::Unavailable(std::string("write to ") + self->peer_address_ +
                                      " failed: " + uv_strerror(status)));
    }
    delete w;
  });
  if (rc != 0) {
    delete w;
    return Status::Unavailable(std::string("write to ") + peer_address_ +
                               " failed: " + uv_strerror(rc));
  }
  ++writer_->uv_writes;
  return Status::Ok();
}

void Connection::OnRead(ssize_t nread, const uv_buf_t* buf) {
  if (nread == 0) return;
  if (nread < 0) {
    Close(Status::Unavailable(nread == UV_EOF ? "peer " + peer_address_ + " closed the connection"
                                              : "read from " + peer_address_ +
                                                    " failed: " + uv_strerror(nread)));
    return;
  }
  inbuf_.append(buf->base, static_cast<size_t>(nread));
  Status s = ParseFrames();
  if (!s.ok()) {
    spdlog::warn("dropping connection {} from {} ({}): {}", id_, peer_address_,
                 peer_role_.empty() ? "unauthenticated" : peer_role_, s.message());
    Close(s);
    return;
  }
  if (state_ == State::kClosed) return;
  // Compact: drop the parsed prefix.
  if (inbuf_pos_ > 0) {
    inbuf_.erase(0, inbuf_pos_);
    inbuf_pos_ = 0;
  }
}

// Splits inbuf_ into complete frames. The segment table is checked against the frame limit
// before the frame's bytes are gathered, so an oversized frame costs nothing to reject.
Status Connection::ParseFrames() {
  while (state_ != State::kClosed) {
    const size_t avail = inbuf_.size() - inbuf_pos_;
    const char* p = inbuf_.data() + inbuf_pos_;
    RAYD_ASSIGN_OR_RETURN(const size_t frame_bytes, FrameSize(p, avail, options_.limits));
    if (avail < frame_bytes) {
      inbuf_.reserve(inbuf_pos_ + frame_bytes);
      return Status::Ok();
    }
    auto storage = std::make_shared<FrameBytes>();
    storage->words = kj::heapArray<capnp::word>(frame_bytes / 8);
    std::memcpy(storage->words.begin(), p, frame_bytes);
    inbuf_pos_ += frame_bytes;

    const capnp::ReaderOptions reader_options = FrameReaderOptions(frame_bytes, options_.limits);
    Status s;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
      auto reader = std::make_unique<capnp::FlatArrayMessageReader>(storage->words.asPtr(),
                                                                    reader_options);
      s = OnFrame(std::move(reader), storage);
    })) {
      return Status::InvalidArgument("malformed frame: " +
                                     std::string(e->getDescription().cStr()) + " (at " +
                                     e->getFile() + ":" + std::to_string(e->getLine()) + ")");
    }
    RAYD_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

Status Connection::OnFrame(std::unique_ptr<capnp::MessageReader> message,
                           std::shared_ptr<void> storage) {
  auto frame = message->getRoot<proto::Frame>();
  if (state_ == State::kHandshake) return OnHandshakeFrame(frame);
  switch (frame.which()) {
    case proto::Frame::REQUEST:
      OnRequest(frame, std::move(message), std::move(storage));
      return Status::Ok();
    case proto::Frame::RESPONSE:
      OnResponse(frame);
      return Status::Ok();
    default:
      return Status::InvalidArgument("unexpected handshake frame after the handshake");
  }
}

Status Connection::OnHandshakeFrame(proto::Frame::Reader frame) {
  Handshake::Step step = handshake_.OnFrame(frame);
  if (step.reply) Send(*step.reply);
  if (!step.status.ok()) return step.status;
  if (handshake_.done()) {
    peer_role_ = handshake_.peer_role();
    BecomeReady();
  }
  return Status::Ok();
}

void Connection::BecomeReady() {
  state_ = State::kReady;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(stream_), &fd) == 0) {
    std::lock_guard lock(writer_->mu);
    writer_->fd = fd;
  }
  handshake_timer_.reset();
  for (auto& message : unsent_) Send(*message);
  unsent_.clear();
  if (on_ready_) on_ready_(*this);
}

void Connection::OnRequest(proto::Frame::Reader frame,
                           std::unique_ptr<capnp::MessageReader> message,
                           std::shared_ptr<void> storage) {
  const uint64_t id = frame.getId();
  const auto method = frame.getRequest().getMethod();
  auto call = std::make_shared<IncomingCall>(weak_from_this(), writer_, id, method,
                                             std::move(message), std::move(storage));
  const Handler* handler = dispatcher_ ? dispatcher_->Find(method) : nullptr;
  if (handler == nullptr) {
    call->Fail(Status::Unimplemented(MethodName(method) + " is not served by this " +
                                     options_.role));
    return;
  }
  // A handler that reads past the traversal limit, or a malformed pointer, throws a
  // kj::Exception: it answers the call and is logged; the connection stays up.
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { (*handler)(call); })) {
    spdlog::warn("malformed request ({}) from {}: {}", MethodName(method), peer_address_,
                 e->getDescription().cStr());
    call->Fail(Status::InvalidArgument("malformed request: " +
                                       std::string(e->getDescription().cStr())));
  }
}

void Connection::OnResponse(proto::Frame::Reader frame) {
  auto it = pending_.find(frame.getId());
  if (it == pending_.end()) return;  // it timed out already
  Pending pending = std::move(it->second);
  pending_.erase(it);
  if (pending.deadline != Clock::time_point::max()) deadlines_.erase({pending.deadline, frame.getId()});
  auto response = frame.getResponse();
  if (response.getCode() == 0) {
    pending.cb(Status::Ok(), response.getResult());
  } else {
    pending.cb(Status(static_cast<StatusCode>(response.getCode()), response.getMessage()),
               capnp::AnyPointer::Reader());
  }
}

void Connection::SendResponse(uint64_t id, const Status& status, const FillFn& fill) {
  if (state_ != State::kReady) return;
  capnp::MallocMessageBuilder message(kFirstSegmentWords);
  BuildResponse(message, id, status, fill);
  Send(message);
}

std::unique_ptr<capnp::MallocMessageBuilder> BuildRequest(proto::Method method,
                                                          const FillFn& fill) {
  auto message = std::make_unique<capnp::MallocMessageBuilder>(kFirstSegmentWords);
  auto request = message->initRoot<proto::Frame>().initRequest();
  request.setMethod(method);
  if (fill) fill(request.getParams());
  return message;
}

void Connection::Call(proto::Method method, const FillFn& fill, Millis timeout, ReplyFn cb) {
  Send(BuildRequest(method, fill), timeout, std::move(cb));
}

void Connection::Send(std::unique_ptr<capnp::MallocMessageBuilder> message, Millis timeout,
                      ReplyFn cb) {
  if (state_ == State::kClosed) {
    cb(Status::Unavailable("connection to " + peer_address_ + " is closed"),
       capnp::AnyPointer::Reader());
    return;
  }
  const uint64_t id = next_request_id_++;
  auto frame = message->getRoot<proto::Frame>();
  frame.setId(id);
  auto request = frame.getRequest();
  request.setTimeoutMs(static_cast<uint32_t>(timeout.count()));
  Pending pending{request.getMethod(), std::move(cb), Clock::time_point::max()};
  if (timeout.count() > 0) {
    pending.deadline = Clock::now() + timeout;
    deadlines_.insert({pending.deadline, id});
  }
  pending_.emplace(id, std::move(pending));
  if (state_ == State::kReady) {
    Send(*message);
  } else {
    unsent_.push_back(std::move(message));
  }
  ArmDeadlineTimer();
}

void Connection::ArmDeadlineTimer() {
  if (deadlines_.empty()) {
    if (deadline_timer_) deadline_timer_->Stop();
    return;
  }
  if (!deadline_timer_) deadline_timer_ = std::make_unique<Timer>(loop_);
  auto wait = std::chrono::duration_cast<Millis>(deadlines_.begin()->first - Clock::now());
  deadline_timer_->Start(std::max(wait + Millis(1), Millis(0)), Millis(0),
                         [this] { ExpireDeadlines(); });
}

void Connection::ExpireDeadlines() {
  const auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    Pending pending = std::move(it->second);
    pending_.erase(it);
    pending.cb(Status::DeadlineExceeded(MethodName(pending.method) + " to " + peer_address_ +
                                        " got no reply before its deadline"),
               capnp::AnyPointer::Reader());
    if (state_ == State::kClosed) return;
  }
  ArmDeadlineTimer();
}

void Connection::Close(const Status& reason) {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  if (writer_) {
    // No thread writes on the socket from here on: uv_close below closes its fd.
    std::lock_guard lock(writer_->mu);
    writer_->fd = -1;
    writer_->deferred.clear();
  }
  handshake_timer_.reset();
  deadline_timer_.reset();
  unsent_.clear();
  uv_read_stop(stream_);
  uv_close(reinterpret_cast<uv_handle_t*>(stream_), [](uv_handle_t* h) {
    auto* self = static_cast<Connection*>(h->data);
    if (h->type == UV_TCP) {
      delete reinterpret_cast<uv_tcp_t*>(h);
    } else {
      delete reinterpret_cast<uv_pipe_t*>(h);
    }
    // Last: dropping self_ may destroy the connection.
    auto keep = std::move(self->self_);
  });
  // Keep ourselves alive through the callbacks below even if self_ is the last owner.
  auto keep = shared_from_this();
  auto pending = std::move(pending_);
  pending_.clear();
  deadlines_.clear();
  const std::string why = reason.message();
  for (auto& [id, p] : pending) {
    p.cb(Status::Unavailable("connection to " + peer_address_ + " closed: " + why),
         capnp::AnyPointer::Reader());
  }
  if (on_closed_) {
    auto fn = std::move(on_closed_);
    fn(*this, reason);
  }
}

}  // namespace rayd::rpc
