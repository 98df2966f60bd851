#pragma once
// Transforms: C++ functions over batches, registered by name like rayd tasks, that a dataset's
// `transforms:` list applies in order after the read, wherever the dataset's blocks are made
// (in the rank, or as tasks on other nodes: rayd/data/shard.h).
//
//   rayd::Result<rayd::data::Block> Brighten(const rayd::data::Block& batch,
//                                            const nlohmann::json& args) { ... }
//   RAYD_DATA_MAP(Brighten);
//
//   datasets:
//     train:
//       format: idx
//       paths: [/usr/share/datasets/fashion-mnist/train-*]
//       transforms:
//         - {map_batches: to_float32, columns: [image], scale: 0.00392156862745098}
//         - {map_batches: Brighten, amount: 0.1}
//         - {filter: label_in, column: label, values: [0, 1]}
//         - {limit: 1000}
//
// A map's keys other than `map_batches` (or `filter`) are its arguments. Maps and filters hold no
// state between batches (ARCHITECTURE.md: only buffering steps do), so a block can be made by any
// process in any order. Built in: to_float32 {columns, scale (1), mean (0), std (1)}: each column
// as float32 (x * scale - mean) / std; select_columns {columns}; label_in {column, values}.
// `limit: N` keeps the dataset's first N rows (before the epoch's order is drawn).

#include <rayd/base/status.h>
#include <rayd/data/block.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rayd::data {

using BatchMap = Result<Block> (*)(const Block& batch, const nlohmann::json& args);
// Whether row `row` of `batch` stays.
using RowFilter = bool (*)(const Block& batch, int64_t row, const nlohmann::json& args);

bool RegisterBatchMap(const std::string& name, BatchMap fn);
bool RegisterRowFilter(const std::string& name, RowFilter fn);

struct TransformStep {
  enum class Kind { kMap, kFilter };
  Kind kind = Kind::kMap;
  std::string name;
  nlohmann::json args = nlohmann::json::object();
};

// The steps of a dataset's `transforms:` list (its `limit` entries apart: ParseLimit), each
// name looked up now; InvalidArgument naming the entry (transforms[2].map_batches: unknown
// transform 'x' (registered: ...)).
Result<std::vector<TransformStep>> ParseTransforms(const nlohmann::json& transforms);
// The smallest `limit:` of the list, or -1.
int64_t ParseLimit(const nlohmann::json& transforms);
// Applies `steps` in order.
Result<Block> ApplyTransforms(const std::vector<TransformStep>& steps, Block block);

}  // namespace rayd::data

#define RAYD_DATA_MAP(fn)                                                                    \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_data_map_registered_, __COUNTER__) = \
      ::rayd::data::RegisterBatchMap(#fn, fn)
#define RAYD_DATA_FILTER(fn)                                                                    \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_data_filter_registered_, __COUNTER__) = \
      ::rayd::data::RegisterRowFilter(#fn, fn)
