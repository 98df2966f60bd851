#pragma once
// Bytes between std::string and Cap'n Proto's Data fields, the one way every wire adapter
// writes them.

#include <capnp/blob.h>

#include <string>

namespace rayd {

// A Data view of `s` (valid while `s` is).
inline capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

inline std::string FromData(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

}  // namespace rayd
