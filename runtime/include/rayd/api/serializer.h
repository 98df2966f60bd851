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

#include <string>
#include <string_view>

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

template <typename T>
std::string Serialize(const T& value) {
  std::string out;
  StringWriter writer(&out);
  msgpack::pack(writer, value);
  return out;
}

// Decodes exactly one msgpack value of type T from `bytes`. Throws what msgpack throws
// (msgpack::type_error, msgpack::unpack_error, ... all std::exception) on bytes that are not
// one T, trailing bytes included.
template <typename T>
T Deserialize(std::string_view bytes) {
  size_t offset = 0;
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size(), offset);
  if (offset != bytes.size()) throw msgpack::unpack_error("trailing bytes after the value");
  return handle.get().as<T>();
}

}  // namespace rayd::internal
