// The transform registry and the built-in transforms.

#include <rayd/data/transforms.h>

#include <cmath>
#include <map>
#include <mutex>

namespace rayd::data {
namespace {

struct TransformRegistry {
  std::mutex mu;
  std::map<std::string, BatchMap> maps;
  std::map<std::string, RowFilter> filters;
  std::map<std::string, BatchMapperFactory> mappers;
};
TransformRegistry& Transforms() {
  static TransformRegistry* registry = new TransformRegistry();  // never destroyed: transforms register at load
  return *registry;
}

template <typename Map>
std::string Names(const Map& map) {
  std::string out;
  for (const auto& [name, fn] : map) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Result<std::vector<std::string>> Columns(const nlohmann::json& args, const char* what) {
  std::vector<std::string> out;
  const nlohmann::json& columns = args.contains("columns") ? args["columns"] : args["column"];
  if (columns.is_string()) out.push_back(columns.get<std::string>());
  if (columns.is_array()) {
    for (const nlohmann::json& c : columns) {
      if (c.is_string()) out.push_back(c.get<std::string>());
    }
  }
  if (out.empty()) return Status::InvalidArgument(std::string(what) + ": needs columns: [NAME, ...]");
  return out;
}

template <typename T>
void ToFloat(const T* from, float* to, int64_t n, float scale, float mean, float inv_std) {
  for (int64_t i = 0; i < n; ++i) to[i] = (static_cast<float>(from[i]) * scale - mean) * inv_std;
}

Result<Block> ToFloat32(const Block& batch, const nlohmann::json& args) {
  RAYD_ASSIGN_OR_RETURN(std::vector<std::string> names, Columns(args, "to_float32"));
  const float scale = args.value("scale", 1.0f), mean = args.value("mean", 0.0f);
  const float std = args.value("std", 1.0f);
  if (std == 0) return Status::InvalidArgument("to_float32: std must not be 0");
  BlockBuilder out(batch.num_rows());
  for (const Column& c : batch.columns()) {
    if (std::find(names.begin(), names.end(), c.name()) == names.end()) {
      out.AddColumn(c, nullptr);
      continue;
    }
    if (c.is_bytes()) {
      return Status::InvalidArgument("to_float32: column '" + c.name() + "' holds bytes");
    }
    auto* to = reinterpret_cast<float*>(out.AddFixed({c.name(), DType::kFloat32, c.schema.shape}));
    const int64_t n = batch.num_rows() * c.RowElements();
    switch (c.dtype()) {
      case DType::kUInt8: ToFloat(c.As<uint8_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kInt8: ToFloat(c.As<int8_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kUInt16: ToFloat(c.As<uint16_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kInt16: ToFloat(c.As<int16_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kUInt32: ToFloat(c.As<uint32_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kInt32: ToFloat(c.As<int32_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kInt64: ToFloat(c.As<int64_t>(), to, n, scale, mean, 1 / std); break;
      case DType::kFloat32: ToFloat(c.As<float>(), to, n, scale, mean, 1 / std); break;
      case DType::kFloat64: ToFloat(c.As<double>(), to, n, scale, mean, 1 / std); break;
      case DType::kBytes: break;
    }
    for (const std::string& name : names) {
      if (batch.Find(name) == nullptr) {
        return Status::NotFound("to_float32: no column '" + name + "' (the dataset has " +
                                DescribeSchema(batch.schema()) + ")");
      }
    }
  }
  // The untouched columns still point into `batch`'s memory: keep it alive with the result.
  Block result = std::move(out).Finish();
  return Block(result.num_rows(), result.columns(),
               {std::make_shared<Block>(batch), std::make_shared<Block>(result)});
}

Result<Block> SelectColumns(const Block& batch, const nlohmann::json& args) {
  RAYD_ASSIGN_OR_RETURN(std::vector<std::string> names, Columns(args, "select_columns"));
  return batch.Select(names);
}

// Integer label columns only (the common case: keep some classes).
bool LabelIn(const Block& batch, int64_t row, const nlohmann::json& args) {
  const Column* c = batch.Find(args.value("column", "label"));
  if (c == nullptr || c->is_bytes()) return false;
  int64_t v = 0;
  switch (c->dtype()) {
    case DType::kUInt8: v = c->As<uint8_t>()[row]; break;
    case DType::kInt8: v = c->As<int8_t>()[row]; break;
    case DType::kUInt16: v = c->As<uint16_t>()[row]; break;
    case DType::kInt16: v = c->As<int16_t>()[row]; break;
    case DType::kInt32: v = c->As<int32_t>()[row]; break;
    case DType::kUInt32: v = c->As<uint32_t>()[row]; break;
    case DType::kInt64: v = c->As<int64_t>()[row]; break;
    default: return false;
  }
  for (const nlohmann::json& want : args.value("values", nlohmann::json::array())) {
    if (want.is_number_integer() && want.get<int64_t>() == v) return true;
  }
  return false;
}

// A step's `resources`, `label_selector` and `concurrency`; nullopt when it has none (a
// stateful map always has one: its pool).
Result<std::optional<StepPlacement>> ParsePlacement(const nlohmann::json& entry,
                                                    const std::string& where,
                                                    TransformStep::Kind kind) {
  const bool stateful = kind == TransformStep::Kind::kStatefulMap;
  if (!stateful && !entry.contains("resources") && !entry.contains("label_selector")) {
    if (entry.contains("concurrency")) {
      return Status::InvalidArgument(where + ".concurrency: only a stateful map "
                                     "(RAYD_DATA_MAP_CLASS) runs on a pool of actors");
    }
    return std::optional<StepPlacement>();
  }
  StepPlacement placement;
  if (entry.contains("resources")) {
    const nlohmann::json& r = entry["resources"];
    if (!r.is_object()) return Status::InvalidArgument(where + ".resources: expected a map");
    for (const auto& [name, amount] : r.items()) {
      if (!amount.is_number() || amount.get<double>() < 0) {
        return Status::InvalidArgument(where + ".resources." + name +
                                       ": expected an amount of 0 or more");
      }
      placement.resources[name] = amount.get<double>();
    }
  }
  if (entry.contains("label_selector")) {
    const nlohmann::json& l = entry["label_selector"];
    if (!l.is_object()) return Status::InvalidArgument(where + ".label_selector: expected a map");
    for (const auto& [name, value] : l.items()) {
      if (!value.is_string()) {
        return Status::InvalidArgument(where + ".label_selector." + name + ": expected a string");
      }
      placement.label_selector[name] = value.get<std::string>();
    }
  }
  if (entry.contains("concurrency")) {
    if (!stateful) {
      return Status::InvalidArgument(where + ".concurrency: only a stateful map "
                                     "(RAYD_DATA_MAP_CLASS) runs on a pool of actors");
    }
    const nlohmann::json& c = entry["concurrency"];
    if (!c.is_number_integer() || c.get<int>() < 1) {
      return Status::InvalidArgument(where + ".concurrency: expected a number of actors, 1 or more");
    }
    placement.concurrency = c.get<int>();
  }
  // Like a data task, a step reserves nothing unless it says (a gang may hold every CPU).
  if (placement.resources.empty()) placement.resources["CPU"] = 0;
  return std::optional<StepPlacement>(std::move(placement));
}

const bool registered_builtins = RegisterBatchMap("to_float32", ToFloat32) &&
                                 RegisterBatchMap("select_columns", SelectColumns) &&
                                 RegisterRowFilter("label_in", LabelIn);

}  // namespace

bool RegisterBatchMap(const std::string& name, BatchMap fn) {
  TransformRegistry& r = Transforms();
  std::lock_guard lock(r.mu);
  r.maps[name] = fn;
  return true;
}

bool RegisterRowFilter(const std::string& name, RowFilter fn) {
  TransformRegistry& r = Transforms();
  std::lock_guard lock(r.mu);
  r.filters[name] = fn;
  return true;
}

bool RegisterBatchMapper(const std::string& name, BatchMapperFactory factory) {
  TransformRegistry& r = Transforms();
  std::lock_guard lock(r.mu);
  r.mappers[name] = factory;
  return true;
}

Result<std::unique_ptr<BatchMapper>> MakeBatchMapper(const TransformStep& step) {
  BatchMapperFactory factory = nullptr;
  {
    TransformRegistry& r = Transforms();
    std::lock_guard lock(r.mu);
    auto it = r.mappers.find(step.name);
    if (it != r.mappers.end()) factory = it->second;
  }
  if (factory == nullptr) {
    return Status::NotFound("map_batches " + step.name + ": no stateful map of that name here");
  }
  try {
    return factory(step.args);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("map_batches " + step.name + ": " + e.what());
  }
}

Result<std::vector<TransformStep>> ParseTransforms(const nlohmann::json& transforms) {
  std::vector<TransformStep> steps;
  if (transforms.is_null()) return steps;
  if (!transforms.is_array()) {
    return Status::InvalidArgument("transforms: expected a list of {map_batches: NAME, ...}, "
                                   "{filter: NAME, ...} or {limit: N}");
  }
  TransformRegistry& r = Transforms();
  std::lock_guard lock(r.mu);
  for (size_t i = 0; i < transforms.size(); ++i) {
    const nlohmann::json& entry = transforms[i];
    const std::string where = "transforms[" + std::to_string(i) + "]";
    if (!entry.is_object()) return Status::InvalidArgument(where + ": expected a map");
    if (entry.contains("limit")) {
      if (!entry["limit"].is_number_integer() || entry["limit"].get<int64_t>() < 0) {
        return Status::InvalidArgument(where + ".limit: expected a row count of 0 or more");
      }
      continue;
    }
    if (entry.contains("cache")) {
      if (entry.size() != 1 || entry["cache"] != "node") {
        return Status::InvalidArgument(where + ".cache: expected {cache: node} (the steps before "
                                       "it made once per node, shared by every rank and trial "
                                       "there that reads the same dataset)");
      }
      for (const TransformStep& before : steps) {
        const std::string at = "transforms[" + std::to_string(before.index) + "]";
        if (before.kind == TransformStep::Kind::kCache) {
          return Status::InvalidArgument(where + ".cache: a second cache step (the first is " +
                                         at + ")");
        }
        if (before.kind != TransformStep::Kind::kMap || before.placement) {
          return Status::InvalidArgument(
              where + ".cache: " + at + " (" + before.name +
              ") comes before it; only plain map_batches steps (no filter, no stateful map, no "
              "resources or label_selector of their own) may: the cache keeps rows in place");
        }
      }
      steps.push_back({.kind = TransformStep::Kind::kCache, .name = "cache", .index = i});
      continue;
    }
    TransformStep step;
    const char* key = entry.contains("map_batches") ? "map_batches"
                      : entry.contains("filter")    ? "filter"
                                                    : nullptr;
    if (key == nullptr || !entry[key].is_string()) {
      return Status::InvalidArgument(where + ": expected map_batches: NAME, filter: NAME or limit: N");
    }
    const bool filter = std::string(key) == "filter";
    step.name = entry[key].get<std::string>();
    step.index = i;
    step.kind = filter                            ? TransformStep::Kind::kFilter
                : r.mappers.count(step.name) > 0 ? TransformStep::Kind::kStatefulMap
                                                  : TransformStep::Kind::kMap;
    const bool known = filter ? r.filters.count(step.name) > 0
                              : r.maps.count(step.name) + r.mappers.count(step.name) > 0;
    if (!known) {
      std::string names = Names(r.maps);
      if (!filter && !r.mappers.empty()) names += ", " + Names(r.mappers);
      return Status::InvalidArgument(where + "." + key + ": unknown transform '" + step.name +
                                     "' (registered: " + (filter ? Names(r.filters) : names) +
                                     "; register it with " +
                                     (filter ? "RAYD_DATA_FILTER" : "RAYD_DATA_MAP or RAYD_DATA_MAP_CLASS") +
                                     " in a library the job loads)");
    }
    RAYD_ASSIGN_OR_RETURN(step.placement, ParsePlacement(entry, where, step.kind));
    for (const auto& [k, v] : entry.items()) {
      if (k != key && k != "resources" && k != "label_selector" && k != "concurrency") {
        step.args[k] = v;
      }
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::optional<size_t> CacheStep(std::span<const TransformStep> steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind == TransformStep::Kind::kCache) return i;
  }
  return std::nullopt;
}

std::vector<TransformStage> PlanStages(const std::vector<TransformStep>& steps) {
  std::vector<TransformStage> stages(1);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].placement) {
      stages.back().end = i;
      const bool filter = steps[i].kind == TransformStep::Kind::kFilter;
      stages.push_back({.begin = i,
                        .actors = steps[i].kind == TransformStep::Kind::kStatefulMap,
                        .placement = *steps[i].placement,
                        .where = "transforms[" + std::to_string(steps[i].index) + "] (" +
                                 (filter ? "filter " : "map_batches ") + steps[i].name + ")"});
    }
  }
  stages.back().end = steps.size();
  return stages;
}

int64_t ParseLimit(const nlohmann::json& transforms) {
  int64_t limit = -1;
  if (!transforms.is_array()) return limit;
  for (const nlohmann::json& entry : transforms) {
    if (entry.is_object() && entry.contains("limit") && entry["limit"].is_number_integer()) {
      const int64_t n = entry["limit"].get<int64_t>();
      limit = limit < 0 ? n : std::min(limit, n);
    }
  }
  return limit;
}

namespace {
thread_local int64_t transform_epoch = -1;
}  // namespace

int64_t TransformEpoch() { return transform_epoch; }

Result<Block> ApplyTransforms(std::span<const TransformStep> steps, Block block,
                              BatchMapper* mapper, int64_t epoch) {
  // The epoch the steps see, for this call (a data actor's thread serves one block at a time).
  struct EpochScope {
    explicit EpochScope(int64_t e) : before(transform_epoch) { transform_epoch = e; }
    ~EpochScope() { transform_epoch = before; }
    int64_t before;
  } scope(epoch);
  for (size_t i = 0; i < steps.size(); ++i) {
    const TransformStep& step = steps[i];
    if (step.kind == TransformStep::Kind::kStatefulMap) {
      if (i != 0 || mapper == nullptr) {
        return Status::InvalidArgument("map_batches " + step.name +
                                          ": a stateful map runs only on its actor pool");
      }
      Result<Block> out = (*mapper)(block);
      if (!out.ok()) {
        return Status(out.status().code(), "map_batches " + step.name + ": " + out.status().message());
      }
      block = std::move(*out);
      continue;
    }
    if (step.kind == TransformStep::Kind::kCache) continue;  // where rows are made, not what
    if (step.kind == TransformStep::Kind::kMap) {
      BatchMap fn;
      {
        TransformRegistry& r = Transforms();
        std::lock_guard lock(r.mu);
        fn = r.maps.at(step.name);
      }
      Result<Block> out = fn(block, step.args);
      if (!out.ok()) {
        return Status(out.status().code(), "map_batches " + step.name + ": " + out.status().message());
      }
      block = std::move(*out);
      continue;
    }
    RowFilter fn;
    {
      TransformRegistry& r = Transforms();
      std::lock_guard lock(r.mu);
      fn = r.filters.at(step.name);
    }
    std::vector<int64_t> keep;
    for (int64_t row = 0; row < block.num_rows(); ++row) {
      if (fn(block, row, step.args)) keep.push_back(row);
    }
    if (static_cast<int64_t>(keep.size()) != block.num_rows()) block = block.Take(keep);
  }
  return block;
}

}  // namespace rayd::data
