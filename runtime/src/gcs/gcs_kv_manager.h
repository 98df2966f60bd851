#pragma once
// The GCS's namespaced key-value store (rendezvous addresses, job configs, user data). Each
// namespace is one store table, "kv:<namespace>"; values are opaque bytes.

#include "gcs/store_client.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

class GcsKvManager {
 public:
  // `store` must outlive the manager.
  explicit GcsKvManager(StoreClient& store) : store_(store) {}
  void RegisterMethods(rpc::Dispatcher& dispatcher);

 private:
  void HandlePut(const rpc::CallPtr& call);
  void HandleGet(const rpc::CallPtr& call);
  void HandleDel(const rpc::CallPtr& call);
  void HandleKeys(const rpc::CallPtr& call);
  void HandleExists(const rpc::CallPtr& call);

  StoreClient& store_;
};

}  // namespace rayd::gcs
