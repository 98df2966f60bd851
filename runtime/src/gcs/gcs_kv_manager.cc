#include "gcs/gcs_kv_manager.h"

#include "rayd/base/capnp_bytes.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::gcs {
namespace {

std::string Table(capnp::Text::Reader ns) { return "kv:" + std::string(ns.cStr()); }

// Replies with `fill(reply, value)` when `r` is ok, else fails the call.
template <typename T, proto::Method M, typename Fill>
auto ReplyWith(const rpc::Incoming<M>& call, Fill fill) {
  return [call, fill](Result<T> r) {
    if (!r.ok()) {
      call.Fail(r.status());
      return;
    }
    call.Reply([&](typename rpc::ReplyOf<M>::Builder b) { fill(b, *r); });
  };
}

}  // namespace

void GcsKvManager::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::KV_PUT>([this](const auto& c) { HandlePut(c); });
  dispatcher.Handle<proto::Method::KV_GET>([this](const auto& c) { HandleGet(c); });
  dispatcher.Handle<proto::Method::KV_DEL>([this](const auto& c) { HandleDel(c); });
  dispatcher.Handle<proto::Method::KV_KEYS>([this](const auto& c) { HandleKeys(c); });
  dispatcher.Handle<proto::Method::KV_EXISTS>([this](const auto& c) { HandleExists(c); });
}

void GcsKvManager::HandlePut(const rpc::Incoming<proto::Method::KV_PUT>& call) {
  auto r = call.params();
  auto value = r.getValue();
  store_.Put(Table(r.getNamespace()), r.getKey(),
             std::string(reinterpret_cast<const char*>(value.begin()), value.size()),
             r.getOverwrite(), ReplyWith<bool>(call, [](auto b, bool added) {
               b.setAdded(added);
             }));
}

void GcsKvManager::HandleGet(const rpc::Incoming<proto::Method::KV_GET>& call) {
  auto r = call.params();
  store_.Get(Table(r.getNamespace()), r.getKey(),
             ReplyWith<std::optional<std::string>>(call, [](auto b, const auto& value) {
               b.setFound(value.has_value());
               if (value) b.setValue(AsData(*value));
             }));
}

void GcsKvManager::HandleDel(const rpc::Incoming<proto::Method::KV_DEL>& call) {
  auto r = call.params();
  auto fill = [](auto b, int64_t n) {
    b.setDeleted(static_cast<uint32_t>(n));
  };
  if (r.getByPrefix()) {
    store_.DeleteByPrefix(Table(r.getNamespace()), r.getKey(), ReplyWith<int64_t>(call, fill));
  } else {
    store_.Delete(Table(r.getNamespace()), r.getKey(),
                  ReplyWith<bool>(call, [fill](auto b, bool d) { fill(b, d ? 1 : 0); }));
  }
}

void GcsKvManager::HandleKeys(const rpc::Incoming<proto::Method::KV_KEYS>& call) {
  auto r = call.params();
  store_.Keys(Table(r.getNamespace()), r.getPrefix(),
              ReplyWith<std::vector<std::string>>(call, [](auto b, const auto& keys) {
                auto list = b.initKeys(static_cast<unsigned>(keys.size()));
                for (unsigned i = 0; i < keys.size(); ++i) list.set(i, keys[i]);
              }));
}

void GcsKvManager::HandleExists(const rpc::Incoming<proto::Method::KV_EXISTS>& call) {
  auto r = call.params();
  store_.Exists(Table(r.getNamespace()), r.getKey(), ReplyWith<bool>(call, [](auto b, bool e) {
                  b.setExists(e);
                }));
}

}  // namespace rayd::gcs
