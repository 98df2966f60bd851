// Blocks as tensors.

#include <rayd/api/errors.h>
#include <rayd/train/torch_data.h>

namespace rayd::train {
namespace {

std::optional<torch::ScalarType> TorchType(rayd::data::DType dtype) {
  using rayd::data::DType;
  switch (dtype) {
    case DType::kUInt8: return torch::kUInt8;
    case DType::kInt8: return torch::kInt8;
    case DType::kInt16: return torch::kInt16;
    case DType::kInt32: return torch::kInt32;
    case DType::kInt64: return torch::kInt64;
    case DType::kFloat32: return torch::kFloat32;
    case DType::kFloat64: return torch::kFloat64;
    default: return std::nullopt;
  }
}

}  // namespace

TensorBatch ToTensors(const rayd::data::Block& batch, const torch::Device& device) {
  using rayd::data::DType;
  TensorBatch out;
  // Keeps the block's memory alive as long as any tensor viewing it.
  auto owner = std::make_shared<rayd::data::Block>(batch);
  for (const rayd::data::Column& c : owner->columns()) {
    if (c.is_bytes()) continue;
    std::vector<int64_t> sizes{owner->num_rows()};
    sizes.insert(sizes.end(), c.schema.shape.begin(), c.schema.shape.end());
    torch::Tensor t;
    if (std::optional<torch::ScalarType> type = TorchType(c.dtype())) {
      t = torch::from_blob(const_cast<uint8_t*>(c.data), sizes, [owner](void*) {},
                           torch::TensorOptions().dtype(*type));
    } else if (c.dtype() == DType::kUInt16) {
      t = torch::empty(sizes, torch::kInt32);
      const uint16_t* from = c.As<uint16_t>();
      int32_t* to = t.data_ptr<int32_t>();
      for (int64_t i = 0, n = t.numel(); i < n; ++i) to[i] = from[i];
    } else if (c.dtype() == DType::kUInt32) {
      t = torch::empty(sizes, torch::kInt64);
      const uint32_t* from = c.As<uint32_t>();
      int64_t* to = t.data_ptr<int64_t>();
      for (int64_t i = 0, n = t.numel(); i < n; ++i) to[i] = from[i];
    } else {
      continue;
    }
    out.emplace(c.name(), device.is_cpu() ? t : t.to(device, /*non_blocking=*/false));
  }
  return out;
}

bool TorchBatches::Advance() {
  std::optional<rayd::data::Block> batch = NextBatch(*pass_);
  if (!batch) {
    current_.clear();
    return false;
  }
  current_ = ToTensors(*batch, device_);
  return true;
}

TorchBatches IterTorchBatches(rayd::data::DatasetShard& shard,
                              const rayd::data::BatchOptions& options,
                              const torch::Device& device) {
  return TorchBatches(shard.IterBatches(options), device);
}

}  // namespace rayd::train
