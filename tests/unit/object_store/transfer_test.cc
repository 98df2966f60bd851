// The transfer channel over real sockets on 127.0.0.1: whole objects arrive byte for byte,
// every pin is released, and failures (unknown object, wrong token, a peer that goes away or
// never answers, garbage on the wire) end fetches with the documented codes while the server
// keeps serving.
//
// Most tests run server and client on one loop driven with RunUntil; the large transfers run
// the server on its own thread and loop, as in a daemon.

#include "rayd/object_store/transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <future>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <capnp/serialize.h>

#include "rayd/base/auth.h"
#include "rayd/base/frame.h"
#include "rayd/base/handshake.h"
#include "rayd/base/rpc.h"
#include "test_util.h"

namespace rayd::object_store {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "transfer-test-token";

// libuv writes with write(2): a write to a peer that just went away raises SIGPIPE, which the
// daemons ignore as well.
const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

uint8_t PatternByte(uint64_t i, uint8_t seed) {
  return static_cast<uint8_t>((i ^ (i >> 9) ^ (i >> 19)) * 31 + seed);
}

std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = PatternByte(i, seed);
  return v;
}

// Index of the first byte that differs from the pattern, or -1.
int64_t FirstMismatch(const std::vector<uint8_t>& v, uint8_t seed) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != PatternByte(i, seed)) return static_cast<int64_t>(i);
  return -1;
}

// Objects a server sends, counting pins taken and released. Filled before serving; only the
// counters change afterwards (from the server's thread).
struct FakeStore {
  std::unordered_map<ObjectId, std::vector<uint8_t>> objects;
  std::atomic<int> pins{0};
  std::atomic<int> releases{0};

  ObjectId Add(std::vector<uint8_t> bytes) {
    ObjectId id = ObjectId::FromRandom();
    objects.emplace(id, std::move(bytes));
    return id;
  }
  TransferServer::Source AsSource() {
    return [this](const ObjectId& id) -> Result<PinnedBytes> {
      auto it = objects.find(id);
      if (it == objects.end()) return Status::NotFound("no object " + id.Hex());
      ++pins;
      return PinnedBytes{it->second.data(), it->second.size(), [this] { ++releases; }};
    };
  }
};

// The outcome of one fetch into a vector.
struct Fetched {
  bool done = false;
  Status status;
  std::vector<uint8_t> bytes;
};

void StartFetch(TransferClient& client, const std::string& peer, const ObjectId& id, Fetched& out) {
  client.Fetch(
      peer, id,
      [&out](size_t size, std::function<void(Result<uint8_t*>)> give) {
        out.bytes.resize(size);
        give(out.bytes.data());
      },
      [&out](Status s) {
        CHECK_FALSE(out.done);  // runs once
        out.status = std::move(s);
        out.done = true;
      });
}

// A TransferServer on its own thread and loop.
class ServerThread {
 public:
  explicit ServerThread(FakeStore& store, std::string listen = "127.0.0.1:0") {
    std::promise<std::string> bound;
    thread_ = std::thread([this, &store, listen, &bound] {
      EventLoop loop;
      loop_ = &loop;
      auto server = std::make_unique<TransferServer>(loop, kToken, store.AsSource());
      Status s = server->Listen(listen);
      bound.set_value(s.ok() ? server->address() : "");
      if (!s.ok()) return;
      loop.Run();
      server.reset();
    });
    address_ = bound.get_future().get();
    REQUIRE_FALSE(address_.empty());
  }
  ~ServerThread() {
    if (thread_.joinable()) Stop();
  }
  // Destroys the server (on its thread) and waits.
  void Stop() {
    loop_->Stop();
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  std::thread thread_;
  EventLoop* loop_ = nullptr;
  std::string address_;
};

int PortOf(const std::string& address) { return rpc::ParseEndpoint(address)->port; }

// A non-blocking raw TCP socket to 127.0.0.1:port, for speaking broken protocol at a server
// that runs on the test's own loop.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = rayd::testing::ConnectLoopback(port);
    REQUIRE(fd_ >= 0);
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~RawSocket() { close(fd_); }
  void Send(const std::string& bytes) {
    REQUIRE(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  }
  // Appends what has arrived to received(); true once the peer has closed.
  bool Poll() {
    char buf[4096];
    while (true) {
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        received_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return true;
      return errno != EAGAIN && errno != EWOULDBLOCK;
    }
  }
  const std::string& received() const { return received_; }

 private:
  int fd_;
  std::string received_;
};

// Speaks the connecting side of the handshake every rayd connection opens with
// (rayd/base/handshake.h, proofs tagged "transfer") over `raw`, the server running on `loop`.
// Returns how many bytes the server sent during it.
size_t Authenticate(EventLoop& loop, RawSocket& raw) {
  rpc::Handshake handshake(rpc::Handshake::Side::kConnecting, kToken, "test", "transfer",
                           "the transfer server");
  size_t used = 0;
  while (!handshake.done()) {
    size_t size = 0;
    REQUIRE(loop.RunUntil(
        [&] {
          if (raw.Poll()) return true;
          auto need = rpc::FrameSize(raw.received().data() + used, raw.received().size() - used,
                                     rpc::Limits{});
          if (!need.ok() || raw.received().size() - used < *need) return false;
          size = *need;
          return true;
        },
        5000ms));
    REQUIRE(size > 0);
    auto words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
    std::memcpy(words.begin(), raw.received().data() + used, size);
    capnp::FlatArrayMessageReader reader(words);
    auto step = handshake.OnFrame(reader.getRoot<proto::Frame>());
    REQUIRE(step.status.ok());
    used += size;
    if (step.reply) {
      auto flat = capnp::messageToFlatArray(*step.reply);
      raw.Send(std::string(reinterpret_cast<const char*>(flat.asBytes().begin()),
                           flat.asBytes().size()));
    }
  }
  return used;
}

std::string LittleEndian(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A request frame as the wire format describes it.
std::string RequestFrame(uint8_t type, uint64_t tag, const ObjectId& id, uint64_t offset,
                         uint64_t length, uint8_t magic = 0xD7) {
  std::string f;
  f += static_cast<char>(magic);
  f += static_cast<char>(1);
  f += static_cast<char>(type);
  f += std::string(5, '\0');
  f += LittleEndian(tag);
  f.append(reinterpret_cast<const char*>(id.bytes().data()), ObjectId::kSize);
  f += LittleEndian(offset);
  f += LittleEndian(length);
  return f;
}

TEST_CASE("a 64 MiB object arrives byte for byte, and every pin is released", "[transfer]") {
  FakeStore store;
  ObjectId id = store.Add(Pattern(64 << 20, 7));
  ServerThread server(store);
  EventLoop loop;
  TransferClient client(loop, kToken, TransferOptions{.chunk_size = 3 << 20});
  Fetched got;
  StartFetch(client, server.address(), id, got);
  REQUIRE(loop.RunUntil([&] { return got.done; }, 30000ms));
  REQUIRE(got.status.ok());
  REQUIRE(got.bytes.size() == size_t(64) << 20);
  CHECK(FirstMismatch(got.bytes, 7) == -1);
  server.Stop();
  // One STAT pin plus one per chunk (3 MiB chunks: 22 of them), each released once.
  CHECK(store.pins == 1 + 22);
  CHECK(store.releases == store.pins);
}

TEST_CASE("tiny, empty and oddly chunked objects", "[transfer]") {
  FakeStore store;
  ObjectId one = store.Add(Pattern(1, 3));
  ObjectId empty = store.Add({});
  ObjectId odd = store.Add(Pattern(1000003, 5));  // not a multiple of the chunk size
  EventLoop loop;
  TransferServer server(loop, kToken, store.AsSource());
  REQUIRE(server.Listen("127.0.0.1:0").ok());
  TransferClient client(loop, kToken,
                        TransferOptions{.chunk_size = 4096, .max_chunks_in_flight = 3});
  Fetched a, b, c;
  StartFetch(client, server.address(), one, a);
  StartFetch(client, server.address(), empty, b);
  StartFetch(client, server.address(), odd, c);
  REQUIRE(loop.RunUntil([&] { return a.done && b.done && c.done; }, 10000ms));
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  REQUIRE(c.status.ok());
  CHECK(a.bytes == Pattern(1, 3));
  CHECK(b.bytes.empty());
  REQUIRE(c.bytes.size() == 1000003);
  CHECK(FirstMismatch(c.bytes, 5) == -1);
  REQUIRE(loop.RunUntil([&] { return store.releases == store.pins; }, 5000ms));
  CHECK(store.pins == 3 + 1 + (1000003 + 4095) / 4096);
}

TEST_CASE("concurrent fetches from one peer share its connection", "[transfer]") {
  FakeStore store;
  std::vector<ObjectId> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(store.Add(Pattern((1 << 20) + i * 7919, i)));
  ServerThread server(store);
  EventLoop loop;
  TransferClient client(loop, kToken, TransferOptions{.chunk_size = 100000});
  // Each object twice, all at once.
  std::vector<Fetched> got(12);
  for (size_t i = 0; i < got.size(); ++i) StartFetch(client, server.address(), ids[i % 6], got[i]);
  REQUIRE(loop.RunUntil(
      [&] { return std::all_of(got.begin(), got.end(), [](auto& g) { return g.done; }); },
      20000ms));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("fetch " << i);
    REQUIRE(got[i].status.ok());
    REQUIRE(got[i].bytes.size() == size_t((1 << 20) + (i % 6) * 7919));
    CHECK(FirstMismatch(got[i].bytes, static_cast<uint8_t>(i % 6)) == -1);
  }
  // A later fetch reuses the pooled connection.
  Fetched again;
  StartFetch(client, server.address(), ids[0], again);
  REQUIRE(loop.RunUntil([&] { return again.done; }, 10000ms));
  CHECK(again.status.ok());
  server.Stop();
  CHECK(store.releases == store.pins);
}

TEST_CASE("an unknown object is NotFound, and a bad peer is Unavailable", "[transfer]") {
  FakeStore store;
  store.Add(Pattern(10, 1));
  EventLoop loop;
  TransferServer server(loop, kToken, store.AsSource());
  REQUIRE(server.Listen("127.0.0.1:0").ok());
  TransferClient client(loop, kToken);
  Fetched missing, refused, malformed;
  StartFetch(client, server.address(), ObjectId::FromRandom(), missing);
  StartFetch(client, "127.0.0.1:" + std::to_string(testing::FreeTcpPort()), ObjectId::FromRandom(),
             refused);
  StartFetch(client, "no-port-here", ObjectId::FromRandom(), malformed);
  REQUIRE(loop.RunUntil([&] { return missing.done && refused.done && malformed.done; }, 10000ms));
  CHECK(missing.status.code() == StatusCode::kNotFound);
  CHECK(refused.status.code() == StatusCode::kUnavailable);
  CHECK(refused.status.message().find("127.0.0.1:") != std::string::npos);
  CHECK(malformed.status.code() == StatusCode::kInvalidArgument);
  CHECK(store.pins == 0);
}

TEST_CASE("a wrong token is PermissionDenied, and the server keeps serving", "[transfer][auth]") {
  FakeStore store;
  ObjectId id = store.Add(Pattern(5000, 2));
  EventLoop loop;
  TransferServer server(loop, kToken, store.AsSource());
  REQUIRE(server.Listen("127.0.0.1:0").ok());
  TransferClient intruder(loop, "not-the-token");
  Fetched bad;
  StartFetch(intruder, server.address(), id, bad);
  REQUIRE(loop.RunUntil([&] { return bad.done; }, 10000ms));
  CHECK(bad.status.code() == StatusCode::kPermissionDenied);
  CHECK(bad.status.message().find(server.address()) != std::string::npos);
  CHECK(store.pins == 0);  // nothing was looked up for it

  TransferClient good(loop, kToken);
  Fetched ok;
  StartFetch(good, server.address(), id, ok);
  REQUIRE(loop.RunUntil([&] { return ok.done; }, 10000ms));
  CHECK(ok.status.ok());
  CHECK(ok.bytes == Pattern(5000, 2));
}

TEST_CASE("a server destroyed mid-fetch fails it with Unavailable", "[transfer]") {
  FakeStore store;
  ObjectId id = store.Add(Pattern(64 << 20, 9));
  EventLoop loop;
  auto server = std::make_unique<TransferServer>(loop, kToken, store.AsSource());
  REQUIRE(server->Listen("127.0.0.1:0").ok());
  const std::string address = server->address();
  TransferClient client(loop, kToken,
                        TransferOptions{.chunk_size = 1 << 20, .max_chunks_in_flight = 2});
  Fetched got;
  StartFetch(client, address, id, got);
  REQUIRE(loop.RunUntil([&] { return store.pins >= 5; }, 10000ms));
  REQUIRE_FALSE(got.done);
  server.reset();
  // Pins held by unfinished writes are released by the time the server is gone.
  CHECK(store.releases == store.pins);
  REQUIRE(loop.RunUntil([&] { return got.done; }, 10000ms));
  CHECK(got.status.code() == StatusCode::kUnavailable);
  CHECK(got.status.message().find(address) != std::string::npos);

  // A new server on the same address: the client reconnects for the next fetch.
  server = std::make_unique<TransferServer>(loop, kToken, store.AsSource());
  REQUIRE(server->Listen(address).ok());
  Fetched again;
  StartFetch(client, address, id, again);
  REQUIRE(loop.RunUntil([&] { return again.done; }, 30000ms));
  REQUIRE(again.status.ok());
  CHECK(FirstMismatch(again.bytes, 9) == -1);
}

TEST_CASE("a pooled connection that died while idle is replaced transparently", "[transfer]") {
  FakeStore store;
  ObjectId id = store.Add(Pattern(200000, 6));
  auto server = std::make_unique<ServerThread>(store);
  const std::string address = server->address();
  EventLoop loop;
  TransferClient client(loop, kToken);
  Fetched first;
  StartFetch(client, address, id, first);
  REQUIRE(loop.RunUntil([&] { return first.done; }, 10000ms));
  REQUIRE(first.status.ok());
  // The peer restarts while the client's loop is not running: the pooled connection is dead
  // but the client has not seen it yet.
  server.reset();
  server = std::make_unique<ServerThread>(store, address);
  Fetched second;
  StartFetch(client, address, id, second);
  REQUIRE(loop.RunUntil([&] { return second.done; }, 10000ms));
  REQUIRE(second.status.ok());
  CHECK(FirstMismatch(second.bytes, 6) == -1);
}

TEST_CASE("a peer that never answers fails the fetch with DeadlineExceeded", "[transfer]") {
  // A listening socket nobody accepts on: connects succeed, nothing is ever sent.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 16) == 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string peer = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  EventLoop loop;
  auto client = std::make_unique<TransferClient>(loop, kToken, TransferOptions{.timeout = 200ms});
  Fetched slow;
  auto start = Clock::now();
  StartFetch(*client, peer, ObjectId::FromRandom(), slow);
  REQUIRE(loop.RunUntil([&] { return slow.done; }, 10000ms));
  CHECK(slow.status.code() == StatusCode::kDeadlineExceeded);
  CHECK(Clock::now() - start >= 200ms);

  // Destroying the client cancels what is in flight, before the destructor returns.
  Fetched pending;
  StartFetch(*client, peer, ObjectId::FromRandom(), pending);
  REQUIRE(loop.RunUntil([&] { return uv_loop_alive(loop.uv()); }, 1000ms));
  CHECK_FALSE(pending.done);
  client.reset();
  CHECK(pending.done);
  CHECK(pending.status.code() == StatusCode::kCancelled);
  close(fd);
}

TEST_CASE("garbage on the wire closes that connection only", "[transfer]") {
  FakeStore store;
  ObjectId id = store.Add(Pattern(300000, 4));
  EventLoop loop;
  TransferServer server(loop, kToken, store.AsSource());
  REQUIRE(server.Listen("127.0.0.1:0").ok());
  const int port = PortOf(server.address());

  SECTION("before the handshake") {
    RawSocket raw(port);
    raw.Send(std::string(1000, '\x5a'));
    REQUIRE(loop.RunUntil([&] { return raw.Poll(); }, 5000ms));
  }
  SECTION("a read outside the object") {
    RawSocket raw(port);
    const size_t handshake_bytes = Authenticate(loop, raw);
    raw.Send(RequestFrame(2, 1, id, 299999, 2));
    REQUIRE(loop.RunUntil([&] { return raw.Poll(); }, 5000ms));
    CHECK(raw.received().size() == handshake_bytes);  // no reply before the close
  }
  SECTION("an unknown message type") {
    RawSocket raw(port);
    Authenticate(loop, raw);
    raw.Send(RequestFrame(9, 1, id, 0, 0));
    REQUIRE(loop.RunUntil([&] { return raw.Poll(); }, 5000ms));
  }
  SECTION("a bad magic byte") {
    RawSocket raw(port);
    Authenticate(loop, raw);
    raw.Send(RequestFrame(1, 1, id, 0, 0, 0x42));
    REQUIRE(loop.RunUntil([&] { return raw.Poll(); }, 5000ms));
  }
  SECTION("an oversized read length") {
    RawSocket raw(port);
    Authenticate(loop, raw);
    raw.Send(RequestFrame(2, 1, id, 0, uint64_t(1) << 40));
    REQUIRE(loop.RunUntil([&] { return raw.Poll(); }, 5000ms));
  }
  // The server still serves a proper client, and every pin was given back.
  TransferClient client(loop, kToken);
  Fetched got;
  StartFetch(client, server.address(), id, got);
  REQUIRE(loop.RunUntil([&] { return got.done; }, 10000ms));
  REQUIRE(got.status.ok());
  CHECK(FirstMismatch(got.bytes, 4) == -1);
  REQUIRE(loop.RunUntil([&] { return store.releases == store.pins; }, 5000ms));
}

TEST_CASE("throughput of a 256 MiB fetch over loopback", "[transfer][perf]") {
  constexpr size_t kSize = size_t(256) << 20;
  FakeStore store;
  ObjectId id = store.Add(Pattern(kSize, 11));
  ServerThread server(store);
  EventLoop loop;
  TransferClient client(loop, kToken);
  std::vector<uint8_t> dest(kSize, 0);  // faulted in up front, like an arena
  for (int round = 0; round < 3; ++round) {
    bool done = false;
    Status status;
    auto start = Clock::now();
    client.Fetch(
        server.address(), id,
        [&](size_t size, std::function<void(Result<uint8_t*>)> give) {
          REQUIRE(size == kSize);
          give(dest.data());
        },
        [&](Status s) {
          status = std::move(s);
          done = true;
        });
    REQUIRE(loop.RunUntil([&] { return done; }, 60000ms));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    REQUIRE(status.ok());
    std::printf("transfer: 256 MiB over loopback in %.1f ms: %.2f GB/s\n", seconds * 1e3,
                kSize / seconds / 1e9);
  }
  CHECK(std::memcmp(dest.data(), store.objects.at(id).data(), kSize) == 0);
}

}  // namespace
}  // namespace rayd::object_store
