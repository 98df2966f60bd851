#pragma once
// Shared pieces of the `rayd` commands: finding the cluster, printing errors.

#include <string>

#include "rayd/base/status.h"

namespace rayd::cli {

// Where to reach the head and with which token: flag, else environment (RAYD_ADDRESS,
// RAYD_TOKEN), else the newest head session started on this machine under `temp_root`.
struct ClusterTarget {
  std::string address;
  std::string token;
};
Result<ClusterTarget> FindCluster(const std::string& address_flag, const std::string& token_flag,
                                  const std::string& temp_root);

// Prints "rayd <command>: <message>" to stderr and returns 1.
int Fail(const std::string& command, const std::string& message);

}  // namespace rayd::cli
