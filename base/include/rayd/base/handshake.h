#pragma once
// Handshake: the opening exchange of every rayd connection, RPC and object transfer alike.
// Three Cap'n Proto frames (rpc.capnp's Frame: hello, auth, authResult), each side proving it
// holds the cluster token without sending it:
//   accepting -> connecting  Hello       protocol version, role, 32-byte nonce
//   connecting -> accepting  Auth        protocol version, role, HMAC(token, tag || nonce), own nonce
//   accepting -> connecting  AuthResult  verdict, and the server's proof over the client's nonce
// A wrong token, another protocol version or a malformed frame is refused with a one-line
// reason (the accepting side tells the peer why in AuthResult).
//
// This is the exchange only, with no I/O: the transport sends the frames Start and OnFrame
// return, in order, and feeds it the frames it reads until done() (or an error). RPC
// connections go on with request/response frames; the transfer channel with its raw payload
// path.

#include <capnp/message.h>

#include <memory>
#include <string>

#include "rayd/base/status.h"
#include "rayd/protocol/rpc.capnp.h"

namespace rayd::rpc {

class Handshake {
 public:
  enum class Side { kAccepting, kConnecting };
  using Frame = std::unique_ptr<capnp::MallocMessageBuilder>;

  // `tag` separates the proofs of different channels ("rpc", "transfer"), so a proof made for
  // one is no use on another. `peer_address` is for messages.
  Handshake(Side side, std::string token, std::string role, std::string tag,
            std::string peer_address);

  // The accepting side's Hello, to send first; null on the connecting side.
  Frame Start();
  // Feeds one received frame. Ok with the frame to send back (null: nothing); done() once
  // the peer is authenticated. An error is the reason to close; `reply` may still hold a frame
  // telling the peer why (send it first).
  struct Step {
    Status status;
    Frame reply;
  };
  Step OnFrame(proto::Frame::Reader frame);

  bool done() const { return done_; }
  const std::string& peer_role() const { return peer_role_; }

 private:
  std::string Proof(std::string_view who, const std::string& nonce) const;

  Side side_;
  std::string token_;
  std::string role_;
  std::string tag_;
  std::string peer_address_;
  std::string our_nonce_;
  std::string peer_role_;
  bool done_ = false;
};

}  // namespace rayd::rpc
