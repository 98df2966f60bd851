#pragma once
// Cluster token helpers. The token never crosses the wire: peers prove they hold it with
// HMAC-SHA256 over a fresh nonce (OpenSSL's libcrypto).

#include <cstddef>
#include <string>
#include <string_view>

namespace rayd {

// A new random cluster token: 64 hex digits.
std::string GenerateToken();
// `n` random bytes from OpenSSL's CSPRNG.
std::string RandomBytes(size_t n);
// Raw 32-byte HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(std::string_view key, std::string_view data);
// Equality that takes the same time wherever the inputs differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace rayd
