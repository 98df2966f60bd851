#pragma once
// ObjectManager: finds object values for this process. Owned objects live in the local
// MemoryStore; borrowed ones (refs received from elsewhere) are fetched from their owner's
// GET_OBJECT service and cached locally. Also serves GET_OBJECT for the objects we own.
//
// Threading: Resolve/ResolveArgs/RegisterMethods on the loop thread; the ownership table
// (RegisterBorrowed, OwnerOf) from any thread.

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/client_pool.h"
#include "core/memory_store.h"
#include "common/task_spec.h"

namespace rayd::core {

class ObjectManager {
 public:
  // All references must outlive the manager.
  ObjectManager(MemoryStore& store, ClientPool& clients, std::string self_address)
      : store_(store), clients_(clients), self_address_(std::move(self_address)) {}

  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // Runs `cb` with the value of `id` once known: from the store, or from `owner_address`.
  void Resolve(const ObjectId& id, const std::string& owner_address,
               std::function<void(const ObjectValue&)> cb);
  // Replaces every kRef argument by its value. If one of them holds an error, `cb` gets that
  // error value instead (a task whose input failed fails the same way).
  void ResolveArgs(std::vector<TaskArg> args,
                   std::function<void(std::vector<TaskArg>, const ObjectValue* error)> cb);

  void RegisterBorrowed(const ObjectId& id, const std::string& owner_address);
  // Our address for objects we own, the owner's for borrowed ones, "" if unknown.
  std::string OwnerOf(const ObjectId& id);
  void ForgetBorrowed(const ObjectId& id);
  const std::string& self_address() const { return self_address_; }

 private:
  MemoryStore& store_;
  ClientPool& clients_;
  const std::string self_address_;
  std::mutex mu_;
  std::unordered_map<ObjectId, std::string> borrowed_owner_;  // guarded by mu_
};

}  // namespace rayd::core
