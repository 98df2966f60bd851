// GetDatasetShard: the run's datasets in a rank.

#include <fstream>
#include <rayd/api.h>
#include <rayd/train/data.h>

#include "datasets.h"
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

namespace internal {

Result<std::unique_ptr<data::DatasetShard>> OpenRankShard(const std::string& datasets_json,
                                                          const std::string& name, int world,
                                                          int rank, int local_world_size) {
  nlohmann::json json =
      nlohmann::json::parse(datasets_json.empty() ? "[]" : datasets_json, nullptr, false);
  RAYD_ASSIGN_OR_RETURN(std::vector<data::DatasetSpec> specs, DatasetsFromJson(json));
  std::string names;
  for (const data::DatasetSpec& spec : specs) {
    if (spec.name == name) {
      return data::DatasetShard::Open(
          spec, {.world_size = world,
                 .rank = rank,
                 .seed = 0,
                 .budget_bytes = kNodeBudgetBytes / std::max(local_world_size, 1)});
    }
    names += (names.empty() ? "" : ", ") + spec.name;
  }
  return Status::NotFound("the run has no dataset '" + name + "' (" +
                          (names.empty() ? std::string("it has none: add datasets: to its "
                                                       "train.yaml or tune.yaml, or "
                                                       "RunConfig::datasets")
                                         : "it has: " + names) +
                          ")");
}

Status WriteDataPositions(const std::map<std::string, data::ShardPosition>& positions,
                          const std::string& dir) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, p] : positions) {
    json[name] = {{"epoch", p.epoch}, {"cursor", p.cursor}};
    if (!p.pending.empty()) json[name]["pending"] = p.pending;
  }
  const std::string path = dir + "/" + kDataPositionsFile;
  std::ofstream out(path);
  out << json.dump() << "\n";
  out.close();
  if (!out) return Status::Internal("cannot write the datasets' positions to " + path);
  return Status::Ok();
}

void ResumeShard(data::DatasetShard& shard, const std::string& name, const std::string& dir) {
  std::ifstream in(dir + "/" + kDataPositionsFile);
  if (!in) return;
  const nlohmann::json positions = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!positions.is_object() || !positions.contains(name)) return;
  const nlohmann::json& p = positions[name];
  if (!p.is_object() || !p.value("epoch", nlohmann::json()).is_number_integer() ||
      !p.value("cursor", nlohmann::json()).is_number_integer()) {
    return;
  }
  data::ShardPosition position{.epoch = p["epoch"].get<int64_t>(),
                               .cursor = p["cursor"].get<int64_t>()};
  if (const nlohmann::json pending = p.value("pending", nlohmann::json()); pending.is_array()) {
    for (const nlohmann::json& row : pending) {
      if (row.is_number_integer()) position.pending.push_back(row.get<int64_t>());
    }
  }
  shard.ResumeAt(std::move(position));
}

}  // namespace internal

data::DatasetShard& GetDatasetShard(const std::string& name) {
  internal::RankSession& session = internal::RequireSession("GetDatasetShard");
  auto it = session.shards.find(name);
  if (it != session.shards.end()) return *it->second;
  // Sharded over the data-parallel ranks: under a mesh, the ranks of one data replica (its
  // pipeline stages and tensor shards) read the same batches.
  const TrainContext& context = session.context;
  Result<std::unique_ptr<data::DatasetShard>> shard =
      internal::OpenRankShard(session.datasets_json, name, context.mesh.data,
                              context.mesh.data_rank, context.local_world_size);
  if (!shard.ok()) throw RaydError("GetDatasetShard: " + shard.status().message());
  // A restarted attempt goes on where its checkpoint's report left the dataset.
  if (session.checkpoint) internal::ResumeShard(**shard, name, *session.checkpoint);
  if (!session.data_feed) {
    session.data_feed = std::make_unique<internal::DataFeed>(context.run_name, context.world_rank,
                                                             context.world_size);
  }
  return *session.shards.emplace(name, std::move(*shard)).first->second;
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
