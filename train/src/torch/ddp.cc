#include "rayd/train/ddp.h"

#include <rayd/base/logging.h>
#include <rayd/train/fsdp.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "c10d_error.h"
#include "tensor_alias.h"

namespace rayd::train {
namespace {

// The parameters every rank holds whole: all but the shards of the module's sharded units
// (ZeRO stage 3, rayd/train/fsdp.h), which their units gather and reduce themselves.
std::vector<torch::Tensor> ReplicatedParameters(torch::nn::Module& module) {
  std::unordered_set<const c10::TensorImpl*> shards;
  // Not modules() with the module itself: that needs it held by a shared_ptr.
  std::vector<const torch::nn::Module*> all = {&module};
  for (const auto& child : module.modules(/*include_self=*/false)) all.push_back(child.get());
  for (const torch::nn::Module* each : all) {
    if (const auto* unit = each->as<ShardedUnitImpl>()) {
      shards.insert(unit->shard().unsafeGetTensorImpl());
    }
  }
  std::vector<torch::Tensor> params;
  for (const auto& param : module.parameters()) {
    if (!shards.contains(param.unsafeGetTensorImpl())) params.push_back(param);
  }
  return params;
}

}  // namespace

Result<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    torch::nn::Module& module, ProcessGroup& group, DistributedDataParallelOptions options) {
  if (options.bucket_cap_bytes <= 0 || options.first_bucket_cap_bytes <= 0) {
    return Status::InvalidArgument("bucket caps must be positive");
  }
  // Gloo reduces CPU tensors, NCCL CUDA tensors of one device (the rank's).
  const bool nccl = group.backend() == CollectiveBackend::kNccl;
  std::optional<torch::Device> device;
  for (const auto& tensor : ReplicatedParameters(module)) {
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
  std::vector<torch::Tensor> everything = ReplicatedParameters(module);
  for (const auto& buffer : module.buffers()) everything.push_back(buffer);
  RAYD_RETURN_IF_ERROR(ddp->BroadcastFromRankZero(everything, "rank 0's parameters"));
  if (options.broadcast_buffers) ddp->buffers_ = module.buffers();
  ddp->options_ = options;
  ddp->BuildBuckets();
  ddp->InstallHooks();
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(torch::nn::Module& module, ProcessGroup& group)
    : module_(module), group_(group) {
  // A parameter shared by two submodules appears twice in parameters(); it gets one slot.
  std::unordered_set<const c10::TensorImpl*> seen;
  for (auto& param : ReplicatedParameters(module_)) {
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

void DistributedDataParallel::BuildBuckets() {
  flat_layout_ = false;
  region_ = torch::Tensor();
  buckets_.clear();
  slots_.assign(params_.size(), Slot{});
  // The open bucket of each dtype: a parameter joins it while it fits its cap, else opens the
  // next one. Bucket indices follow the order buckets were opened, so every rank numbers (and
  // launches) them alike.
  std::map<int, size_t> open;
  std::vector<int64_t> bytes;  // per bucket
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& param = params_[i];
    const int64_t size = param.numel() * static_cast<int64_t>(param.element_size());
    auto it = open.find(static_cast<int>(param.scalar_type()));
    if (it == open.end() || bytes[it->second] + size > Cap(it->second)) {
      buckets_.emplace_back();
      bytes.push_back(0);
      it = open.insert_or_assign(static_cast<int>(param.scalar_type()), buckets_.size() - 1).first;
    }
    Bucket& bucket = buckets_[it->second];
    slots_[i].pieces.push_back({it->second, bucket.elements, 0, param.numel()});
    bucket.params.push_back(i);
    bucket.elements += param.numel();
    bytes[it->second] += size;
  }
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const torch::Tensor& first = params_[bucket.params.front()];
    bucket.flat = torch::zeros({bucket.elements}, first.options().requires_grad(false));
    for (size_t i : bucket.params) {
      slots_[i].view =
          internal::AliasOf(bucket.flat, slots_[i].pieces.front().bucket_offset, params_[i].sizes());
    }
  }
  PointGradsHome();
}

Status DistributedDataParallel::UseFlatLayout(const std::vector<torch::Tensor>& order,
                                              const std::vector<int64_t>& bounds,
                                              bool reduce_to_owners) {
  // Where each of our parameters sits in the flat space.
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = i;
  std::vector<int64_t> begin(params_.size(), -1);
  int64_t total = 0;
  for (const torch::Tensor& param : order) {
    auto it = index.find(param.unsafeGetTensorImpl());
    if (it == index.end() || begin[it->second] >= 0) {
      return Status::InvalidArgument(
          "the flat layout must hold each of the model's trainable parameters once");
    }
    if (param.scalar_type() != order.front().scalar_type()) {
      return Status::InvalidArgument("the flat layout needs parameters of one dtype");
    }
    begin[it->second] = total;
    total += param.numel();
  }
  const int world = group_.world_size(), rank = group_.rank();
  if (order.size() != params_.size() || bounds.size() != static_cast<size_t>(world) + 1 ||
      bounds.front() != 0 || bounds.back() != total) {
    return Status::InvalidArgument(
        "the flat layout must hold every trainable parameter of the model, and its bounds must "
        "split all of it among the group's ranks");
  }
  flat_layout_ = true;
  // The old buckets go before the new storage comes: for a large model, holding both at once
  // would be the run's peak memory. (Between steps, so no gradient is lost that matters.)
  for (torch::Tensor& param : params_) param.mutable_grad() = torch::Tensor();
  buckets_.clear();
  slots_.assign(params_.size(), Slot{});
  // Buckets are ranges of the flat space, made from its end (backward's first gradients) down;
  // with reduce_to_owners none crosses an owner's bound (a parameter that does is cut in two).
  std::vector<int64_t> bytes;
  std::vector<int64_t> low;  // per bucket: its lowest flat element so far (buckets grow down)
  bool sealed = false;  // the last bucket takes no more pieces
  const int64_t element_size = order.empty() ? 1 : order.front().element_size();
  for (size_t o = order.size(); o-- > 0;) {
    const size_t i = index.at(order[o].unsafeGetTensorImpl());
    const int64_t start = begin[i], end = start + params_[i].numel();
    for (int64_t hi = end; hi > start;) {
      int owner = -1;
      int64_t lo = start;
      if (reduce_to_owners) {
        owner = static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), hi - 1) -
                                 bounds.begin()) - 1;
        lo = std::max(start, bounds[owner]);
      }
      const int64_t size = (hi - lo) * element_size;
      // Reduced to owners, a large gradient gets a bucket of its own: a rank that does not own
      // it then reduces autograd's tensor as it is, without a copy (MarkReady).
      const bool alone = reduce_to_owners && 2 * size >= options_.bucket_cap_bytes;
      const bool fits = !alone && !buckets_.empty() && !sealed && buckets_.back().owner == owner &&
                        bytes.back() + size <= Cap(buckets_.size() - 1);
      if (!fits) {
        buckets_.emplace_back();
        buckets_.back().owner = owner;
        bytes.push_back(0);
        low.push_back(hi);
      }
      sealed = alone;
      const size_t b = buckets_.size() - 1;
      slots_[i].pieces.push_back({b, lo, lo - start, hi - lo});  // bucket_offset fixed below
      buckets_[b].params.push_back(i);
      buckets_[b].elements += hi - lo;
      bytes[b] += size;
      low[b] = lo;
      hi = lo;
    }
  }
  // This rank's persistent gradients: all of them, or (reduce_to_owners) the range it owns.
  region_begin_ = reduce_to_owners ? bounds[rank] : 0;
  const int64_t region_end = reduce_to_owners ? bounds[rank + 1] : total;
  torch::NoGradGuard no_grad;
  region_ = torch::zeros({region_end - region_begin_},
                         order.empty() ? torch::TensorOptions()
                                       : order.front().options().requires_grad(false));
  for (auto& slot : slots_) {
    for (Piece& piece : slot.pieces) piece.bucket_offset -= low[piece.bucket];
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    if (!bucket.Transient(rank)) {
      bucket.flat = region_.narrow(0, low[b] - region_begin_, bucket.elements);
    }
  }
  // A parameter wholly in the region keeps its gradient there; the others have none between
  // steps (their pieces are copied into the buckets as they arrive).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (begin[i] >= region_begin_ && begin[i] + params_[i].numel() <= region_end) {
      slots_[i].view = internal::AliasOf(region_, begin[i] - region_begin_, params_[i].sizes());
    }
  }
  PointGradsHome();
  return Status::Ok();
}

int64_t DistributedDataParallel::gradient_bytes() const {
  if (flat_layout_) return region_.numel() * static_cast<int64_t>(region_.element_size());
  int64_t total = 0;
  for (const Bucket& bucket : buckets_) {
    total += bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size());
  }
  return total;
}

torch::Tensor DistributedDataParallel::FlatGradients(int64_t begin, int64_t end) const {
  RAYD_CHECK(flat_layout_ && begin >= region_begin_ && end >= begin &&
             end - region_begin_ <= region_.numel());
  return internal::AliasOf(region_, begin - region_begin_, {end - begin});
}

void DistributedDataParallel::PointGradsHome() {
  // The backward accumulates straight into the bucket too, rather than into a .grad autograd
  // allocates and MarkReady then copies: no second copy of every gradient at the first step
  // (for a large model, the run's peak memory).
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    if (!slots_[i].view.defined()) {
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
  // Every element is written (copied or zeroed) before the bucket is launched: no need to zero
  // it. The smallest spare that fits is reused: transient buckets come and go every step, and
  // fresh allocations of their size fragment the heap (glibc keeps such chunks resident).
  auto best = spare_.end();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->numel() >= bucket.elements && (best == spare_.end() || it->numel() < best->numel())) {
      best = it;
    }
  }
  if (best != spare_.end()) {
    bucket.storage = std::move(*best);
    spare_.erase(best);
  } else {
    bucket.storage = torch::empty({bucket.elements},
                                  params_[bucket.params.front()].options().requires_grad(false));
  }
  bucket.flat = bucket.storage.narrow(0, 0, bucket.elements);
}

void DistributedDataParallel::LetGo(Bucket& bucket, bool reusable) {
  int64_t spare_bytes = 0;
  for (const torch::Tensor& t : spare_) spare_bytes += t.numel() * t.element_size();
  if (reusable && bucket.storage.defined() &&
      spare_bytes + bucket.storage.numel() * bucket.storage.element_size() <=
          options_.reduce_in_flight_cap_bytes + options_.bucket_cap_bytes) {
    spare_.push_back(std::move(bucket.storage));
  }
  bucket.storage = torch::Tensor();
  bucket.flat = torch::Tensor();
  bucket.work.reset();  // it holds its input, which would keep the memory alive
}

void DistributedDataParallel::ReleaseReducedBuckets() {
  // Those whose reduce is done; then, while more than the cap waits in flight, the oldest once
  // it is done (backward outrunning the network must not hold every gradient).
  auto let_go = [&](Bucket& bucket) {
    Status done =
        WaitWork(*bucket.work, group_.timeout(), "reducing a gradient bucket to its owner");
    LetGo(bucket, done.ok());
    if (error_.ok()) error_ = std::move(done);
  };
  std::erase_if(in_flight_, [&](size_t b) {
    if (!buckets_[b].work->isCompleted()) return false;
    let_go(buckets_[b]);
    return true;
  });
  auto bytes = [&] {
    int64_t total = 0;
    for (size_t b : in_flight_) total += buckets_[b].elements * buckets_[b].flat.element_size();
    return total;
  };
  while (in_flight_.size() > 1 && bytes() > options_.reduce_in_flight_cap_bytes && error_.ok()) {
    let_go(buckets_[in_flight_.front()]);
    in_flight_.pop_front();
  }
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
  Slot& slot = slots_[param];
  if (slot.view.defined()) {
    // Its home is in the buckets' storage, where autograd accumulated it unless .grad was
    // replaced (zero_grad(set_to_none), or the first step).
    if (!grad.defined()) {
      slot.view.zero_();
    } else if (grad.data_ptr() != slot.view.data_ptr()) {
      slot.view.copy_(grad);
    }
  } else {
    // Its pieces go to buckets that may not exist yet (reduced to other ranks): copied in, and
    // autograd's .grad let go. A bucket that is this whole gradient and nothing else takes
    // autograd's tensor itself: no copy, and half the memory while its reduce is in flight.
    Bucket& first = buckets_[slot.pieces.front().bucket];
    if (grad.defined() && grad.is_contiguous() && slot.pieces.size() == 1 &&
        !first.flat.defined() && first.params.size() == 1) {
      first.flat = grad.view(-1);
    } else {
      const torch::Tensor flat = grad.defined() ? grad.reshape(-1) : torch::Tensor();
      for (const Piece& piece : slot.pieces) {
        EnsureStorage(piece.bucket);
        torch::Tensor into =
            buckets_[piece.bucket].flat.narrow(0, piece.bucket_offset, piece.length);
        if (flat.defined()) {
          into.copy_(flat.narrow(0, piece.param_offset, piece.length));
        } else {
          into.zero_();
        }
      }
    }
    params_[param].mutable_grad() = torch::Tensor();
  }
  slot.ready = true;
  for (const Piece& piece : slot.pieces) --buckets_[piece.bucket].pending;
}

void DistributedDataParallel::LaunchReadyBuckets() {
  const int world = group_.world_size();
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
        if (bucket.Transient(group_.rank())) in_flight_.push_back(next_bucket_ - 1);
      } else {
        bucket.work = group_.c10d().allreduce(tensors);
      }
    } catch (...) {
      error_ = StatusFromC10dException(std::current_exception(), "launching a gradient reduction");
    }
  }
  if (!in_flight_.empty()) ReleaseReducedBuckets();
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
    if (!buckets_[b].work) continue;  // reduced and let go already
    status = WaitWork(*buckets_[b].work, group_.timeout(),
                      std::string(buckets_[b].owner >= 0 ? "reducing" : "all-reducing") +
                          " gradient bucket " + std::to_string(b) + " of " +
                          std::to_string(buckets_.size()));
  }
  const int rank = group_.rank();
  if (status.ok()) {
    // From now on .grad is the parameter's slice of the buckets' storage: the next backward
    // accumulates straight into it, and the averaged result is already there. A parameter with
    // (a piece) reduced to another rank has none.
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& grad = params_[i].mutable_grad();
      if (!slots_[i].view.defined()) {
        grad = torch::Tensor();
      } else if (!grad.defined() || grad.data_ptr() != slots_[i].view.data_ptr()) {
        grad = slots_[i].view;
      }
    }
    if (!buffers_.empty()) status = BroadcastFromRankZero(buffers_, "rank 0's buffers");
  }
  for (Bucket& bucket : buckets_) {
    if (bucket.Transient(rank) && bucket.flat.defined()) LetGo(bucket, status.ok());
  }
  ResetStep();
  return status;
}

void DistributedDataParallel::ResetStep() {
  for (auto& slot : slots_) slot.ready = false;
  in_flight_.clear();
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work.reset();
  }
  next_bucket_ = 0;
  error_ = Status::Ok();
}

}  // namespace rayd::train
