#include "gcs/gcs_kv_manager.h"

#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {
namespace {

std::string Table(capnp::Text::Reader ns) { return "kv:" + std::string(ns.cStr()); }

capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

// Replies with `fill(value)` when `r` is ok, else fails the call.
template <typename T, typename Fill>
auto ReplyWith(const rpc::CallPtr& call, Fill fill) {
  return [call, fill](Result<T> r) {
    if (!r.ok()) {
      call->Fail(r.status());
      return;
    }
    call->Reply([&](capnp::AnyPointer::Builder b) { fill(b, *r); });
  };
}

}  // namespace

void GcsKvManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Register(proto::Method::KV_PUT, [this](auto& c) { HandlePut(c); });
  dispatcher.Register(proto::Method::KV_GET, [this](auto& c) { HandleGet(c); });
  dispatcher.Register(proto::Method::KV_DEL, [this](auto& c) { HandleDel(c); });
  dispatcher.Register(proto::Method::KV_KEYS, [this](auto& c) { HandleKeys(c); });
  dispatcher.Register(proto::Method::KV_EXISTS, [this](auto& c) { HandleExists(c); });
}

void GcsKvManager::HandlePut(const rpc::CallPtr& call) {
  auto r = call->Params<proto::KvPutRequest>();
  auto value = r.getValue();
  store_.Put(Table(r.getNamespace()), r.getKey(),
             std::string(reinterpret_cast<const char*>(value.begin()), value.size()),
             r.getOverwrite(), ReplyWith<bool>(call, [](auto b, bool added) {
               b.template initAs<proto::KvPutReply>().setAdded(added);
             }));
}

void GcsKvManager::HandleGet(const rpc::CallPtr& call) {
  auto r = call->Params<proto::KvGetRequest>();
  store_.Get(Table(r.getNamespace()), r.getKey(),
             ReplyWith<std::optional<std::string>>(call, [](auto b, const auto& value) {
               auto reply = b.template initAs<proto::KvGetReply>();
               reply.setFound(value.has_value());
               if (value) reply.setValue(AsData(*value));
             }));
}

void GcsKvManager::HandleDel(const rpc::CallPtr& call) {
  auto r = call->Params<proto::KvDelRequest>();
  auto fill = [](auto b, int64_t n) {
    b.template initAs<proto::KvDelReply>().setDeleted(static_cast<uint32_t>(n));
  };
  if (r.getByPrefix()) {
    store_.DeleteByPrefix(Table(r.getNamespace()), r.getKey(), ReplyWith<int64_t>(call, fill));
  } else {
    store_.Delete(Table(r.getNamespace()), r.getKey(),
                  ReplyWith<bool>(call, [fill](auto b, bool d) { fill(b, d ? 1 : 0); }));
  }
}

void GcsKvManager::HandleKeys(const rpc::CallPtr& call) {
  auto r = call->Params<proto::KvKeysRequest>();
  store_.Keys(Table(r.getNamespace()), r.getPrefix(),
              ReplyWith<std::vector<std::string>>(call, [](auto b, const auto& keys) {
                auto list = b.template initAs<proto::KvKeysReply>().initKeys(
                    static_cast<unsigned>(keys.size()));
                for (unsigned i = 0; i < keys.size(); ++i) list.set(i, keys[i]);
              }));
}

void GcsKvManager::HandleExists(const rpc::CallPtr& call) {
  auto r = call->Params<proto::KvGetRequest>();
  store_.Exists(Table(r.getNamespace()), r.getKey(), ReplyWith<bool>(call, [](auto b, bool e) {
                  b.template initAs<proto::KvExistsReply>().setExists(e);
                }));
}

}  // namespace rayd::gcs
