#pragma once
// The GCS's namespaced key-value store (rendezvous addresses, job configs, user data). Each
// namespace is one store table, "kv:<namespace>"; values are opaque bytes.

#include "gcs/table_store.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

class GcsKvManager {
 public:
  // `store` must outlive the manager.
  explicit GcsKvManager(TableStore& store) : store_(store) {}
  void RegisterMethods(rpc::Dispatcher& dispatcher);

 private:
  void HandlePut(const rpc::Incoming<proto::Method::KV_PUT>& call);
  void HandleGet(const rpc::Incoming<proto::Method::KV_GET>& call);
  void HandleDel(const rpc::Incoming<proto::Method::KV_DEL>& call);
  void HandleKeys(const rpc::Incoming<proto::Method::KV_KEYS>& call);
  void HandleExists(const rpc::Incoming<proto::Method::KV_EXISTS>& call);

  TableStore& store_;
};

}  // namespace rayd::gcs
