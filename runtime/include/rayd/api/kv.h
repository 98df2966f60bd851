#pragma once
// The cluster's key-value store, kept by the head (in Redis when the head uses it), as Ray's
// internal_kv: small values that processes of the cluster publish to each other (rendezvous
// addresses, configuration). Keys live in namespaces; any process of the cluster reads them.
//
//   rayd::KvPut("train", "run-1/rendezvous", "10.0.0.2:29500");
//   std::optional<std::string> address = rayd::KvGet("train", "run-1/rendezvous");
//   rayd::KvDel("train", "run-1/", /*by_prefix=*/true);

#include <optional>
#include <string>

#include "rayd/api/errors.h"
#include "rayd/internal/runtime.h"

namespace rayd {

// Stores `value` under `key`; returns true when the key was new. Without `overwrite` an
// existing value is kept (and false returned). Throws RaydError when the head cannot be reached.
inline bool KvPut(const std::string& ns, const std::string& key, const std::string& value,
                  bool overwrite = true) {
  Result<bool> added = internal::RequireRuntime().KvPut(ns, key, value, overwrite);
  internal::ThrowIfError(added.status());
  return *added;
}

// The value under `key`, or nullopt.
inline std::optional<std::string> KvGet(const std::string& ns, const std::string& key) {
  Result<std::optional<std::string>> value = internal::RequireRuntime().KvGet(ns, key);
  internal::ThrowIfError(value.status());
  return std::move(value).value();
}

// Deletes `key` (with by_prefix: every key that starts with it); returns how many were deleted.
inline int KvDel(const std::string& ns, const std::string& key, bool by_prefix = false) {
  Result<int> deleted = internal::RequireRuntime().KvDel(ns, key, by_prefix);
  internal::ThrowIfError(deleted.status());
  return *deleted;
}

}  // namespace rayd
