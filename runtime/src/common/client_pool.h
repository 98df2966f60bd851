#pragma once
// ClientPool: one RpcClient per peer address (workers, owners, node daemons), created on
// first use. Loop thread only.

#include <map>
#include <memory>
#include <string>

#include "rayd/base/rpc.h"

namespace rayd::core {

class ClientPool {
 public:
  // `loop` must outlive the pool.
  ClientPool(EventLoop& loop, rpc::Options options) : loop_(loop), options_(std::move(options)) {}

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
  std::map<std::string, std::unique_ptr<rpc::RpcClient>> clients_;
};

}  // namespace rayd::core
