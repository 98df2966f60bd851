// RAYD_REMOTE and the FunctionRegistry; argument packing on the caller side and decoding and
// invocation on the worker side, through registry entries and encoded bytes.

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "fake_runtime.h"
#include "rayd/api.h"
#include "rayd/internal/function_registry.h"

namespace regtest {

struct Point {
  double x = 0;
  double y = 0;
  std::string label;
  MSGPACK_DEFINE(x, y, label);
  friend bool operator==(const Point&, const Point&) = default;
};

// A value that carries refs, as users build them.
struct Batch {
  std::string name;
  std::vector<rayd::ObjectRef<int>> parts;
  MSGPACK_DEFINE(name, parts);
};

int RegMul(int a, int b) { return a * b; }
std::string RegConcat(const std::string& a, std::vector<std::string> rest) {
  std::string out = a;
  for (const auto& s : rest) out += s;
  return out;
}
double RegHalf(double x) noexcept { return x / 2; }
float RegScale(float x) { return x * 2; }
int g_noop_calls = 0;
void RegNoop() { ++g_noop_calls; }
Point RegMirror(const Point& p) { return {p.y, p.x, p.label + "'"}; }
int RegTakesRef(rayd::ObjectRef<int> ref) { return ref.IsNil() ? -1 : 1; }
int RegTakesValue(int v) { return v; }
int RegNotRegistered(int v) { return v; }

int g_acc_destroyed = 0;
class Acc {
 public:
  explicit Acc(int start) : total_(start) {}
  ~Acc() { ++g_acc_destroyed; }
  static Acc* Make(int start) { return new Acc(start); }
  static Acc* MakeNull() { return nullptr; }
  int Push(int x) { return total_ += x; }
  int Total() const { return total_; }
  void Reset() noexcept { total_ = 0; }

 private:
  int total_;
};

}  // namespace regtest

// Spaces, '&' and several lines in one file, on purpose.
// clang-format off
RAYD_REMOTE(regtest::RegMul, regtest::RegConcat);
RAYD_REMOTE( &regtest::RegHalf ,regtest::RegNoop );
RAYD_REMOTE(regtest::RegMirror, regtest::RegTakesRef, regtest::RegTakesValue);
RAYD_REMOTE(regtest::Acc::Make, regtest::Acc::MakeNull, & regtest::Acc::Push,
            &regtest::Acc::Total, &regtest::Acc::Reset);
// clang-format on

namespace rayd {
namespace {

using internal::FunctionKind;
using internal::FunctionRegistry;
using internal::InvocationArg;
using internal::TaskArg;
using regtest::Acc;
using regtest::Point;

const internal::FunctionEntry& Entry(const std::string& name) {
  const internal::FunctionEntry* entry = FunctionRegistry::Global().Find(name);
  INFO(name);
  REQUIRE(entry != nullptr);
  return *entry;
}

InvocationArg Value(std::string bytes) {
  InvocationArg arg;
  arg.value = std::move(bytes);
  return arg;
}

template <typename T>
InvocationArg Encoded(const T& v) {
  return Value(internal::Serialize(v));
}

TEST_CASE("RAYD_REMOTE registers names as written, normalised", "[api][registry]") {
  std::vector<std::string> names = FunctionRegistry::Global().Names();
  for (const char* name :
       {"regtest::RegMul", "regtest::RegConcat", "regtest::RegHalf", "regtest::RegNoop",
        "regtest::Acc::Make", "regtest::Acc::Push", "regtest::Acc::Total", "regtest::Acc::Reset"}) {
    INFO(name);
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
  }
  CHECK(FunctionRegistry::Global().Find("&regtest::Acc::Push") == nullptr);
  CHECK(FunctionRegistry::Global().Find("regtest::RegNotRegistered") == nullptr);
}

TEST_CASE("kinds and arities follow the function types", "[api][registry]") {
  CHECK(Entry("regtest::RegMul").kind == FunctionKind::kFunction);
  CHECK(Entry("regtest::RegMul").arity == 2);
  CHECK(Entry("regtest::RegNoop").kind == FunctionKind::kFunction);
  CHECK(Entry("regtest::RegNoop").arity == 0);
  CHECK(Entry("regtest::Acc::Make").kind == FunctionKind::kActorFactory);
  CHECK(Entry("regtest::Acc::Push").kind == FunctionKind::kActorMethod);
  CHECK(Entry("regtest::Acc::Push").arity == 1);
  CHECK(Entry("regtest::Acc::Total").kind == FunctionKind::kActorMethod);  // const
  CHECK(Entry("regtest::Acc::Reset").kind == FunctionKind::kActorMethod);  // noexcept
}

TEST_CASE("names are found from function pointers", "[api][registry]") {
  auto& registry = FunctionRegistry::Global();
  const std::string* name = registry.NameFor(FunctionRegistry::PointerKey(&regtest::RegMul));
  REQUIRE(name != nullptr);
  CHECK(*name == "regtest::RegMul");
  name = registry.NameFor(FunctionRegistry::PointerKey(&Acc::Push));
  REQUIRE(name != nullptr);
  CHECK(*name == "regtest::Acc::Push");
  name = registry.NameFor(FunctionRegistry::PointerKey(&Acc::Total));
  REQUIRE(name != nullptr);
  CHECK(*name == "regtest::Acc::Total");
  CHECK(registry.NameFor(FunctionRegistry::PointerKey(&regtest::RegNotRegistered)) == nullptr);
  CHECK(internal::RemoteName(&regtest::RegHalf) == "regtest::RegHalf");
  CHECK_THROWS_WITH(internal::RemoteName(&regtest::RegNotRegistered),
                    "function is not registered with RAYD_REMOTE");
}

TEST_CASE("RAYD_REMOTE argument lists split at top-level commas only", "[api][registry]") {
  CHECK(internal::SplitRemoteNames("Plus", 1) == std::vector<std::string>{"Plus"});
  CHECK(internal::SplitRemoteNames(" Counter::FactoryCreate,  &Counter::Add ", 2) ==
        std::vector<std::string>{"Counter::FactoryCreate", "Counter::Add"});
  CHECK(internal::SplitRemoteNames("Sum<int, long>, & A::B, (F)", 3) ==
        std::vector<std::string>{"Sum<int, long>", "A::B", "(F)"});
}

TEST_CASE("registering a name twice keeps the first", "[api][registry]") {
  auto& registry = FunctionRegistry::Global();
  internal::FunctionEntry second{"regtest::RegMul", FunctionKind::kFunction, 7, nullptr};
  registry.Register(std::move(second), "not-a-pointer");
  CHECK(Entry("regtest::RegMul").arity == 2);
  CHECK(Entry("regtest::RegMul").invoke != nullptr);
}

TEST_CASE("values round-trip through msgpack", "[api][serialization]") {
  using internal::Deserialize;
  using internal::Serialize;
  CHECK(Deserialize<int>(Serialize(-42)) == -42);
  CHECK(Deserialize<uint64_t>(Serialize(uint64_t{1} << 63)) == uint64_t{1} << 63);
  CHECK(Deserialize<std::string>(Serialize(std::string("h\0llo", 5))) == std::string("h\0llo", 5));
  std::vector<float> floats(1000);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = 0.5f * static_cast<float>(i);
  CHECK(Deserialize<std::vector<float>>(Serialize(floats)) == floats);
  std::map<std::string, std::vector<int>> nested{{"a", {1, 2}}, {"b", {}}};
  CHECK(Deserialize<decltype(nested)>(Serialize(nested)) == nested);
  Point p{1.5, -2, "p"};
  CHECK(Deserialize<Point>(Serialize(p)) == p);
  CHECK(Deserialize<std::optional<int>>(Serialize(std::optional<int>())) == std::nullopt);
  CHECK_THROWS(Deserialize<int>(Serialize(std::string("not an int"))));
  CHECK_THROWS(Deserialize<int>(""));
  CHECK_THROWS(Deserialize<int>(Serialize(1) + Serialize(2)));  // trailing bytes
}

TEST_CASE("refs and actor handles inside values round-trip as borrowed", "[api][serialization]") {
  testing::FakeRuntime fake;
  ObjectRef<int> a = Put(1);
  ObjectRef<int> b = Put(2);
  std::string bytes = internal::Serialize(regtest::Batch{"two", {a, b}});
  {
    auto batch = internal::Deserialize<regtest::Batch>(bytes);
    CHECK(batch.name == "two");
    REQUIRE(batch.parts.size() == 2);
    CHECK(batch.parts[0] == a);
    CHECK(batch.parts[1].ID() == b.ID());
    CHECK(batch.parts[0].owner_address() == testing::FakeRuntime::kOwner);
    REQUIRE(fake.borrowed.size() == 2);
    CHECK(fake.borrowed[0] == std::make_pair(a.id(), std::string(testing::FakeRuntime::kOwner)));
    CHECK(fake.RefCount(a.id()) == 2);  // ours and the decoded copy
    CHECK(*Get(batch.parts[1]) == 2);
  }
  CHECK(fake.RefCount(a.id()) == 1);
  // A nil ref stays nil and registers nothing.
  auto nil = internal::Deserialize<ObjectRef<int>>(internal::Serialize(ObjectRef<int>()));
  CHECK(nil.IsNil());
  CHECK(fake.borrowed.size() == 2);

  ActorHandle<Acc> handle(ActorId::FromRandom());
  auto back = internal::Deserialize<ActorHandle<Acc>>(internal::Serialize(handle));
  CHECK(back == handle);
  CHECK(internal::Deserialize<ActorHandle<Acc>>(internal::Serialize(ActorHandle<Acc>())).IsNil());
  CHECK_THROWS(internal::Deserialize<ActorHandle<Acc>>(internal::Serialize(std::string("zz"))));
}

TEST_CASE("arguments are converted to and serialised as the parameter type", "[api][args]") {
  // double -> float: the bytes are those of the float (msgpack float32, not float64).
  auto packed = internal::PackArgs<decltype(&regtest::RegScale)>(0.1);
  REQUIRE(packed.size() == 1);
  CHECK(packed[0].kind == TaskArg::Kind::kValue);
  CHECK(packed[0].value == internal::Serialize(0.1f));
  CHECK(packed[0].value != internal::Serialize(0.1));
  // int -> double.
  packed = internal::PackArgs<decltype(&regtest::RegHalf)>(3);
  CHECK(internal::Deserialize<double>(packed[0].value) == 3.0);
  // const char* -> const std::string&, and a vector by value.
  packed =
      internal::PackArgs<decltype(&regtest::RegConcat)>("a", std::vector<std::string>{"b", "c"});
  REQUIRE(packed.size() == 2);
  CHECK(packed[0].value == internal::Serialize(std::string("a")));
  CHECK(packed[1].value == internal::Serialize(std::vector<std::string>{"b", "c"}));
  const Point p{3, 4, "q"};
  packed = internal::PackArgs<decltype(&regtest::RegMirror)>(p);
  CHECK(internal::Deserialize<Point>(packed[0].value) == p);
}

TEST_CASE("an ObjectRef argument is kRef or kRefAsRef by the parameter type", "[api][args]") {
  testing::FakeRuntime fake;
  ObjectRef<int> ref = Put(5);
  auto as_value = internal::PackArgs<decltype(&regtest::RegTakesValue)>(ref);
  REQUIRE(as_value.size() == 1);
  CHECK(as_value[0].kind == TaskArg::Kind::kRef);
  CHECK(as_value[0].ref == ref.id());
  CHECK(as_value[0].owner_address == testing::FakeRuntime::kOwner);
  CHECK(as_value[0].value.empty());
  auto as_ref = internal::PackArgs<decltype(&regtest::RegTakesRef)>(ref);
  CHECK(as_ref[0].kind == TaskArg::Kind::kRefAsRef);
  CHECK(as_ref[0].ref == ref.id());
  CHECK_THROWS_AS(internal::PackArgs<decltype(&regtest::RegTakesValue)>(ObjectRef<int>()),
                  RaydError);
}

TEST_CASE("functions run through their registry entries", "[api][invoke]") {
  auto result = Entry("regtest::RegMul").invoke(nullptr, {Encoded(6), Encoded(7)});
  CHECK(internal::Deserialize<int>(result.value) == 42);
  CHECK(result.actor == nullptr);

  result = Entry("regtest::RegConcat")
               .invoke(nullptr,
                       {Encoded(std::string("x")), Encoded(std::vector<std::string>{"y", "z"})});
  CHECK(internal::Deserialize<std::string>(result.value) == "xyz");

  result = Entry("regtest::RegMirror").invoke(nullptr, {Encoded(Point{1, 2, "m"})});
  CHECK(internal::Deserialize<Point>(result.value) == Point{2, 1, "m'"});

  int before = regtest::g_noop_calls;
  result = Entry("regtest::RegNoop").invoke(nullptr, {});
  CHECK(regtest::g_noop_calls == before + 1);
  CHECK(result.value.empty());  // void
}

TEST_CASE("factories make instances that methods then run on", "[api][invoke]") {
  int destroyed = regtest::g_acc_destroyed;
  {
    auto created = Entry("regtest::Acc::Make").invoke(nullptr, {Encoded(10)});
    REQUIRE(created.actor != nullptr);
    void* self = created.actor.get();
    auto pushed = Entry("regtest::Acc::Push").invoke(self, {Encoded(5)});
    CHECK(internal::Deserialize<int>(pushed.value) == 15);
    CHECK(internal::Deserialize<int>(Entry("regtest::Acc::Total").invoke(self, {}).value) == 15);
    CHECK(Entry("regtest::Acc::Reset").invoke(self, {}).value.empty());
    CHECK(static_cast<Acc*>(self)->Total() == 0);
    CHECK_THROWS_AS(Entry("regtest::Acc::Push").invoke(nullptr, {Encoded(1)}),
                    internal::ArgumentError);
  }
  // The shared_ptr<void> deleted the instance as an Acc.
  CHECK(regtest::g_acc_destroyed == destroyed + 1);
  CHECK_THROWS_AS(Entry("regtest::Acc::MakeNull").invoke(nullptr, {}), RaydError);
}

TEST_CASE("bad argument bytes raise ArgumentError naming the function and index", "[api][invoke]") {
  const auto& mul = Entry("regtest::RegMul");
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(mul.invoke(nullptr, {Encoded(1), Encoded(std::string("two"))}),
                  internal::ArgumentError);
  CHECK_THROWS_WITH(mul.invoke(nullptr, {Encoded(1), Encoded(std::string("two"))}),
                    Contains("regtest::RegMul") && Contains("argument 1") && Contains("int"));
  CHECK_THROWS_WITH(mul.invoke(nullptr, {Value(""), Encoded(2)}),
                    Contains("regtest::RegMul") && Contains("argument 0"));
  CHECK_THROWS_WITH(mul.invoke(nullptr, {Value("\xc1"), Encoded(2)}), Contains("argument 0"));
  CHECK_THROWS_WITH(mul.invoke(nullptr, {Encoded(1), Value(internal::Serialize(2) + "x")}),
                    Contains("argument 1"));
  CHECK_THROWS_WITH(mul.invoke(nullptr, {Encoded(1)}), Contains("expected 2 arguments, got 1"));
  InvocationArg ref;
  ref.is_ref = true;
  ref.ref = ObjectId::FromRandom();
  CHECK_THROWS_AS(mul.invoke(nullptr, {ref, Encoded(2)}), internal::ArgumentError);
  CHECK_THROWS_WITH(Entry("regtest::RegMirror").invoke(nullptr, {Encoded(std::string("p"))}),
                    Contains("regtest::RegMirror") && Contains("regtest::Point"));
}

TEST_CASE("an ObjectRef parameter gets the ref itself, registered as borrowed", "[api][invoke]") {
  testing::FakeRuntime fake;
  InvocationArg ref;
  ref.is_ref = true;
  ref.ref = ObjectId::FromRandom();
  ref.owner_address = "elsewhere:7";
  auto result = Entry("regtest::RegTakesRef").invoke(nullptr, {ref});
  CHECK(internal::Deserialize<int>(result.value) == 1);
  REQUIRE(fake.borrowed.size() == 1);
  CHECK(fake.borrowed[0] == std::make_pair(ref.ref, std::string("elsewhere:7")));
  CHECK(fake.RefCount(ref.ref) == 0);  // the handle lived for the call only
  CHECK(fake.adds == 1);
}

struct CustomFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST_CASE("demangled type names", "[api][errors]") {
  CHECK(internal::DemangledTypeName(std::out_of_range("x")) == "std::out_of_range");
  CHECK(internal::DemangledTypeName(CustomFailure("x")) ==
        "rayd::(anonymous namespace)::CustomFailure");
  const std::exception& base = RemoteError("T", "m");
  CHECK(internal::DemangledTypeName(base) == "rayd::RemoteError");
  CHECK(internal::DemangledName(typeid(int)) == "int");
}

}  // namespace
}  // namespace rayd
