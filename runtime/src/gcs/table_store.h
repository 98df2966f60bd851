#pragma once
// TableStore: where the GCS keeps its tables (nodes, jobs, KV, ...). Each table is a map
// from string keys to opaque string values. Two implementations: in memory (the default) and
// Redis (durable: a restarted head reloads every table from it).
//
// Threading: a TableStore belongs to one EventLoop and is called on its thread only.
// Callbacks run on that thread exactly once; an implementation may run them before the call
// returns (the in-memory one does), so callers must not hold state that the callback changes.
// Errors (Redis down, protocol errors) arrive as non-ok Results; nothing throws.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/base/status.h"

namespace rayd::gcs {

class TableStore {
 public:
  template <typename T>
  using Callback = std::function<void(Result<T>)>;

  virtual ~TableStore() = default;

  // Sets table[key] = value unless `overwrite` is false and the key exists.
  // Yields true when the key was new.
  virtual void Put(const std::string& table, const std::string& key, std::string value,
                   bool overwrite, Callback<bool> cb) = 0;
  virtual void Get(const std::string& table, const std::string& key,
                   Callback<std::optional<std::string>> cb) = 0;
  virtual void GetAll(const std::string& table,
                      Callback<std::map<std::string, std::string>> cb) = 0;
  // Yields true when the key existed.
  virtual void Delete(const std::string& table, const std::string& key, Callback<bool> cb) = 0;
  // Deletes every key starting with `prefix`; yields how many.
  virtual void DeleteByPrefix(const std::string& table, const std::string& prefix,
                              Callback<int64_t> cb) = 0;
  // Keys starting with `prefix` (all keys for ""), sorted.
  virtual void Keys(const std::string& table, const std::string& prefix,
                    Callback<std::vector<std::string>> cb) = 0;
  virtual void Exists(const std::string& table, const std::string& key, Callback<bool> cb) = 0;

  // "memory" or "redis://host:port", for status output.
  virtual std::string Describe() const = 0;
};

std::unique_ptr<TableStore> MakeInMemoryTableStore();

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;             // empty: no AUTH
  std::string key_prefix = "rayd";  // keys are "<key_prefix>:<table>" hashes
  Millis connect_timeout{5000};
};

// Parses "redis://[:password@]host:port" (password in the URL is optional; `password`, when
// non-empty, wins). Errors name what is wrong with the URL.
Result<RedisOptions> ParseRedisAddress(const std::string& url, const std::string& password);

// Connects (and authenticates) to Redis on `loop`; `cb` gets the client or why it failed.
// The client reconnects by itself with backoff if Redis drops; calls made while it is down
// fail with Unavailable. `loop` must outlive the client. hiredis writes with write(2), so the
// process must ignore SIGPIPE or a write to a Redis that just died kills it.
void ConnectRedisTableStore(EventLoop& loop, RedisOptions options,
                             std::function<void(Result<std::unique_ptr<TableStore>>)> cb);

}  // namespace rayd::gcs
