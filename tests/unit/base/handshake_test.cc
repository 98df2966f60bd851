// The opening exchange every rayd connection makes (rayd/base/handshake.h), played between two
// Handshake objects through real serialised frames.

#include <capnp/serialize.h>

#include <catch2/catch.hpp>
#include <optional>

#include "rayd/base/handshake.h"

namespace rayd::rpc {
namespace {

// Delivers `frame` as the peer would read it: flattened, then read back.
Handshake::Step Deliver(Handshake& to, capnp::MallocMessageBuilder& frame) {
  auto words = capnp::messageToFlatArray(frame);
  capnp::FlatArrayMessageReader reader(words);
  return to.OnFrame(reader.getRoot<proto::Frame>());
}

struct Outcome {
  Status server, client;
  std::optional<std::string> server_saw_role;
};

// Runs the whole exchange; each side stops at its first error.
Outcome Run(Handshake& server, Handshake& client) {
  Outcome out;
  auto hello = server.Start();
  REQUIRE(hello);
  REQUIRE_FALSE(client.Start());
  auto auth = Deliver(client, *hello);
  out.client = auth.status;
  if (!auth.status.ok()) return out;
  REQUIRE(auth.reply);
  auto verdict = Deliver(server, *auth.reply);
  out.server = verdict.status;
  out.server_saw_role = server.peer_role();
  REQUIRE(verdict.reply);  // accepted or refused, the client is told
  out.client = Deliver(client, *verdict.reply).status;
  return out;
}

}  // namespace

TEST_CASE("both sides prove the cluster token and learn each other's role", "[handshake]") {
  Handshake server(Handshake::Side::kAccepting, "secret", "gcs", "rpc", "client");
  Handshake client(Handshake::Side::kConnecting, "secret", "driver", "rpc", "server");
  Outcome out = Run(server, client);
  CHECK(out.server.ok());
  CHECK(out.client.ok());
  CHECK(server.done());
  CHECK(client.done());
  CHECK(server.peer_role() == "driver");
  CHECK(client.peer_role() == "gcs");
}

TEST_CASE("a wrong token is refused, and the refused side hears why", "[handshake]") {
  Handshake server(Handshake::Side::kAccepting, "secret", "gcs", "rpc", "client");
  Handshake client(Handshake::Side::kConnecting, "guess", "driver", "rpc", "server");
  Outcome out = Run(server, client);
  CHECK(out.server.code() == StatusCode::kPermissionDenied);
  CHECK(out.client.code() == StatusCode::kPermissionDenied);
  CHECK(out.client.message().find("wrong cluster token") != std::string::npos);
  CHECK_FALSE(server.done());
  CHECK_FALSE(client.done());
}

TEST_CASE("a proof made for one channel is no use on another", "[handshake]") {
  // Same token, but a client speaking the RPC channel's proofs to a transfer server.
  Handshake server(Handshake::Side::kAccepting, "secret", "transfer", "transfer", "client");
  Handshake client(Handshake::Side::kConnecting, "secret", "node", "rpc", "server");
  Outcome out = Run(server, client);
  CHECK(out.server.code() == StatusCode::kPermissionDenied);
  CHECK_FALSE(server.done());
}

TEST_CASE("frames out of turn and another protocol version are refused", "[handshake]") {
  Handshake server(Handshake::Side::kAccepting, "secret", "gcs", "rpc", "client");
  Handshake client(Handshake::Side::kConnecting, "secret", "driver", "rpc", "server");
  auto hello = server.Start();
  // The server does not take its own Hello back.
  CHECK(Deliver(server, *hello).status.code() == StatusCode::kPermissionDenied);
  // A Hello of another version: the client says which versions differ.
  capnp::MallocMessageBuilder old;
  auto h = old.initRoot<proto::Frame>().initHello();
  h.setProtocolVersion(proto::PROTOCOL_VERSION + 1);
  h.setNonce(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(std::string(32, 'n').data()), 32));
  auto step = Deliver(client, old);
  CHECK_FALSE(step.status.ok());
  CHECK(step.status.message().find("protocol version") != std::string::npos);
  // An AuthResult before any Hello proves nothing.
  Handshake fresh(Handshake::Side::kConnecting, "secret", "driver", "rpc", "server");
  capnp::MallocMessageBuilder early;
  early.initRoot<proto::Frame>().initAuthResult().setOk(true);
  CHECK(Deliver(fresh, early).status.code() == StatusCode::kPermissionDenied);
}

}  // namespace rayd::rpc
