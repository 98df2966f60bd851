#pragma once
// Private to the transfer channel: its wire format (see transfer.cc for the layout) and the
// socket helpers the server and the client share.

#include <netdb.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <capnp/serialize.h>
#include <kj/exception.h>

#include "rayd/base/auth.h"
#include "rayd/base/frame.h"
#include "rayd/base/handshake.h"
#include "rayd/base/event_loop.h"
#include "rayd/base/ids.h"
#include "rayd/base/logging.h"
#include "rayd/base/rpc.h"
#include "rayd/base/status.h"

namespace rayd::object_store::wire {

// ---------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------

constexpr uint8_t kFrameMagic = 0xD7;
constexpr uint8_t kVersion = 1;
constexpr size_t kRequestSize = 48;
constexpr size_t kReplySize = 32;
constexpr size_t kMaxSmallFrame = 48;
// The largest READ a server answers; the client never asks for more.
constexpr uint64_t kMaxChunk = 256ull << 20;
// A server stops reading a connection with this many replies not yet written (back-pressure).
constexpr size_t kMaxQueuedWrites = 256;
constexpr Millis kHandshakeTimeout{10000};

enum class MsgType : uint8_t { kStat = 1, kRead = 2 };
enum class WireStatus : uint8_t { kOk = 0, kNotFound = 1, kError = 2 };

inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

struct Request {
  MsgType type = MsgType::kStat;
  uint64_t tag = 0;
  ObjectId id;
  uint64_t offset = 0;
  uint64_t length = 0;
};

inline void EncodeRequest(const Request& r, uint8_t* out) {
  std::memset(out, 0, kRequestSize);
  out[0] = kFrameMagic;
  out[1] = kVersion;
  out[2] = static_cast<uint8_t>(r.type);
  PutU64(out + 8, r.tag);
  std::memcpy(out + 16, r.id.bytes().data(), ObjectId::kSize);
  PutU64(out + 32, r.offset);
  PutU64(out + 40, r.length);
}

inline Result<Request> DecodeRequest(const uint8_t* in) {
  if (in[0] != kFrameMagic || in[1] != kVersion) {
    return Status::InvalidArgument("bad request magic/version " + std::to_string(in[0]) + "/" +
                                   std::to_string(in[1]));
  }
  Request r;
  if (in[2] != static_cast<uint8_t>(MsgType::kStat) &&
      in[2] != static_cast<uint8_t>(MsgType::kRead)) {
    return Status::InvalidArgument("unknown request type " + std::to_string(in[2]));
  }
  r.type = static_cast<MsgType>(in[2]);
  r.tag = GetU64(in + 8);
  auto id = ObjectId::FromHex(internal::ToHex(in + 16, ObjectId::kSize));
  RAYD_CHECK(id.ok());
  r.id = *id;
  r.offset = GetU64(in + 32);
  r.length = GetU64(in + 40);
  if (r.length > kMaxChunk) {
    return Status::InvalidArgument("read length " + std::to_string(r.length) + " above limit " +
                                   std::to_string(kMaxChunk));
  }
  return r;
}

struct Reply {
  MsgType type = MsgType::kStat;
  WireStatus status = WireStatus::kOk;
  uint64_t tag = 0;
  uint64_t value = 0;
};

inline void EncodeReply(const Reply& r, uint8_t* out) {
  std::memset(out, 0, kReplySize);
  out[0] = kFrameMagic;
  out[1] = kVersion;
  out[2] = static_cast<uint8_t>(r.type);
  out[3] = static_cast<uint8_t>(r.status);
  PutU64(out + 8, r.tag);
  PutU64(out + 16, r.value);
}

inline Result<Reply> DecodeReply(const uint8_t* in) {
  if (in[0] != kFrameMagic || in[1] != kVersion) {
    return Status::InvalidArgument("bad reply magic/version");
  }
  if (in[2] != static_cast<uint8_t>(MsgType::kStat) &&
      in[2] != static_cast<uint8_t>(MsgType::kRead)) {
    return Status::InvalidArgument("unknown reply type " + std::to_string(in[2]));
  }
  if (in[3] > static_cast<uint8_t>(WireStatus::kError)) {
    return Status::InvalidArgument("unknown reply status " + std::to_string(in[3]));
  }
  return Reply{static_cast<MsgType>(in[2]), static_cast<WireStatus>(in[3]), GetU64(in + 8),
               GetU64(in + 16)};
}

// The opening handshake is the one every rayd connection makes (rayd/base/handshake.h, tagged
// "transfer"): Cap'n Proto stream frames of at most kMaxHandshakeFrame bytes, before the raw
// requests and replies above.
constexpr size_t kMaxHandshakeFrame = 1024;

inline std::string FlattenFrame(capnp::MessageBuilder& message) {
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// How many bytes the handshake frame starting at `data` spans, as far as `avail` bytes tell
// (rpc::FrameSize: fewer available means "read more and ask again").
inline Result<size_t> HandshakeFrameSize(const uint8_t* data, size_t avail) {
  rpc::Limits limits;
  limits.max_frame_bytes = kMaxHandshakeFrame;
  return rpc::FrameSize(reinterpret_cast<const char*>(data), avail, limits);
}

// Feeds the complete handshake frame of `size` bytes at `data` to `handshake`.
inline rpc::Handshake::Step FeedHandshake(rpc::Handshake& handshake, const uint8_t* data,
                                          size_t size) {
  rpc::Limits limits;
  limits.max_frame_bytes = kMaxHandshakeFrame;
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  std::memcpy(words.begin(), data, words.size() * sizeof(capnp::word));
  rpc::Handshake::Step step{Status::InvalidArgument("malformed handshake frame"), nullptr};
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
    capnp::FlatArrayMessageReader reader(words, rpc::FrameReaderOptions(size, limits));
    step = handshake.OnFrame(reader.getRoot<proto::Frame>());
  })) {
    return {Status::InvalidArgument("malformed handshake frame: " +
                                    std::string(e->getDescription().cStr())),
            nullptr};
  }
  return step;
}

// ---------------------------------------------------------------------------------------------
// Socket helpers
// ---------------------------------------------------------------------------------------------

// Numeric IPv4/IPv6 without a lookup; a host name with a (blocking) getaddrinfo.
inline Result<sockaddr_storage> Resolve(const std::string& address) {
  RAYD_ASSIGN_OR_RETURN(rpc::Endpoint ep, rpc::ParseEndpoint(address));
  if (ep.kind != rpc::Endpoint::Kind::kTcp) {
    return Status::InvalidArgument("transfer address '" + address + "' is not host:port");
  }
  sockaddr_storage addr{};
  if (uv_ip4_addr(ep.host.c_str(), ep.port, reinterpret_cast<sockaddr_in*>(&addr)) == 0 ||
      uv_ip6_addr(ep.host.c_str(), ep.port, reinterpret_cast<sockaddr_in6*>(&addr)) == 0) {
    return addr;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::Unavailable("cannot resolve host '" + ep.host + "': " + gai_strerror(rc));
  }
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return addr;
}

// No Nagle delay for the small request/reply frames. Socket buffer sizes are left to the
// kernel: setting SO_RCVBUF/SO_SNDBUF turns Linux's autotuning off (it grows to tcp_rmem's
// maximum, 32 MiB here), and fixed 1/4/16 MiB buffers measured no faster over loopback.
inline void TuneSocket(uv_tcp_t* tcp) {
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(tcp), &fd) == 0) rpc::TuneTcpSocket(fd);
}

inline uv_stream_t* AsStream(uv_tcp_t* tcp) { return reinterpret_cast<uv_stream_t*>(tcp); }

}  // namespace rayd::object_store::wire
