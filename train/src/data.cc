// GetDatasetShard: the run's datasets in a rank.

#include <rayd/api.h>
#include <rayd/train/data.h>

#include "rank_session.h"

namespace rayd::train {
namespace {

// Bytes of blocks the ranks of one node may hold ahead of their loops, together.
constexpr int64_t kNodeBudgetBytes = int64_t{512} << 20;

}  // namespace

nlohmann::json DatasetsToJson(const std::vector<data::DatasetSpec>& datasets) {
  nlohmann::json out = nlohmann::json::array();
  for (const data::DatasetSpec& d : datasets) {
    out.push_back({{"name", d.name}, {"format", d.format}, {"paths", d.paths},
                   {"options", d.options}});
  }
  return out;
}

Result<std::vector<data::DatasetSpec>> DatasetsFromJson(const nlohmann::json& json) {
  std::vector<data::DatasetSpec> out;
  if (json.is_null()) return out;
  if (!json.is_array()) return Status::InvalidArgument("datasets: expected a list");
  for (const nlohmann::json& d : json) {
    if (!d.is_object()) return Status::InvalidArgument("datasets: expected objects");
    data::DatasetSpec spec;
    spec.name = d.value("name", "");
    spec.format = d.value("format", "");
    spec.paths = d.value("paths", std::vector<std::string>());
    spec.options = d.value("options", nlohmann::json::object());
    out.push_back(std::move(spec));
  }
  return out;
}

data::DatasetShard& GetDatasetShard(const std::string& name) {
  internal::RankSession& session = internal::RequireSession("GetDatasetShard");
  auto it = session.shards.find(name);
  if (it != session.shards.end()) return *it->second;
  nlohmann::json json = nlohmann::json::parse(
      session.datasets_json.empty() ? "[]" : session.datasets_json, nullptr, false);
  Result<std::vector<data::DatasetSpec>> specs = DatasetsFromJson(json);
  if (!specs.ok()) throw RaydError("GetDatasetShard: " + specs.status().message());
  std::string names;
  for (const data::DatasetSpec& spec : *specs) {
    if (spec.name != name) {
      names += (names.empty() ? "" : ", ") + spec.name;
      continue;
    }
    const TrainContext& context = session.context;
    // Sharded over the data-parallel ranks: under a mesh, the ranks of one data replica (its
    // pipeline stages and tensor shards) read the same batches.
    data::ShardOptions options{
        .world_size = context.mesh.data,
        .rank = context.mesh.data_rank,
        .seed = 0,
        .budget_bytes = kNodeBudgetBytes / std::max(context.local_world_size, 1)};
    Result<std::unique_ptr<data::DatasetShard>> shard = data::DatasetShard::Open(spec, options);
    if (!shard.ok()) throw RaydError(shard.status().message());
    return *session.shards.emplace(name, std::move(*shard)).first->second;
  }
  throw RaydError("GetDatasetShard: the run has no dataset '" + name + "' (" +
                  (names.empty() ? std::string("it has none: add datasets: to its train.yaml or "
                                               "tune.yaml, or RunConfig::datasets")
                                 : "it has: " + names) +
                  ")");
}

std::vector<std::string> DatasetNames() {
  internal::RankSession& session = internal::RequireSession("DatasetNames");
  nlohmann::json json = nlohmann::json::parse(
      session.datasets_json.empty() ? "[]" : session.datasets_json, nullptr, false);
  std::vector<std::string> names;
  if (Result<std::vector<data::DatasetSpec>> specs = DatasetsFromJson(json); specs.ok()) {
    for (const data::DatasetSpec& spec : *specs) names.push_back(spec.name);
  }
  return names;
}

std::optional<data::Block> NextBatch(data::BatchIterator& pass) {
  Result<std::optional<data::Block>> next = pass.Next();
  if (!next.ok()) throw RaydError(next.status().message());
  return std::move(*next);
}

}  // namespace rayd::train
