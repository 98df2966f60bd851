// `rayd drain NODE_ID [--deadline 30s] [--reason TEXT]`: a preemption notice for one node. The
// head places nothing new there from now; the ranks on it see the notice (GetContext().drain,
// the Python client's get_context().drain) and may checkpoint; at the deadline the node stops
// its workers and leaves the cluster, or sooner once nothing runs on it.

#include <cctype>
#include <cmath>
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "rayd/base/event_loop.h"
#include "rayd/runtime/cluster.h"
#include "rayd/runtime/session.h"

namespace rayd::cli {

Result<int64_t> ParseDrainDeadline(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) != 0 || text[digits] == '.')) {
    ++digits;
  }
  const std::string unit = text.substr(digits);
  double value = 0;
  try {
    size_t used = 0;
    value = digits > 0 ? std::stod(text.substr(0, digits), &used) : -1;
    if (used != digits) value = -1;
  } catch (const std::exception&) {
    value = -1;
  }
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1000;
  if (unit == "ms") scale = 1;
  if (unit == "m") scale = 60'000;
  if (unit == "h") scale = 3'600'000;
  if (value < 0 || scale == 0 || !std::isfinite(value)) {
    return Status::InvalidArgument(
        "--deadline: expected a duration such as 30s, 2m, 500ms or 45 "
        "(seconds), got '" +
        text + "'");
  }
  return static_cast<int64_t>(std::llround(value * scale));
}

int RunDrain(const DrainArgs& args) {
  const std::string command = "drain";
  Result<int64_t> within_ms = ParseDrainDeadline(args.deadline);
  if (!within_ms.ok()) {
    std::cerr << "rayd drain: " << within_ms.status().message() << "\n";
    return 2;
  }
  auto target = FindCluster(args.address, args.token, session::ResolveTempRoot(args.temp_dir));
  if (!target.ok()) return Fail(command, target.status().message());
  auto cluster = ClusterClient::Connect(target->address, target->token, Millis(5000));
  auto view = cluster.ok() ? (*cluster)->Nodes() : Result<ClusterView>(cluster.status());
  if (!view.ok()) {
    return Fail(command,
                "cannot reach the cluster at " + target->address + ": " + view.status().message());
  }
  // The id as `rayd status` prints it ("node_" and all), or a unique prefix of an alive node's.
  std::string wanted = args.node;
  if (wanted.rfind("node_", 0) == 0) wanted = wanted.substr(5);
  std::vector<const NodeInfo*> matches;
  for (const NodeInfo& n : view->nodes) {
    if (n.alive && !wanted.empty() && n.node_id.Hex().rfind(wanted, 0) == 0) matches.push_back(&n);
  }
  if (matches.size() != 1) {
    std::string alive;
    for (const NodeInfo& n : view->nodes) {
      if (n.alive)
        alive += "\n  " + n.node_id.Hex() + (n.is_head ? " (head)" : "") + "  " + n.address;
    }
    return Fail(command, (matches.empty() ? "no alive node has an id starting with '"
                                          : "more than one alive node's id starts with '") +
                             args.node + "'; the alive nodes:" + alive);
  }
  const NodeInfo& node = *matches.front();
  const int64_t deadline_ms = NowUnixMs() + *within_ms;
  if (Status drained = (*cluster)->DrainNode(node.node_id, deadline_ms, args.reason);
      !drained.ok()) {
    return Fail(command, drained.message());
  }
  std::cout << "node " << node.node_id.Hex() << " (" << node.address
            << ") is draining: it takes no new work and leaves within "
            << static_cast<double>(*within_ms) / 1000 << " s"
            << (args.reason.empty() ? "" : " (" + args.reason + ")") << "\n";
  return 0;
}

}  // namespace rayd::cli
