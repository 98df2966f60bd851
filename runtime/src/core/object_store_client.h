#pragma once
// ObjectStoreClient: a core worker's view of its node's shared-memory object store. It maps the
// node's arena once (the descriptor comes from the node's store socket) and talks to the node
// daemon over the core worker's RPC connection for everything but the bytes: create, seal, get
// (pulling from other nodes as needed), release, delete.
//
// Large values are written in place by the creating thread and read in place by readers: a
// Get returns SharedBytes that point into the arena and hold a pin on the object, released
// (STORE_RELEASE) when the last reference to them goes. The mapping itself is shared with
// those bytes, so they stay readable even after the client is destroyed.
//
// Threading: Create/PutInPlace/Get block, for user and task threads (never the loop thread);
// Seal/Abort/Release may be called from any thread; Delete runs on the loop thread.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/client_pool.h"
#include "common/task_spec.h"
#include "rayd/object_store/arena.h"

namespace rayd::core {

class ObjectStoreClient : public std::enable_shared_from_this<ObjectStoreClient> {
 public:
  struct NodeStore {
    std::string node_id;
    std::string node_address;     // the node daemon's RPC address
    std::string store_socket;
    std::string transfer_address;
  };
  // Maps the arena handed out on `node.store_socket`. Fails (Unavailable) when that socket is
  // not reachable, e.g. a driver on a machine without a node daemon. `loop` and `clients`
  // must outlive the client.
  static Result<std::shared_ptr<ObjectStoreClient>> Connect(EventLoop& loop, ClientPool& clients,
                                                      NodeStore node);
  ~ObjectStoreClient();

  // This node, as an object location.
  const internal::ObjectLocation& location() const { return location_; }
  const object_store::Arena& arena() const { return *arena_; }

  // Reserves `size` bytes for object `id` owned by `owner` and returns where to write them.
  // `caller_is_owner`: a Put (this process owns it), as opposed to a task result for its caller.
  Result<uint8_t*> Create(const ObjectId& id, size_t size, const std::string& owner,
                          bool caller_is_owner);
  // Makes a created object readable (asynchronous: later calls on this connection see it).
  void Seal(const ObjectId& id);
  void Abort(const ObjectId& id);
  // Creates, writes with `write`, and seals: the store marker of a new primary copy.
  Result<ObjectValue> PutInPlace(const ObjectId& id, size_t size, const std::string& owner,
                                 bool caller_is_owner, const std::function<void(uint8_t*)>& write);

  // The bytes of the object that `marker` (an in_store value) describes, pinned, pulling them
  // to this node first if it has no copy. Blocks.
  Result<std::shared_ptr<const internal::SharedBytes>> Get(const ObjectId& id,
                                                           const ObjectValue& marker,
                                                           const std::string& owner);

  // Frees copies of an object this process owned on each node in `locations` (loop thread).
  void Delete(const ObjectId& id, const std::vector<internal::ObjectLocation>& locations);

 private:
  class Bytes;
  ObjectStoreClient(EventLoop& loop, ClientPool& clients, NodeStore node,
              std::shared_ptr<object_store::Arena> arena);
  // Runs a call of method M to the node on the loop and waits for it. `fill` builds M's
  // request; `on_result` reads M's reply when the call succeeds.
  template <proto::Method M>
  Status CallNode(const std::function<void(typename rpc::RequestOf<M>::Builder)>& fill,
                  const std::function<void(typename rpc::ReplyOf<M>::Reader)>& on_result);
  void Release(const ObjectId& id);
  // Sends a one-way M (STORE_SEAL/ABORT/RELEASE) for `id` to the node (any thread).
  template <proto::Method M>
  void Tell(const ObjectId& id);

  EventLoop& loop_;
  ClientPool& clients_;
  const NodeStore node_;
  const internal::ObjectLocation location_;
  std::shared_ptr<object_store::Arena> arena_;  // co-owned by the Bytes handed out
};

}  // namespace rayd::core
