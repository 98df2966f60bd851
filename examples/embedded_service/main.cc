// embedded_service: a small C++ service that embeds rayd. It is built out of tree against an
// installed rayd (find_package(rayd), rayd::rayd), starts an embedded single-node cluster, prices
// a batch of orders with remote functions, books them on a ledger actor, and checks the answers.
// Exits 0 only when every answer is right; tests/e2e/install_test.cmake runs it.
//
// As with any rayd driver, node daemons re-run this same executable as a worker, so the
// functions registered below with RAYD_REMOTE are found there too: call rayd::Init first.

#include <rayd/api.h>

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Order {
  std::string sku;
  int quantity;
  int64_t unit_cents;
};

}  // namespace

int64_t LineTotal(int quantity, int64_t unit_cents) {
  if (quantity <= 0) throw std::invalid_argument("quantity must be positive");
  return quantity * unit_cents;
}

int64_t SumCents(std::vector<int64_t> cents) {
  int64_t sum = 0;
  for (int64_t c : cents) sum += c;
  return sum;
}

std::string Receipt(std::string sku, int64_t cents) {
  return sku + ": " + std::to_string(cents / 100) + "." + (cents % 100 < 10 ? "0" : "") +
         std::to_string(cents % 100);
}
RAYD_REMOTE(LineTotal, SumCents, Receipt);

// The service's state: a running total of what it has booked. One instance, in one worker.
class Ledger {
 public:
  static Ledger* FactoryCreate(std::string currency) { return new Ledger(std::move(currency)); }
  int64_t Book(int64_t cents) {
    total_ += cents;
    ++entries_;
    return total_;
  }
  int Entries() { return entries_; }
  std::string Currency() { return currency_; }

 private:
  explicit Ledger(std::string currency) : currency_(std::move(currency)) {}
  std::string currency_;
  int64_t total_ = 0;
  int entries_ = 0;
};
RAYD_REMOTE(Ledger::FactoryCreate, &Ledger::Book, &Ledger::Entries, &Ledger::Currency);

namespace {

int failures = 0;

template <typename T>
void Expect(const std::string& what, const T& got, const T& want) {
  std::cout << what << " = " << got << "\n";
  if (!(got == want)) {
    std::cout << "  WRONG: expected " << want << "\n";
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  rayd::RaydConfig config;  // no address: an embedded cluster for the life of the program
  rayd::Init(config, argc, argv);

  const std::vector<Order> orders = {
      {"apple", 3, 125}, {"bread", 1, 349}, {"cheese", 2, 1099}, {"dates", 10, 45}};

  // Price every line in parallel, then total them remotely: the refs are resolved for SumCents.
  std::vector<rayd::ObjectRef<int64_t>> lines;
  for (const Order& o : orders) {
    lines.push_back(rayd::Task(LineTotal).Remote(o.quantity, o.unit_cents));
  }
  std::vector<int64_t> line_cents;
  for (const auto& value : rayd::Get(lines)) line_cents.push_back(*value);
  Expect<int64_t>("line totals [0]", line_cents.at(0), 375);
  Expect<int64_t>("line totals [3]", line_cents.at(3), 450);
  int64_t total = *rayd::Get(rayd::Task(SumCents).Remote(line_cents));
  Expect<int64_t>("order total (cents)", total, 375 + 349 + 2198 + 450);
  Expect<std::string>("receipt", *rayd::Get(rayd::Task(Receipt).Remote(std::string("order"), total)),
                      std::string("order: 33.72"));

  // Book each line on the ledger actor; calls on one actor run in submission order.
  rayd::ActorHandle<Ledger> ledger =
      rayd::Actor(Ledger::FactoryCreate).SetName("ledger").Remote(std::string("EUR"));
  rayd::ObjectRef<int64_t> last;
  for (int64_t cents : line_cents) last = ledger.Task(&Ledger::Book).Remote(cents);
  Expect<int64_t>("ledger total (cents)", *rayd::Get(last), total);
  auto found = rayd::GetActor<Ledger>("ledger");
  Expect<bool>("ledger found by name", found.has_value(), true);
  if (found) {
    Expect<int>("ledger entries", *rayd::Get(found->Task(&Ledger::Entries).Remote()), 4);
    Expect<std::string>("ledger currency", *rayd::Get(found->Task(&Ledger::Currency).Remote()),
                        std::string("EUR"));
  }

  // A bad request fails remotely and reaches the caller as a RemoteError.
  bool raised = false;
  try {
    rayd::Get(rayd::Task(LineTotal).Remote(0, int64_t{100}));
  } catch (const rayd::RemoteError& e) {
    raised = true;
    std::cout << "LineTotal(0, 100) raised " << e.remote_type() << "\n";
  }
  Expect<bool>("bad request raised RemoteError", raised, true);

  ledger.Kill();
  rayd::Shutdown();
  if (failures != 0) {
    std::cout << "embedded_service: " << failures << " check(s) FAILED\n";
    return 1;
  }
  std::cout << "embedded_service: all checks passed\n";
  return 0;
}
