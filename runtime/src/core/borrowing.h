#pragma once
// Borrowing: the borrower protocol between processes, on top of the ReferenceCounter's
// bookkeeping. A ref that a task received (as an argument, or inside one) and kept past the
// task's end is registered with its owner (ADD_BORROWER) before the task's reply goes, while the
// caller still pins the object; when the last local reference to it goes, the owner is told
// (REMOVE_BORROWER). As an owner, each borrower counts as one reference until it is done.
//
// Threading: BeginTask/Received/EndTask on the thread running the task (EndTask blocks until
// the owners answered); OnUnreferenced on any thread; the methods on the loop.

#include <string>

#include "common/client_pool.h"
#include "core/reference_counter.h"
#include "rayd/base/rpc.h"

namespace rayd::core {

class Borrowing {
 public:
  // `address` is this process's own (refs it owns are never borrowed). `loop`, `clients` and
  // `refs` must outlive this.
  Borrowing(EventLoop& loop, ClientPool& clients, ReferenceCounter& refs, std::string address)
      : loop_(loop), clients_(clients), refs_(refs), address_(std::move(address)) {}

  // Serves ADD_BORROWER and REMOVE_BORROWER (the owner's side).
  void RegisterMethods(rpc::Dispatcher& dispatcher);

  // A task starts on this thread; it received ref `id` owned by `owner`; it ended: the refs it
  // kept are registered with their owners.
  static void BeginTask();
  void Received(const ObjectId& id, const std::string& owner);
  void EndTask();
  // The local count of `id` reached zero (the memory store's hook): tells its owner if it was a
  // registered borrow.
  void OnUnreferenced(const ObjectId& id);

 private:
  EventLoop& loop_;
  ClientPool& clients_;
  ReferenceCounter& refs_;
  std::string address_;
};

}  // namespace rayd::core
