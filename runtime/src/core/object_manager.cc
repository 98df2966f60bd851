#include "core/object_manager.h"

#include <spdlog/spdlog.h>

namespace rayd::core {

using internal::ErrorKind;

void ObjectManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::GET_OBJECT>([this](const auto& call) {
    auto id = ObjectId::FromHex(call.params().getObjectId().cStr());
    if (!id.ok()) return call.Fail(id.status());
    if (!store_.Known(*id)) {
      return call.Fail(Status::NotFound("object " + id->Hex() +
                                        " was freed by its owner (no reference to it remained)"));
    }
    // Not stored yet: it may be a pending task result, so the reply waits for it.
    store_.WhenReady(*id, [call](const ObjectValue& v) {
      call.Reply([&](proto::GetObjectReply::Builder b) { ToProto(v, b.initValue()); });
    });
  });
}

void ObjectManager::Resolve(const ObjectId& id, const std::string& owner_address,
                            std::function<void(const ObjectValue&)> cb) {
  if (owner_address.empty() || owner_address == self_address_ || store_.Contains(id)) {
    store_.WhenReady(id, std::move(cb));
    return;
  }
  auto fill = [id](proto::GetObjectRequest::Builder r) { r.setObjectId(id.Hex()); };
  clients_.Get(owner_address)
      .Call<proto::Method::GET_OBJECT>(
          fill, Millis(0),
          [this, id, owner_address, cb = std::move(cb)](const Status& s,
                                                        proto::GetObjectReply::Reader r) {
            // The owner freed it (NotFound), or the owner is gone: its connection closed, or
            // no connection could be made before the client gave up (ClientPool).
            ObjectValue value =
                s.ok() ? FromProto(r.getValue())
                : s.code() == StatusCode::kNotFound
                    ? ErrorValue(ErrorKind::kObjectLost, s.message())
                    : ErrorValue(ErrorKind::kOwnerDied,
                                 "object " + id.Hex() + " is lost: its owner at " + owner_address +
                                     " is gone (" + s.message() + ")",
                                 "OwnerDiedError");
            store_.Put(id, value);
            cb(value);
          });
}

void ObjectManager::ResolveArgs(
    std::vector<TaskArg> args,
    std::function<void(std::vector<TaskArg>, const ObjectValue* error)> cb) {
  struct State {
    std::vector<TaskArg> args;
    size_t pending = 0;
    std::optional<ObjectValue> error;
    std::function<void(std::vector<TaskArg>, const ObjectValue*)> cb;
  };
  auto state = std::make_shared<State>();
  state->args = std::move(args);
  state->cb = std::move(cb);
  for (const auto& a : state->args) state->pending += a.kind == TaskArg::Kind::kRef;
  if (state->pending == 0) {
    state->cb(std::move(state->args), nullptr);
    return;
  }
  for (size_t i = 0; i < state->args.size(); ++i) {
    auto& a = state->args[i];
    if (a.kind != TaskArg::Kind::kRef) continue;
    Resolve(a.ref, a.owner_address, [state, i](const ObjectValue& v) {
      auto& arg = state->args[i];
      if (v.error != ErrorKind::kNone) {
        if (!state->error) state->error = v;
      } else if (v.in_store) {
        // Too large to inline: the executing worker reads it from its node's store.
      } else {
        arg.kind = TaskArg::Kind::kValue;
        arg.value = v.data;
      }
      if (--state->pending == 0) {
        state->cb(std::move(state->args), state->error ? &*state->error : nullptr);
      }
    });
  }
}

void ObjectManager::RegisterBorrowed(const ObjectId& id, const std::string& owner_address) {
  if (owner_address == self_address_) return;
  std::lock_guard lock(mu_);
  borrowed_owner_.emplace(id, owner_address);
}

std::string ObjectManager::OwnerOf(const ObjectId& id) {
  std::lock_guard lock(mu_);
  auto it = borrowed_owner_.find(id);
  return it == borrowed_owner_.end() ? self_address_ : it->second;
}

void ObjectManager::ForgetBorrowed(const ObjectId& id) {
  std::lock_guard lock(mu_);
  borrowed_owner_.erase(id);
}

}  // namespace rayd::core
