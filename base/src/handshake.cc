#include "rayd/base/handshake.h"

#include "rayd/base/auth.h"
#include "rayd/base/capnp_bytes.h"

namespace rayd::rpc {
namespace {

constexpr size_t kNonceBytes = 32;

}  // namespace

Handshake::Handshake(Side side, std::string token, std::string role, std::string tag,
                     std::string peer_address)
    : side_(side),
      token_(std::move(token)),
      role_(std::move(role)),
      tag_(std::move(tag)),
      peer_address_(std::move(peer_address)) {}

std::string Handshake::Proof(std::string_view who, const std::string& nonce) const {
  return HmacSha256(token_, "rayd-" + tag_ + "-" + std::string(who) + nonce);
}

Handshake::Frame Handshake::Start() {
  if (side_ != Side::kAccepting) return nullptr;
  our_nonce_ = RandomBytes(kNonceBytes);
  auto message = std::make_unique<capnp::MallocMessageBuilder>();
  auto hello = message->initRoot<proto::Frame>().initHello();
  hello.setProtocolVersion(proto::PROTOCOL_VERSION);
  hello.setNonce(AsData(our_nonce_));
  hello.setRole(role_);
  return message;
}

Handshake::Step Handshake::OnFrame(proto::Frame::Reader frame) {
  if (done_) return {Status::PermissionDenied("a handshake frame after the handshake"), nullptr};
  if (side_ == Side::kConnecting && frame.isHello()) {
    auto hello = frame.getHello();
    if (hello.getProtocolVersion() != proto::PROTOCOL_VERSION) {
      return {Status::Unavailable("peer " + peer_address_ + " speaks protocol version " +
                                  std::to_string(hello.getProtocolVersion()) + ", we speak " +
                                  std::to_string(proto::PROTOCOL_VERSION)),
              nullptr};
    }
    if (hello.getNonce().size() != kNonceBytes) {
      return {Status::PermissionDenied("malformed hello nonce from " + peer_address_), nullptr};
    }
    peer_role_ = hello.getRole();
    our_nonce_ = RandomBytes(kNonceBytes);
    auto message = std::make_unique<capnp::MallocMessageBuilder>();
    auto auth = message->initRoot<proto::Frame>().initAuth();
    auth.setProtocolVersion(proto::PROTOCOL_VERSION);
    auth.setRole(role_);
    auth.setProof(AsData(Proof("client", FromData(hello.getNonce()))));
    auth.setNonce(AsData(our_nonce_));
    return {Status::Ok(), std::move(message)};
  }
  if (side_ == Side::kAccepting && frame.isAuth()) {
    auto auth = frame.getAuth();
    auto refuse = [&](const std::string& why) {
      auto message = std::make_unique<capnp::MallocMessageBuilder>();
      auto result = message->initRoot<proto::Frame>().initAuthResult();
      result.setOk(false);
      result.setMessage(why);
      return Step{Status::PermissionDenied(why), std::move(message)};
    };
    if (auth.getProtocolVersion() != proto::PROTOCOL_VERSION) {
      return refuse("protocol version " + std::to_string(auth.getProtocolVersion()) +
                    " is not supported (this daemon speaks " +
                    std::to_string(proto::PROTOCOL_VERSION) + ")");
    }
    peer_role_ = auth.getRole();
    if (!ConstantTimeEquals(Proof("client", our_nonce_), FromData(auth.getProof()))) {
      return refuse("wrong cluster token");
    }
    if (auth.getNonce().size() != kNonceBytes) return refuse("malformed auth nonce");
    auto message = std::make_unique<capnp::MallocMessageBuilder>();
    auto result = message->initRoot<proto::Frame>().initAuthResult();
    result.setOk(true);
    result.setProof(AsData(Proof("server", FromData(auth.getNonce()))));
    done_ = true;
    return {Status::Ok(), std::move(message)};
  }
  if (side_ == Side::kConnecting && frame.isAuthResult()) {
    auto result = frame.getAuthResult();
    if (!result.getOk()) {
      return {Status::PermissionDenied(peer_address_ + " refused us: " +
                                       std::string(result.getMessage().cStr())),
              nullptr};
    }
    if (our_nonce_.empty() ||
        !ConstantTimeEquals(Proof("server", our_nonce_), FromData(result.getProof()))) {
      return {Status::PermissionDenied(peer_address_ +
                                       " could not prove it holds the cluster token"),
              nullptr};
    }
    done_ = true;
    return {Status::Ok(), nullptr};
  }
  return {Status::PermissionDenied("unexpected frame before the handshake finished"), nullptr};
}

}  // namespace rayd::rpc
