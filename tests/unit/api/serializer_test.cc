// Values on the wire: msgpack for everything, and the out-of-band layout for vectors of
// numbers (one raw array behind a 64-byte header, so that it is written with one memcpy and
// read in place).

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rayd/api.h"

using rayd::internal::Deserialize;
using rayd::internal::FindRawArray;
using rayd::internal::kRawArrayHeader;
using rayd::internal::Serialize;

TEST_CASE("vectors of numbers travel as one aligned raw array", "[api][serializer]") {
  std::vector<float> v = {1.5f, -2.0f, 3.25f};
  std::string bytes = Serialize(v);
  REQUIRE(bytes.size() == kRawArrayHeader + v.size() * sizeof(float));
  CHECK(static_cast<uint8_t>(bytes[0]) == 0xc9);  // a msgpack ext value
  size_t n = 0;
  const float* elements = FindRawArray<float>(bytes, &n);
  REQUIRE(elements != nullptr);
  CHECK(n == 3);
  CHECK(reinterpret_cast<const char*>(elements) == bytes.data() + 64);
  CHECK(std::vector<float>(elements, elements + n) == v);
  CHECK(Deserialize<std::vector<float>>(bytes) == v);

  CHECK(Deserialize<std::vector<int64_t>>(Serialize(std::vector<int64_t>{-1, 1LL << 40})) ==
        std::vector<int64_t>{-1, 1LL << 40});
  CHECK(Deserialize<std::vector<uint8_t>>(Serialize(std::vector<uint8_t>{})).empty());
  CHECK(Deserialize<std::vector<double>>(Serialize(std::vector<double>(1000, 0.5))) ==
        std::vector<double>(1000, 0.5));
}

TEST_CASE("a raw array is not read as another element type", "[api][serializer]") {
  std::string bytes = Serialize(std::vector<float>{1, 2});
  CHECK_THROWS(Deserialize<std::vector<int32_t>>(bytes));
  CHECK_THROWS(Deserialize<std::vector<double>>(bytes));
  // Truncated or padded: refused, not read past the end.
  CHECK_THROWS(Deserialize<std::vector<float>>(bytes.substr(0, bytes.size() - 1)));
  CHECK_THROWS(Deserialize<std::vector<float>>(bytes + "x"));
}

TEST_CASE("other values keep their msgpack encoding", "[api][serializer]") {
  // bool vectors and containers of vectors are ordinary msgpack.
  std::vector<bool> flags = {true, false};
  CHECK(Deserialize<std::vector<bool>>(Serialize(flags)) == flags);
  std::map<std::string, std::vector<float>> named = {{"w", {1, 2}}};
  CHECK(Deserialize<decltype(named)>(Serialize(named)) == named);
  // A msgpack array of numbers (from another encoder) still decodes as a vector.
  std::string packed;
  rayd::internal::StringWriter writer(&packed);
  msgpack::pack(writer, std::vector<int>{1, 2, 3});
  CHECK(Deserialize<std::vector<float>>(packed) == std::vector<float>{1, 2, 3});
}
