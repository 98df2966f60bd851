#include "node/object_service.h"

#include <spdlog/spdlog.h>

namespace rayd::node {

using object_store::ClientId;
using object_store::Slice;

namespace {
// Pins held by the transfer server while it sends a chunk.
constexpr ClientId kTransferClient = 1;

Result<ObjectId> ParseId(capnp::Text::Reader hex) { return ObjectId::FromHex(hex.cStr()); }

const char* StateName(object_store::ObjectState state) {
  switch (state) {
    case object_store::ObjectState::kCreating: return "CREATING";
    case object_store::ObjectState::kSealed: return "SEALED";
    case object_store::ObjectState::kSpilled: return "SPILLED";
  }
  return "?";
}
}  // namespace

ObjectService::ObjectService(EventLoop& loop, ObjectServiceConfig config)
    : loop_(loop),
      config_(std::move(config)),
      peers_(loop, rpc::Options{config_.token, "node"}, kPeerNodeGiveUpAfter) {}

ObjectService::~ObjectService() {
  // Fetches in flight fail (Cancelled) before the arena they write into goes away.
  transfer_client_.reset();
  transfer_server_.reset();
  handout_.reset();
}

Result<std::unique_ptr<ObjectService>> ObjectService::Start(EventLoop& loop,
                                                            ObjectServiceConfig config) {
  std::unique_ptr<ObjectService> s(new ObjectService(loop, std::move(config)));
  object_store::StoreOptions options;
  options.capacity = s->config_.capacity;
  options.arena_name = "rayd-objects-" + s->config_.node_id.Hex().substr(0, 8);
  options.spill_dir = s->config_.session_dir + "/spill";
  RAYD_ASSIGN_OR_RETURN(s->store_, object_store::ObjectStore::Create(loop, options));
  auto& arena = s->store_->arena();
  s->handout_ = std::make_unique<object_store::ArenaHandout>(loop, arena.fd(), arena.size());
  RAYD_RETURN_IF_ERROR(s->handout_->Listen(s->store_socket()));
  ObjectService* self = s.get();
  s->transfer_server_ = std::make_unique<object_store::TransferServer>(
      loop, s->config_.token, [self](const ObjectId& id) -> Result<object_store::PinnedBytes> {
        RAYD_ASSIGN_OR_RETURN(Slice slice, self->store_->TryPin(id, kTransferClient));
        return object_store::PinnedBytes{self->store_->arena().base() + slice.offset, slice.size,
                                         [self, id] { self->store_->Unpin(id, kTransferClient); }};
      });
  RAYD_RETURN_IF_ERROR(s->transfer_server_->Listen(s->config_.node_ip + ":0"));
  s->transfer_client_ = std::make_unique<object_store::TransferClient>(loop, s->config_.token);
  spdlog::info("object store: {} bytes, arena handed out on {}, transfers on {}",
               s->config_.capacity, s->store_socket(), s->transfer_address());
  return s;
}

void ObjectService::OnConnectionClosed(rpc::Connection& connection) {
  const auto client = reinterpret_cast<ClientId>(&connection);
  store_->UnpinAll(client);
  if (auto it = creating_.find(client); it != creating_.end()) {
    for (const auto& id : it->second) store_->Abort(id);
    creating_.erase(it);
  }
  if (auto it = owner_of_client_.find(client); it != owner_of_client_.end()) {
    DeleteOwnedBy(it->second);
    owner_of_client_.erase(it);
  }
}

void ObjectService::RegisterMethods(rpc::Dispatcher& d) {
  d.Handle<proto::Method::STORE_CREATE>([this](const auto& c) { HandleCreate(c); });
  d.Handle<proto::Method::STORE_SEAL>([this](const auto& c) {
    auto id = ParseId(c.params().getObjectId());
    if (!id.ok()) return c.Fail(id.status());
    creating_[ClientOf(c)].erase(*id);
    Status s = store_->Seal(*id);
    s.ok() ? c.Reply() : c.Fail(s);
  });
  d.Handle<proto::Method::STORE_ABORT>([this](const auto& c) {
    auto id = ParseId(c.params().getObjectId());
    if (!id.ok()) return c.Fail(id.status());
    creating_[ClientOf(c)].erase(*id);
    store_->Abort(*id);
    c.Reply();
  });
  d.Handle<proto::Method::STORE_GET>([this](const auto& c) { HandleGet(c); });
  d.Handle<proto::Method::STORE_RELEASE>([this](const auto& c) {
    auto id = ParseId(c.params().getObjectId());
    if (!id.ok()) return c.Fail(id.status());
    store_->Unpin(*id, ClientOf(c));
    c.Reply();
  });
  d.Handle<proto::Method::STORE_DELETE>([this](const auto& c) {
    for (auto hex : c.params().getObjectIds()) {
      if (auto id = ParseId(hex); id.ok()) store_->Delete(*id);
    }
    c.Reply();
  });
  d.Handle<proto::Method::STORE_LIST>([this](const auto& c) { HandleList(c); });
}

void ObjectService::HandleCreate(const rpc::Incoming<proto::Method::STORE_CREATE>& call) {
  auto req = call.params();
  auto id = ParseId(req.getObjectId());
  if (!id.ok()) return call.Fail(id.status());
  const ClientId client = ClientOf(call);
  creating_[client].insert(*id);
  if (req.getCallerIsOwner()) owner_of_client_[client] = req.getOwner();
  store_->CreateObject(*id, req.getSize(), /*primary=*/true, req.getOwner(),
                       [this, call, client, id = *id](Result<Slice> r) {
                         if (!r.ok()) {
                           creating_[client].erase(id);
                           return call.Fail(r.status());
                         }
                         call.Reply(
                             [&](proto::StoreCreateReply::Builder b) { b.setOffset(r->offset); });
                       });
}

void ObjectService::HandleGet(const rpc::Incoming<proto::Method::STORE_GET>& call) {
  auto req = call.params();
  auto id = ParseId(req.getObjectId());
  if (!id.ok()) return call.Fail(id.status());
  std::vector<Location> locations;
  for (auto l : req.getLocations()) {
    if (l.getNodeId() == config_.node_id.Hex()) continue;  // that's us: nothing to pull
    locations.push_back({l.getNodeId(), l.getNodeAddress(), l.getTransferAddress()});
  }
  Get(*id, ClientOf(call), req.getSize(), std::move(locations), req.getOwner(),
      [call](Result<Slice> r) {
        if (!r.ok()) return call.Fail(r.status());
        call.Reply([&](proto::StoreGetReply::Builder reply) {
          reply.setOffset(r->offset);
          reply.setSize(r->size);
        });
      });
}

void ObjectService::Get(const ObjectId& id, ClientId client, size_t size,
                        std::vector<Location> locations, std::string owner,
                        std::function<void(Result<Slice>)> done) {
  if (auto pull = pulls_.find(id); pull != pulls_.end()) {
    pull->second.waiters.emplace_back(client, std::move(done));
    return;
  }
  store_->GetAndPin(id, client,
                    [this, id, client, size, locations = std::move(locations),
                     owner = std::move(owner), done = std::move(done)](Result<Slice> r) mutable {
                      if (r.ok() || r.status().code() != StatusCode::kNotFound ||
                          locations.empty()) {
                        return done(std::move(r));
                      }
                      if (auto pull = pulls_.find(id); pull != pulls_.end()) {
                        pull->second.waiters.emplace_back(client, std::move(done));
                        return;
                      }
                      Pull& pull = pulls_[id];
                      pull.size = size;
                      pull.owner = std::move(owner);
                      pull.candidates = std::move(locations);
                      pull.waiters.emplace_back(client, std::move(done));
                      TryNextLocation(id);
                    });
}

// Pins the object on the next candidate node (restoring it there if spilled), fetches it over
// the transfer channel into a new secondary copy here, and unpins it there.
void ObjectService::TryNextLocation(const ObjectId& id) {
  Pull& pull = pulls_.at(id);
  if (pull.next >= pull.candidates.size()) {
    return FinishPull(id, Status::Unavailable("object " + id.Hex() +
                                              " is lost: no node holding it could serve it" +
                                              pull.errors));
  }
  const Location from = pull.candidates[pull.next++];
  auto fail = [this, id, from](const Status& s) {
    auto it = pulls_.find(id);
    if (it == pulls_.end()) return;
    it->second.errors += "; node " + from.node_id.substr(0, 8) + ": " + s.message();
    TryNextLocation(id);
  };
  auto fill = [&](proto::StoreGetRequest::Builder r) {
    r.setObjectId(id.Hex());
    r.setSize(pull.size);
  };
  peers_.Get(from.node_address)
      .Call<proto::Method::STORE_GET>(fill, Millis(30000), [this, id, from, fail](const Status& s) {
        if (!s.ok()) return fail(s);
        auto allocate = [this, id](size_t n, std::function<void(Result<uint8_t*>)> give) {
          auto it = pulls_.find(id);
          std::string owner = it == pulls_.end() ? "" : it->second.owner;
          store_->CreateObject(id, n, /*primary=*/false, owner,
                               [this, give = std::move(give)](Result<Slice> slice) {
                                 if (!slice.ok()) return give(slice.status());
                                 give(store_->arena().base() + slice->offset);
                               });
        };
        transfer_client_->Fetch(
            from.transfer_address, id, allocate, [this, id, from, fail](Status st) {
              auto unpin = [&](proto::StoreObjectRequest::Builder r) { r.setObjectId(id.Hex()); };
              peers_.Get(from.node_address)
                  .Call<proto::Method::STORE_RELEASE>(unpin, Millis(10000), [](const Status&) {});
              if (st.ok()) st = store_->Seal(id);
              if (!st.ok()) {
                store_->Abort(id);
                return fail(st);
              }
              FinishPull(id, Status::Ok());
            });
      });
}

void ObjectService::FinishPull(const ObjectId& id, const Status& status) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  Pull pull = std::move(it->second);
  pulls_.erase(it);
  if (!status.ok()) {
    spdlog::warn("{}", status.message());
    for (auto& [client, done] : pull.waiters) done(status);
    return;
  }
  spdlog::debug("pulled object {} ({} bytes)", id.Hex(), pull.size);
  TellOwner(id, pull.owner);
  for (auto& [client, done] : pull.waiters) store_->GetAndPin(id, client, std::move(done));
}

// The owner frees every copy it knows of: tell it about this one.
void ObjectService::TellOwner(const ObjectId& id, const std::string& owner) {
  if (owner.empty()) return;
  auto fill = [&](proto::AddObjectLocationRequest::Builder r) {
    r.setObjectId(id.Hex());
    auto l = r.initLocation();
    l.setNodeId(config_.node_id.Hex());
    l.setNodeAddress(node_address_);
    l.setTransferAddress(transfer_address());
  };
  peers_.Get(owner).Call<proto::Method::ADD_OBJECT_LOCATION>(fill, Millis(10000),
                                                             [](const Status&) {});
}

void ObjectService::DeleteOwnedBy(const std::string& owner) {
  size_t n = 0;
  for (const auto& o : store_->List()) {
    if (o.owner != owner) continue;
    store_->Delete(o.id);
    ++n;
  }
  if (n > 0) spdlog::info("deleted {} objects of {}, which is gone", n, owner);
}

void ObjectService::HandleList(const rpc::Incoming<proto::Method::STORE_LIST>& call) {
  auto objects = store_->List();
  auto stats = store_->Stats();
  call.Reply([&](proto::StoreListReply::Builder reply) {
    auto list = reply.initObjects(static_cast<unsigned>(objects.size()));
    for (unsigned i = 0; i < objects.size(); ++i) {
      const auto& o = objects[i];
      auto out = list[i];
      out.setObjectId(o.id.Hex());
      out.setSize(o.size);
      out.setState(StateName(o.state));
      out.setPrimary(o.primary);
      out.setPins(o.pins);
      out.setOwner(o.owner);
      out.setSpillPath(o.spill_path);
    }
    reply.setCapacity(stats.capacity);
    reply.setUsed(stats.used);
    reply.setPeakUsed(stats.peak_used);
    reply.setSpilledBytes(stats.spilled_bytes);
    reply.setTotalEvicted(stats.total_evicted);
    reply.setTotalSpilled(stats.total_spilled);
    reply.setTotalRestored(stats.total_restored);
  });
}

}  // namespace rayd::node
