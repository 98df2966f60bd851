#pragma once
// Identifiers: random 128-bit values printed as 32 hex digits. Plain copyable values.

#include <array>
#include <cstring>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "rayd/base/status.h"

namespace rayd {

namespace internal {
// Unique, not secret (ids). Thread-safe.
void FillRandom(uint8_t* out, size_t n);
// From OpenSSL's CSPRNG (tokens, nonces). Thread-safe.
void CryptoRandom(uint8_t* out, size_t n);
std::string ToHex(const uint8_t* data, size_t n);
// Writes the 2n hex digits of `data` to `out` (no terminator).
void WriteHex(const uint8_t* data, size_t n, char* out);
bool FromHex(std::string_view hex, uint8_t* out, size_t n);
}  // namespace internal

template <typename Tag>
class UniqueId {
 public:
  static constexpr size_t kSize = 16;

  UniqueId() { bytes_.fill(0); }
  static UniqueId FromRandom();
  static Result<UniqueId> FromHex(std::string_view hex);
  // Ray's spelling, for ported programs: the id in `id`, given as its kSize bytes or as the
  // 2 * kSize hex digits rayd's ObjectRef::ID() gives (Ray's gives bytes); Nil for anything else.
  static UniqueId FromBinary(std::string_view id);
  static UniqueId Nil() { return UniqueId(); }

  bool IsNil() const {
    for (auto b : bytes_)
      if (b != 0) return false;
    return true;
  }
  std::string Hex() const;
  // Writes the 2 * kSize hex digits to `out` (no terminator), allocating nothing.
  void WriteHex(char* out) const { internal::WriteHex(bytes_.data(), kSize, out); }
  // First 8 hex digits, for tables and logs.
  std::string Short() const { return Hex().substr(0, 8); }
  const std::array<uint8_t, kSize>& bytes() const { return bytes_; }

  friend bool operator==(const UniqueId&, const UniqueId&) = default;
  friend auto operator<=>(const UniqueId&, const UniqueId&) = default;

 private:
  std::array<uint8_t, kSize> bytes_;
};

struct NodeIdTag {};
struct JobIdTag {};
struct WorkerIdTag {};
struct ObjectIdTag {};
using NodeId = UniqueId<NodeIdTag>;
using JobId = UniqueId<JobIdTag>;
using WorkerId = UniqueId<WorkerIdTag>;
using ObjectId = UniqueId<ObjectIdTag>;


template <typename Tag>
UniqueId<Tag> UniqueId<Tag>::FromRandom() {
  UniqueId id;
  internal::FillRandom(id.bytes_.data(), kSize);
  return id;
}

template <typename Tag>
Result<UniqueId<Tag>> UniqueId<Tag>::FromHex(std::string_view hex) {
  UniqueId id;
  if (!internal::FromHex(hex, id.bytes_.data(), kSize))
    return Status::InvalidArgument("not a valid id: '" + std::string(hex) + "'");
  return id;
}

template <typename Tag>
UniqueId<Tag> UniqueId<Tag>::FromBinary(std::string_view id) {
  UniqueId out;
  if (id.size() == kSize) {
    std::memcpy(out.bytes_.data(), id.data(), kSize);
  } else if (!internal::FromHex(id, out.bytes_.data(), kSize)) {
    out.bytes_.fill(0);
  }
  return out;
}

template <typename Tag>
std::string UniqueId<Tag>::Hex() const {
  return internal::ToHex(bytes_.data(), kSize);
}

}  // namespace rayd

template <typename Tag>
struct std::hash<rayd::UniqueId<Tag>> {
  size_t operator()(const rayd::UniqueId<Tag>& id) const {
    size_t h;
    static_assert(sizeof(h) <= rayd::UniqueId<Tag>::kSize);
    std::memcpy(&h, id.bytes().data(), sizeof(h));
    return h;
  }
};
