#pragma once
// A tensor on another tensor's storage that is not an autograd view of it: the gradient buckets'
// per-parameter .grad tensors, ZeRO's flat parameters and their slices. An optimizer's
// zero_grad() detaches a .grad in place, which LibTorch refuses for a view; this shares the
// storage (and keeps it alive) without being one.

#include <torch/torch.h>

#include <cstdint>

namespace rayd::train::internal {

// `sizes`, contiguous, on `flat`'s storage from element `offset` of `flat` on.
inline torch::Tensor AliasOf(const torch::Tensor& flat, int64_t offset, at::IntArrayRef sizes) {
  torch::Tensor alias = torch::empty({0}, flat.options().requires_grad(false));
  alias.set_(flat.storage(), flat.storage_offset() + offset, sizes);
  return alias;
}

}  // namespace rayd::train::internal
