#include "core/borrowing.h"

#include <spdlog/spdlog.h>

#include <future>
#include <map>
#include <vector>

#include "rayd/protocol/core.capnp.h"

namespace rayd::core {
namespace {

// Refs received by the task running on this thread (executor threads, during a task).
thread_local bool t_in_task = false;
thread_local std::vector<std::pair<ObjectId, std::string>> t_received_refs;

constexpr Millis kOwnerTimeout{10000};

void FillIds(proto::BorrowerRequest::Builder r, const std::vector<ObjectId>& ids,
             const std::string& borrower) {
  auto list = r.initObjectIds(static_cast<unsigned>(ids.size()));
  for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i].Hex());
  r.setBorrower(borrower);
}

// Runs `fn` on each id of `request` that parses.
template <typename Fn>
void ForEachId(proto::BorrowerRequest::Reader request, Fn fn) {
  for (auto hex : request.getObjectIds()) {
    if (auto id = ObjectId::FromHex(hex.cStr()); id.ok()) fn(*id);
  }
}

}  // namespace

void Borrowing::RegisterMethods(rpc::Dispatcher& dispatcher) {
  dispatcher.Handle<proto::Method::ADD_BORROWER>([this](const auto& call) {
    const std::string borrower = call.params().getBorrower();
    ForEachId(call.params(), [&](const ObjectId& id) { refs_.AddBorrower(id, borrower); });
    call.Reply();
  });
  dispatcher.Handle<proto::Method::REMOVE_BORROWER>([this](const auto& call) {
    const std::string borrower = call.params().getBorrower();
    ForEachId(call.params(), [&](const ObjectId& id) { refs_.RemoveBorrower(id, borrower); });
    call.Reply();
  });
}

void Borrowing::BeginTask() {
  t_in_task = true;
  t_received_refs.clear();
}

void Borrowing::Received(const ObjectId& id, const std::string& owner) {
  if (t_in_task && owner != address_) t_received_refs.emplace_back(id, owner);
}

void Borrowing::EndTask() {
  t_in_task = false;
  std::vector<std::pair<ObjectId, std::string>> received;
  received.swap(t_received_refs);
  for (const auto& [owner, ids] : refs_.KeepBorrows(received)) AddBorrower(owner, ids, address_);
}

void Borrowing::LendTo(const std::vector<internal::NestedRef>& nested,
                       const std::string& borrower) {
  std::map<std::string, std::vector<ObjectId>> by_owner;
  for (const auto& n : nested) {
    const std::string& owner = n.owner_address.empty() ? address_ : n.owner_address;
    if (owner == borrower) continue;  // the caller's own: it keeps them itself
    if (owner == address_) {
      refs_.AddBorrower(n.id, borrower);
    } else {
      by_owner[owner].push_back(n.id);
    }
  }
  for (const auto& [owner, ids] : by_owner) AddBorrower(owner, ids, borrower);
}

void Borrowing::AddBorrower(const std::string& owner, const std::vector<ObjectId>& ids,
                            const std::string& borrower) {
  // Shared: a wait that gives up returns before the answer.
  auto answered = std::make_shared<std::promise<Status>>();
  auto outcome = answered->get_future();
  loop_.Post([this, owner, ids, borrower, answered] {
    clients_.Get(owner).Call<proto::Method::ADD_BORROWER>(
        [&](proto::BorrowerRequest::Builder r) { FillIds(r, ids, borrower); }, kOwnerTimeout,
        [answered](const Status& s) { answered->set_value(s); });
  });
  Status s = outcome.wait_for(kOwnerTimeout + Millis(1000)) == std::future_status::ready
                 ? outcome.get()
                 : Status::DeadlineExceeded("no answer");
  if (!s.ok()) {
    spdlog::warn("could not register {} as a borrower with {}: {}", borrower, owner, s.message());
  }
}

void Borrowing::OnUnreferenced(const ObjectId& id) {
  std::optional<std::string> owner = refs_.ReleaseBorrow(id);
  if (!owner) return;  // cheap unless the id is a registered borrow
  loop_.Post([this, id, owner = std::move(*owner)] {
    clients_.Get(owner).Call<proto::Method::REMOVE_BORROWER>(
        [&](proto::BorrowerRequest::Builder r) { FillIds(r, {id}, address_); }, kOwnerTimeout,
        [](const Status&) {});
  });
}

}  // namespace rayd::core
