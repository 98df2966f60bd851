#pragma once
// ClientPool: one RpcClient per peer address (workers, owners, node daemons), created on
// first use. A call to a peer no connection can be made to fails (Unavailable) after
// kPeerGiveUpAfter: a peer may be gone for good (its process exited, its host is cut off),
// unlike the GCS, which a restarted head brings back. A connection that dies under calls
// fails them at once (the kernel notices a silent peer within rpc::kDeadPeerTimeoutMs).
// Loop thread only.

#include <map>
#include <memory>
#include <string>

#include "rayd/base/rpc.h"

namespace rayd::core {

inline constexpr Millis kPeerGiveUpAfter{30000};

class ClientPool {
 public:
  // `loop` must outlive the pool. `give_up_after`: how long a call waits for a connection.
  ClientPool(EventLoop& loop, rpc::Options options, Millis give_up_after = kPeerGiveUpAfter)
      : loop_(loop), options_(std::move(options)), give_up_after_(give_up_after) {}

  // The client for `address`, connecting on first use.
  rpc::RpcClient& Get(const std::string& address);
  // Forgets the client (it is destroyed on the next loop turn, failing its queued calls with
  // Cancelled): for peers known to be gone. Safe to call from the client's own callbacks.
  void Drop(const std::string& address);
  // Destroys every client now (their queued calls fail with Cancelled). For shutdown.
  void Clear() { clients_.clear(); }

 private:
  EventLoop& loop_;
  rpc::Options options_;
  Millis give_up_after_;
  std::map<std::string, std::unique_ptr<rpc::RpcClient>> clients_;
};

}  // namespace rayd::core
