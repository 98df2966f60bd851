#pragma once
// rayd Data's batches as LibTorch tensors, inside a train loop:
//
//   rayd::data::DatasetShard& shard = rayd::train::GetDatasetShard("train");
//   for (rayd::train::TensorBatch& batch :
//        rayd::train::IterTorchBatches(shard, {.batch_size = 64, .epoch = epoch}, device)) {
//     torch::Tensor x = batch.at("image"), y = batch.at("label");
//   }
//
// A fixed column becomes a tensor of shape [rows, *shape] viewing the block's memory (the
// object store's shared memory, or the producer's buffer) with no copy when it stays on the
// CPU; on a GPU it is copied to the device. uint16 and uint32 columns (which LibTorch 1.13 has
// no type for) are widened to int32 and int64; bytes columns are left out (decode them in a
// transform).

#include <rayd/data/shard.h>
#include <rayd/train/data.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rayd::train {

using TensorBatch = std::map<std::string, torch::Tensor>;

// The fixed columns of `batch` as tensors on `device`.
TensorBatch ToTensors(const rayd::data::Block& batch, const torch::Device& device);

// One pass over a shard's epoch as tensor batches (an input range). Errors throw RaydError from
// the increment, failing the attempt with the reader's message.
class TorchBatches {
 public:
  class Iterator {
   public:
    Iterator() = default;
    explicit Iterator(TorchBatches* owner) : owner_(owner) {}
    TensorBatch& operator*() { return owner_->current_; }
    Iterator& operator++() {
      if (!owner_->Advance()) owner_ = nullptr;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return owner_ != other.owner_; }

   private:
    TorchBatches* owner_ = nullptr;
  };

  TorchBatches(std::unique_ptr<rayd::data::BatchIterator> pass, torch::Device device)
      : pass_(std::move(pass)), device_(device) {}
  Iterator begin() { return Advance() ? Iterator(this) : Iterator(); }
  Iterator end() { return Iterator(); }

 private:
  bool Advance();
  std::unique_ptr<rayd::data::BatchIterator> pass_;
  torch::Device device_;
  TensorBatch current_;
};

TorchBatches IterTorchBatches(rayd::data::DatasetShard& shard,
                              const rayd::data::BatchOptions& options,
                              const torch::Device& device = torch::kCPU);

}  // namespace rayd::train
