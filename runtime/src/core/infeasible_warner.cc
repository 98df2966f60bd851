#include "core/infeasible_warner.h"

#include <spdlog/spdlog.h>

#include "common/node_info.h"
#include "rayd/protocol/gcs.capnp.h"

namespace rayd::core {
namespace {

// Long enough for the nodes of a cluster that is still starting to register; well inside the
// default infeasible timeout (60 s), so the warning comes while the request still waits.
constexpr Millis kCheckDelay{1000};

}  // namespace

void InfeasibleWarner::Watch(std::string_view kind, std::string what,
                             scheduler::ResourceSet demand) {
  if (ctx_.stopping || demand.IsEmpty()) return;
  if (!seen_.insert(std::string(kind) + " " + demand.ToString()).second) return;
  pending_.push_back({std::move(what), std::move(demand)});
  if (!timer_.active()) timer_.Start(kCheckDelay, Millis(0), [this] { Check(); });
}

void InfeasibleWarner::Check() {
  if (ctx_.stopping || pending_.empty()) return;
  auto watched = std::make_shared<std::vector<Watched>>(std::move(pending_));
  pending_.clear();
  auto fill = [](proto::GetAllNodesRequest::Builder r) { r.setOnlyAlive(true); };
  ctx_.gcs.Call<proto::Method::GET_ALL_NODES>(
      fill, Millis(15000), [watched](const Status& s, proto::GetAllNodesReply::Reader r) {
        if (!s.ok()) return;  // no word from the GCS: no warning
        std::vector<scheduler::ResourceSet> totals;
        for (auto node : r.getNodes()) {
          totals.push_back(runtime::ResourcesFromProto(node.getTotal()));
        }
        for (const auto& w : *watched) {
          bool fits = false;
          for (const auto& total : totals) fits = fits || w.demand.IsSubsetOf(total);
          if (fits) continue;
          spdlog::warn(
              "{} needs {}, which no node of the cluster has ({} alive); it waits for such "
              "a node to join, and fails with InfeasibleError after the "
              "cluster's infeasible timeout",
              w.what, w.demand.ToString(), totals.size());
        }
      });
}

}  // namespace rayd::core
