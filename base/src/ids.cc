#include "rayd/base/ids.h"

#include <openssl/rand.h>

#include <cstring>
#include <random>

#include "rayd/base/logging.h"

namespace rayd::internal {

// Ids need to be unique, not secret: a per-thread 64-bit generator seeded once from the CSPRNG
// is ~50x cheaper than RAND_bytes per id (two ids per task). Secrets use CryptoRandom.
void FillRandom(uint8_t* out, size_t n) {
  thread_local std::mt19937_64 rng = [] {
    uint64_t seed[4];
    CryptoRandom(reinterpret_cast<uint8_t*>(seed), sizeof(seed));
    std::seed_seq seq{seed[0], seed[1], seed[2], seed[3]};
    return std::mt19937_64(seq);
  }();
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(out + i, &v, std::min<size_t>(8, n - i));
  }
}

void CryptoRandom(uint8_t* out, size_t n) {
  RAYD_CHECK_MSG(RAND_bytes(out, static_cast<int>(n)) == 1, "RAND_bytes failed");
}

void WriteHex(const uint8_t* data, size_t n, char* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
}

std::string ToHex(const uint8_t* data, size_t n) {
  std::string s(2 * n, '0');
  WriteHex(data, n, s.data());
  return s;
}

static int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool FromHex(std::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace rayd::internal
