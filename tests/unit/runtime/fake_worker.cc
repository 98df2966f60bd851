// fake_worker: the smallest process a node daemon can lease out, for node_lease_test.
//
// Prints its RAYD_* / CUDA_VISIBLE_DEVICES / FAKE_* environment (one KEY=VALUE per line; unset
// variables print as KEY=<unset>), registers with the node at RAYD_NODE_ADDRESS under
// RAYD_WORKER_ID (address "127.0.0.1:1", its pid), and exits when that connection closes.
// Knobs, all optional:
//   FAKE_WORKER_EXIT_BEFORE_REGISTER=<code>  exit with <code> instead of registering
//   FAKE_WORKER_NO_REGISTER=1                connect but never register (start timeout)
//   FAKE_WORKER_EXIT_AFTER_MS=<ms>           after registering, exit after <ms> with
//   FAKE_WORKER_EXIT_CODE=<code>             this code (default 0)

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "rayd/base/rpc.h"
#include "rayd/protocol/core.capnp.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

[[noreturn]] void Exit(int code, const std::string& why) {
  std::printf("fake_worker exiting with %d: %s\n", code, why.c_str());
  std::fflush(stdout);
  _exit(code);
}

}  // namespace

int main() {
  for (const char* name : {"RAYD_WORKER_MODE", "RAYD_WORKER_ID", "RAYD_JOB_ID", "RAYD_NODE_ID",
                           "RAYD_NODE_IP", "RAYD_NODE_ADDRESS", "RAYD_GCS_ADDRESS", "RAYD_TOKEN",
                           "RAYD_SESSION_DIR", "CUDA_VISIBLE_DEVICES", "FAKE_WORKER_TAG"}) {
    const char* v = std::getenv(name);
    std::printf("%s=%s\n", name, v ? v : "<unset>");
  }
  std::fflush(stdout);
  if (!Env("FAKE_WORKER_EXIT_BEFORE_REGISTER").empty()) {
    Exit(std::atoi(Env("FAKE_WORKER_EXIT_BEFORE_REGISTER").c_str()), "asked to, unregistered");
  }

  rayd::EventLoop loop;
  rayd::rpc::RpcClient node(loop, Env("RAYD_NODE_ADDRESS"),
                            rayd::rpc::Options{Env("RAYD_TOKEN"), "worker"});
  bool connected = false;
  node.SetOnStateChange([&](const rayd::Status& s) {
    if (s.ok()) {
      connected = true;
    } else if (connected || s.code() == rayd::StatusCode::kPermissionDenied) {
      Exit(0, "node connection closed: " + s.message());
    }
  });
  node.Connect();
  rayd::Timer exit_timer(loop);
  if (Env("FAKE_WORKER_NO_REGISTER").empty()) {
    auto fill = [](rayd::proto::RegisterWorkerRequest::Builder r) {
      r.setWorkerId(Env("RAYD_WORKER_ID"));
      r.setAddress("127.0.0.1:1");
      r.setPid(getpid());
    };
    node.Call<rayd::proto::Method::REGISTER_WORKER>(
        fill, rayd::Millis(10000),
        [&](const rayd::Status& s, rayd::proto::RegisterWorkerReply::Reader reply) {
          if (!s.ok()) Exit(1, "registration failed: " + s.ToString());
          std::printf("registered with node %s (gcs %s)\n", reply.getNodeId().cStr(),
                      reply.getGcsAddress().cStr());
          std::fflush(stdout);
          if (Env("FAKE_WORKER_EXIT_AFTER_MS").empty()) return;
          exit_timer.Start(
              rayd::Millis(std::atoi(Env("FAKE_WORKER_EXIT_AFTER_MS").c_str())), rayd::Millis(0),
              [] { Exit(std::atoi(Env("FAKE_WORKER_EXIT_CODE").c_str()), "asked to"); });
        });
  }
  loop.Run();
  return 0;
}
