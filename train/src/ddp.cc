#include "rayd/train/ddp.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <map>
#include <optional>
#include <string>
#include <unordered_set>

#include "c10d_error.h"

namespace rayd::train {

Result<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    torch::nn::Module& module, ProcessGroup& group, DistributedDataParallelOptions options) {
  if (options.bucket_cap_bytes <= 0 || options.first_bucket_cap_bytes <= 0) {
    return Status::InvalidArgument("bucket caps must be positive");
  }
  // Gloo reduces CPU tensors, NCCL CUDA tensors of one device (the rank's).
  const bool nccl = group.backend() == CollectiveBackend::kNccl;
  std::optional<torch::Device> device;
  for (const auto& tensor : module.parameters()) {
    const bool placed = nccl ? tensor.device().is_cuda() : tensor.device().is_cpu();
    if (!placed || tensor.is_sparse() || (device && tensor.device() != *device)) {
      return Status::InvalidArgument(
          std::string("DistributedDataParallel over ") + (nccl ? "NCCL" : "Gloo") + " needs " +
          (nccl ? "dense parameters on one CUDA device" : "dense CPU parameters") + ", got a " +
          tensor.toString() + " on " + tensor.device().str());
    }
    device = tensor.device();
  }
  std::unique_ptr<DistributedDataParallel> ddp(new DistributedDataParallel(module, group));
  std::vector<torch::Tensor> everything = module.parameters();
  for (const auto& buffer : module.buffers()) everything.push_back(buffer);
  RAYD_RETURN_IF_ERROR(ddp->BroadcastFromRankZero(everything, "rank 0's parameters"));
  if (options.broadcast_buffers) ddp->buffers_ = module.buffers();
  ddp->options_ = options;
  ddp->BuildBuckets(std::vector<int>(ddp->params_.size(), -1));
  ddp->InstallHooks();
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(torch::nn::Module& module, ProcessGroup& group)
    : module_(module), group_(group) {
  // A parameter shared by two submodules appears twice in parameters(); it gets one slot.
  std::unordered_set<const c10::TensorImpl*> seen;
  for (auto& param : module_.parameters()) {
    if (param.requires_grad() && seen.insert(param.unsafeGetTensorImpl()).second) {
      params_.push_back(param);
    }
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

Status DistributedDataParallel::BroadcastFromRankZero(const std::vector<torch::Tensor>& all,
                                                      const std::string& what) {
  // Grouped by dtype, in the same order on every rank (std::map). A small group (buffers, a
  // small model) travels as one flat tensor: one collective. A large one goes tensor by
  // tensor, in place, all launched before any is waited for: a flat copy of a large model
  // would be the run's peak memory.
  constexpr int64_t kFlatBytes = 16 << 20;
  std::map<int, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : all) by_dtype[static_cast<int>(t.scalar_type())].push_back(t);
  const std::string doing = "broadcasting " + what;
  torch::NoGradGuard no_grad;
  c10d::BroadcastOptions options;
  options.rootRank = 0;
  try {
    for (auto& [dtype, tensors] : by_dtype) {
      int64_t bytes = 0;
      for (const auto& t : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
      if (bytes > kFlatBytes) {
        std::vector<c10::intrusive_ptr<c10d::Work>> works;
        for (const auto& t : tensors) {
          std::vector<torch::Tensor> one = {t.detach()};
          works.push_back(group_.c10d().broadcast(one, options));
        }
        for (auto& work : works) RAYD_RETURN_IF_ERROR(WaitWork(*work, group_.timeout(), doing));
        continue;
      }
      std::vector<torch::Tensor> pieces;
      for (const auto& t : tensors) pieces.push_back(t.detach().reshape(-1));
      std::vector<torch::Tensor> flat{torch::cat(pieces)};
      auto work = group_.c10d().broadcast(flat, options);
      RAYD_RETURN_IF_ERROR(WaitWork(*work, group_.timeout(), doing));
      if (group_.rank() == 0) continue;
      int64_t offset = 0;
      for (auto& t : tensors) {
        t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
    }
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), doing);
  }
  return Status::Ok();
}

void DistributedDataParallel::BuildBuckets(const std::vector<int>& owners) {
  buckets_.clear();
  slots_.assign(params_.size(), Slot{});
  // The open bucket of each (owner, dtype): a parameter joins it while it fits its cap, else
  // opens the next one. Bucket indices follow the order buckets were opened, so every rank
  // numbers (and launches) them alike.
  std::map<std::pair<int, int>, size_t> open;
  std::vector<int64_t> bytes;  // per bucket
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& param = params_[i];
    const int64_t size = param.numel() * static_cast<int64_t>(param.element_size());
    const std::pair<int, int> key{owners[i], static_cast<int>(param.scalar_type())};
    auto it = open.find(key);
    if (it == open.end() ||
        bytes[it->second] + size > (it->second == 0 ? options_.first_bucket_cap_bytes
                                                    : options_.bucket_cap_bytes)) {
      buckets_.emplace_back();
      buckets_.back().owner = owners[i];
      bytes.push_back(0);
      it = open.insert_or_assign(key, buckets_.size() - 1).first;
    }
    Bucket& bucket = buckets_[it->second];
    slots_[i].bucket = it->second;
    slots_[i].offset = bucket.elements;
    bucket.params.push_back(i);
    bucket.elements += param.numel();
    bytes[it->second] += size;
  }
  const int rank = group_.rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!buckets_[b].Transient(rank)) EnsureStorage(b);
  }
  // The backward accumulates straight into the bucket too, rather than into a .grad autograd
  // allocates and MarkReady then copies: no second copy of every gradient at the first step
  // (for a large model, the run's peak memory). A parameter another rank steps (stage 2) keeps
  // no gradient between steps.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    if (buckets_[slots_[i].bucket].Transient(rank)) {
      grad = torch::Tensor();
      continue;
    }
    if (grad.defined() && grad.data_ptr() != slots_[i].view.data_ptr()) {
      slots_[i].view.copy_(grad);
    }
    grad = slots_[i].view;
  }
  ResetStep();
}

void DistributedDataParallel::EnsureStorage(size_t b) {
  Bucket& bucket = buckets_[b];
  if (bucket.flat.defined()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor& first = params_[bucket.params.front()];
  bucket.flat = torch::zeros(
      {bucket.elements}, torch::TensorOptions().dtype(first.scalar_type()).device(first.device()));
  // Each view shares its bucket's storage without being an autograd view of it, so
  // zero_grad()'s in-place detach_() accepts it as a .grad, and it keeps the storage alive.
  for (size_t i : bucket.params) {
    slots_[i].view = torch::empty({0}, bucket.flat.options());
    slots_[i].view.set_(bucket.flat.storage(), slots_[i].offset, params_[i].sizes());
  }
}

void DistributedDataParallel::Release(size_t b) {
  Bucket& bucket = buckets_[b];
  bucket.flat = torch::Tensor();  // a reduce in flight keeps its own reference to the storage
  for (size_t i : bucket.params) slots_[i].view = torch::Tensor();
}

void DistributedDataParallel::ReleaseReducedBuckets() {
  const int rank = group_.rank();
  for (size_t b = 0; b < next_bucket_; ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.Transient(rank) && bucket.flat.defined() && bucket.work &&
        bucket.work->isCompleted()) {
      Release(b);
    }
  }
}

Status DistributedDataParallel::ReduceGradientsToOwners(
    const std::unordered_map<const c10::TensorImpl*, int>& owners) {
  std::vector<int> per_param(params_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = owners.find(params_[i].unsafeGetTensorImpl());
    if (it == owners.end()) continue;
    if (it->second < 0 || it->second >= group_.world_size()) {
      return Status::InvalidArgument("owner rank " + std::to_string(it->second) +
                                     " is not in a group of " +
                                     std::to_string(group_.world_size()));
    }
    per_param[i] = it->second;
  }
  BuildBuckets(per_param);
  return Status::Ok();
}

void DistributedDataParallel::InstallHooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, i](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list& /*inputs*/) {
              OnGradientReady(i);
              return outputs;
            })));
    accumulators_.push_back(std::move(accumulator));
  }
}

void DistributedDataParallel::OnGradientReady(size_t param) {
  if (!error_.ok() || !sync_) return;  // under NoSync: autograd accumulates into .grad alone
  if (slots_[param].ready) {
    error_ = Status::InvalidArgument(
        "a parameter received a second gradient before FinishBackward(): call "
        "FinishBackward() after every backward pass");
    return;
  }
  const torch::Tensor& grad = params_[param].grad();
  if (grad.defined() && grad.layout() != torch::kStrided) {
    error_ = Status::Unimplemented("sparse gradients are not supported");
    return;
  }
  MarkReady(param, grad);
  LaunchReadyBuckets();
}

void DistributedDataParallel::MarkReady(size_t param, const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  const size_t b = slots_[param].bucket;
  EnsureStorage(b);
  torch::Tensor& view = slots_[param].view;
  if (!grad.defined()) {
    view.zero_();
  } else if (grad.data_ptr() != view.data_ptr()) {
    // .grad is not (or no longer) our bucket view: zero_grad(set_to_none), or the first step.
    view.copy_(grad);
  }
  // Another rank steps it (stage 2): the bucket has this gradient now; drop autograd's copy.
  if (buckets_[b].Transient(group_.rank())) params_[param].mutable_grad() = torch::Tensor();
  slots_[param].ready = true;
  --buckets_[b].pending;
}

void DistributedDataParallel::LaunchReadyBuckets() {
  const int world = group_.world_size();
  ReleaseReducedBuckets();
  while (error_.ok() && next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_++];
    try {
      // Divide before summing, as torch DDP does: the sum of averages cannot overflow where
      // the sum of gradients might. (A pass over the bucket: skipped when there is no one to
      // average with.)
      if (world > 1) bucket.flat.div_(world);
      std::vector<torch::Tensor> tensors{bucket.flat};
      if (bucket.owner >= 0) {
        c10d::ReduceOptions reduce;
        reduce.rootRank = bucket.owner;
        bucket.work = group_.c10d().reduce(tensors, reduce);
      } else {
        bucket.work = group_.c10d().allreduce(tensors);
      }
    } catch (...) {
      error_ = StatusFromC10dException(std::current_exception(), "launching a gradient reduction");
    }
  }
}

Status DistributedDataParallel::FinishBackward() {
  if (!sync_) {
    ResetStep();
    return Status::Ok();
  }
  // Parameters that got no gradient this step (unused in forward) contribute zeros, so every
  // rank still launches every bucket, in the same order.
  for (size_t i = 0; i < params_.size() && error_.ok(); ++i) {
    if (!slots_[i].ready) MarkReady(i, torch::Tensor());
  }
  LaunchReadyBuckets();
  Status status = error_;
  for (size_t b = 0; b < buckets_.size() && status.ok(); ++b) {
    status = WaitWork(*buckets_[b].work, group_.timeout(),
                      std::string(buckets_[b].owner >= 0 ? "reducing" : "all-reducing") +
                          " gradient bucket " + std::to_string(b) + " of " +
                          std::to_string(buckets_.size()));
  }
  const int rank = group_.rank();
  if (status.ok()) {
    // From now on .grad is the parameter's slice of its bucket: the next backward accumulates
    // straight into it, and the averaged result is already there. A parameter another rank
    // steps has none.
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& grad = params_[i].mutable_grad();
      if (buckets_[slots_[i].bucket].Transient(rank)) {
        grad = torch::Tensor();
      } else if (!grad.defined() || grad.data_ptr() != slots_[i].view.data_ptr()) {
        grad = slots_[i].view;
      }
    }
    if (!buffers_.empty()) status = BroadcastFromRankZero(buffers_, "rank 0's buffers");
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].Transient(rank)) Release(b);
  }
  ResetStep();
  return status;
}

void DistributedDataParallel::ResetStep() {
  for (auto& slot : slots_) slot.ready = false;
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work.reset();
  }
  next_bucket_ = 0;
  error_ = Status::Ok();
}

}  // namespace rayd::train
