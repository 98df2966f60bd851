// The RPC layer over real sockets: round trips on TCP and Unix sockets, typed errors,
// deadlines, the token handshake, malformed and oversized frames, reconnecting.
//
// The server runs on its own thread and loop (as in a daemon); clients run on the test's
// thread and drive their loop with RunUntil.

#include <arpa/inet.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <future>
#include <optional>
#include <thread>

#include "rayd/base/rpc.h"
#include "rayd/protocol/gcs.capnp.h"
#include "server_thread.h"
#include "test_util.h"

namespace rayd::rpc {
namespace {

using namespace std::chrono_literals;

using testing::kTestToken;
constexpr const char* kToken = kTestToken;

// A ServerThread whose setup ignores the keep list.
class ServerThread : public testing::ServerThread {
 public:
  ServerThread(std::function<void(Dispatcher&, EventLoop&)> setup,
               std::vector<std::string> listen = {"127.0.0.1:0"}, Limits limits = {})
      : testing::ServerThread([setup](Dispatcher& d, EventLoop& l, Keep&) { setup(d, l); },
                              std::move(listen), limits) {}
};

std::string AsString(capnp::Data::Reader v) {
  return std::string(reinterpret_cast<const char*>(v.begin()), v.size());
}

// Serves KV_GET as an echo (the key comes back as the value), PING, and KV_DEL as a failure,
// through the typed handlers.
void EchoSetup(Dispatcher& d, EventLoop&) {
  d.Handle<proto::Method::KV_GET>([](const Incoming<proto::Method::KV_GET>& call) {
    std::string key = call.params().getKey();
    call.Reply([&](proto::KvGetReply::Builder reply) {
      reply.setFound(true);
      reply.setValue(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(key.data()), key.size()));
    });
  });
  d.Handle<proto::Method::PING>([](const auto& call) { call.Reply(); });
  d.Handle<proto::Method::KV_DEL>(
      [](const auto& call) { call.Fail(Status::NotFound("no such key, as asked")); });
}

auto KeyParams(const std::string& key) {
  return [key](proto::KvGetRequest::Builder r) { r.setKey(key); };
}

// Calls KV_GET and returns the echoed value or the error.
Result<std::string> Echo(EventLoop& loop, RpcClient& client, const std::string& key,
                         Millis timeout = 5000ms) {
  std::string value;
  Status s = CallAndWait<proto::Method::KV_GET>(
      loop, client, KeyParams(key), timeout,
      [&](proto::KvGetReply::Reader r) { value = AsString(r.getValue()); });
  if (!s.ok()) return s;
  return value;
}

// Each method's request and reply are declared once (rpc_methods.h); calls and handlers that
// build or read anything else do not compile.
static_assert(std::is_same_v<RequestOf<proto::Method::KV_PUT>, proto::KvPutRequest>);
static_assert(std::is_same_v<ReplyOf<proto::Method::KV_PUT>, proto::KvPutReply>);
static_assert(std::is_same_v<RequestOf<proto::Method::GET_ALL_JOBS>, proto::Empty>);
template <proto::Method M, typename Fill>
concept CallableWith = requires(RpcClient& c, Fill fill) {
  c.Call<M>(fill, Millis(1), [](const Status&) {});
};
using KvGetFill = decltype(KeyParams(""));
static_assert(CallableWith<proto::Method::KV_GET, KvGetFill>);
static_assert(!CallableWith<proto::Method::KV_PUT, KvGetFill>);  // builds KV_GET's request

// A blocking raw TCP socket to 127.0.0.1:port, for speaking broken protocol at the server.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = rayd::testing::ConnectLoopback(port);
    REQUIRE(fd_ >= 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawSocket() { close(fd_); }
  void Send(const std::string& bytes) {
    REQUIRE(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  }
  // Reads until the peer closes (true) or the receive timeout passes (false).
  bool ReadUntilClosed() {
    char buf[4096];
    while (true) {
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  int fd_;
};

std::string Serialize(capnp::MessageBuilder& message) {
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

TEST_CASE("calls round-trip over TCP and Unix sockets", "[rpc]") {
  testing::TempDir dir;
  ServerThread server(EchoSetup, {"127.0.0.1:0", "unix:" + dir.path() + "/s.sock"});
  for (size_t i = 0; i < 2; ++i) {
    EventLoop loop;
    RpcClient client(loop, server.address(i), Options{kToken, "test"});
    client.Connect();
    auto value = Echo(loop, client, "hello");
    REQUIRE(value.ok());
    CHECK(*value == "hello");
    CHECK(client.connected());
    // Many calls in flight at once all complete, each with its own answer.
    int done = 0;
    for (int k = 0; k < 200; ++k) {
      client.Call<proto::Method::KV_GET>(KeyParams(std::to_string(k)), 5000ms,
                                         [&, k](const Status& s, proto::KvGetReply::Reader r) {
                                           REQUIRE(s.ok());
                                           CHECK(AsString(r.getValue()) == std::to_string(k));
                                           ++done;
                                         });
    }
    REQUIRE(loop.RunUntil([&] { return done == 200; }, 10000ms));
  }
}

TEST_CASE("replies from other threads and from the loop interleave intact with large ones too",
          "[rpc]") {
  // KV_GET "N:SIZE" answers SIZE bytes of one letter: odd N from a thread of its own
  // (ReplyFromAnyThread), even N from the loop. Replies of up to 4 MiB overflow the socket's
  // buffer, so other threads' bytes wait for the loop while the loop's queue behind them.
  auto answer = [](const std::string& key, proto::KvGetReply::Builder reply) {
    const int n = std::stoi(key);
    const size_t size = std::stoul(key.substr(key.find(':') + 1));
    const std::string value(size, static_cast<char>('a' + n % 26));
    reply.setFound(true);
    reply.setValue(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(value.data()), value.size()));
  };
  std::vector<std::future<void>> others;  // the server's loop thread only; each its own thread
  auto setup = [&](Dispatcher& d, EventLoop&) {
    d.Handle<proto::Method::KV_GET>([&](const Incoming<proto::Method::KV_GET>& call) {
      const std::string key = call.params().getKey();
      if (std::stoi(key) % 2 == 0) {
        call.Reply([&](proto::KvGetReply::Builder r) { answer(key, r); });
        return;
      }
      others.push_back(std::async(std::launch::async, [call, key, &answer] {
        call.ReplyFromAnyThread([&](proto::KvGetReply::Builder r) { answer(key, r); });
      }));
    });
  };
  testing::TempDir dir;
  ServerThread server(setup, {"127.0.0.1:0", "unix:" + dir.path() + "/s.sock"});
  for (size_t i = 0; i < 2; ++i) {
    EventLoop loop;
    RpcClient client(loop, server.address(i), Options{kToken, "test"});
    client.Connect();
    constexpr int kCalls = 240;
    int done = 0;
    int wrong = 0;
    for (int n = 0; n < kCalls; ++n) {
      const size_t size = n % 8 == 0 ? (4u << 20) - 4096u * n : n % 3 == 0 ? 200000u : 40u;
      client.Call<proto::Method::KV_GET>(
          KeyParams(std::to_string(n) + ":" + std::to_string(size)), 30000ms,
          [&, n, size](const Status& s, proto::KvGetReply::Reader r) {
            ++done;
            const std::string value = s.ok() ? AsString(r.getValue()) : "";
            if (!s.ok() || value.size() != size ||
                value.find_first_not_of(static_cast<char>('a' + n % 26)) != std::string::npos) {
              ++wrong;
              UNSCOPED_INFO("call " << n << ": " << s.message() << ", " << value.size()
                                    << " bytes of " << size);
            }
          });
    }
    REQUIRE(loop.RunUntil([&] { return done == kCalls; }, 60000ms));
    CHECK(wrong == 0);
    CHECK(client.connected());
  }
}

TEST_CASE("typed errors reach the caller", "[rpc]") {
  ServerThread server(EchoSetup);
  EventLoop loop;
  RpcClient client(loop, server.address(), Options{kToken, "test"});
  client.Connect();
  Status s = CallAndWait(loop, client, proto::Method::KV_DEL, nullptr, 5000ms);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message() == "no such key, as asked");
  s = CallAndWait(loop, client, proto::Method::GET_ALL_JOBS, nullptr, 5000ms);
  CHECK(s.code() == StatusCode::kUnimplemented);
}

TEST_CASE("a call without a reply fails at its deadline, and the connection stays usable", "[rpc]") {
  std::vector<CallPtr> parked;  // server thread only
  ServerThread server([&](Dispatcher& d, EventLoop& l) {
    EchoSetup(d, l);
    d.Register(proto::Method::KV_KEYS, [&](const CallPtr& call) { parked.push_back(call); });
  });
  EventLoop loop;
  RpcClient client(loop, server.address(), Options{kToken, "test"});
  client.Connect();
  REQUIRE(Echo(loop, client, "warm").ok());
  auto start = Clock::now();
  Status s = CallAndWait(loop, client, proto::Method::KV_KEYS, nullptr, 150ms);
  auto waited = Clock::now() - start;
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
  CHECK(waited >= 150ms);
  auto value = Echo(loop, client, "after");
  REQUIRE(value.ok());
  CHECK(*value == "after");
}

TEST_CASE("a wrong token is refused, and the server keeps serving", "[rpc][auth]") {
  ServerThread server(EchoSetup);
  EventLoop loop;
  RpcClient bad(loop, server.address(), Options{"not-the-token", "test"});
  std::optional<Status> state;
  bad.SetOnStateChange([&](const Status& s) { state = s; });
  bad.Connect();
  REQUIRE(loop.RunUntil([&] { return state.has_value(); }, 10000ms));
  CHECK(state->code() == StatusCode::kPermissionDenied);
  CHECK(state->message().find("wrong cluster token") != std::string::npos);
  // Retrying can't help, so the client stops and calls fail at once.
  auto r = Echo(loop, bad, "x", 1000ms);
  CHECK(r.status().code() == StatusCode::kPermissionDenied);

  RpcClient good(loop, server.address(), Options{kToken, "test"});
  good.Connect();
  CHECK(Echo(loop, good, "still here").ok());
}

TEST_CASE("a server that cannot prove the token is not trusted", "[rpc][auth]") {
  // The client holds the right token; the server does not.
  std::promise<std::string> address;
  EventLoop server_loop;
  Dispatcher dispatcher;
  EchoSetup(dispatcher, server_loop);
  RpcServer server(server_loop, Options{"impostor", "gcs"}, dispatcher);
  REQUIRE(server.Listen("127.0.0.1:0").ok());
  std::thread t([&] { server_loop.Run(); });
  EventLoop loop;
  RpcClient client(loop, server.bound_addresses()[0], Options{kToken, "test"});
  std::optional<Status> state;
  client.SetOnStateChange([&](const Status& s) { state = s; });
  client.Connect();
  REQUIRE(loop.RunUntil([&] { return state.has_value(); }, 10000ms));
  CHECK(state->code() == StatusCode::kPermissionDenied);
  server_loop.Stop();
  t.join();
  server.Close();
}

TEST_CASE("malformed frames close that connection only", "[rpc][frames]") {
  ServerThread server(EchoSetup);
  SECTION("an impossible segment count") {
    RawSocket raw(server.port());
    raw.Send(std::string("\xff\xff\xff\xff\x01\x00\x00\x00", 8));
    CHECK(raw.ReadUntilClosed());
  }
  SECTION("garbage where the handshake should be") {
    RawSocket raw(server.port());
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::KvGetRequest>().setKey("not a frame");
    raw.Send(Serialize(message));
    CHECK(raw.ReadUntilClosed());
  }
  SECTION("a request before authenticating") {
    RawSocket raw(server.port());
    capnp::MallocMessageBuilder message;
    auto frame = message.initRoot<proto::Frame>();
    frame.setId(1);
    frame.initRequest().setMethod(proto::Method::PING);
    raw.Send(Serialize(message));
    CHECK(raw.ReadUntilClosed());
  }
  SECTION("a segment table pointing past its segment") {
    RawSocket raw(server.port());
    // One segment of 2 words whose root pointer claims a struct far outside it.
    std::string bytes("\x00\x00\x00\x00\x02\x00\x00\x00", 8);
    bytes += std::string("\xfc\xff\xff\x7f\x10\x00\x10\x00", 8);  // far struct pointer
    bytes += std::string(8, '\0');
    raw.Send(bytes);
    CHECK(raw.ReadUntilClosed());
  }
  EventLoop loop;
  RpcClient client(loop, server.address(), Options{kToken, "test"});
  client.Connect();
  CHECK(Echo(loop, client, "alive").ok());
}

TEST_CASE("oversized frames are refused before they are read", "[rpc][frames]") {
  Limits limits;
  limits.max_frame_bytes = 1 << 20;
  ServerThread server(EchoSetup, {"127.0.0.1:0"}, limits);
  SECTION("a header announcing 1 GiB") {
    RawSocket raw(server.port());
    raw.Send(std::string("\x00\x00\x00\x00\x00\x00\x00\x08", 8));  // 2^27 words
    CHECK(raw.ReadUntilClosed());
  }
  SECTION("an authenticated peer sending a 2 MiB request") {
    EventLoop loop;
    RpcClient client(loop, server.address(), Options{kToken, "test"});
    client.Connect();
    REQUIRE(Echo(loop, client, "small").ok());
    auto big = Echo(loop, client, std::string(2 << 20, 'x'));
    CHECK(big.status().code() == StatusCode::kUnavailable);
    // The client reconnects by itself and the server still serves.
    auto again = Echo(loop, client, "small again", 10000ms);
    REQUIRE(again.ok());
    CHECK(*again == "small again");
  }
}

TEST_CASE("the client reconnects with backoff and sends queued calls", "[rpc][reconnect]") {
  const int port = testing::FreeTcpPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  EventLoop loop;
  RpcClient client(loop, address, Options{kToken, "test"}, nullptr,
                   ReconnectBackoff{Millis(20), Millis(200)});
  client.Connect();
  // Nothing listens yet: the call waits in the queue while the client retries.
  std::optional<Status> result;
  client.Call(proto::Method::PING, nullptr, 20000ms,
              [&](const Status& s, capnp::AnyPointer::Reader) { result = s; });
  REQUIRE(loop.RunUntil([&] { return client.attempts() >= 3; }, 10000ms));
  CHECK_FALSE(result.has_value());
  CHECK(client.last_error().code() == StatusCode::kUnavailable);
  {
    ServerThread server(EchoSetup, {address});
    REQUIRE(loop.RunUntil([&] { return result.has_value(); }, 10000ms));
    CHECK(result->ok());
  }
  // The server went away: the client notices and reconnects when it returns.
  REQUIRE(loop.RunUntil([&] { return !client.connected(); }, 10000ms));
  ServerThread again(EchoSetup, {address});
  auto value = Echo(loop, client, "back", 10000ms);
  REQUIRE(value.ok());
  CHECK(*value == "back");
}

TEST_CASE("a queued call expires at its deadline while disconnected", "[rpc][reconnect]") {
  EventLoop loop;
  RpcClient client(loop, "127.0.0.1:" + std::to_string(testing::FreeTcpPort()),
                   Options{kToken, "test"});
  client.Connect();
  Status s = CallAndWait(loop, client, proto::Method::PING, nullptr, 200ms);
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
  CHECK(s.message().find("no connection") != std::string::npos);
}

TEST_CASE("a client to a peer that may be gone gives up waiting for a connection", "[rpc][reconnect]") {
  EventLoop loop;
  ReconnectBackoff backoff;
  backoff.initial = 10ms;
  backoff.give_up_after = 300ms;
  RpcClient client(loop, "127.0.0.1:" + std::to_string(testing::FreeTcpPort()),
                   Options{kToken, "test"}, nullptr, backoff);
  client.Connect();
  // No deadline of its own: it would wait for ever; it fails Unavailable, naming the peer.
  std::optional<Status> result;
  const auto start = Clock::now();
  client.Call<proto::Method::PING>(0ms, [&](const Status& s) { result = s; });
  REQUIRE(loop.RunUntil([&] { return result.has_value(); }, 5000ms));
  CHECK(result->code() == StatusCode::kUnavailable);
  CHECK(result->message().find("no connection to 127.0.0.1:") != std::string::npos);
  CHECK(Clock::now() - start >= 300ms);
  // A call's own, shorter deadline still answers first, as DeadlineExceeded.
  Status s = CallAndWait(loop, client, proto::Method::PING, nullptr, 50ms);
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("both sides of a connection can call each other", "[rpc]") {
  // The server answers PING by calling KV_GET back on the client before replying.
  ServerThread server([](Dispatcher& d, EventLoop&) {
    d.Handle<proto::Method::PING>([](const Incoming<proto::Method::PING>& call) {
      auto conn = call.connection();
      REQUIRE(conn);
      conn->Call<proto::Method::KV_GET>(
          KeyParams("from-server"), 5000ms,
          [call](const Status& s, proto::KvGetReply::Reader r) {
            if (!s.ok()) return call.Fail(s);
            if (AsString(r.getValue()) != "from-server") {
              return call.Fail(Status::Internal("bad echo"));
            }
            call.Reply();
          });
    });
  });
  EventLoop loop;
  Dispatcher client_methods;
  EchoSetup(client_methods, loop);
  RpcClient client(loop, server.address(), Options{kToken, "test"}, &client_methods);
  client.Connect();
  CHECK(CallAndWait(loop, client, proto::Method::PING, nullptr, 5000ms).ok());
}

TEST_CASE("endpoints parse", "[rpc]") {
  auto tcp = ParseEndpoint("10.0.0.1:6380");
  REQUIRE(tcp.ok());
  CHECK(tcp->host == "10.0.0.1");
  CHECK(tcp->port == 6380);
  auto v6 = ParseEndpoint("[::1]:7");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->ToString() == "[::1]:7");
  auto unix_ep = ParseEndpoint("unix:/tmp/x.sock");
  REQUIRE(unix_ep.ok());
  CHECK(unix_ep->path == "/tmp/x.sock");
  CHECK_FALSE(ParseEndpoint("no-port").ok());
  CHECK_FALSE(ParseEndpoint("host:99999").ok());
  CHECK_FALSE(ParseEndpoint("host:12ab").ok());
  CHECK_FALSE(ParseEndpoint("unix:").ok());
}

}  // namespace
}  // namespace rayd::rpc
