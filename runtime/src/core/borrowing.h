#pragma once
// Borrowing: the borrower protocol between processes, on top of the ReferenceCounter's
// bookkeeping. A ref that a task received (as an argument, or inside one) and kept past the
// task's end is registered with its owner (ADD_BORROWER) before the task's reply goes, while the
// caller still pins the object; when the last local reference to it goes, the owner is told
// (REMOVE_BORROWER). As an owner, each borrower counts as one reference until it is done.
// Refs a task returns inside its result are lent to the result's owner: the worker registers
// the caller as their borrower (ADD_BORROWER names the borrower) before the reply goes, while
// the task's own handles still hold them; the caller adopts the registrations (AdoptBorrow).
//
// Threading: BeginTask/Received/EndTask on the thread running the task (EndTask blocks until
// the owners answered); OnUnreferenced on any thread; the methods on the loop.

#include <string>
#include <vector>

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
  // Registers `borrower` (a task's caller, which owns its result) as a borrower of each of
  // `nested` with their owners; refs `borrower` owns itself need none. Call while something
  // here still holds them. Blocks until the owners answered (task threads).
  void LendTo(const std::vector<internal::NestedRef>& nested, const std::string& borrower);
  // The local count of `id` reached zero (the memory store's hook): tells its owner if it was a
  // registered borrow.
  void OnUnreferenced(const ObjectId& id);

 private:
  // ADD_BORROWER of `ids` for `borrower` at `owner`; blocks until it answered.
  void AddBorrower(const std::string& owner, const std::vector<ObjectId>& ids,
                   const std::string& borrower);

  EventLoop& loop_;
  ClientPool& clients_;
  ReferenceCounter& refs_;
  std::string address_;
};

}  // namespace rayd::core
