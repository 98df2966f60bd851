// Domains (draws stay inside their bounds and steps, with the right JSON types; Contains;
// Validate's errors) and the variant generator (count, order, nesting, reproducibility).

#include <rayd/tune/search_space.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace rayd::tune {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using nlohmann::json;

constexpr int kDraws = 2000;

bool IsMultipleOf(double v, double q) {
  double k = std::round(v / q);
  return std::fabs(v - k * q) <= 1e-9 * std::max(std::fabs(v), q);
}

TEST_CASE("uniform draws stay from lower up to but excluding upper and spread over the range", "[tune]") {
  Domain d = Domain::Uniform(-2.0, 3.0);
  REQUIRE_NOTHROW(d.Validate());
  Rng rng(1);
  double min = 1e9, max = -1e9;
  for (int i = 0; i < kDraws; ++i) {
    json v = d.Sample(rng);
    REQUIRE(v.is_number_float());
    double x = v.get<double>();
    REQUIRE(x >= -2.0);
    REQUIRE(x < 3.0);
    REQUIRE(d.Contains(v));
    min = std::min(min, x);
    max = std::max(max, x);
  }
  CHECK(min < -1.9);
  CHECK(max > 2.9);
}

TEST_CASE("loguniform spreads its draws over every decade", "[tune]") {
  Domain d = Domain::LogUniform(1e-4, 1e-1);
  Rng rng(2);
  std::map<int, int> per_decade;
  for (int i = 0; i < kDraws; ++i) {
    double x = d.Sample(rng).get<double>();
    REQUIRE(x >= 1e-4);
    REQUIRE(x < 1e-1);
    per_decade[static_cast<int>(std::floor(std::log10(x)))]++;
  }
  // Three decades, each about a third of the draws; a uniform draw would put ~90% in the top.
  REQUIRE(per_decade.size() == 3);
  for (const auto& [decade, count] : per_decade) {
    INFO("decade 1e" << decade);
    CHECK(count > kDraws / 3 - 150);
    CHECK(count < kDraws / 3 + 150);
  }
}

TEST_CASE("quniform and qloguniform draws are multiples of q within the bounds", "[tune]") {
  Rng rng(3);
  Domain qu = Domain::QUniform(0.0, 1.0, 0.25);
  std::set<double> seen;
  for (int i = 0; i < kDraws; ++i) {
    json v = qu.Sample(rng);
    double x = v.get<double>();
    REQUIRE(x >= 0.0);
    REQUIRE(x <= 1.0);
    REQUIRE(IsMultipleOf(x, 0.25));
    REQUIRE(qu.Contains(v));
    seen.insert(x);
  }
  CHECK(seen == std::set<double>{0.0, 0.25, 0.5, 0.75, 1.0});

  // Bounds that are not multiples of q: the draw is moved back inside.
  Domain odd = Domain::QUniform(0.1, 0.95, 0.2);
  for (int i = 0; i < kDraws; ++i) {
    double x = odd.Sample(rng).get<double>();
    REQUIRE(x >= 0.1);
    REQUIRE(x <= 0.95);
    REQUIRE(IsMultipleOf(x, 0.2));
  }

  Domain ql = Domain::QLogUniform(1e-4, 1e-1, 5e-5);
  for (int i = 0; i < kDraws; ++i) {
    json v = ql.Sample(rng);
    double x = v.get<double>();
    REQUIRE(x >= 1e-4);
    REQUIRE(x <= 1e-1);
    REQUIRE(IsMultipleOf(x, 5e-5));
    REQUIRE(ql.Contains(v));
  }
}

TEST_CASE("randint draws integers from lower up to upper with upper excluded", "[tune]") {
  Domain d = Domain::RandInt(-3, 4);
  Rng rng(4);
  std::set<int64_t> seen;
  for (int i = 0; i < kDraws; ++i) {
    json v = d.Sample(rng);
    REQUIRE(v.is_number_integer());
    int64_t x = v.get<int64_t>();
    REQUIRE(x >= -3);
    REQUIRE(x < 4);
    seen.insert(x);
  }
  CHECK(seen == std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3});
}

TEST_CASE("qrandint draws multiples of q from lower to upper with upper included", "[tune]") {
  Domain d = Domain::QRandInt(-21, 12, 3);
  Rng rng(5);
  std::set<int64_t> seen;
  for (int i = 0; i < kDraws; ++i) {
    json v = d.Sample(rng);
    REQUIRE(v.is_number_integer());
    int64_t x = v.get<int64_t>();
    REQUIRE(x >= -21);
    REQUIRE(x <= 12);
    REQUIRE(x % 3 == 0);
    REQUIRE(d.Contains(v));
    seen.insert(x);
  }
  CHECK(seen.count(-21) == 1);
  CHECK(seen.count(12) == 1);
  CHECK(seen.size() == 12);

  // Bounds off the grid of q: results stay inside anyway.
  Domain odd = Domain::QRandInt(1, 10, 4);
  for (int i = 0; i < kDraws; ++i) {
    int64_t x = odd.Sample(rng).get<int64_t>();
    REQUIRE((x == 4 || x == 8));
  }
}

TEST_CASE("randn draws have the requested mean and sd", "[tune]") {
  Domain d = Domain::Randn(5.0, 2.0);
  Rng rng(6);
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < kDraws; ++i) {
    double x = d.Sample(rng).get<double>();
    REQUIRE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  double mean = sum / kDraws;
  double sd = std::sqrt(sum_sq / kDraws - mean * mean);
  CHECK(mean == Approx(5.0).margin(0.2));
  CHECK(sd == Approx(2.0).margin(0.2));
  CHECK(Domain::Randn().lower() == 0.0);
  CHECK(Domain::Randn().upper() == 1.0);
}

TEST_CASE("choice and grid_search draw every value and only those", "[tune]") {
  Domain d = Domain::Choice({32, "adam", 0.5});
  Rng rng(7);
  std::map<std::string, int> counts;
  for (int i = 0; i < kDraws; ++i) {
    json v = d.Sample(rng);
    REQUIRE(d.Contains(v));
    counts[v.dump()]++;
  }
  REQUIRE(counts.size() == 3);
  for (const auto& [value, count] : counts) CHECK(count > kDraws / 3 - 150);
  CHECK(Domain::GridSearch({1, 2}).Sample(rng).is_number_integer());
}

TEST_CASE("Contains checks bounds steps types and membership", "[tune]") {
  Domain u = Domain::Uniform(0, 1);
  CHECK(u.Contains(0.0));
  CHECK(u.Contains(0.5));
  CHECK_FALSE(u.Contains(1.0));
  CHECK_FALSE(u.Contains(-0.1));
  CHECK_FALSE(u.Contains("0.5"));

  Domain q = Domain::QUniform(0, 1, 0.1);
  CHECK(q.Contains(0.3));
  CHECK(q.Contains(1.0));
  CHECK_FALSE(q.Contains(0.35));

  Domain l = Domain::LogUniform(1e-3, 1);
  CHECK(l.Contains(0.01));
  CHECK_FALSE(l.Contains(1e-4));

  Domain r = Domain::RandInt(0, 10);
  CHECK(r.Contains(0));
  CHECK(r.Contains(9));
  CHECK_FALSE(r.Contains(10));
  CHECK_FALSE(r.Contains(2.5));
  CHECK_FALSE(r.Contains(2.0));  // a float is not an integer draw

  Domain qr = Domain::QRandInt(0, 12, 4);
  CHECK(qr.Contains(12));
  CHECK_FALSE(qr.Contains(6));

  CHECK(Domain::Randn().Contains(-123.0));
  CHECK_FALSE(Domain::Randn().Contains(nullptr));

  Domain c = Domain::Choice({"sgd", "adam"});
  CHECK(c.Contains("adam"));
  CHECK_FALSE(c.Contains("rmsprop"));
  CHECK(Domain::GridSearch({64, 128}).Contains(128));
}

TEST_CASE("Domain names and ToJson use the tune.yaml spelling", "[tune]") {
  CHECK(Domain::LogUniform(1e-4, 0.1).ToJson() == json::parse(R"({"loguniform": [0.0001, 0.1]})"));
  CHECK(Domain::QUniform(0, 1, 0.5).ToJson() == json::parse(R"({"quniform": [0.0, 1.0, 0.5]})"));
  CHECK(Domain::Randn(1, 2).ToJson() == json::parse(R"({"randn": [1.0, 2.0]})"));
  CHECK(Domain::GridSearch({64, 128}).ToJson() == json::parse(R"({"grid_search": [64, 128]})"));
  CHECK(Domain::Choice({"a", 1}).ToJson() == json::parse(R"({"choice": ["a", 1]})"));
  json ri = Domain::RandInt(1, 5).ToJson();
  CHECK(ri == json::parse(R"({"randint": [1, 5]})"));
  CHECK(ri["randint"][0].is_number_integer());
  CHECK(Domain::QRandInt(0, 10, 2).ToJson() == json::parse(R"({"qrandint": [0, 10, 2]})"));
  CHECK(std::string(Domain::QLogUniform(1, 10, 1).name()) == "qloguniform");
  CHECK(std::string(Domain::Uniform(0, 1).name()) == "uniform");
  CHECK(Domain::RandInt(0, 3).is_integer());
  CHECK_FALSE(Domain::Choice({1}).is_numeric());
}

TEST_CASE("Validate rejects empty domains and bad bounds with a reason", "[tune]") {
  auto reason = [](const Domain& d) -> std::string {
    try {
      d.Validate();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(reason(Domain::GridSearch({})), Contains("grid_search") && Contains("value"));
  CHECK_THAT(reason(Domain::Choice({})), Contains("choice"));
  CHECK_THAT(reason(Domain::Uniform(1, 1)), Contains("lower bound 1 must be below upper bound 1"));
  CHECK_THAT(reason(Domain::Uniform(2, 1)), Contains("uniform"));
  CHECK_THAT(reason(Domain::RandInt(5, 3)),
             Equals("randint: lower bound 5 must be below upper bound 3"));
  CHECK_THAT(reason(Domain::LogUniform(0, 1)), Contains("positive"));
  CHECK_THAT(reason(Domain::QLogUniform(-1, 1, 0.1)), Contains("positive"));
  CHECK_THAT(reason(Domain::QUniform(0, 1, 0)), Contains("q must be positive"));
  CHECK_THAT(reason(Domain::QRandInt(0, 10, -2)), Contains("q must be positive"));
  CHECK_THAT(reason(Domain::QUniform(0.1, 0.2, 1)), Contains("no multiple of q"));
  CHECK_THAT(reason(Domain::Randn(0, 0)), Contains("sd must be positive"));
  CHECK_THAT(reason(Domain::Uniform(0, INFINITY)), Contains("finite"));
  CHECK_THAT(reason(Domain::Randn(NAN, 1)), Contains("finite"));
  CHECK(reason(Domain::QRandInt(1, 10, 4)).empty());
  CHECK(reason(Domain::Randn()).empty());
  CHECK(reason(Domain::Choice({nullptr})).empty());
}

TEST_CASE("SetPath GetPath and JoinPath handle nested keys", "[tune]") {
  json config = json::object();
  SetPath(config, {"optim", "momentum"}, 0.9);
  SetPath(config, {"lr"}, 0.1);
  SetPath(config, {"optim", "name"}, "sgd");
  CHECK(config == json::parse(R"({"lr": 0.1, "optim": {"momentum": 0.9, "name": "sgd"}})"));
  CHECK(GetPath(config, {"optim", "name"}) == "sgd");
  CHECK(GetPath(config, {"optim", "missing"}).is_null());
  CHECK(GetPath(config, {"lr", "deeper"}).is_null());
  CHECK(GetPath(config, {}) == config);
  CHECK(JoinPath({"optim", "momentum"}) == "optim/momentum");
  CHECK(JoinPath({"lr"}) == "lr");
  CHECK(JoinPath({}).empty());
}

TEST_CASE("GenerateVariants makes num_samples times the grid product in order", "[tune]") {
  ParamSpace space = {
      {{"a"}, Domain::GridSearch({1, 2, 3})},
      {{"lr"}, Domain::LogUniform(1e-4, 1e-1)},
      {{"b"}, Domain::GridSearch({"x", "y"})},
      {{"optim", "momentum"}, 0.9},
      {{"optim", "name"}, "sgd"},
  };
  std::vector<json> configs = GenerateVariants(space, 2, 42);
  REQUIRE(configs.size() == 2 * 3 * 2);
  // The last grid parameter varies fastest; the whole grid repeats per sample.
  const std::vector<std::pair<int, std::string>> expected = {{1, "x"}, {1, "y"}, {2, "x"},
                                                             {2, "y"}, {3, "x"}, {3, "y"}};
  std::set<double> lrs;
  for (size_t i = 0; i < configs.size(); ++i) {
    INFO("config " << i << ": " << configs[i].dump());
    CHECK(configs[i]["a"] == expected[i % 6].first);
    CHECK(configs[i]["b"] == expected[i % 6].second);
    CHECK(configs[i]["optim"] == json::parse(R"({"momentum": 0.9, "name": "sgd"})"));
    double lr = configs[i]["lr"].get<double>();
    CHECK(lr >= 1e-4);
    CHECK(lr < 1e-1);
    lrs.insert(lr);
  }
  CHECK(lrs.size() == configs.size());  // drawn afresh for every config
}

TEST_CASE("GenerateVariants is reproducible by seed", "[tune]") {
  ParamSpace space = {
      {{"lr"}, Domain::Uniform(0, 1)},
      {{"model", "layers"}, Domain::RandInt(1, 1000000)},
      {{"batch"}, Domain::Choice({16, 32, 64, 128})},
      {{"noise"}, Domain::Randn()},
  };
  std::vector<json> a = GenerateVariants(space, 8, 7);
  std::vector<json> b = GenerateVariants(space, 8, 7);
  std::vector<json> c = GenerateVariants(space, 8, 8);
  REQUIRE(a.size() == 8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a[0]["model"]["layers"].is_number_integer());
}

TEST_CASE("GenerateVariants without domains or with bad input", "[tune]") {
  CHECK(GenerateVariants({}, 3, 0) ==
        std::vector<json>{json::object(), json::object(), json::object()});
  CHECK(GenerateVariants({{{"x"}, 1}}, 1, 0) == std::vector<json>{json{{"x", 1}}});
  CHECK_THROWS_AS(GenerateVariants({}, 0, 0), std::invalid_argument);
  CHECK_THROWS_WITH(GenerateVariants({{{"opt", "lr"}, Domain::Uniform(1, 0)}}, 1, 0),
                    Contains("opt/lr: uniform"));
  CHECK_THROWS_AS(GenerateVariants({{{"g"}, Domain::GridSearch({})}}, 1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace rayd::tune
