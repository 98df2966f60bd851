#include "rayd/base/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "rayd/base/ids.h"
#include "rayd/base/logging.h"

namespace rayd {

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  internal::CryptoRandom(reinterpret_cast<uint8_t*>(out.data()), n);
  return out;
}

std::string GenerateToken() {
  std::string raw = RandomBytes(32);
  return internal::ToHex(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  RAYD_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                  reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
                  &len) != nullptr);
  return std::string(reinterpret_cast<char*>(out), len);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace rayd
