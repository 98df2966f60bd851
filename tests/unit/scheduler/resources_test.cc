#include <rayd/scheduler/resources.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace rayd::scheduler {
namespace {

FixedPoint Whole(int64_t n) { return FixedPoint::FromWhole(n); }
FixedPoint Units(int64_t n) { return FixedPoint::FromUnits(n); }

// The message of a failed result; fails the test if the result is ok.
template <typename T>
std::string ErrorOf(const Result<T>& result) {
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == StatusCode::kInvalidArgument);
  return result.status().message();
}

TEST_CASE("FixedPoint::FromDouble rounds to the nearest unit", "[fixed_point]") {
  CHECK(FixedPoint::FromDouble(1.0).units() == 10000);
  CHECK(FixedPoint::FromDouble(0.5).units() == 5000);
  CHECK(FixedPoint::FromDouble(1.0 / 3).units() == 3333);
  CHECK(FixedPoint::FromDouble(2.0 / 3).units() == 6667);
  CHECK(FixedPoint::FromDouble(0.1).units() == 1000);
  CHECK(FixedPoint::FromDouble(0.3).units() == 3000);  // 0.3 * 10000 is 2999.9999999999995
  CHECK(FixedPoint::FromDouble(0.0001).units() == 1);
  CHECK(FixedPoint::FromDouble(0.00005).units() == 1);  // halves away from zero
  CHECK(FixedPoint::FromDouble(0.00004).units() == 0);
  CHECK(FixedPoint::FromDouble(-0.25).units() == -2500);
  CHECK(FixedPoint::FromDouble(std::nan("")).units() == 0);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  CHECK(FixedPoint::FromDouble(1e300).units() == kMax);
  CHECK(FixedPoint::FromDouble(std::numeric_limits<double>::infinity()).units() == kMax);
  CHECK(FixedPoint::FromDouble(-1e300).units() == kMin);
}

TEST_CASE("FixedPoint arithmetic is exact and does not drift", "[fixed_point]") {
  FixedPoint sum;
  const FixedPoint tenth = FixedPoint::FromDouble(0.1);
  for (int i = 0; i < 10000; ++i) sum += tenth;
  CHECK(sum == Whole(1000));
  CHECK(sum.ToDouble() == 1000.0);

  // Taking a third three times from one leaves exactly one unit: 10000 - 3 * 3333.
  FixedPoint gpu = Whole(1);
  const FixedPoint third = FixedPoint::FromDouble(1.0 / 3);
  for (int i = 0; i < 3; ++i) gpu -= third;
  CHECK(gpu == Units(1));
  CHECK(gpu.ToString() == "0.0001");

  CHECK(Whole(2) + FixedPoint::FromDouble(0.25) == FixedPoint::FromDouble(2.25));
  CHECK(Whole(1) - Whole(3) == Whole(-2));
  CHECK(Units(1) < Units(2));
  CHECK(Units(2) >= Units(2));
  CHECK(Units(3) != Units(2));
  CHECK(FixedPoint() == Units(0));
}

TEST_CASE("FixedPoint saturates instead of wrapping", "[fixed_point]") {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  CHECK((Units(kMax) + Units(1)).units() == kMax);
  CHECK((Units(kMin) - Units(1)).units() == kMin);
  CHECK((Units(kMin) + Units(-1)).units() == kMin);
  CHECK((Units(kMax) - Units(-1)).units() == kMax);
  CHECK(FixedPoint::FromWhole(kMax / 100).units() == kMax);
  CHECK(FixedPoint::FromWhole(kMin / 100).units() == kMin);
  CHECK(FixedPoint::FromWhole(FixedPoint::kMaxWhole).units() == FixedPoint::kMaxWhole * 10000);
}

TEST_CASE("FixedPoint::ToString prints the shortest exact form", "[fixed_point]") {
  CHECK(Whole(1).ToString() == "1");
  CHECK(FixedPoint().ToString() == "0");
  CHECK(FixedPoint::FromDouble(0.5).ToString() == "0.5");
  CHECK(Units(1).ToString() == "0.0001");
  CHECK(FixedPoint::FromDouble(2.25).ToString() == "2.25");
  CHECK(Units(12340).ToString() == "1.234");
  CHECK(Units(10010).ToString() == "1.001");
  CHECK(Whole(-3).ToString() == "-3");
  CHECK(Units(-5).ToString() == "-0.0005");
  CHECK(Units(std::numeric_limits<int64_t>::min()).ToString() == "-922337203685477.5808");
  CHECK(FixedPoint::FromDouble(1.0 / 3).ToDouble() == 0.3333);
}

TEST_CASE("ResourceSet stores positive amounts only", "[resource_set]") {
  ResourceSet set{{"CPU", 4}, {"GPU", 0}, {"tpu", 0.5}};
  CHECK(set.size() == 2);
  CHECK(set.Get("CPU") == Whole(4));
  CHECK(set.Get("GPU") == FixedPoint());
  CHECK(set.Get("missing") == FixedPoint());
  set.Set("tpu", FixedPoint());
  CHECK(set.size() == 1);
  set.Set("CPU", Whole(-1));
  CHECK(set.IsEmpty());
  CHECK(set == ResourceSet{});
  CHECK(ResourceSet{{"GPU", 0}} == ResourceSet{});
}

TEST_CASE("ResourceSet iterates in name order", "[resource_set]") {
  ResourceSet set{{"tpu", 1}, {"CPU", 4}, {"GPU", 2}, {"memory", 1024}};
  std::vector<std::string> names;
  for (const auto& [name, amount] : set) names.push_back(name);
  CHECK(names == std::vector<std::string>{"CPU", "GPU", "memory", "tpu"});
  CHECK(set.ToString() == "{CPU: 4, GPU: 2, memory: 1.00KiB, tpu: 1}");
  CHECK(ResourceSet{}.ToString() == "{}");
}

TEST_CASE("ResourceSet subset, add and subtract", "[resource_set]") {
  const ResourceSet available{{"CPU", 4}, {"GPU", 1}};
  CHECK(ResourceSet{}.IsSubsetOf(available));
  CHECK(ResourceSet{}.IsSubsetOf(ResourceSet{}));
  CHECK(ResourceSet{{"CPU", 4}}.IsSubsetOf(available));
  CHECK(ResourceSet{{"CPU", 2}, {"GPU", 0.5}}.IsSubsetOf(available));
  CHECK_FALSE(ResourceSet{{"CPU", 4.0001}}.IsSubsetOf(available));
  CHECK_FALSE(ResourceSet{{"tpu", 1}}.IsSubsetOf(available));
  CHECK_FALSE(available.IsSubsetOf(ResourceSet{{"CPU", 4}}));

  ResourceSet sum = available + ResourceSet{{"GPU", 0.5}, {"tpu", 2}};
  CHECK(sum == ResourceSet{{"CPU", 4}, {"GPU", 1.5}, {"tpu", 2}});

  ResourceSet rest = available - ResourceSet{{"CPU", 4}, {"GPU", 0.25}};
  CHECK(rest == ResourceSet{{"GPU", 0.75}});
  CHECK(rest.Get("CPU") == FixedPoint());  // dropped, not stored as zero

  // Violating the precondition clamps at zero rather than going negative.
  ResourceSet clamped = ResourceSet{{"CPU", 1}} - ResourceSet{{"CPU", 2}, {"GPU", 1}};
  CHECK(clamped.IsEmpty());

  ResourceSet gpus{{"GPU", 1}};
  const ResourceSet third{{"GPU", 1.0 / 3}};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(third.IsSubsetOf(gpus));
    gpus -= third;
  }
  CHECK(gpus.Get("GPU") == Units(1));
  CHECK_FALSE(third.IsSubsetOf(gpus));
}

TEST_CASE("ResourceSet JSON round trip", "[resource_set][json]") {
  const ResourceSet set{{"CPU", 4}, {"GPU", 1.0 / 3}, {"memory", 10737418240.0}, {"tpu", 0.0001}};
  CHECK(set.ToJson() == R"({"CPU":4,"GPU":0.3333,"memory":10737418240,"tpu":0.0001})");
  auto parsed = ResourceSet::FromJson(set.ToJson());
  REQUIRE(parsed.ok());
  CHECK(*parsed == set);
  CHECK(ResourceSet{}.ToJson() == "{}");
  CHECK(ResourceSet::FromJson("{}")->IsEmpty());
  // FromJson accepts the predefined names that --resources rejects.
  CHECK(ResourceSet::FromJson(R"({"CPU": 2, "object_store_memory": 100})")->Get("CPU") == Whole(2));

  // Every fractional amount with one to four decimals survives the trip through text.
  for (int64_t units = 1; units < 3 * FixedPoint::kScale; units += 7) {
    ResourceSet one;
    one.Set("x", Units(units + 123456789LL * FixedPoint::kScale));
    auto back = ResourceSet::FromJson(one.ToJson());
    REQUIRE(back.ok());
    REQUIRE(*back == one);
  }
}

TEST_CASE("FromJson reports errors with its own prefix", "[resource_set][json]") {
  CHECK(ErrorOf(ResourceSet::FromJson("[]")) ==
        R"(resources JSON must be a JSON object such as {"tpu": 1}, got array)");
  CHECK(ErrorOf(ResourceSet::FromJson(R"({"GPU": -1})")) ==
        R"(resources JSON: "GPU" must be a non-negative number, got -1)");
}

TEST_CASE("ParseResourcesJson accepts custom resources", "[parse][json]") {
  auto parsed = ParseResourcesJson(R"({"tpu":1,"custom":0.5, "zero": 0, "big": 1e6})");
  REQUIRE(parsed.ok());
  CHECK(*parsed == ResourceSet{{"tpu", 1}, {"custom", 0.5}, {"big", 1000000}});
  CHECK(ParseResourcesJson(" {} ")->IsEmpty());
  CHECK(ParseResourcesJson(R"({"a": 0.3})")->Get("a") == Units(3000));
  CHECK(ParseResourcesJson(R"({"a": 100000000000000})")->Get("a") == Whole(FixedPoint::kMaxWhole));
}

TEST_CASE("ParseResourcesJson error messages", "[parse][json]") {
  CHECK(ErrorOf(ParseResourcesJson("")) ==
        R"(--resources is empty; expected a JSON object such as {"tpu": 1})");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": 1,})")) ==
        "--resources is not valid JSON (at byte 11): syntax error while parsing object key - "
        "unexpected '}'; expected string literal");
  CHECK(ErrorOf(ParseResourcesJson("tpu=1")) ==
        "--resources is not valid JSON (at byte 2): syntax error while parsing value - invalid "
        "literal; last read: 'tp'");
  CHECK(ErrorOf(ParseResourcesJson(R"({"a": 1e400})")) ==
        "--resources is not valid JSON: number overflow parsing '1e400'");
  CHECK(ErrorOf(ParseResourcesJson("[1, 2]")) ==
        R"(--resources must be a JSON object such as {"tpu": 1}, got array)");
  CHECK(ErrorOf(ParseResourcesJson("3")) ==
        R"(--resources must be a JSON object such as {"tpu": 1}, got number)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": 1, "tpu": 2})")) ==
        R"(--resources: "tpu" is given twice)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"": 1})")) ==
        "--resources: resource names must not be empty");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": "1"})")) ==
        R"(--resources: "tpu" must be a non-negative number, got "1")");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": true})")) ==
        R"(--resources: "tpu" must be a non-negative number, got true)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": null})")) ==
        R"(--resources: "tpu" must be a non-negative number, got null)");
  // Long values are cut to 40 characters.
  CHECK(ErrorOf(ParseResourcesJson(
            R"({"tpu": {"list": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]}})")) ==
        R"(--resources: "tpu" must be a non-negative number, got )"
        R"({"list":[1,2,3,4,5,6,7,8,9,10,11,12,1...)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": -1})")) ==
        R"(--resources: "tpu" must be a non-negative number, got -1)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": -0.5})")) ==
        R"(--resources: "tpu" must be a non-negative number, got -0.5)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": 0.00005})")) ==
        R"(--resources: "tpu" = 5e-05 is finer than the resolution of resource amounts (0.0001))");
  CHECK(
      ErrorOf(ParseResourcesJson(R"({"tpu": 1.23456})")) ==
      R"(--resources: "tpu" = 1.23456 is finer than the resolution of resource amounts (0.0001))");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": 100000000000001})")) ==
        R"(--resources: "tpu" is too large; the maximum amount is 100000000000000)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": 1e15})")) ==
        R"(--resources: "tpu" is too large; the maximum amount is 100000000000000)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"tpu": 18446744073709551615})")) ==
        R"(--resources: "tpu" is too large; the maximum amount is 100000000000000)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"a\nb": "x"})")) ==
        R"(--resources: "a\nb" must be a non-negative number, got "x")");
}

TEST_CASE("ParseResourcesJson rejects predefined resources", "[parse][json]") {
  CHECK(ErrorOf(ParseResourcesJson(R"({"CPU": 4})")) ==
        R"(--resources: "CPU" is a predefined resource; use --num-cpus instead)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"GPU": 1})")) ==
        R"(--resources: "GPU" is a predefined resource; use --num-gpus instead)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"memory": 1})")) ==
        R"(--resources: "memory" is a predefined resource; use --memory instead)");
  CHECK(ErrorOf(ParseResourcesJson(R"({"object_store_memory": 1})")) ==
        R"(--resources: "object_store_memory" is a predefined resource; )"
        "use --object-store-memory instead");
  CHECK(ParseResourcesJson(R"({"cpu": 1})").ok());  // names are case-sensitive
}

TEST_CASE("FormatResourceAmount prints bytes for memory resources", "[bytes]") {
  auto bytes = [](int64_t n) { return FixedPoint::FromWhole(n); };
  CHECK(FormatResourceAmount("memory", bytes(10LL << 30)) == "10.00GiB");
  CHECK(FormatResourceAmount("object_store_memory", bytes(512LL << 20)) == "512.00MiB");
  CHECK(FormatResourceAmount("memory", bytes(0)) == "0B");
  CHECK(FormatResourceAmount("memory", bytes(1023)) == "1023B");
  CHECK(FormatResourceAmount("memory", bytes(1536)) == "1.50KiB");
  CHECK(FormatResourceAmount("memory", bytes((1LL << 20) - 1)) == "1.00MiB");
  CHECK(FormatResourceAmount("memory", bytes(3LL << 40)) == "3.00TiB");
  CHECK(FormatResourceAmount("memory", bytes(500LL << 40)) == "500.00TiB");
  // The largest amount (int64 max units) is about 838 TiB.
  CHECK(FormatResourceAmount("memory", bytes(5LL << 50)) == "838.86TiB");
  CHECK(FormatResourceAmount("memory", FixedPoint::FromDouble(99.5)) == "100B");
  CHECK(FormatResourceAmount("memory", bytes(-2048)) == "-2.00KiB");
  CHECK(FormatResourceAmount("CPU", FixedPoint::FromDouble(2.5)) == "2.5");
  CHECK(FormatResourceAmount("tpu", bytes(1LL << 30)) == "1073741824");
}

TEST_CASE("ParseByteSize accepts numbers with units", "[bytes]") {
  auto parse = [](std::string_view text) {
    auto result = ParseByteSize(text);
    REQUIRE(result.ok());
    return *result;
  };
  CHECK(parse("1073741824") == 1073741824);
  CHECK(parse("0") == 0);
  CHECK(parse("1GiB") == 1LL << 30);
  CHECK(parse("512MiB") == 512LL << 20);
  CHECK(parse("2GB") == 2'000'000'000);
  CHECK(parse("100KiB") == 102400);
  CHECK(parse("100kb") == 100000);
  CHECK(parse("3TiB") == 3LL << 40);
  CHECK(parse("1TB") == 1'000'000'000'000);
  CHECK(parse("42B") == 42);
  CHECK(parse(" 1.5 GiB ") == 1610612736);
  CHECK(parse("0.5KB") == 500);
  CHECK(parse(".5KiB") == 512);
  CHECK(parse("1.1KiB") == 1126);  // 1126.4 rounds to the nearest byte
  CHECK(parse("100000000000000") == FixedPoint::kMaxWhole);
}

TEST_CASE("ParseByteSize error messages", "[bytes]") {
  CHECK(ErrorOf(ParseByteSize("")) ==
        "byte size is empty; expected a number with an optional unit, e.g. 512MiB or 2GB");
  CHECK(ErrorOf(ParseByteSize("  ")) ==
        "byte size is empty; expected a number with an optional unit, e.g. 512MiB or 2GB");
  CHECK(ErrorOf(ParseByteSize("GiB")) ==
        R"(invalid byte size "GiB": expected a number with an optional unit, e.g. 512MiB or 2GB)");
  CHECK(ErrorOf(ParseByteSize("1.2.3GB")) ==
        R"(invalid byte size "1.2.3GB": )"
        "expected a number with an optional unit, e.g. 512MiB or 2GB");
  CHECK(ErrorOf(ParseByteSize(".")) ==
        R"(invalid byte size ".": expected a number with an optional unit, e.g. 512MiB or 2GB)");
  CHECK(ErrorOf(ParseByteSize("-1GiB")) == R"(byte size "-1GiB" must not be negative)");
  CHECK(ErrorOf(ParseByteSize("2XB")) ==
        R"(unknown unit "XB" in byte size "2XB"; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  CHECK(ErrorOf(ParseByteSize("2G")) ==
        R"(unknown unit "G" in byte size "2G"; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  CHECK(ErrorOf(ParseByteSize("1e9")) ==
        R"(unknown unit "e9" in byte size "1e9"; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  const std::string too_large = " is too large; the maximum is 100000000000000 bytes (90.95TiB)";
  CHECK(ErrorOf(ParseByteSize("100000000000001")) == R"(byte size "100000000000001")" + too_large);
  CHECK(ErrorOf(ParseByteSize("99999999999999999999")) ==
        R"(byte size "99999999999999999999")" + too_large);
  CHECK(ErrorOf(ParseByteSize("100000TiB")) == R"(byte size "100000TiB")" + too_large);
  CHECK(ErrorOf(ParseByteSize("90.95TiB")) == R"(byte size "90.95TiB")" + too_large);
}

TEST_CASE("ParseLabels", "[labels]") {
  auto parsed = ParseLabels("zone=us-east-1a, accel = h100 ,empty=,eq=a=b");
  REQUIRE(parsed.ok());
  CHECK(*parsed == Labels{{"zone", "us-east-1a"}, {"accel", "h100"}, {"empty", ""}, {"eq", "a=b"}});
  CHECK(ParseLabels("")->empty());
  CHECK(ParseLabels("  ")->empty());
  CHECK(ErrorOf(ParseLabels("a=b,,c=d")) ==
        R"(empty label in "a=b,,c=d"; expected key=value pairs separated by commas)");
  CHECK(ErrorOf(ParseLabels("a=b,")) ==
        R"(empty label in "a=b,"; expected key=value pairs separated by commas)");
  CHECK(ErrorOf(ParseLabels("a=b,gpu")) == R"(label "gpu" has no '='; expected key=value)");
  CHECK(ErrorOf(ParseLabels(" =v")) == R"(label "=v" has an empty key)");
  CHECK(ErrorOf(ParseLabels("k=1,k=2")) == R"(label key "k" is given twice)");
}

TEST_CASE("NodeResources allocates within what is available", "[node]") {
  NodeResources node(ResourceSet{{"CPU", 4}, {"GPU", 1}}, Labels{{"zone", "a"}});
  CHECK(node.available() == node.total());
  CHECK(node.labels().at("zone") == "a");

  CHECK(node.IsFeasible(ResourceSet{{"CPU", 4}}));
  CHECK_FALSE(node.IsFeasible(ResourceSet{{"CPU", 5}}));
  CHECK_FALSE(node.IsFeasible(ResourceSet{{"tpu", 1}}));

  REQUIRE(node.TryAllocate(ResourceSet{{"CPU", 3}, {"GPU", 0.5}}));
  CHECK(node.available() == ResourceSet{{"CPU", 1}, {"GPU", 0.5}});
  CHECK_FALSE(node.IsAvailable(ResourceSet{{"CPU", 2}}));
  CHECK(node.IsFeasible(ResourceSet{{"CPU", 2}}));

  const NodeResources before = node;
  CHECK_FALSE(node.TryAllocate(ResourceSet{{"CPU", 1}, {"GPU", 0.75}}));
  CHECK(node == before);  // a failed allocation changes nothing

  node.Release(ResourceSet{{"CPU", 3}, {"GPU", 0.5}});
  CHECK(node.available() == node.total());
  node.Release(ResourceSet{{"CPU", 3}, {"tpu", 1}});  // double release cannot create resources
  CHECK(node.available() == node.total());
}

TEST_CASE("NodeResources snapshot clamps available to total", "[node]") {
  NodeResources node(ResourceSet{{"CPU", 4}, {"GPU", 1}}, ResourceSet{{"CPU", 8}, {"tpu", 1}},
                     Labels{});
  CHECK(node.available() == ResourceSet{{"CPU", 4}});
  CHECK(node.available().IsSubsetOf(node.total()));
}

}  // namespace
}  // namespace rayd::scheduler
