// TableStore: one contract, run against both implementations (in memory and a real
// redis-server), then the Redis client's own behaviour: authentication, connect failures,
// durability across clients, losing and regaining the server, and destruction with commands in
// flight. Tests synchronise by running the event loop until a condition holds, with deadlines.

#include "gcs/table_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redis_server.h"

namespace rayd::gcs {
namespace {

using testing::RedisServer;
using testing::RedisServerOptions;
using namespace std::string_literals;

constexpr Millis kWait{10000};

// hiredis writes with write(2): a write to a dead server raises SIGPIPE, which the daemons
// ignore as well.
const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

// Runs `start(callback)`, then the loop until the callback has run; returns what it got. Fails
// the test if the callback does not run within kWait.
template <typename T, typename Start>
Result<T> Await(EventLoop& loop, Start&& start) {
  auto got = std::make_shared<std::optional<Result<T>>>();
  start([got](Result<T> r) {
    CHECK_FALSE(got->has_value());  // callbacks run exactly once (no REQUIRE: C frames above)
    got->emplace(std::move(r));
  });
  REQUIRE(loop.RunUntil([&] { return got->has_value(); }, kWait));
  return std::move(**got);
}

// Runs the loop for `d`: only to let a background timer fire while polling for a condition.
void RunFor(EventLoop& loop, Millis d) {
  loop.RunUntil([] { return false; }, d);
}

RedisOptions OptionsFor(const RedisServer& server, const std::string& password = "",
                        const std::string& key_prefix = "rayd") {
  auto options = ParseRedisAddress(server.Address(), password);
  REQUIRE(options.ok());
  options->key_prefix = key_prefix;
  return *options;
}

Result<std::unique_ptr<TableStore>> Connect(EventLoop& loop, RedisOptions options) {
  return Await<std::unique_ptr<TableStore>>(
      loop, [&](auto cb) { ConnectRedisTableStore(loop, options, std::move(cb)); });
}

// Synchronous wrappers over one client, for readable tests.
class SyncStore {
 public:
  SyncStore(EventLoop& loop, TableStore& client) : loop_(loop), client_(client) {}

  Result<bool> Put(const std::string& table, const std::string& key, const std::string& value,
                   bool overwrite = true) {
    return Await<bool>(loop_, [&](auto cb) { client_.Put(table, key, value, overwrite, cb); });
  }
  Result<std::optional<std::string>> Get(const std::string& table, const std::string& key) {
    return Await<std::optional<std::string>>(loop_, [&](auto cb) { client_.Get(table, key, cb); });
  }
  Result<std::map<std::string, std::string>> GetAll(const std::string& table) {
    return Await<std::map<std::string, std::string>>(loop_,
                                                     [&](auto cb) { client_.GetAll(table, cb); });
  }
  Result<bool> Delete(const std::string& table, const std::string& key) {
    return Await<bool>(loop_, [&](auto cb) { client_.Delete(table, key, cb); });
  }
  Result<int64_t> DeleteByPrefix(const std::string& table, const std::string& prefix) {
    return Await<int64_t>(loop_, [&](auto cb) { client_.DeleteByPrefix(table, prefix, cb); });
  }
  Result<std::vector<std::string>> Keys(const std::string& table, const std::string& prefix) {
    return Await<std::vector<std::string>>(loop_,
                                           [&](auto cb) { client_.Keys(table, prefix, cb); });
  }
  Result<bool> Exists(const std::string& table, const std::string& key) {
    return Await<bool>(loop_, [&](auto cb) { client_.Exists(table, key, cb); });
  }

 private:
  EventLoop& loop_;
  TableStore& client_;
};

// A loop and a client of the given kind ("memory" or "redis", with its own redis-server).
// Members are declared (and so destroyed in reverse) in dependency order.
struct Harness {
  explicit Harness(const std::string& kind) {
    if (kind == "memory") {
      client = MakeInMemoryTableStore();
    } else {
      redis = std::make_unique<RedisServer>();
      auto connected = Connect(loop, OptionsFor(*redis));
      REQUIRE(connected.ok());
      client = std::move(connected).value();
    }
  }
  SyncStore store() { return SyncStore(loop, *client); }

  EventLoop loop;
  std::unique_ptr<RedisServer> redis;
  std::unique_ptr<TableStore> client;
};

std::string Kind() { return GENERATE(as<std::string>{}, "memory", "redis"); }

// ---- The contract, for both implementations. ----

TEST_CASE("TableStore Put and Get, with and without overwrite", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  CHECK(*s.Get("nodes", "n1") == std::nullopt);
  CHECK(*s.Put("nodes", "n1", "v1") == true);
  CHECK(*s.Get("nodes", "n1") == "v1");
  // Overwrite: the value changes and the key was not new.
  CHECK(*s.Put("nodes", "n1", "v2", /*overwrite=*/true) == false);
  CHECK(*s.Get("nodes", "n1") == "v2");
  // No overwrite (HSETNX): an existing value is kept.
  CHECK(*s.Put("nodes", "n1", "v3", /*overwrite=*/false) == false);
  CHECK(*s.Get("nodes", "n1") == "v2");
  CHECK(*s.Put("nodes", "n2", "w", /*overwrite=*/false) == true);
  CHECK(*s.Get("nodes", "n2") == "w");
  // The empty value is a value, not absence.
  CHECK(*s.Put("nodes", "empty", "") == true);
  CHECK(*s.Get("nodes", "empty") == ""s);
}

TEST_CASE("TableStore GetAll returns the whole table", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  CHECK(s.GetAll("jobs")->empty());
  REQUIRE(s.Put("jobs", "b", "2").ok());
  REQUIRE(s.Put("jobs", "a", "1").ok());
  REQUIRE(s.Put("jobs", "c", "3").ok());
  REQUIRE(s.Put("jobs", "a", "1bis").ok());
  CHECK(*s.GetAll("jobs") ==
        std::map<std::string, std::string>{{"a", "1bis"}, {"b", "2"}, {"c", "3"}});
}

TEST_CASE("TableStore Delete and Exists", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  CHECK(*s.Exists("actors", "a1") == false);
  CHECK(*s.Delete("actors", "a1") == false);
  REQUIRE(s.Put("actors", "a1", "x").ok());
  REQUIRE(s.Put("actors", "a2", "y").ok());
  CHECK(*s.Exists("actors", "a1") == true);
  CHECK(*s.Delete("actors", "a1") == true);
  CHECK(*s.Exists("actors", "a1") == false);
  CHECK(*s.Get("actors", "a1") == std::nullopt);
  CHECK(*s.Delete("actors", "a1") == false);
  CHECK(*s.Get("actors", "a2") == "y");
}

TEST_CASE("TableStore Keys filters by prefix and sorts", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  CHECK(s.Keys("kv", "")->empty());
  for (const char* key : {"ns2/b", "ns1/z", "ns1/a", "ns10/x", "other", "ns1"}) {
    REQUIRE(s.Put("kv", key, "v").ok());
  }
  using Keys = std::vector<std::string>;
  CHECK(*s.Keys("kv", "") == Keys{"ns1", "ns1/a", "ns1/z", "ns10/x", "ns2/b", "other"});
  CHECK(*s.Keys("kv", "ns1/") == Keys{"ns1/a", "ns1/z"});
  CHECK(*s.Keys("kv", "ns1") == Keys{"ns1", "ns1/a", "ns1/z", "ns10/x"});
  CHECK(s.Keys("kv", "zzz")->empty());
}

TEST_CASE("TableStore DeleteByPrefix deletes exactly the matching keys", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  CHECK(*s.DeleteByPrefix("kv", "a/") == 0);  // missing table
  for (const char* key : {"a/1", "a/2", "a/", "ab", "b/1"}) REQUIRE(s.Put("kv", key, "v").ok());
  CHECK(*s.DeleteByPrefix("kv", "a/") == 3);
  CHECK(*s.Keys("kv", "") == std::vector<std::string>{"ab", "b/1"});
  CHECK(*s.DeleteByPrefix("kv", "zzz") == 0);
  CHECK(*s.DeleteByPrefix("kv", "") == 2);
  CHECK(s.GetAll("kv")->empty());
}

TEST_CASE("TableStore keys and values are binary-safe", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  const std::string key = "k\0ey %s\r\n"s;
  const std::string value = "\0\x01\xff%s%n\r\n\0end"s;
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);

  REQUIRE(*s.Put("bin", key, value) == true);
  REQUIRE(*s.Put("bin", "big", big) == true);
  CHECK(*s.Get("bin", key) == value);
  CHECK(*s.Get("bin", "big") == big);
  CHECK(*s.Get("bin", "k") == std::nullopt);  // the key does not stop at its NUL
  CHECK(*s.Exists("bin", key) == true);
  CHECK(*s.GetAll("bin") == std::map<std::string, std::string>{{key, value}, {"big", big}});
  CHECK(*s.Keys("bin", "k\0"s) == std::vector<std::string>{key});
  CHECK(*s.DeleteByPrefix("bin", "k\0"s) == 1);
  CHECK(*s.Exists("bin", key) == false);
}

TEST_CASE("TableStore tables are independent", "[store]") {
  Harness h(Kind());
  CAPTURE(h.client->Describe());
  SyncStore s = h.store();

  REQUIRE(s.Put("nodes", "id", "node").ok());
  REQUIRE(s.Put("jobs", "id", "job").ok());
  CHECK(*s.Get("nodes", "id") == "node");
  CHECK(*s.Get("jobs", "id") == "job");
  CHECK(*s.DeleteByPrefix("nodes", "") == 1);
  CHECK(*s.Get("jobs", "id") == "job");
  CHECK(s.Keys("nodes", "")->empty());
  CHECK(*s.Keys("jobs", "") == std::vector<std::string>{"id"});
}

TEST_CASE("TableStore Describe names the backend", "[store]") {
  CHECK(MakeInMemoryTableStore()->Describe() == "memory");
  Harness h("redis");
  CHECK(h.client->Describe() == "redis://127.0.0.1:" + std::to_string(h.redis->port()));
}

// ---- The Redis client's own behaviour. ----

// A loopback TCP port that refuses connections (bound, not listening) or, after Listen(),
// accepts them into the backlog and never answers.
class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~Socket() { close(fd_); }
  void Listen() { REQUIRE(listen(fd_, 16) == 0); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

TEST_CASE("ParseRedisAddress accepts the documented forms", "[store][redis]") {
  auto plain = ParseRedisAddress("redis://10.0.0.5:6380", "");
  REQUIRE(plain.ok());
  CHECK(plain->host == "10.0.0.5");
  CHECK(plain->port == 6380);
  CHECK(plain->password.empty());

  auto bare = ParseRedisAddress("head-node:6379", "");
  REQUIRE(bare.ok());
  CHECK(bare->host == "head-node");
  CHECK(bare->port == 6379);

  auto with_password = ParseRedisAddress("redis://:p@ss:word@host:1", "");
  REQUIRE(with_password.ok());
  CHECK(with_password->password == "p@ss:word");
  CHECK(with_password->host == "host");
  CHECK(ParseRedisAddress("redis://:in-url@host:1", "flag")->password == "flag");

  auto ipv6 = ParseRedisAddress("redis://[::1]:7000", "");
  REQUIRE(ipv6.ok());
  CHECK(ipv6->host == "::1");
}

TEST_CASE("ParseRedisAddress says what is wrong", "[store][redis]") {
  struct Case {
    std::string url;
    std::string complaint;
  };
  for (const auto& [url, complaint] : std::vector<Case>{
           {"x", "no port"},
           {"redis://host", "no port"},
           {"redis://:6379", "no host"},
           {"redis://host:http", "port 'http'"},
           {"redis://host:0", "port '0'"},
           {"redis://host:65536", "port '65536'"},
           {"redis://host:6379/0", "no path"},
           {"http://host:6379", "scheme"},
           {"redis://user:secret@host:6379", "redis://:PASSWORD@"},
       }) {
    CAPTURE(url);
    auto parsed = ParseRedisAddress(url, "");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(parsed.status().message(),
               Catch::Contains("expected redis://HOST:PORT") && Catch::Contains(complaint));
    CHECK_THAT(parsed.status().message(), !Catch::Contains("secret"));
  }
  CHECK_THAT(ParseRedisAddress("x", "").status().message(),
             Catch::StartsWith("--redis-address 'x': expected redis://HOST:PORT"));
}

TEST_CASE("Redis clients with different key prefixes do not share tables", "[store][redis]") {
  EventLoop loop;
  RedisServer redis;
  auto a = Connect(loop, OptionsFor(redis, "", "cluster-a"));
  auto b = Connect(loop, OptionsFor(redis, "", "cluster-b"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  SyncStore sa(loop, **a);
  SyncStore sb(loop, **b);

  REQUIRE(*sa.Put("nodes", "n1", "a") == true);
  CHECK(*sb.Get("nodes", "n1") == std::nullopt);
  REQUIRE(*sb.Put("nodes", "n1", "b") == true);
  CHECK(*sa.Get("nodes", "n1") == "a");
  CHECK(*sb.DeleteByPrefix("nodes", "") == 1);
  CHECK(*sa.Keys("nodes", "") == std::vector<std::string>{"n1"});
}

TEST_CASE("Redis data outlives the client (a restarted head reloads it)", "[store][redis]") {
  EventLoop loop;
  RedisServer redis;
  {
    auto first = Connect(loop, OptionsFor(redis));
    REQUIRE(first.ok());
    SyncStore s(loop, **first);
    REQUIRE(s.Put("nodes", "n1", "alive").ok());
    REQUIRE(s.Put("kv", "ns/key", "\0value\0"s).ok());
  }
  auto second = Connect(loop, OptionsFor(redis));
  REQUIRE(second.ok());
  SyncStore s(loop, **second);
  CHECK(*s.GetAll("nodes") == std::map<std::string, std::string>{{"n1", "alive"}});
  CHECK(*s.Get("kv", "ns/key") == "\0value\0"s);
}

TEST_CASE("Redis password handling", "[store][redis]") {
  EventLoop loop;
  RedisServer redis(RedisServerOptions{.password = "s3cret"});

  SECTION("a wrong password is refused with a clear error") {
    auto client = Connect(loop, OptionsFor(redis, "wrong"));
    REQUIRE_FALSE(client.ok());
    CHECK(client.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(client.status().message(),
               Catch::StartsWith("Redis at 127.0.0.1:" + std::to_string(redis.port()) +
                                 " refused the password: "));
  }
  SECTION("no password is refused with a clear error") {
    auto client = Connect(loop, OptionsFor(redis));
    REQUIRE_FALSE(client.ok());
    CHECK(client.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(client.status().message(), Catch::Contains("requires a password"));
  }
  SECTION("the right password, from the URL, works") {
    auto options =
        ParseRedisAddress("redis://:s3cret@127.0.0.1:" + std::to_string(redis.port()), "");
    REQUIRE(options.ok());
    auto client = Connect(loop, *options);
    REQUIRE(client.ok());
    SyncStore s(loop, **client);
    CHECK(*s.Put("t", "k", "v") == true);
    CHECK(*s.Get("t", "k") == "v");
  }
}

TEST_CASE("Redis connect failures are Unavailable within the timeout", "[store][redis]") {
  EventLoop loop;
  Socket socket;
  RedisOptions options;
  options.port = socket.port();
  options.connect_timeout = Millis(500);
  std::string where = "cannot connect to Redis at 127.0.0.1:" + std::to_string(socket.port());

  SECTION("nothing listening") {
    auto start = Clock::now();
    auto client = Connect(loop, options);
    REQUIRE_FALSE(client.ok());
    CHECK(client.status().code() == StatusCode::kUnavailable);
    CHECK(client.status().message() == where + ": Connection refused");
    CHECK(Clock::now() - start < options.connect_timeout);
  }
  SECTION("a server that never answers") {
    socket.Listen();
    auto start = Clock::now();
    auto client = Connect(loop, options);
    REQUIRE_FALSE(client.ok());
    CHECK(client.status().code() == StatusCode::kUnavailable);
    CHECK(client.status().message() == where + ": no answer within 500 ms");
    CHECK(Clock::now() - start >= options.connect_timeout - Millis(50));  // loop clock: ms
    CHECK(Clock::now() - start < options.connect_timeout * 4);
  }
}

TEST_CASE("Redis: losing the server fails calls, then the client reconnects by itself",
          "[store][redis]") {
  std::string password = GENERATE(as<std::string>{}, "", "s3cret");  // AUTH is sent again
  CAPTURE(password);
  EventLoop loop;
  RedisServer redis(RedisServerOptions{.password = password, .appendonly = true});
  auto client = Connect(loop, OptionsFor(redis, password));
  REQUIRE(client.ok());
  SyncStore s(loop, **client);
  REQUIRE(s.Put("nodes", "n1", "v1").ok());

  // A command in flight when the server dies gets Unavailable, as does the next one.
  auto got = std::make_shared<std::optional<Result<std::optional<std::string>>>>();
  (*client)->Get("nodes", "n1", [got](auto r) { got->emplace(std::move(r)); });
  redis.Kill();
  REQUIRE(loop.RunUntil([&] { return got->has_value(); }, kWait));
  CHECK((*got)->status().code() == StatusCode::kUnavailable);
  auto down = s.Put("nodes", "n2", "v2");
  CHECK(down.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(down.status().message(), Catch::Contains("127.0.0.1:" + std::to_string(redis.port())));

  // Back on the same port: the client reconnects (with backoff) without being asked.
  auto put_when_back = [&](const std::string& key) {
    auto deadline = Clock::now() + kWait;
    Result<bool> put = Status::Unavailable("not tried");
    while (Clock::now() < deadline) {
      put = s.Put("nodes", key, "v");
      if (put.ok()) break;
      CHECK(put.status().code() == StatusCode::kUnavailable);
      RunFor(loop, Millis(20));  // poll interval: lets the reconnect timer fire
    }
    return put;
  };
  redis.Restart();
  REQUIRE(put_when_back("n3").ok());
  // With appendonly, what was written before the crash is still there.
  CHECK(*s.GetAll("nodes") == std::map<std::string, std::string>{{"n1", "v1"}, {"n3", "v"}});

  // Again, with the connection idle when the server goes (the disconnect callback notices).
  redis.Stop();
  RunFor(loop, Millis(50));
  redis.Restart();
  REQUIRE(put_when_back("n4").ok());
  CHECK(s.GetAll("nodes")->size() == 3);
}

TEST_CASE("Redis: destroying the client drops its callbacks", "[store][redis]") {
  EventLoop loop;
  RedisServer redis;
  auto client = Connect(loop, OptionsFor(redis));
  REQUIRE(client.ok());
  std::unique_ptr<TableStore> store = std::move(client).value();
  auto calls = std::make_shared<int>(0);
  auto count = [calls](auto) { ++*calls; };

  // A second client's round trip gives the first one's replies time to arrive.
  auto other = Connect(loop, OptionsFor(redis));
  REQUIRE(other.ok());
  SyncStore probe(loop, **other);

  SECTION("with commands in flight") {
    store->Put("t", "a", "1", true, count);
    store->Get("t", "a", count);
    store->Keys("t", "", count);
    store.reset();
    CHECK(probe.Put("t", "b", "2").ok());
    CHECK(*calls == 0);
  }
  SECTION("from inside one of its callbacks") {
    bool first_ran = false;
    store->Put("t", "a", "1", true, [&](Result<bool> r) {
      CHECK(r.ok());
      first_ran = true;
      store.reset();
    });
    store->Get("t", "a", count);
    store->DeleteByPrefix("t", "", count);
    REQUIRE(loop.RunUntil([&] { return first_ran; }, kWait));
    CHECK(probe.Put("t", "b", "2").ok());
    CHECK(*calls == 0);
  }
  SECTION("from inside a callback failed by a lost connection") {
    bool first_ran = false;
    store->Get("t", "a", [&](auto r) {
      CHECK(r.status().code() == StatusCode::kUnavailable);
      first_ran = true;
      store.reset();
    });
    store->Get("t", "b", count);
    redis.Kill();
    REQUIRE(loop.RunUntil([&] { return first_ran; }, kWait));
    CHECK(*calls == 0);
  }
  SECTION("while reconnecting") {
    auto got = std::make_shared<std::optional<Result<bool>>>();
    store->Put("t", "a", "1", true, [got](Result<bool> r) { got->emplace(std::move(r)); });
    redis.Kill();
    REQUIRE(loop.RunUntil([&] { return got->has_value(); }, kWait));
    CHECK((*got)->status().code() == StatusCode::kUnavailable);
    store.reset();              // the reconnect timer is armed
    RunFor(loop, Millis(300));  // past the first reconnect attempt, which must not happen
  }
}

}  // namespace
}  // namespace rayd::gcs
