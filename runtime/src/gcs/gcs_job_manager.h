#pragma once
// The GCS job table: one entry per driver (a program that called rayd::Init, or `rayd tune`).

#include "gcs/store_client.h"
#include "rayd/base/rpc.h"

namespace rayd::gcs {

class GcsJobManager {
 public:
  // `store` must outlive the manager.
  explicit GcsJobManager(StoreClient& store) : store_(store) {}
  void RegisterMethods(rpc::Dispatcher& dispatcher);

 private:
  void HandleAdd(const rpc::CallPtr& call);
  void HandleFinished(const rpc::CallPtr& call);
  void HandleGetAll(const rpc::CallPtr& call);

  StoreClient& store_;
};

}  // namespace rayd::gcs
