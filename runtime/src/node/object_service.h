#pragma once
// ObjectService: the node daemon's object store front end. It owns the node's arena and
// object table (rayd/object_store), hands the arena to local processes (ArenaHandout), serves
// the STORE_* methods, and moves objects between nodes: a STORE_GET for an object this node
// doesn't hold pulls it from a node that does (pin there over RPC, fetch the bytes over the
// transfer channel straight into this arena, seal, tell the owner about the new copy).
//
// Pins are per connection: a client that disconnects loses its pins, and objects it was
// creating are aborted. A client that created objects it owns (Puts) is their owner: when its
// connection closes, every object of that owner here is deleted (it can free them no more).
//
// Loop thread only.

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/client_pool.h"
#include "rayd/base/rpc.h"
#include "rayd/object_store/arena_handout.h"
#include "rayd/object_store/object_store.h"
#include "rayd/object_store/transfer.h"
#include "rayd/protocol/core.capnp.h"

namespace rayd::node {

struct ObjectServiceConfig {
  size_t capacity = 0;
  std::string session_dir;  // holds store.sock and spill/
  std::string node_ip;      // the transfer channel listens here
  std::string token;
  NodeId node_id;
};

class ObjectService {
 public:
  // Creates the arena and starts listening. `loop` must outlive the service.
  static Result<std::unique_ptr<ObjectService>> Start(EventLoop& loop, ObjectServiceConfig config);
  ~ObjectService();

  void RegisterMethods(rpc::Dispatcher& dispatcher);
  // Wire to RpcServer::SetOnConnectionClosed: drops the connection's pins and creations.
  void OnConnectionClosed(rpc::Connection& connection);
  // The process at `owner` (a core worker address) is gone: its objects here are deleted.
  void DeleteOwnedBy(const std::string& owner);
  // The node's RPC address, once it listens (objects' locations carry it).
  void set_node_address(std::string address) { node_address_ = std::move(address); }

  std::string store_socket() const { return config_.session_dir + "/store.sock"; }
  const std::string& transfer_address() const { return transfer_server_->address(); }
  size_t capacity() const { return config_.capacity; }
  object_store::StoreStats Stats() const { return store_->Stats(); }
  size_t NumPrimary() const { return store_->NumPrimary(); }

 private:
  struct Location {
    std::string node_id;
    std::string node_address;
    std::string transfer_address;
  };
  // A pull in progress and the STORE_GET calls waiting for it.
  struct Pull {
    size_t size = 0;
    std::string owner;
    std::vector<Location> candidates;  // tried in order
    size_t next = 0;
    std::vector<std::pair<object_store::ClientId, std::function<void(Result<object_store::Slice>)>>>
        waiters;
    std::string errors;  // why each candidate failed
  };

  ObjectService(EventLoop& loop, ObjectServiceConfig config);
  void HandleCreate(const rpc::Incoming<proto::Method::STORE_CREATE>& call);
  void HandleGet(const rpc::Incoming<proto::Method::STORE_GET>& call);
  void HandleList(const rpc::Incoming<proto::Method::STORE_LIST>& call);
  void Get(const ObjectId& id, object_store::ClientId client, size_t size,
           std::vector<Location> locations, std::string owner,
           std::function<void(Result<object_store::Slice>)> done);
  void TryNextLocation(const ObjectId& id);
  void FinishPull(const ObjectId& id, const Status& status);
  void TellOwner(const ObjectId& id, const std::string& owner);
  // The client a call came from: its connection.
  template <proto::Method M>
  static object_store::ClientId ClientOf(const rpc::Incoming<M>& call) {
    return reinterpret_cast<object_store::ClientId>(call.connection().get());
  }

  EventLoop& loop_;
  ObjectServiceConfig config_;
  std::string node_address_;
  std::unique_ptr<object_store::ObjectStore> store_;
  std::unique_ptr<object_store::ArenaHandout> handout_;
  std::unique_ptr<object_store::TransferServer> transfer_server_;
  std::unique_ptr<object_store::TransferClient> transfer_client_;
  // Other node daemons and owners. A node daemon that accepts no connection for
  // kPeerNodeGiveUpAfter is gone (a live one's kernel accepts at once, however busy it is): a
  // pull goes on to the next copy, or fails as lost, instead of waiting out its 30 s deadline.
  // The GCS declares a silent node dead on the same scale (5 missed 1 s heartbeats by default).
  static constexpr Millis kPeerNodeGiveUpAfter{5000};
  core::ClientPool peers_;
  std::map<ObjectId, Pull> pulls_;
  std::map<object_store::ClientId, std::set<ObjectId>> creating_;  // unsealed, per client
  std::map<object_store::ClientId, std::string> owner_of_client_;  // learnt from Puts
};

}  // namespace rayd::node
