#include "core/memory_store.h"

namespace rayd::core {

void MemoryStore::Put(const ObjectId& id, ObjectValue value) {
  if (on_arrive_) on_arrive_(id);
  PutEvent event;
  event.in_store = value.in_store;
  event.nested = value.nested;
  std::vector<std::shared_ptr<Waiter>> wake;
  {
    std::lock_guard lock(mu_);
    if (!PutLocked(id, std::move(value), &event.kept, &wake)) return;
  }
  for (const auto& w : wake) w->cv.notify_one();
  if (on_put_) on_put_(id, event);
}

bool MemoryStore::Known(const ObjectId& id) const {
  std::lock_guard lock(mu_);
  return entries_.count(id) > 0;
}

int MemoryStore::RefCount(const ObjectId& id) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.refs;
}

std::vector<std::pair<ObjectId, int>> MemoryStore::RefCounts() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<ObjectId, int>> counts;
  for (const auto& [id, entry] : entries_) {
    if (entry.refs > 0) counts.emplace_back(id, entry.refs);
  }
  return counts;
}

void MemoryStore::Reset(const ObjectId& id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.value.reset();
}

bool MemoryStore::PutLocked(const ObjectId& id, ObjectValue value, bool* kept,
                            std::vector<std::shared_ptr<Waiter>>* wake) {
  std::vector<std::function<void(const ObjectValue&)>> callbacks;
  auto& e = entries_[id];
  if (e.value) return false;
  // A released entry is not wanted here any more, even if Wait()ers still get the value.
  *kept = !e.released;
  if (e.released && e.waiters.empty()) {
    // Nobody wants it any more. A stored value must still be freed by whoever owns it.
    if (value.in_store && on_free_) {
      loop_.Post([fn = on_free_, id, value = std::move(value)] { fn(id, value); });
    }
    entries_.erase(id);
    return true;
  }
  e.value = std::move(value);
  callbacks.swap(e.callbacks);
  if (!callbacks.empty()) {
    auto shared = std::make_shared<ObjectValue>(*e.value);
    loop_.Post([callbacks = std::move(callbacks), shared] {
      for (const auto& cb : callbacks) cb(*shared);
    });
  }
  for (auto& w : e.waiters) {
    if (w->missing > 0 && --w->missing == 0) wake->push_back(std::move(w));
  }
  e.waiters.clear();
  return true;
}

std::optional<ObjectValue> MemoryStore::TryGet(const ObjectId& id) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.value;
}

bool MemoryStore::Contains(const ObjectId& id) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.value.has_value();
}

std::vector<std::optional<ObjectValue>> MemoryStore::Wait(const std::vector<ObjectId>& ids,
                                                          size_t num_ready,
                                                          Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  size_t ready = 0;
  for (const auto& id : ids) {
    auto it = entries_.find(id);
    ready += it != entries_.end() && it->second.value.has_value();
  }
  if (ready < num_ready) {
    // Register with every missing object; Put counts us down and wakes us once, at the end.
    auto waiter = std::make_shared<Waiter>();
    waiter->missing = num_ready - ready;
    std::vector<ObjectId> registered;
    for (const auto& id : ids) {
      auto& e = entries_[id];
      if (e.value) continue;
      e.waiters.push_back(waiter);
      registered.push_back(id);
    }
    waiter->cv.wait_until(lock, deadline, [&] { return waiter->missing == 0; });
    for (const auto& id : registered) {
      auto it = entries_.find(id);
      if (it != entries_.end()) std::erase(it->second.waiters, waiter);
    }
  }
  std::vector<std::optional<ObjectValue>> out;
  out.reserve(ids.size());
  for (const auto& id : ids) {
    auto it = entries_.find(id);
    out.push_back(it == entries_.end() ? std::nullopt : it->second.value);
  }
  return out;
}

void MemoryStore::WhenReady(const ObjectId& id, std::function<void(const ObjectValue&)> cb) {
  std::lock_guard lock(mu_);
  auto& e = entries_[id];
  if (e.value) {
    loop_.Post([cb = std::move(cb), v = *e.value] { cb(v); });
    return;
  }
  e.released = false;
  e.callbacks.push_back(std::move(cb));
}

void MemoryStore::AddRef(const ObjectId& id) {
  std::lock_guard lock(mu_);
  auto& e = entries_[id];
  e.refs++;
  e.released = false;
}

void MemoryStore::RemoveRef(const ObjectId& id) {
  bool unreferenced = false;
  {
    std::lock_guard lock(mu_);
    unreferenced = RemoveRefLocked(id);
  }
  if (unreferenced && on_unreferenced_) on_unreferenced_(id);
}

bool MemoryStore::RemoveRefLocked(const ObjectId& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || --it->second.refs > 0) return false;
  if (!it->second.callbacks.empty() || !it->second.waiters.empty()) return true;  // still wanted
  if (it->second.value) {
    if (it->second.value->in_store && on_free_) {
      loop_.Post([fn = on_free_, id, value = std::move(*it->second.value)] { fn(id, value); });
    }
    entries_.erase(it);
  } else {
    it->second.released = true;
  }
  return true;
}

bool MemoryStore::AddLocation(const ObjectId& id, const internal::ObjectLocation& location) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.value || !it->second.value->in_store) return false;
  auto& locations = it->second.value->locations;
  for (const auto& l : locations) {
    if (l.node_id == location.node_id) return true;
  }
  locations.push_back(location);
  return true;
}

size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace rayd::core
