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
// A map's keys other than `map_batches` (or `filter`) are its arguments, except three that say
// where the step runs: `resources` and `label_selector` (the step's own, as a task's), and
// `concurrency`. Maps and filters hold no state between batches, so a block can be made by any
// process in any order.
//
// Stateful maps: a class made once and then called on many batches (a model, a tokenizer, a
// lookup table loaded from a file) runs on a pool of rayd actors, `concurrency` of them (default
// 1, per rank), each holding one instance built from the step's arguments:
//
//   class Embed : public rayd::data::BatchMapper {
//    public:
//     explicit Embed(const nlohmann::json& args);   // may throw: the pool's start fails with it
//     rayd::Result<rayd::data::Block> operator()(const rayd::data::Block& batch) override;
//   };
//   RAYD_DATA_MAP_CLASS(Embed);
//
//         - {map_batches: Embed, concurrency: 2, resources: {CPU: 1}, label_selector: {kind: cpu}}
//
// How steps run (PlanStages): the read and the steps up to the first step with a placement of
// its own make a block where the dataset says (`execution:`); each later step with a placement
// (a stateful map, or a map or filter with its own `resources`/`label_selector`) starts a stage
// that runs, with the plain steps after it, as a rayd task (or actor call) on the previous
// stage's block in the object store. Built in: to_float32 {columns, scale (1), mean (0), std (1)}: each column
// as float32 (x * scale - mean) / std; select_columns {columns}; label_in {column, values}.
// `limit: N` keeps the dataset's first N rows (before the epoch's order is drawn).
//
// `{cache: node}`: the read and the steps before it (plain maps only: decoding, resizing,
// normalising; nothing random) are made once per node and kept there, in blocks of the
// dataset's rows in file order in the object store, for every rank and trial on the node that
// reads the same dataset (the same files, format, options and steps before the cache: its
// fingerprint, CacheFingerprint in data/src/node_cache.h). Each reader still draws its own
// order and runs the steps after the cache itself. A node's blocks of one fingerprint are held
// by a rayd actor on that node and freed when no reader has asked for one for
// `cache_idle_s` (30) seconds; they are kept under `cache_bytes` (512 MiB), the least
// recently used let go first (and made again if asked for).

#include <rayd/base/status.h>
#include <rayd/data/block.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rayd::data {

using BatchMap = Result<Block> (*)(const Block& batch, const nlohmann::json& args);
// Whether row `row` of `batch` stays.
using RowFilter = bool (*)(const Block& batch, int64_t row, const nlohmann::json& args);

// A stateful map's instance: made once per actor (RAYD_DATA_MAP_CLASS), called on one batch at a
// time.
class BatchMapper {
 public:
  virtual ~BatchMapper() = default;
  virtual Result<Block> operator()(const Block& batch) = 0;
};
using BatchMapperFactory = Result<std::unique_ptr<BatchMapper>> (*)(const nlohmann::json& args);

bool RegisterBatchMap(const std::string& name, BatchMap fn);
bool RegisterRowFilter(const std::string& name, RowFilter fn);
bool RegisterBatchMapper(const std::string& name, BatchMapperFactory factory);

// Where a step asks to run: its own `resources`, `label_selector` and (stateful maps) `concurrency`.
struct StepPlacement {
  std::map<std::string, double> resources;
  std::map<std::string, std::string> label_selector;
  int concurrency = 1;
};

struct TransformStep {
  enum class Kind { kMap, kFilter, kStatefulMap, kCache };
  Kind kind = Kind::kMap;
  std::string name;
  nlohmann::json args = nlohmann::json::object();
  size_t index = 0;  // its place in the `transforms:` list (limits counted), for messages
  // Set when the step has placement keys, and always for a stateful map.
  std::optional<StepPlacement> placement;
};

// Consecutive steps that run in one place: [begin, end) of the steps. Stage 0 begins with the
// read; a later stage begins with a step that has a placement (on an actor pool when that step
// is a stateful map, as a task otherwise).
struct TransformStage {
  size_t begin = 0;
  size_t end = 0;
  bool actors = false;
  StepPlacement placement;  // of step `begin` (stages after the first)
  std::string where;        // step `begin` as the user wrote it: "transforms[2] (map_batches Embed)"
};
std::vector<TransformStage> PlanStages(const std::vector<TransformStep>& steps);
// The place of the `{cache: node}` step among `steps`, if there is one.
std::optional<size_t> CacheStep(std::span<const TransformStep> steps);

// The steps of a dataset's `transforms:` list (its `limit` entries apart: ParseLimit), each
// name looked up now; InvalidArgument naming the entry (transforms[2].map_batches: unknown
// transform 'x' (registered: ...)).
Result<std::vector<TransformStep>> ParseTransforms(const nlohmann::json& transforms);
// The smallest `limit:` of the list, or -1.
int64_t ParseLimit(const nlohmann::json& transforms);
// Applies `steps` in order, for the rows of epoch `epoch` (TransformEpoch() in each step); a
// stateful map among them applies through `mapper` when it is the first step (an actor's own
// instance), and is InvalidArgument otherwise.
Result<Block> ApplyTransforms(std::span<const TransformStep> steps, Block block,
                              BatchMapper* mapper = nullptr, int64_t epoch = -1);
// In a batch map, filter or stateful map: the epoch (0, 1, ...) the rows it is called on are made
// for, so that a random transform can draw anew each epoch, as torchvision's do, while a block
// made again (a failure, a resume) comes out the same. -1 where rows are made once for every
// epoch (the steps before a `{cache: node}` step) and outside a pass.
int64_t TransformEpoch();
// A stateful map's instance (the constructor's exception as InvalidArgument).
Result<std::unique_ptr<BatchMapper>> MakeBatchMapper(const TransformStep& step);

}  // namespace rayd::data

#define RAYD_DATA_MAP(fn)                                                                    \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_data_map_registered_, __COUNTER__) = \
      ::rayd::data::RegisterBatchMap(#fn, fn)
#define RAYD_DATA_FILTER(fn)                                                                    \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_data_filter_registered_, __COUNTER__) = \
      ::rayd::data::RegisterRowFilter(#fn, fn)

// Registers class `Class` (a rayd::data::BatchMapper made from `const nlohmann::json&`) as the
// stateful map `Class`.
#define RAYD_DATA_MAP_CLASS(Class)                                                                \
  [[maybe_unused]] static const bool RAYD_CONCAT(rayd_data_mapper_registered_, __COUNTER__) =     \
      ::rayd::data::RegisterBatchMapper(                                                           \
          #Class,                                                                                  \
          [](const nlohmann::json& args) -> ::rayd::Result<std::unique_ptr<::rayd::data::BatchMapper>> { \
            return std::unique_ptr<::rayd::data::BatchMapper>(new Class(args));                    \
          })
