#include "core/object_store_client.h"

#include <unistd.h>

#include <future>

#include "rayd/object_store/arena_handout.h"

namespace rayd::core {

using internal::SharedBytes;

// An object's bytes in the arena, pinned until destroyed.
class ObjectStoreClient::Bytes : public SharedBytes {
 public:
  Bytes(std::weak_ptr<ObjectStoreClient> client, std::shared_ptr<object_store::Arena> arena,
        ObjectId id, size_t offset, size_t size)
      : client_(std::move(client)), arena_(std::move(arena)), id_(id),
        view_(reinterpret_cast<const char*>(arena_->base() + offset), size) {}
  ~Bytes() override {
    if (auto client = client_.lock()) client->Release(id_);
  }
  std::string_view view() const override { return view_; }
  bool in_shared_memory() const override { return true; }

 private:
  std::weak_ptr<ObjectStoreClient> client_;
  std::shared_ptr<object_store::Arena> arena_;  // keeps the mapping while the bytes are read
  ObjectId id_;
  std::string_view view_;
};

ObjectStoreClient::ObjectStoreClient(EventLoop& loop, ClientPool& clients, NodeStore node,
                         std::shared_ptr<object_store::Arena> arena)
    : loop_(loop),
      clients_(clients),
      node_(std::move(node)),
      location_{node_.node_id, node_.node_address, node_.transfer_address},
      arena_(std::move(arena)) {}

ObjectStoreClient::~ObjectStoreClient() = default;

Result<std::shared_ptr<ObjectStoreClient>> ObjectStoreClient::Connect(EventLoop& loop, ClientPool& clients,
                                                          NodeStore node) {
  if (node.store_socket.empty() || access(node.store_socket.c_str(), F_OK) != 0) {
    return Status::Unavailable("no object store socket at '" + node.store_socket + "'");
  }
  RAYD_ASSIGN_OR_RETURN(auto received, object_store::ReceiveArena(node.store_socket, Millis(10000)));
  RAYD_ASSIGN_OR_RETURN(std::unique_ptr<object_store::Arena> arena,
                        object_store::Arena::Map(received.fd, received.size));
  return std::shared_ptr<ObjectStoreClient>(
      new ObjectStoreClient(loop, clients, std::move(node), std::move(arena)));
}

template <proto::Method M>
Status ObjectStoreClient::CallNode(
    const std::function<void(typename rpc::RequestOf<M>::Builder)>& fill,
    const std::function<void(typename rpc::ReplyOf<M>::Reader)>& on_result) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  loop_.Post([&] {
    clients_.Get(node_.node_address)
        .Call<M>(fill, Millis(60000), [&](const Status& s, typename rpc::ReplyOf<M>::Reader r) {
          if (s.ok() && on_result) on_result(r);
          promise.set_value(s);
        });
  });
  return future.get();
}

Result<uint8_t*> ObjectStoreClient::Create(const ObjectId& id, size_t size, const std::string& owner,
                                     bool caller_is_owner) {
  uint64_t offset = 0;
  Status s = CallNode<proto::Method::STORE_CREATE>(
      [&](proto::StoreCreateRequest::Builder r) {
        r.setObjectId(id.Hex());
        r.setSize(size);
        r.setOwner(owner);
        r.setCallerIsOwner(caller_is_owner);
      },
      [&](proto::StoreCreateReply::Reader r) { offset = r.getOffset(); });
  if (!s.ok()) return s;
  if (offset + size > arena_->size()) {
    return Status::Internal("the node placed an object outside its arena");
  }
  arena_->Populate(offset + size);  // first touch through page faults costs ~10 µs a page
  return arena_->base() + offset;
}

void ObjectStoreClient::Seal(const ObjectId& id) { Tell<proto::Method::STORE_SEAL>(id); }
void ObjectStoreClient::Abort(const ObjectId& id) { Tell<proto::Method::STORE_ABORT>(id); }

template <proto::Method M>
void ObjectStoreClient::Tell(const ObjectId& id) {
  loop_.Post([weak = weak_from_this(), id] {
    auto self = weak.lock();
    if (!self) return;
    auto fill = [&](proto::StoreObjectRequest::Builder r) { r.setObjectId(id.Hex()); };
    self->clients_.Get(self->node_.node_address).Call<M>(fill, Millis(60000), [](const Status&) {});
  });
}

Result<ObjectValue> ObjectStoreClient::PutInPlace(const ObjectId& id, size_t size,
                                            const std::string& owner, bool caller_is_owner,
                                            const std::function<void(uint8_t*)>& write) {
  RAYD_ASSIGN_OR_RETURN(uint8_t * dest, Create(id, size, owner, caller_is_owner));
  try {
    write(dest);
  } catch (...) {
    Abort(id);
    throw;
  }
  Seal(id);
  ObjectValue marker;
  marker.in_store = true;
  marker.size = size;
  marker.locations.push_back(location_);
  return marker;
}

namespace {
void FillGet(const ObjectId& id, const ObjectValue& marker, const std::string& owner,
             proto::StoreGetRequest::Builder r) {
  r.setObjectId(id.Hex());
  r.setSize(marker.size);
  r.setOwner(owner);
  auto list = r.initLocations(static_cast<unsigned>(marker.locations.size()));
  for (unsigned i = 0; i < marker.locations.size(); ++i) ToProto(marker.locations[i], list[i]);
}
}  // namespace

Result<std::shared_ptr<const SharedBytes>> ObjectStoreClient::Get(const ObjectId& id,
                                                            const ObjectValue& marker,
                                                            const std::string& owner) {
  uint64_t offset = 0, size = 0;
  Status s = CallNode<proto::Method::STORE_GET>(
      [&](proto::StoreGetRequest::Builder r) { FillGet(id, marker, owner, r); },
      [&](proto::StoreGetReply::Reader reply) {
        offset = reply.getOffset();
        size = reply.getSize();
      });
  if (!s.ok()) return s;
  if (offset + size > arena_->size()) {
    return Status::Internal("the node placed an object outside its arena");
  }
  arena_->Populate(offset + size);
  return std::shared_ptr<const SharedBytes>(
      std::make_shared<Bytes>(weak_from_this(), arena_, id, offset, size));
}

void ObjectStoreClient::Release(const ObjectId& id) { Tell<proto::Method::STORE_RELEASE>(id); }

void ObjectStoreClient::Delete(const ObjectId& id,
                         const std::vector<internal::ObjectLocation>& locations) {
  for (const auto& l : locations) {
    auto fill = [&](proto::StoreDeleteRequest::Builder r) { r.initObjectIds(1).set(0, id.Hex()); };
    clients_.Get(l.node_address)
        .Call<proto::Method::STORE_DELETE>(fill, Millis(10000), [](const Status&) {});
  }
}

}  // namespace rayd::core
