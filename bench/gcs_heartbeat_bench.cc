// Head CPU with many simulated nodes heartbeating: starts a real head (`rayd start --head`),
// registers N fake nodes from this process (one connection each, as real nodes have) that
// heartbeat every period, and reads the head's CPU time from /proc over the measuring window.
//
//   gcs_heartbeat_bench [nodes=100] [seconds=20] [period_ms=1000]

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/node_info.h"
#include "rayd/base/rpc.h"
#include "rayd/runtime/session.h"

using namespace rayd;
using namespace std::chrono_literals;

namespace {

// utime + stime of `pid`, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return double(utime + stime) / sysconf(_SC_CLK_TCK);
}

int Run(const std::string& cmd) { return std::system(cmd.c_str()); }

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::stoi(argv[1]) : 100;
  const int seconds = argc > 2 ? std::stoi(argv[2]) : 20;
  const int period_ms = argc > 3 ? std::stoi(argv[3]) : 1000;
  char dir[] = "/tmp/rayd-hb-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string root = dir;
  // Port 0: any free port; the head writes the one it bound into its session directory.
  if (Run(std::string(RAYD_BINARY) + " start --head --port 0 --temp-dir " + root + " --heartbeat-period-ms " + std::to_string(period_ms) +
          " > /dev/null") != 0) {
    std::fprintf(stderr, "could not start the head\n");
    return 1;
  }
  const std::string session = session::LatestHeadSession(root);
  const std::string token = *session::ReadTrimmed(session + "/token");
  const pid_t head = std::stoi(*session::ReadTrimmed(session + "/head.pid"));
  const std::string address = *session::ReadTrimmed(session + "/gcs_address");

  EventLoop loop;
  std::vector<std::unique_ptr<rpc::RpcClient>> clients;
  std::vector<NodeInfo> infos;
  int registered = 0;
  for (int i = 0; i < nodes; ++i) {
    NodeInfo info;
    info.node_id = NodeId::FromRandom();
    info.address = "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":7000";
    info.hostname = "sim-" + std::to_string(i);
    info.ip = "10.0.0." + std::to_string(i);
    info.total = scheduler::ResourceSet{{"CPU", 8}, {"GPU", 1}, {"memory", 32e9}};
    info.available = info.total;
    infos.push_back(info);
    clients.push_back(
        std::make_unique<rpc::RpcClient>(loop, address, rpc::Options{token, "node"}));
    clients.back()->Connect();
    clients.back()->Call<proto::Method::REGISTER_NODE>(
        [&](proto::RegisterNodeRequest::Builder r) {
          runtime::NodeInfoToProto(infos[i], r.initNode());
        },
        10000ms, [&](const Status& s) { registered += s.ok(); });
  }
  if (!loop.RunUntil([&] { return registered == nodes; }, 60000ms)) {
    std::fprintf(stderr, "only %d of %d nodes registered\n", registered, nodes);
  }
  int beats = 0, failed = 0;
  Timer beat(loop);
  beat.Start(Millis(period_ms), Millis(period_ms), [&] {
    for (int i = 0; i < nodes; ++i) {
      clients[i]->Call<proto::Method::HEARTBEAT>(
          [&](proto::HeartbeatRequest::Builder hb) {
            hb.setNodeId(infos[i].node_id.Hex());
            runtime::FillResources(infos[i].available,
                                   [&](unsigned n) { return hb.initAvailable(n); });
          },
          Millis(period_ms), [&](const Status& s) { s.ok() ? ++beats : ++failed; });
    }
  });
  const double cpu0 = CpuSeconds(head);
  const auto t0 = Clock::now();
  bool stop = false;
  Timer end(loop);
  end.Start(Millis(seconds * 1000), 0ms, [&] { stop = true; });
  loop.RunUntil([&] { return stop; }, Millis(seconds * 1000 + 5000));
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = CpuSeconds(head) - cpu0;
  beat.Stop();

  std::printf("simulated nodes: %d, heartbeat period: %d ms, window: %.1f s\n", nodes, period_ms,
              wall);
  std::printf("heartbeats answered: %d (%.0f/s), failed: %d\n", beats, beats / wall, failed);
  std::printf("head CPU: %.3f s over %.1f s = %.2f%% of one core (%.1f us per heartbeat)\n", cpu,
              wall, 100.0 * cpu / wall, beats ? 1e6 * cpu / beats : 0.0);
  clients.clear();
  Run(std::string(RAYD_BINARY) + " stop --temp-dir " + root + " > /dev/null");
  Run("rm -rf " + root);
  return 0;
}
