// The programming model in one file: remote functions, actors, objects, placement groups,
// errors. Runs on an embedded local cluster, or on a running one when RAYD_ADDRESS is set. The
// same executable is re-run by node daemons as a worker, so a single-file program just works.

#include <rayd/api.h>

#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

int Plus(int a, int b) { return a + b; }

std::vector<float> Scale(std::vector<float> v, float factor) {
  for (auto& x : v) x *= factor;
  return v;
}

// Takes a ref (not its value): it fetches the value itself, from the ref's owner.
int SumOfRef(rayd::ObjectRef<std::vector<int>> ref) {
  int sum = 0;
  std::shared_ptr<std::vector<int>> values = rayd::Get(ref);
  for (int x : *values) sum += x;
  return sum;
}

int Fail(int x) {
  if (x > 0) throw std::out_of_range("x must not be positive, got " + std::to_string(x));
  return x;
}
RAYD_REMOTE(Plus, Scale, SumOfRef, Fail);

class Counter {
 public:
  explicit Counter(int start) : n_(start) {}
  static Counter* FactoryCreate(int start) { return new Counter(start); }
  int Add(int x) { return n_ += x; }
  int Get() { return n_; }

 private:
  int n_;
};
RAYD_REMOTE(Counter::FactoryCreate, &Counter::Add, &Counter::Get);

int main(int argc, char** argv) {
  rayd::RaydConfig config;  // address "" = embedded local cluster (or RAYD_ADDRESS)
  rayd::Init(config, argc, argv);

  rayd::ObjectRef<int> sum = rayd::Task(Plus).Remote(1, 2);
  std::cout << "Plus(1, 2) = " << *rayd::Get(sum) << "\n";

  // A ref as an argument is resolved before the call.
  auto four = rayd::Task(Plus).Remote(sum, 1);
  std::cout << "Plus(Plus(1, 2), 1) = " << *rayd::Get(four) << "\n";

  auto numbers = rayd::Put(std::vector<int>{1, 2, 3, 4});
  std::cout << "SumOfRef(Put([1,2,3,4])) = " << *rayd::Get(rayd::Task(SumOfRef).Remote(numbers))
            << "\n";

  auto scaled = rayd::Task(Scale).Remote(std::vector<float>(1 << 10, 1.0f), 2.0f);
  std::cout << "Scale(...)[0] = " << (*rayd::Get(scaled))[0] << "\n";

  // 64 MiB: it goes to the node's shared-memory object store (one memcpy), the task reads it in
  // place there, and its 64 MiB result is read here without a copy.
  auto big = rayd::Put(std::vector<float>(1 << 24, 0.5f));
  rayd::ArrayView<float> doubled = rayd::GetView(rayd::Task(Scale).Remote(big, 2.0f));
  std::cout << "Scale(64 MiB)[last] = " << doubled[doubled.size() - 1]
            << " (read in place: " << (doubled.in_shared_memory() ? "yes" : "no") << ")\n";

  rayd::ActorHandle<Counter> counter =
      rayd::Actor(Counter::FactoryCreate).SetName("c").SetMaxRestarts(2).Remote(0);
  auto five = counter.Task(&Counter::Add).Remote(5);
  rayd::WaitResult<int> w = rayd::Wait(std::vector{five}, 1, /*timeout_ms=*/10000);
  std::cout << "Counter.Add(5) = " << *rayd::Get(five) << " (ready: " << w.ready.size()
            << ")\n";
  auto same = rayd::GetActor<Counter>("c");
  std::cout << "GetActor(\"c\").Get() = " << *rayd::Get(same->Task(&Counter::Get).Remote())
            << "\n";

  // A gang: two bundles reserved together (every one or none), then a task inside bundle 1,
  // running on what that bundle reserved.
  rayd::PlacementGroup pg = rayd::CreatePlacementGroup(
      {.name = "gang", .bundles = {{{"CPU", 0.5}}, {{"CPU", 0.5}}},
       .strategy = rayd::PlacementStrategy::PACK});
  const bool reserved = pg.Wait(/*timeout_seconds=*/30);
  auto in_bundle = rayd::Task(Plus).SetPlacementGroup(pg, 1).SetResource("CPU", 0.5).Remote(2, 3);
  std::cout << "placement group reserved: " << (reserved ? "yes" : "no")
            << ", Plus(2, 3) in bundle 1 = " << *rayd::Get(in_bundle) << "\n";
  rayd::RemovePlacementGroup(pg.GetID());

  try {
    rayd::Get(rayd::Task(Fail).Remote(7));
  } catch (const rayd::RemoteError& e) {
    std::cout << "Fail(7) raised " << e.remote_type() << ": " << e.remote_message() << "\n";
  }

  counter.Kill();
  rayd::Shutdown();
  return 0;
}
