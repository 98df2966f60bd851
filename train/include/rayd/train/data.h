#pragma once
// The datasets of a run, inside its train loop (no LibTorch: batches are rayd::data::Block
// views; rayd/train/torch_data.h turns them into tensors).
//
//   rayd::data::DatasetShard& shard = rayd::train::GetDatasetShard("train");
//   for (int epoch = start; epoch < epochs; ++epoch) {
//     auto pass = shard.IterBatches({.batch_size = 64, .epoch = epoch});
//     while (auto batch = rayd::train::NextBatch(*pass)) { ... batch->Find("image") ... }
//   }
//
// Each rank's shard is its equal share of every epoch (rayd/data/order.h), the same number of
// batches on every rank. The time a loop waits for batches is reported as `data_wait_s` (seconds
// since the previous report) in every Report's metrics.

#include <rayd/data/reader.h>
#include <rayd/data/shard.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace rayd::train {

// This rank's shard of the run's dataset `name` (RunConfig::datasets), opened on first use and
// kept for the attempt. Throws RaydError naming the datasets the run has when `name` is not one
// of them, or the reader's error (a missing file, a truncated one, an unknown transform).
rayd::data::DatasetShard& GetDatasetShard(const std::string& name);

// The names of the run's datasets (empty outside a loop whose run has none).
std::vector<std::string> DatasetNames();

// The next batch of `pass`, or nullopt at the end of the epoch; throws RaydError with the
// reader's error (naming the file and row), which fails the attempt.
std::optional<rayd::data::Block> NextBatch(rayd::data::BatchIterator& pass);

// Datasets as they travel to the ranks (a JSON array of {name, format, paths, options}), and back.
nlohmann::json DatasetsToJson(const std::vector<rayd::data::DatasetSpec>& datasets);
Result<std::vector<rayd::data::DatasetSpec>> DatasetsFromJson(const nlohmann::json& json);

}  // namespace rayd::train
