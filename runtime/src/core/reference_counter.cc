#include "core/reference_counter.h"

#include <algorithm>
#include <climits>

namespace rayd::core {

namespace {
// The refs `args` hold: ref arguments, and refs inside by-value ones.
std::vector<ObjectId> ArgRefs(const std::vector<internal::TaskArg>& args) {
  std::vector<ObjectId> refs;
  for (const auto& a : args) {
    if (a.kind != internal::TaskArg::Kind::kValue) refs.push_back(a.ref);
    for (const auto& n : a.nested) refs.push_back(n.id);
  }
  return refs;
}
}  // namespace

void ReferenceCounter::PinActorArgs(const ActorId& actor,
                                    const std::vector<internal::TaskArg>& args) {
  std::vector<ObjectId> refs = ArgRefs(args);
  if (refs.empty()) return;
  for (const auto& id : refs) store_.AddRef(id);
  std::lock_guard lock(mu_);
  actor_arg_pins_[actor] = std::move(refs);
}

void ReferenceCounter::ReleaseActorArgs(const ActorId& actor) {
  ReleasePins(actor_arg_pins_, actor);
}

void ReferenceCounter::PinArgs(const TaskSpec& spec) {
  std::vector<ObjectId> refs = ArgRefs(spec.args);
  if (refs.empty()) return;
  for (const auto& id : refs) store_.AddRef(id);
  std::lock_guard lock(mu_);
  arg_pins_[spec.return_id] = std::move(refs);
}

void ReferenceCounter::ReleaseArgs(const ObjectId& return_id) { ReleasePins(arg_pins_, return_id); }

void ReferenceCounter::PinNested(const ObjectId& outer,
                                 const std::vector<internal::NestedRef>& nested) {
  std::vector<ObjectId> ids;
  for (const auto& n : nested) ids.push_back(n.id);
  {
    std::lock_guard lock(mu_);
    if (ids.empty() || !nested_pins_.emplace(outer, ids).second) return;
  }
  for (const auto& id : ids) store_.AddRef(id);
}

void ReferenceCounter::ReleaseNested(const ObjectId& outer) { ReleasePins(nested_pins_, outer); }

void ReferenceCounter::AdoptBorrow(const ObjectId& id, const std::string& owner) {
  std::lock_guard lock(mu_);
  registered_borrows_.emplace(id, owner);
}

std::unordered_map<ObjectId, std::pair<size_t, size_t>> ReferenceCounter::AllReferenceCounts()
    const {
  // The store counts every reference; the pins and borrowers here account for all but the
  // handles'. Two snapshots, not one: a figure may be a moment stale, never negative.
  std::unordered_map<ObjectId, size_t> submitted, other;
  {
    std::lock_guard lock(mu_);
    for (const auto& [task, ids] : arg_pins_) {
      for (const auto& id : ids) ++submitted[id];
    }
    for (const auto& [outer, ids] : nested_pins_) {
      for (const auto& id : ids) ++other[id];
    }
    for (const auto& [actor, ids] : actor_arg_pins_) {
      for (const auto& id : ids) ++other[id];
    }
    for (const auto& [id, borrowers] : borrowers_) other[id] += borrowers.size();
  }
  std::unordered_map<ObjectId, std::pair<size_t, size_t>> counts;
  for (const auto& [id, refs] : store_.RefCounts()) {
    const size_t total = static_cast<size_t>(refs);
    const size_t held_for_tasks = std::min(total, submitted[id]);
    const size_t held_otherwise = std::min(total - held_for_tasks, other[id]);
    const size_t handles = total - held_for_tasks - held_otherwise;
    if (handles + held_for_tasks > 0) counts.emplace(id, std::make_pair(handles, held_for_tasks));
  }
  return counts;
}

size_t ReferenceCounter::num_pinned_tasks() const {
  std::lock_guard lock(mu_);
  return arg_pins_.size();
}

bool ReferenceCounter::CanReconstruct(const TaskSpec& spec) {
  if (spec.max_retries == 0) return false;
  for (const auto& a : spec.args) {
    if (a.kind != internal::TaskArg::Kind::kValue) return false;
  }
  return true;
}

void ReferenceCounter::RecordLineage(const TaskSpec& spec) {
  if (!CanReconstruct(spec)) return;
  std::lock_guard lock(mu_);
  lineage_.try_emplace(spec.return_id,
                       Lineage{spec, spec.max_retries < 0 ? INT_MAX : spec.max_retries});
}

void ReferenceCounter::ForgetLineage(const ObjectId& return_id) {
  std::lock_guard lock(mu_);
  lineage_.erase(return_id);
}

std::optional<TaskSpec> ReferenceCounter::TakeRetry(const ObjectId& id) {
  std::lock_guard lock(mu_);
  auto it = lineage_.find(id);
  if (it == lineage_.end() || it->second.attempts_left <= 0) return std::nullopt;
  --it->second.attempts_left;
  ++it->second.spec.attempt;
  return it->second.spec;
}

bool ReferenceCounter::HasLineage(const ObjectId& id) const {
  std::lock_guard lock(mu_);
  return lineage_.contains(id);
}

bool ReferenceCounter::AddBorrower(const ObjectId& id, const std::string& borrower) {
  if (!store_.Known(id)) return false;
  bool added;
  {
    std::lock_guard lock(mu_);
    added = borrowers_[id].insert(borrower).second;
  }
  if (added) store_.AddRef(id);
  return true;
}

void ReferenceCounter::RemoveBorrower(const ObjectId& id, const std::string& borrower) {
  {
    std::lock_guard lock(mu_);
    auto it = borrowers_.find(id);
    if (it == borrowers_.end() || it->second.erase(borrower) == 0) return;
    if (it->second.empty()) borrowers_.erase(it);
  }
  store_.RemoveRef(id);
}

size_t ReferenceCounter::num_borrowers(const ObjectId& id) const {
  std::lock_guard lock(mu_);
  auto it = borrowers_.find(id);
  return it == borrowers_.end() ? 0 : it->second.size();
}

std::map<std::string, std::vector<ObjectId>> ReferenceCounter::KeepBorrows(
    const std::vector<std::pair<ObjectId, std::string>>& received) {
  std::map<std::string, std::vector<ObjectId>> by_owner;
  std::lock_guard lock(mu_);
  for (const auto& [id, owner] : received) {
    if (owner.empty() || store_.RefCount(id) == 0) continue;  // not kept
    if (registered_borrows_.emplace(id, owner).second) by_owner[owner].push_back(id);
  }
  return by_owner;
}

std::optional<std::string> ReferenceCounter::ReleaseBorrow(const ObjectId& id) {
  std::lock_guard lock(mu_);
  auto it = registered_borrows_.find(id);
  if (it == registered_borrows_.end() || store_.RefCount(id) > 0) return std::nullopt;
  std::string owner = std::move(it->second);
  registered_borrows_.erase(it);
  return owner;
}

}  // namespace rayd::core
