#include "cli_common.h"

#include <cstdlib>
#include <iostream>

#include "rayd/runtime/session.h"

namespace rayd::cli {

Result<ClusterTarget> FindCluster(const std::string& address_flag, const std::string& token_flag,
                                  const std::string& temp_root) {
  ClusterTarget target{address_flag, token_flag};
  if (target.address.empty()) {
    if (const char* env = std::getenv("RAYD_ADDRESS"); env && *env) target.address = env;
  }
  if (target.token.empty()) {
    if (const char* env = std::getenv("RAYD_TOKEN"); env && *env) target.token = env;
  }
  const std::string latest = session::LatestHeadSession(temp_root);
  if (target.address.empty()) {
    if (latest.empty()) {
      return Status::NotFound("no cluster address: pass --address or set RAYD_ADDRESS (no head "
                              "was started on this machine under " + temp_root + ")");
    }
    auto address = session::ReadTrimmed(latest + "/gcs_address");
    if (!address.ok()) {
      return Status::NotFound("the newest head session " + latest +
                              " has no address (is the head running?)");
    }
    target.address = *address;
  }
  if (target.token.empty() && !latest.empty()) {
    if (auto token = session::ReadTrimmed(latest + "/token"); token.ok()) target.token = *token;
  }
  if (target.token.empty()) {
    return Status::NotFound("no cluster token: pass --token or set RAYD_TOKEN (the head prints "
                            "it when it starts)");
  }
  return target;
}

int Fail(const std::string& command, const std::string& message) {
  std::cerr << "rayd " << command << ": " << message << std::endl;
  return 1;
}

}  // namespace rayd::cli
