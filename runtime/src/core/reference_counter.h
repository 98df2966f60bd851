#pragma once
// ReferenceCounter: the references this process holds on objects beyond the local counts of
// the memory store (which it adds to and drops through the store), and the lineage that lets
// a lost result be made again. Plain bookkeeping, no I/O: its callers send what it says to
// send. It keeps:
// - argument pins: each ref argument of a submitted task, and each ref inside a by-value
//   argument, holds one reference until the task's result arrives (so the value outlives the
//   caller's own handles while the task needs it);
// - nested pins: an object whose value holds refs holds one reference on each while it is
//   referenced here (Ray's nested refs: a ref put inside a value needs no other handle);
// - borrowers (owner side): each process that kept a ref to an object we own holds one
//   reference until it says it is done;
// - registered borrows (borrower side): refs a task received and kept past its end, registered
//   with their owners, to be released when the last local reference goes;
// - lineage: a retryable task whose arguments are all values can be run again to recreate
//   its result if the only node holding it is lost (Ray's lineage reconstruction).
//
// Threading: safe from any thread.

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/task_spec.h"
#include "core/memory_store.h"

namespace rayd::core {

class ReferenceCounter {
 public:
  // `store` holds the counts; it must outlive the counter.
  explicit ReferenceCounter(MemoryStore& store) : store_(store) {}

  // Argument pins: one reference on each ref argument of `spec` (and ref inside a by-value
  // argument) until ReleaseArgs of its return id.
  void PinArgs(const TaskSpec& spec);
  void ReleaseArgs(const ObjectId& return_id);
  size_t num_pinned_tasks() const;

  // Ray's reference table: for each object referenced here, {references held by this
  // process's ObjectRef handles, references held for submitted tasks that take it as an
  // argument and have not finished}. References of other kinds (inside other objects, for
  // borrowers, for an actor's creation arguments) are in neither figure; an object held only
  // by them is not listed.
  std::unordered_map<ObjectId, std::pair<size_t, size_t>> AllReferenceCounts() const;

  // An actor's creation arguments (refs, and refs inside by-value ones), pinned while it may
  // need them to start or restart: until ReleaseActorArgs (the actor killed for good from here)
  // or the end of this process.
  void PinActorArgs(const ActorId& actor, const std::vector<internal::TaskArg>& args);
  void ReleaseActorArgs(const ActorId& actor);

  // Lineage: whether a task's result could be made again by running it again (retries left,
  // every argument a value: refs may be gone by then). RecordLineage remembers `spec` if so,
  // unless the result has lineage already (a rerun's result keeps the attempts left); Forget
  // when the result can no longer be lost. TakeRetry returns the spec of the next attempt at
  // making `id` (its attempt number counted up), or nothing when `id` has no lineage or no
  // attempts left.
  static bool CanReconstruct(const TaskSpec& spec);
  void RecordLineage(const TaskSpec& spec);
  void ForgetLineage(const ObjectId& return_id);
  std::optional<TaskSpec> TakeRetry(const ObjectId& id);
  bool HasLineage(const ObjectId& id) const;

  // Owner side: `borrower` keeps `id` (one reference per borrower, however often it says so).
  // Objects this process does not know are not counted: false.
  bool AddBorrower(const ObjectId& id, const std::string& borrower);
  // `borrower` is done with `id`: its reference goes.
  void RemoveBorrower(const ObjectId& id, const std::string& borrower);
  size_t num_borrowers(const ObjectId& id) const;

  // Nested pins: one reference on each of `nested` for as long as `outer` is referenced here
  // (until ReleaseNested); pinning an outer that holds pins already does nothing.
  void PinNested(const ObjectId& outer, const std::vector<internal::NestedRef>& nested);
  void ReleaseNested(const ObjectId& outer);

  // Borrower side: `owner` has this process registered as a borrower of `id` (a worker did so
  // on our behalf before returning `id` inside a result we own); released like KeepBorrows'.
  void AdoptBorrow(const ObjectId& id, const std::string& owner);
  // Borrower side: of the refs a task `received` (id, owner), those still referenced here
  // after it ended and not registered yet, grouped by owner: the caller registers them there.
  std::map<std::string, std::vector<ObjectId>> KeepBorrows(
      const std::vector<std::pair<ObjectId, std::string>>& received);
  // The last local reference to `id` went: the owner to tell, if `id` is a registered borrow
  // no longer referenced here (it is forgotten now).
  std::optional<std::string> ReleaseBorrow(const ObjectId& id);

 private:
  struct Lineage {
    TaskSpec spec;
    int attempts_left = 0;
  };

  // Takes `key`'s pins out of `pins` and drops their references, outside the lock: dropping the
  // last reference runs the store's hooks, which may call back.
  template <typename Key>
  void ReleasePins(std::unordered_map<Key, std::vector<ObjectId>>& pins, const Key& key) {
    std::vector<ObjectId> ids;
    {
      std::lock_guard lock(mu_);
      auto it = pins.find(key);
      if (it == pins.end()) return;
      ids = std::move(it->second);
      pins.erase(it);
    }
    for (const auto& id : ids) store_.RemoveRef(id);
  }

  MemoryStore& store_;
  mutable std::mutex mu_;
  std::unordered_map<ObjectId, std::vector<ObjectId>> arg_pins_;  // by return id
  std::unordered_map<ObjectId, std::vector<ObjectId>> nested_pins_;  // by outer id
  std::unordered_map<ActorId, std::vector<ObjectId>> actor_arg_pins_;
  std::unordered_map<ObjectId, Lineage> lineage_;                 // by return id
  std::unordered_map<ObjectId, std::set<std::string>> borrowers_;
  std::unordered_map<ObjectId, std::string> registered_borrows_;  // id -> owner
};

}  // namespace rayd::core
