#pragma once
// NodeClientPool: the GCS's RPC clients to node daemons, one per node id, created on first use
// from the node's registered address and the cluster token. A client for a node that died is
// dropped (its queued calls fail with Cancelled).
//
// Threading: the GCS event loop only. Reply callbacks run on it, and may run before Call
// returns (unknown or dead node, or a client that gave up), so callers must not rely on
// state that the callback changes.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gcs/gcs_node_manager.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

// How long the GCS waits for a node daemon to answer a call (a lease, a bundle, an actor).
inline constexpr Millis kNodeCallTimeout{10000};

class NodeClientPool {
 public:
  // `loop` and `nodes` must outlive the pool. Registers a node-death listener on `nodes`.
  NodeClientPool(EventLoop& loop, GcsNodeManager& nodes, std::string token);
  ~NodeClientPool();
  NodeClientPool(const NodeClientPool&) = delete;
  NodeClientPool& operator=(const NodeClientPool&) = delete;

  // Calls method M on the node daemon of `node` (as RpcClient::Call<M>). A node that is unknown
  // or not alive answers Unavailable at once.
  template <proto::Method M, typename Fill, typename Done>
  void Call(const NodeId& node, Fill&& fill, Millis timeout, Done done) {
    if (rpc::RpcClient* client = Client(node)) {
      client->Call<M>(fill, timeout, std::move(done));
    } else {
      rpc::internal::ReadReply<M>(std::move(done))(NotAlive(node), capnp::AnyPointer::Reader());
    }
  }
  // True while the client to `node` holds an authenticated connection.
  bool Connected(const NodeId& node) const;

  const std::string& token() const { return token_; }

 private:
  // The client to `node`, connecting on first use; null when the node is not alive.
  rpc::RpcClient* Client(const NodeId& node);
  static Status NotAlive(const NodeId& node);
  void Drop(const NodeId& node);

  EventLoop& loop_;
  GcsNodeManager& nodes_;
  std::string token_;
  std::map<NodeId, std::unique_ptr<rpc::RpcClient>> clients_;
  // Clients of dead nodes, destroyed on the next loop turn: never inside a callback that one
  // of them (or a caller up the stack) may still be running.
  std::vector<std::unique_ptr<rpc::RpcClient>> retired_;
  Timer reaper_;
};

}  // namespace rayd::gcs
