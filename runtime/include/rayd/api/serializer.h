#pragma once
// User values travel as msgpack bytes (msgpack-cxx, as in Ray's C++ API). Built-in types and
// the standard containers work as they are; a user type opts in with MSGPACK_DEFINE:
//
//   struct Point {
//     double x = 0, y = 0;
//     MSGPACK_DEFINE(x, y);
//   };
//
// Types that msgpack reads back must be default-constructible (or provide msgpack's `as`
// adaptor).
//
// Out of band: a std::vector of an arithmetic type (not bool) at the top of a value is not
// packed element by element but as one msgpack ext value whose payload is the raw array, so
// that a large vector is written with one memcpy and can be read in place (rayd::GetView):
//
//   0      0xc9, payload length (uint32, big endian; saturated past 4 GiB), ext type 0x52
//   6      'R' 'A', element kind ('i', 'u', 'f'), element size, 4 zero bytes,
//          element count (uint64, little endian), zero padding
//   64     the elements, in the host's (little-endian) byte order

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// msgpack-cxx 4 pulls in Boost unless told not to; rayd never needs its Boost adaptors. The
// rayd_runtime target defines this publicly; the guard covers builds that bypass CMake.
#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace rayd::internal {

// A msgpack output stream that appends to a std::string (no intermediate buffer copy).
class StringWriter {
 public:
  explicit StringWriter(std::string* out) : out_(out) {}
  void write(const char* data, size_t size) { out_->append(data, size); }

 private:
  std::string* out_;
};

static_assert(std::endian::native == std::endian::little,
              "rayd's out-of-band arrays assume a little-endian host");

template <typename T>
struct IsRawArray : std::false_type {};
template <typename E, typename A>
struct IsRawArray<std::vector<E, A>>
    : std::bool_constant<std::is_arithmetic_v<E> && !std::is_same_v<E, bool>> {
  using Element = E;
};

inline constexpr size_t kRawArrayHeader = 64;
inline constexpr int8_t kRawArrayExt = 0x52;

template <typename E>
constexpr char RawArrayKind() {
  return std::is_floating_point_v<E> ? 'f' : std::is_signed_v<E> ? 'i' : 'u';
}

// Where the elements of an out-of-band array start in `bytes`, and how many there are; null if
// `bytes` is not one (a malformed one throws).
template <typename E>
const E* FindRawArray(std::string_view bytes, size_t* count) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < kRawArrayHeader || p[0] != 0xc9 || static_cast<int8_t>(p[5]) != kRawArrayExt) {
    return nullptr;
  }
  const uint32_t length = (uint32_t{p[1]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 8) | p[4];
  uint64_t n = 0;
  std::memcpy(&n, p + 14, sizeof(n));
  if (p[6] != 'R' || p[7] != 'A') throw msgpack::type_error();
  if (p[8] != RawArrayKind<E>() || p[9] != sizeof(E)) {
    throw msgpack::type_error();  // an array of another element type
  }
  if (length != std::min<uint64_t>(bytes.size() - 6, UINT32_MAX) ||
      n != (bytes.size() - kRawArrayHeader) / sizeof(E) ||
      (bytes.size() - kRawArrayHeader) % sizeof(E) != 0) {
    throw msgpack::unpack_error("malformed out-of-band array");
  }
  *count = n;
  return reinterpret_cast<const E*>(p + kRawArrayHeader);
}

// The number of bytes Serialize(value) produces, and writing them in place (raw arrays only).
template <typename V>
size_t RawArraySize(const V& v) {
  return kRawArrayHeader + v.size() * sizeof(typename IsRawArray<V>::Element);
}
template <typename V>
void WriteRawArray(const V& v, uint8_t* out) {
  using E = typename IsRawArray<V>::Element;
  const size_t total = RawArraySize(v);
  // Arrays past 4 GiB saturate the ext length; the element count is what counts.
  const auto length = static_cast<uint32_t>(std::min<uint64_t>(total - 6, UINT32_MAX));
  std::memset(out, 0, kRawArrayHeader);
  out[0] = 0xc9;
  out[1] = static_cast<uint8_t>(length >> 24);
  out[2] = static_cast<uint8_t>(length >> 16);
  out[3] = static_cast<uint8_t>(length >> 8);
  out[4] = static_cast<uint8_t>(length);
  out[5] = static_cast<uint8_t>(kRawArrayExt);
  out[6] = 'R';
  out[7] = 'A';
  out[8] = static_cast<uint8_t>(RawArrayKind<E>());
  out[9] = sizeof(E);
  const uint64_t n = v.size();
  std::memcpy(out + 14, &n, sizeof(n));
  if (n > 0) std::memcpy(out + kRawArrayHeader, v.data(), n * sizeof(E));
}

template <typename T>
std::string Serialize(const T& value) {
  if constexpr (IsRawArray<T>::value) {
    std::string out(RawArraySize(value), '\0');
    WriteRawArray(value, reinterpret_cast<uint8_t*>(out.data()));
    return out;
  } else {
    std::string out;
    StringWriter writer(&out);
    msgpack::pack(writer, value);
    return out;
  }
}

// Decodes exactly one msgpack value of type T from `bytes`. Throws what msgpack throws
// (msgpack::type_error, msgpack::unpack_error, ... all std::exception) on bytes that are not
// one T, trailing bytes included.
template <typename T>
T Deserialize(std::string_view bytes) {
  if constexpr (IsRawArray<T>::value) {
    using E = typename IsRawArray<T>::Element;
    size_t n = 0;
    if (const E* elements = FindRawArray<E>(bytes, &n)) return T(elements, elements + n);
  }
  size_t offset = 0;
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size(), offset);
  if (offset != bytes.size()) throw msgpack::unpack_error("trailing bytes after the value");
  return handle.get().as<T>();
}

}  // namespace rayd::internal
