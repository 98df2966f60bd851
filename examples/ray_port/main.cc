// A Ray C++ program ported to rayd by renaming (ray:: -> rayd::, RAY_ -> RAYD_, <ray/api.h> ->
// <rayd/api.h>, ray::RayConfig -> rayd::RaydConfig): the README's example. Tasks submit tasks,
// overloads are picked with RAYD_FUNC, the job carries a namespace and environment variables,
// an actor creates an actor, and an application metric is counted.

#include <rayd/api.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

int Fib(int n) {  // a task that submits tasks
  if (n < 2) return n;
  auto a = rayd::Task(Fib).Remote(n - 1);
  auto b = rayd::Task(Fib).Remote(n - 2);
  return *a.Get() + *b.Get();
}
int Sum(int a) { return a; }
int Sum(int a, int b) { return a + b; }
std::string Mode() {
  const char* mode = std::getenv("MODE");
  return mode ? mode : "<unset>";
}

class Greeter {
 public:
  static Greeter* Create(std::string greeting) { return new Greeter(std::move(greeting)); }
  explicit Greeter(std::string greeting) : greeting_(std::move(greeting)) {}
  std::string Greet(std::string name) { return greeting_ + ", " + name; }
  // An actor that creates an actor and calls it.
  std::string Relay(std::string name) {
    auto inner = rayd::Actor(Greeter::Create).Remote(greeting_ + " again");
    return *inner.Task(&Greeter::Greet).Remote(name).Get();
  }

 private:
  std::string greeting_;
};

RAYD_REMOTE(Fib, RAYD_FUNC(Sum, int), RAYD_FUNC(Sum, int, int), Mode, Greeter::Create,
            &Greeter::Greet, &Greeter::Relay);

int main(int argc, char** argv) {
  rayd::RaydConfig config;
  config.ray_namespace = "team";
  config.runtime_env.Set("env_vars", std::map<std::string, std::string>{{"MODE", "fast"}});
  rayd::Init(config, argc, argv);
  std::cout << "Fib(6) = " << *rayd::Task(Fib).Remote(6).Get() << "\n";
  std::cout << "Sum(1, 2) = " << *rayd::Task(RAYD_FUNC(Sum, int, int)).Remote(1, 2).Get() << "\n";
  std::cout << "MODE in a worker = " << *rayd::Task(Mode).Remote().Get() << "\n";
  auto greeter = rayd::Actor(Greeter::Create).SetName("greeter").Remote("hello");
  std::cout << "Relay = " << *greeter.Task(&Greeter::Relay).Remote("ray").Get() << "\n";
  std::cout << "namespace = " << rayd::GetNamespace() << ", found by name: "
            << (rayd::GetActor<Greeter>("greeter") ? "yes" : "no") << "\n";
  rayd::Counter calls("app_calls_total", "Calls of the example.", "calls");
  calls.Inc(1, {});
  rayd::Shutdown();
  return 0;
}
