#pragma once
// Object transfer between node daemons. Control goes over the RPC layer; the bytes go over
// this raw data channel so that they never pass through a Cap'n Proto message: the sender
// writes straight from its arena, the receiver reads straight into its arena.
//
// A TransferServer listens on TCP; a TransferClient keeps one connection per peer and fetches
// an object in chunks, several in flight. Each connection is authenticated with the cluster
// token (the server sends a random nonce, the client answers HMAC-SHA256(token, nonce); the
// token never crosses the wire). A bad frame or a failed proof closes that connection (logged);
// the process lives.
//
// Threading: both run on one EventLoop; every method and callback runs on its thread.
// The process must ignore SIGPIPE (the daemons do): a peer may vanish mid-write.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "rayd/base/event_loop.h"
#include "rayd/base/ids.h"
#include "rayd/base/status.h"

namespace rayd::object_store {

struct TransferOptions {
  size_t chunk_size = 8 << 20;   // bytes per chunk request
  int max_chunks_in_flight = 4;  // per fetch
  Millis timeout{30000};         // a fetch with no progress for this long fails
};

// The bytes of a sealed object, pinned until `release` runs (the server calls it once the
// last chunk it sends from them has been written).
struct PinnedBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::function<void()> release;
};

class TransferServer {
 public:
  // Looks an object up for sending: NotFound when this node doesn't hold it (sealed).
  using Source = std::function<Result<PinnedBytes>(const ObjectId&)>;
  TransferServer(EventLoop& loop, std::string token, Source source);
  ~TransferServer();  // closes the listener and every connection

  // "host:port" (port 0 picks one). Errors name the address.
  Status Listen(const std::string& address);
  const std::string& address() const;  // "host:port" actually bound

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TransferClient {
 public:
  TransferClient(EventLoop& loop, std::string token, TransferOptions options = {});
  ~TransferClient();  // fails every fetch in flight with Cancelled

  // Where to write an object of `size` bytes: `give(dest)` with memory for all of it (which
  // must stay valid until `done` runs), or `give(error)` to stop the fetch with that error.
  using Allocate = std::function<void(size_t size, std::function<void(Result<uint8_t*>)> give)>;
  // Fetches object `id` from the TransferServer at `peer`: asks its size, allocates, then
  // requests chunks (max_chunks_in_flight at a time), each read straight into `dest`. `done`
  // runs once: Ok when every byte is in place; NotFound if the peer doesn't have the object;
  // Unavailable if the peer can't be reached or the connection drops; DeadlineExceeded on no
  // progress; PermissionDenied if the token is refused.
  // `done` may run before Fetch returns (e.g. a malformed `peer`). A `give` after the fetch
  // ended (it timed out, or the client was destroyed) is ignored. Callbacks may start new
  // fetches but must not destroy the client.
  void Fetch(const std::string& peer, const ObjectId& id, Allocate allocate,
             std::function<void(Status)> done);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rayd::object_store
