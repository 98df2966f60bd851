// The Redis TableStore: every table is a Redis hash "<key_prefix>:<table>", reached through
// hiredis' async API on the EventLoop's uv_loop_t.
//
// How it works. The client holds at most one hiredis context and is in one of three states:
//   kConnecting  a context exists and the handshake (AUTH, or PING without a password) is in
//                flight, bounded by connect_timeout;
//   kUp          commands go to Redis;
//   kDown        no context; a backoff timer (100 ms doubling to 5 s) starts kConnecting.
// Only kUp accepts commands; in the other states calls fail with Unavailable at once. The first
// handshake decides what ConnectRedisTableStore reports; after that the client reconnects by
// itself for as long as it lives.
//
// Invariants (hiredis 0.14 semantics drive most of them):
// - Each command handed to hiredis carries a heap PendingCommand as privdata. hiredis calls
//   OnReply exactly once per command: with the reply, or with nullptr while it frees the context
//   (connection lost, or we freed it). OnReply deletes the PendingCommand.
// - pending_ lists the PendingCommands of the current context. Before the client lets go of a
//   context (destruction, failed handshake) it clears their `owner`, so the nullptr replies that
//   follow only delete them: no callback runs twice or after the client is gone.
// - ac_->data points to the client while ac_ is in use and is cleared when the client lets go,
//   so the disconnect callback of an abandoned context does nothing.
// - When hiredis frees a context by itself (I/O error, EOF, refused connect), the first nullptr
//   reply or the disconnect callback tells us; ac_ becomes null and is never freed by us.
// - redisAsyncFree is called only from timer callbacks, reply callbacks (hiredis defers the free
//   until the callback returns) or outside hiredis; never from its connect/disconnect callbacks.

#include <fmt/format.h>
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gcs/table_store.h"
#include "rayd/base/logging.h"

namespace rayd::gcs {
namespace {

constexpr Millis kInitialBackoff{100};
constexpr Millis kMaxBackoff{5000};
constexpr std::string_view kScheme = "redis://";

using ReplyResult = Result<const redisReply*>;
using ReplyFn = std::function<void(ReplyResult)>;

// Converts an error reply to a Status; the code says whether retrying later may help.
Status ErrorReplyStatus(const redisReply& reply, std::string_view command) {
  std::string_view text(reply.str, reply.len);
  std::string message = fmt::format("Redis {} failed: {}", command, text);
  for (std::string_view transient : {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN"}) {
    if (text.starts_with(transient)) return Status::Unavailable(std::move(message));
  }
  if (text.starts_with("NOAUTH") || text.starts_with("WRONGPASS") || text.starts_with("NOPERM")) {
    return Status::PermissionDenied(std::move(message));
  }
  if (text.starts_with("OOM")) return Status::ResourceExhausted(std::move(message));
  return Status::Internal(std::move(message));
}

// Checks that a reply is neither an error nor of an unexpected type.
Result<const redisReply*> Expect(ReplyResult r, std::string_view command,
                                 std::initializer_list<int> types) {
  if (!r.ok()) return r.status();
  const redisReply* reply = *r;
  if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(*reply, command);
  if (std::find(types.begin(), types.end(), reply->type) == types.end()) {
    return Status::Internal(
        fmt::format("Redis {}: unexpected reply type {}", command, reply->type));
  }
  return reply;
}

Result<int64_t> ExpectInteger(ReplyResult r, std::string_view command) {
  auto reply = Expect(std::move(r), command, {REDIS_REPLY_INTEGER});
  if (!reply.ok()) return reply.status();
  return static_cast<int64_t>((*reply)->integer);
}

// The string elements of an array reply.
Result<std::vector<std::string>> ExpectStrings(ReplyResult r, std::string_view command) {
  auto reply = Expect(std::move(r), command, {REDIS_REPLY_ARRAY});
  if (!reply.ok()) return reply.status();
  std::vector<std::string> out;
  out.reserve((*reply)->elements);
  for (size_t i = 0; i < (*reply)->elements; ++i) {
    const redisReply* e = (*reply)->element[i];
    if (e->type != REDIS_REPLY_STRING) {
      return Status::Internal(fmt::format("Redis {}: element of type {}", command, e->type));
    }
    out.emplace_back(e->str, e->len);
  }
  return out;
}

bool HasPrefix(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// hiredis 0.14's libuv adapter ignores poll errors, but libuv reports a socket error (a refused
// connect, a reset connection) as status UV_EBADF, with no events, and stops the handle: the
// connection would hang forever. hiredis 1.0 fixed its adapter by handling the events it was
// waiting for, so that the read or write meets the error; these hooks do the same and replace
// the adapter's after redisLibuvAttach (which still allocates and cleans up).
void OnPoll(uv_poll_t* handle, int status, int events) {
  auto* p = static_cast<redisLibuvEvents*>(handle->data);
  int ready = status != 0 ? p->events : events;
  if (p->context != nullptr && (ready & UV_READABLE) != 0) redisAsyncHandleRead(p->context);
  if (p->context != nullptr && (ready & UV_WRITABLE) != 0) redisAsyncHandleWrite(p->context);
}

void UpdatePoll(void* privdata, int add, int remove) {
  auto* p = static_cast<redisLibuvEvents*>(privdata);
  p->events = (p->events | add) & ~remove;
  if (p->events != 0) {
    uv_poll_start(&p->handle, p->events, &OnPoll);
  } else {
    uv_poll_stop(&p->handle);
  }
}

Status AttachToLoop(redisAsyncContext* ac, uv_loop_t* loop) {
  if (redisLibuvAttach(ac, loop) != REDIS_OK) {
    return Status::Internal("cannot attach the Redis connection to the event loop");
  }
  ac->ev.addRead = [](void* p) { UpdatePoll(p, UV_READABLE, 0); };
  ac->ev.delRead = [](void* p) { UpdatePoll(p, 0, UV_READABLE); };
  ac->ev.addWrite = [](void* p) { UpdatePoll(p, UV_WRITABLE, 0); };
  ac->ev.delWrite = [](void* p) { UpdatePoll(p, 0, UV_WRITABLE); };
  return Status::Ok();
}

class RedisTableStore;

// One command handed to hiredis; see the invariants above.
struct PendingCommand {
  RedisTableStore* owner;  // null once the client has let go of the command
  ReplyFn on_reply;
};

class RedisTableStore final : public TableStore {
 public:
  using ConnectCallback = std::function<void(Result<std::unique_ptr<TableStore>>)>;

  // Until the first handshake ends the client owns itself: StartConnecting() then either hands
  // it to `connect_cb` or deletes it. `loop` must outlive the client.
  RedisTableStore(EventLoop& loop, RedisOptions options, ConnectCallback connect_cb)
      : loop_(loop),
        options_(std::move(options)),
        connect_cb_(std::move(connect_cb)),
        handshake_timer_(loop),
        reconnect_timer_(loop) {}

  ~RedisTableStore() override { DropContext(); }

  void StartConnecting();

  void Put(const std::string& table, const std::string& key, std::string value, bool overwrite,
           Callback<bool> cb) override {
    // HSETNX and HSET both answer 1 when the field is new.
    const char* command = overwrite ? "HSET" : "HSETNX";
    Send({command, HashName(table), key, value}, [cb = std::move(cb), command](ReplyResult r) {
      auto n = ExpectInteger(std::move(r), command);
      n.ok() ? cb(*n == 1) : cb(n.status());
    });
  }

  void Get(const std::string& table, const std::string& key,
           Callback<std::optional<std::string>> cb) override {
    Send({"HGET", HashName(table), key}, [cb = std::move(cb)](ReplyResult r) {
      auto reply = Expect(std::move(r), "HGET", {REDIS_REPLY_STRING, REDIS_REPLY_NIL});
      if (!reply.ok()) return cb(reply.status());
      if ((*reply)->type == REDIS_REPLY_NIL) return cb(std::optional<std::string>());
      cb(std::optional<std::string>(std::in_place, (*reply)->str, (*reply)->len));
    });
  }

  void GetAll(const std::string& table, Callback<std::map<std::string, std::string>> cb) override {
    Send({"HGETALL", HashName(table)}, [cb = std::move(cb)](ReplyResult r) {
      auto flat = ExpectStrings(std::move(r), "HGETALL");
      if (!flat.ok()) return cb(flat.status());
      if (flat->size() % 2 != 0) return cb(Status::Internal("Redis HGETALL: odd element count"));
      std::map<std::string, std::string> rows;
      for (size_t i = 0; i < flat->size(); i += 2) {
        rows.emplace(std::move((*flat)[i]), std::move((*flat)[i + 1]));
      }
      cb(std::move(rows));
    });
  }

  void Delete(const std::string& table, const std::string& key, Callback<bool> cb) override {
    Send({"HDEL", HashName(table), key}, [cb = std::move(cb)](ReplyResult r) {
      auto n = ExpectInteger(std::move(r), "HDEL");
      n.ok() ? cb(*n > 0) : cb(n.status());
    });
  }

  void DeleteByPrefix(const std::string& table, const std::string& prefix,
                      Callback<int64_t> cb) override {
    // Two round trips: HKEYS, then one HDEL with every matching key. HDEL's count excludes keys
    // that another client deleted in between. `this` is safe in the reply: replies reach only a
    // live client.
    Send({"HKEYS", HashName(table)}, [this, table, prefix, cb = std::move(cb)](ReplyResult r) {
      auto keys = ExpectStrings(std::move(r), "HKEYS");
      if (!keys.ok()) return cb(keys.status());
      std::string hash = HashName(table);
      std::vector<std::string_view> args = {"HDEL", hash};
      for (const auto& key : *keys) {
        if (HasPrefix(key, prefix)) args.push_back(key);
      }
      if (args.size() == 2) return cb(int64_t{0});
      Send(args, [cb = std::move(cb)](ReplyResult r) { cb(ExpectInteger(std::move(r), "HDEL")); });
    });
  }

  void Keys(const std::string& table, const std::string& prefix,
            Callback<std::vector<std::string>> cb) override {
    Send({"HKEYS", HashName(table)}, [prefix, cb = std::move(cb)](ReplyResult r) {
      auto keys = ExpectStrings(std::move(r), "HKEYS");
      if (!keys.ok()) return cb(keys.status());
      std::erase_if(*keys, [&](const std::string& key) { return !HasPrefix(key, prefix); });
      std::sort(keys->begin(), keys->end());
      cb(std::move(*keys));
    });
  }

  void Exists(const std::string& table, const std::string& key, Callback<bool> cb) override {
    Send({"HEXISTS", HashName(table), key}, [cb = std::move(cb)](ReplyResult r) {
      auto n = ExpectInteger(std::move(r), "HEXISTS");
      n.ok() ? cb(*n == 1) : cb(n.status());
    });
  }

  std::string Describe() const override {
    return fmt::format("redis://{}:{}", options_.host, options_.port);
  }

 private:
  enum class State { kConnecting, kUp, kDown };

  static void OnReply(redisAsyncContext* ac, void* reply, void* privdata);
  static void OnDisconnect(const redisAsyncContext* ac, int status);

  std::string HashName(const std::string& table) const { return options_.key_prefix + ":" + table; }
  std::string Where() const { return fmt::format("Redis at {}:{}", options_.host, options_.port); }

  // Sends a command if the client is up; otherwise fails it with Unavailable before returning.
  void Send(const std::vector<std::string_view>& args, ReplyFn on_reply);
  // Sends on the current context whatever the state (the handshake uses it).
  void SendRaw(const std::vector<std::string_view>& args, ReplyFn on_reply);

  void OnHandshakeReply(ReplyResult r);
  void OnHandshakeTimeout();
  void HandshakeSucceeded();
  // Ends a failed attempt: the first one is reported to connect_cb_ (and deletes the client),
  // later ones schedule the next attempt. The caller must not touch the client afterwards.
  void HandshakeFailed(Status status);
  // hiredis is freeing (or has freed) `ac` by itself; forget it and, if it was serving, start
  // reconnecting. Runs no user code. Idempotent.
  void OnContextLost(const redisAsyncContext* ac);
  // Starts the next connection attempt after the current backoff, and doubles it.
  void ScheduleReconnect();
  // Lets go of the current context: its pending commands are dropped without callbacks.
  void DropContext();

  // Member order follows the dependency order.
  EventLoop& loop_;
  const RedisOptions options_;
  ConnectCallback connect_cb_;  // set until the first handshake ends
  State state_ = State::kDown;
  redisAsyncContext* ac_ = nullptr;              // freed by hiredis or by DropContext
  std::unordered_set<PendingCommand*> pending_;  // owned by hiredis until OnReply
  std::string last_error_;  // why the client is not up, for Unavailable messages
  Millis backoff_ = kInitialBackoff;
  bool warned_since_up_ = false;  // log one warning per outage, not one per attempt
  Timer handshake_timer_;
  Timer reconnect_timer_;
};

void RedisTableStore::StartConnecting() {
  state_ = State::kConnecting;
  redisAsyncContext* ac = redisAsyncConnect(options_.host.c_str(), options_.port);
  if (ac == nullptr) {
    return HandshakeFailed(Status::Internal("hiredis could not allocate a context"));
  }
  if (ac->err != 0) {  // e.g. refused at once, or the host name does not resolve
    std::string reason = ac->errstr;
    redisAsyncFree(ac);
    return HandshakeFailed(Status::Unavailable(
        fmt::format("cannot connect to Redis at {}:{}: {}", options_.host, options_.port, reason)));
  }
  if (Status attached = AttachToLoop(ac, loop_.uv()); !attached.ok()) {
    redisAsyncFree(ac);
    return HandshakeFailed(std::move(attached));
  }
  ac->data = this;
  redisAsyncSetDisconnectCallback(ac, &RedisTableStore::OnDisconnect);
  ac_ = ac;
  handshake_timer_.Start(options_.connect_timeout, Millis(0), [this] { OnHandshakeTimeout(); });
  // hiredis queues the command until the TCP connect completes; a refused connect arrives as a
  // nullptr reply.
  ReplyFn on_reply = [this](ReplyResult r) { OnHandshakeReply(std::move(r)); };
  if (options_.password.empty()) {
    SendRaw({"PING"}, std::move(on_reply));
  } else {
    SendRaw({"AUTH", options_.password}, std::move(on_reply));
  }
}

void RedisTableStore::Send(const std::vector<std::string_view>& args, ReplyFn on_reply) {
  if (state_ != State::kUp) {
    return on_reply(Status::Unavailable(
        fmt::format("{} is unavailable ({}); reconnecting", Where(), last_error_)));
  }
  SendRaw(args, std::move(on_reply));
}

void RedisTableStore::SendRaw(const std::vector<std::string_view>& args, ReplyFn on_reply) {
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  argv.reserve(args.size());
  argvlen.reserve(args.size());
  for (std::string_view arg : args) {
    argv.push_back(arg.data());
    argvlen.push_back(arg.size());
  }
  auto cmd = std::make_unique<PendingCommand>(PendingCommand{this, std::move(on_reply)});
  // hiredis refuses commands while it is tearing the context down.
  if (ac_ == nullptr || redisAsyncCommandArgv(ac_, &RedisTableStore::OnReply, cmd.get(),
                                              static_cast<int>(args.size()), argv.data(),
                                              argvlen.data()) != REDIS_OK) {
    return cmd->on_reply(Status::Unavailable(fmt::format("{}: connection lost", Where())));
  }
  pending_.insert(cmd.release());
}

void RedisTableStore::OnReply(redisAsyncContext* ac, void* reply, void* privdata) {
  std::unique_ptr<PendingCommand> cmd(static_cast<PendingCommand*>(privdata));
  RedisTableStore* self = cmd->owner;
  if (self == nullptr) return;  // the client let go of this command
  self->pending_.erase(cmd.get());
  if (reply == nullptr) {
    self->OnContextLost(ac);
    return cmd->on_reply(Status::Unavailable(
        fmt::format("{}: connection lost ({})", self->Where(), self->last_error_)));
  }
  // May destroy the client.
  cmd->on_reply(static_cast<const redisReply*>(reply));
}

void RedisTableStore::OnDisconnect(const redisAsyncContext* ac, int /*status*/) {
  auto* self = static_cast<RedisTableStore*>(ac->data);
  if (self != nullptr) self->OnContextLost(ac);
}

void RedisTableStore::OnContextLost(const redisAsyncContext* ac) {
  if (ac != ac_) return;
  last_error_ = ac->err != 0 && ac->errstr != nullptr ? ac->errstr : "connection closed";
  const_cast<redisAsyncContext*>(ac)->data = nullptr;
  ac_ = nullptr;
  if (state_ != State::kUp) return;  // a handshake in flight: its nullptr reply handles it
  state_ = State::kDown;
  spdlog::warn("lost the connection to {}: {}; reconnecting", Where(), last_error_);
  warned_since_up_ = true;
  backoff_ = kInitialBackoff;
  ScheduleReconnect();
}

void RedisTableStore::OnHandshakeReply(ReplyResult r) {
  if (!r.ok()) {  // the connection failed or closed; OnContextLost has recorded why
    return HandshakeFailed(Status::Unavailable(fmt::format(
        "cannot connect to Redis at {}:{}: {}", options_.host, options_.port, last_error_)));
  }
  const redisReply* reply = *r;
  if (reply->type != REDIS_REPLY_ERROR) return HandshakeSucceeded();
  std::string_view text(reply->str, reply->len);
  Status status;
  if (!options_.password.empty()) {
    status = Status::PermissionDenied(fmt::format("{} refused the password: {}", Where(), text));
  } else if (text.starts_with("NOAUTH")) {
    status = Status::PermissionDenied(fmt::format("{} requires a password: {}", Where(), text));
  } else {
    status = ErrorReplyStatus(*reply, "PING").WithContext(Where());
  }
  DropContext();  // inside a reply callback: hiredis frees the context when it returns
  HandshakeFailed(std::move(status));
}

void RedisTableStore::OnHandshakeTimeout() {
  if (state_ != State::kConnecting) return;
  DropContext();
  HandshakeFailed(Status::Unavailable(
      fmt::format("cannot connect to Redis at {}:{}: no answer within {} ms", options_.host,
                  options_.port, options_.connect_timeout.count())));
}

void RedisTableStore::HandshakeSucceeded() {
  handshake_timer_.Stop();
  state_ = State::kUp;
  last_error_.clear();
  backoff_ = kInitialBackoff;
  if (warned_since_up_) spdlog::info("reconnected to {}", Where());
  warned_since_up_ = false;
  if (connect_cb_) {
    auto cb = std::exchange(connect_cb_, nullptr);
    cb(std::unique_ptr<TableStore>(this));  // the caller owns the client from here on
  }
}

void RedisTableStore::HandshakeFailed(Status status) {
  handshake_timer_.Stop();
  state_ = State::kDown;
  last_error_ = status.message();
  if (connect_cb_) {
    auto cb = std::exchange(connect_cb_, nullptr);
    delete this;  // owned by itself until now; see the constructor
    return cb(std::move(status));
  }
  if (!warned_since_up_) spdlog::warn("{}; retrying", status.message());
  warned_since_up_ = true;
  spdlog::debug("{}; retrying in {} ms", status.message(), backoff_.count());
  ScheduleReconnect();
}

void RedisTableStore::ScheduleReconnect() {
  reconnect_timer_.Start(backoff_, Millis(0), [this] { StartConnecting(); });
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void RedisTableStore::DropContext() {
  for (PendingCommand* cmd : pending_) cmd->owner = nullptr;
  pending_.clear();
  if (ac_ == nullptr) return;
  ac_->data = nullptr;
  redisAsyncFree(std::exchange(ac_, nullptr));
}

}  // namespace

Result<RedisOptions> ParseRedisAddress(const std::string& url, const std::string& password) {
  // Error messages show the URL with any password masked.
  std::string shown = url;
  if (size_t at = shown.rfind('@'); at != std::string::npos) {
    size_t start = shown.starts_with(kScheme) ? kScheme.size() : 0;
    shown.replace(start, at - start, ":***");
  }
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("--redis-address '{}': expected redis://HOST:PORT ({})", shown, why));
  };

  std::string_view rest = url;
  if (rest.starts_with(kScheme)) {
    rest.remove_prefix(kScheme.size());
  } else if (rest.find("://") != std::string_view::npos) {
    return bad("the only supported scheme is redis://");
  }
  RedisOptions options;
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    if (!userinfo.starts_with(':')) return bad("write the password as redis://:PASSWORD@...");
    options.password = userinfo.substr(1);
    rest.remove_prefix(at + 1);
  }
  if (rest.find('/') != std::string_view::npos) return bad("no path or database number allowed");
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = rest.substr(0, colon);
  std::string_view port_text = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {  // [IPv6]
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return bad("no host");
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port < 1 || port > 65535) {
    return bad(fmt::format("port '{}' is not a number from 1 to 65535", port_text));
  }
  options.host = host;
  options.port = port;
  if (!password.empty()) options.password = password;
  return options;
}

void ConnectRedisTableStore(EventLoop& loop, RedisOptions options,
                             std::function<void(Result<std::unique_ptr<TableStore>>)> cb) {
  if (options.host.empty() || options.port < 1 || options.port > 65535) {
    return cb(Status::InvalidArgument(
        fmt::format("invalid Redis address {}:{}", options.host, options.port)));
  }
  // Owns itself until the first handshake ends; see RedisTableStore's constructor.
  auto* client = new RedisTableStore(loop, std::move(options), std::move(cb));
  client->StartConnecting();
}

}  // namespace rayd::gcs
