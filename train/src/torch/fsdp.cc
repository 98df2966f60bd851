#include "rayd/train/fsdp.h"

#include <ATen/autocast_mode.h>
#include <c10/core/StorageImpl.h>
#include <rayd/api/errors.h>
#include <rayd/train/zero.h>

#include <mutex>
#include <string>
#include <utility>

#include "c10d_error.h"
#include "host_collectives.h"

namespace rayd::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autocast state (mixed_precision.h's AutocastGuard) of a unit's forward, replayed for its
// recomputation in backward, which autograd runs on its own thread without it: otherwise a
// bf16 forward would be differentiated as an fp32 one.
struct AutocastState {
  bool cpu = false, gpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16, gpu_dtype = at::kHalf;

  static AutocastState Now() {
    return {at::autocast::is_cpu_enabled(), at::autocast::is_enabled(),
            at::autocast::get_autocast_cpu_dtype(), at::autocast::get_autocast_gpu_dtype()};
  }
  void Save(AutogradContext* ctx) const {
    ctx->saved_data["autocast_cpu"] = cpu;
    ctx->saved_data["autocast_gpu"] = gpu;
    ctx->saved_data["autocast_cpu_dtype"] = static_cast<int64_t>(cpu_dtype);
    ctx->saved_data["autocast_gpu_dtype"] = static_cast<int64_t>(gpu_dtype);
  }
  static AutocastState Saved(AutogradContext* ctx) {
    return {ctx->saved_data["autocast_cpu"].toBool(), ctx->saved_data["autocast_gpu"].toBool(),
            static_cast<at::ScalarType>(ctx->saved_data["autocast_cpu_dtype"].toInt()),
            static_cast<at::ScalarType>(ctx->saved_data["autocast_gpu_dtype"].toInt())};
  }
  void Apply() const {
    at::autocast::set_cpu_enabled(cpu);
    at::autocast::set_enabled(gpu);
    at::autocast::set_autocast_cpu_dtype(cpu_dtype);
    at::autocast::set_autocast_gpu_dtype(gpu_dtype);
  }
};

// Sets `state` for its scope, and what was there again after.
class ReplayAutocast {
 public:
  explicit ReplayAutocast(const AutocastState& state) : before_(AutocastState::Now()) {
    state.Apply();
    at::autocast::increment_nesting();
  }
  ~ReplayAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    before_.Apply();
  }
  ReplayAutocast(const ReplayAutocast&) = delete;
  ReplayAutocast& operator=(const ReplayAutocast&) = delete;

 private:
  AutocastState before_;
};

// The bytes of the range freed last in this process, kept for the next gather: a caching
// allocator of one block (CUDA's keeps a GPU's freed blocks; these are the CPU's), so that
// gathering unit after unit reuses one block instead of mapping and faulting in fresh pages
// for each (glibc serves blocks this large with mmap once its threshold is fixed). The largest
// freed block is kept; it goes when the last unit does.
class SpareRange {
 public:
  // A block of at least `bytes`; its size in `capacity`.
  static at::DataPtr Take(size_t bytes, at::Allocator& allocator, size_t& capacity) {
    std::lock_guard lock(mutex_);
    if (spare_ && spare_capacity_ >= bytes) {
      capacity = spare_capacity_;
      spare_capacity_ = 0;
      return std::move(spare_);
    }
    capacity = bytes;
    return allocator.allocate(bytes);
  }
  static void Give(at::DataPtr block, size_t capacity) {
    std::lock_guard lock(mutex_);
    if (!spare_ || capacity >= spare_capacity_) {
      spare_ = std::move(block);
      spare_capacity_ = capacity;
    }
  }
  static void UnitMade() {
    std::lock_guard lock(mutex_);
    ++units_;
  }
  static void UnitGone() {
    at::DataPtr last;  // freed outside the lock
    std::lock_guard lock(mutex_);
    if (--units_ == 0) {
      last = std::move(spare_);
      spare_capacity_ = 0;
    }
  }

 private:
  static inline std::mutex mutex_;
  static inline at::DataPtr spare_;
  static inline size_t spare_capacity_ = 0;
  static inline int64_t units_ = 0;
};

// Throws what a failed gather or reduce says, as autograd passes exceptions on.
void ThrowIfError(const Status& status, const char* during) {
  if (!status.ok())
    throw RaydError(std::string("sharded unit ") + during + ": " + status.message());
}

}  // namespace

namespace detail {

// The unit's autograd node. Forward gathers the range and runs the block, with history on an
// inner graph of its own (the input detached) unless the unit recomputes or no gradient is
// wanted, and frees the range; backward gathers it again, differentiates the inner graph (or a
// recomputed one), reduces the parameters' gradients to their owners and frees the range.
class UnitFunction : public torch::autograd::Function<UnitFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, torch::Tensor shard,
                               ShardedUnitImpl* unit, bool record) {
    (void)shard;  // an input only so that autograd hands its gradient back
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    ThrowIfError(unit->Gather(), "forward");
    if (!record || unit->options_.recompute) {
      torch::Tensor output = unit->block_.forward(input);  // autograd is off in here
      unit->Free();
      ctx->saved_data["recompute"] = true;  // backward runs the block again, as it ran here
      AutocastState::Now().Save(ctx);
      ctx->save_for_backward({input});
      return output;
    }
    torch::AutoGradMode enable(true);
    torch::Tensor inner = input.detach().requires_grad_(input.requires_grad());
    torch::Tensor output = unit->block_.forward(inner);
    // The inner graph keeps the block's parameters as they are (views of the range): freeing
    // the range's bytes leaves them in place for backward to refill.
    unit->Free();
    ctx->saved_data["input"] = inner;
    ctx->saved_data["output"] = output;
    return output.detach();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* unit = reinterpret_cast<ShardedUnitImpl*>(ctx->saved_data["unit"].toInt());
    ThrowIfError(unit->Gather(/*check=*/false), "backward");
    torch::AutoGradMode enable(true);
    torch::Tensor input;
    variable_list grads;
    if (!ctx->saved_data.count("recompute")) {
      if (!ctx->saved_data.count("output")) {
        throw RaydError(
            "sharded unit backward: its forward's graph was used already (a second backward "
            "through a unit needs ShardedUnitOptions::recompute)");
      }
      input = ctx->saved_data["input"].toTensor();
      torch::Tensor output = ctx->saved_data["output"].toTensor();
      ctx->saved_data.erase("output");  // the inner graph goes with its backward
      grads = Differentiate(output, input, unit->params_, grad_outputs[0]);
    } else {
      torch::Tensor saved = ctx->get_saved_variables()[0];
      input = saved.detach().requires_grad_(saved.requires_grad());
      ReplayAutocast autocast(AutocastState::Saved(ctx));
      grads = Differentiate(unit->block_.forward(input), input, unit->params_, grad_outputs[0]);
    }
    torch::Tensor input_grad = input.requires_grad() ? grads[0] : torch::Tensor();
    // The parameters are done with: their gradients take the range's place, and go from
    // there to their owners.
    unit->LayOutGradients({grads.begin() + (input.requires_grad() ? 1 : 0), grads.end()});
    grads.clear();
    Result<torch::Tensor> shard_grad = unit->ReduceToOwners();
    unit->Free();
    ThrowIfError(shard_grad.status(), "backward");
    return {input_grad, *shard_grad, torch::Tensor(), torch::Tensor()};
  }

 private:
  // The gradients of `input` (when it needs one) and `params` from `output`'s graph.
  static variable_list Differentiate(const torch::Tensor& output, const torch::Tensor& input,
                                     const std::vector<torch::Tensor>& params,
                                     const torch::Tensor& grad_output) {
    variable_list inputs;
    if (input.requires_grad()) inputs.push_back(input);
    inputs.insert(inputs.end(), params.begin(), params.end());
    return torch::autograd::grad({output}, inputs, {grad_output}, /*retain_graph=*/false,
                                 /*create_graph=*/false, /*allow_unused=*/true);
  }
};

}  // namespace detail

ShardedUnitImpl::ShardedUnitImpl(torch::nn::AnyModule block, ProcessGroup& group,
                                 ShardedUnitOptions options)
    : block_(std::move(block)), group_(group), options_(options) {
  torch::NoGradGuard no_grad;
  params_ = block_.ptr()->parameters();
  if (params_.empty()) throw RaydError("a sharded unit needs a block with parameters");
  for (const torch::Tensor& param : params_) {
    if (param.dtype() != params_[0].dtype() || param.device() != params_[0].device()) {
      throw RaydError("a sharded unit's parameters must share one dtype and device");
    }
    offsets_.push_back(total_);
    total_ += param.numel();
    for (int64_t dim : param.sizes()) {
      signature_ = (signature_ * 1'000'003 + dim + 1) & 0x3fff'ffff'ffff'ffff;
    }
  }
  const int world = group_.world_size();
  shard_len_ = (total_ + world - 1) / world;
  range_ = torch::zeros({shard_len_ * world}, params_[0].options());
  for (size_t i = 0; i < params_.size(); ++i) {
    range_.narrow(0, offsets_[i], Numel(i)).copy_(params_[i].reshape({-1}));
  }
  // Rank 0's parameters everywhere, as PrepareModel makes them.
  const std::string doing = "broadcasting a sharded unit's parameters from rank 0";
  try {
    std::vector<torch::Tensor> tensors = {range_};
    Status sent = WaitWork(*group_.c10d().broadcast(tensors), group_.timeout(), doing);
    if (!sent.ok()) throw RaydError(sent.message());
  } catch (const RaydError&) {
    throw;
  } catch (...) {
    throw RaydError(StatusFromC10dException(std::current_exception(), doing).message());
  }
  SpareRange::UnitMade();
  capacity_ = range_.nbytes();
  shard_ =
      register_parameter("shard", range_.narrow(0, shard_len_ * group_.rank(), shard_len_).clone());
  PointParametersAtRange();
  Free();
}

ShardedUnitImpl::~ShardedUnitImpl() { SpareRange::UnitGone(); }

void ShardedUnitImpl::PointParametersAtRange() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].set_data(range_.narrow(0, offsets_[i], Numel(i)).view(params_[i].sizes()));
    params_[i].requires_grad_(true);
  }
}

int64_t ShardedUnitImpl::param_bytes() const {
  return shard_.numel() * static_cast<int64_t>(shard_.element_size()) +
         static_cast<int64_t>(range_.storage().nbytes());
}

Status ShardedUnitImpl::CheckSameUnit() {
  constexpr std::string_view kDoing = "checking that every rank is at the same sharded unit";
  bool same = false;
  if (HostCollectives* host = Host()) {
    RAYD_ASSIGN_OR_RETURN(same, host->Same(static_cast<uint64_t>(signature_), kDoing));
  } else {
    // The largest signature and the smallest, in one all-reduce.
    torch::Tensor ends =
        torch::tensor({signature_, -signature_}, torch::TensorOptions().dtype(torch::kLong))
            .to(shard_.device());
    RAYD_RETURN_IF_ERROR(AllReduce(group_, ends, kDoing, c10d::ReduceOp::MAX));
    ends = ends.cpu();
    same = ends[0].item<int64_t>() == signature_ && -ends[1].item<int64_t>() == signature_;
  }
  if (!same) {
    return Status::InvalidArgument(
        "the ranks are at different sharded units (this rank's has " + std::to_string(total_) +
        " elements in " + std::to_string(params_.size()) +
        " parameters): every rank must run the same units in the same order");
  }
  return Status::Ok();
}

HostCollectives* ShardedUnitImpl::Host() const {
  return shard_.is_cpu() ? group_.host_collectives() : nullptr;
}

Status ShardedUnitImpl::Gather(bool check) {
  torch::NoGradGuard no_grad;
  if (check) RAYD_RETURN_IF_ERROR(CheckSameUnit());
  if (range_.device() != shard_.device()) {  // the unit was moved since the range was made
    range_ = torch::empty({shard_len_ * group_.world_size()}, shard_.options());
    PointParametersAtRange();
  }
  c10::StorageImpl* storage = range_.storage().unsafeGetStorageImpl();
  const size_t bytes = range_.numel() * range_.element_size();
  if (storage->nbytes() != bytes) {
    if (range_.is_cpu()) {
      storage->set_data_ptr_noswap(SpareRange::Take(bytes, *storage->allocator(), capacity_));
    } else {
      storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
    }
    storage->set_nbytes(bytes);
  }
  constexpr std::string_view kDoing = "gathering a sharded unit's parameters";
  if (HostCollectives* host = Host()) return host->AllGather(shard_.detach(), range_, kDoing);
  range_.narrow(0, shard_len_ * group_.rank(), shard_len_).copy_(shard_.detach());
  // Each rank's part from its owner, in place.
  return EachRank(group_, kDoing, [&](int r) {
    std::vector<torch::Tensor> tensors = {range_.narrow(0, shard_len_ * r, shard_len_)};
    c10d::BroadcastOptions broadcast;
    broadcast.rootRank = r;
    return group_.c10d().broadcast(tensors, broadcast);
  });
}

void ShardedUnitImpl::Free() {
  // The range's bytes go; its tensor and the parameters' views of it stay, shapes and all,
  // for Gather to refill (an inner graph of a forward keeps the views until its backward).
  c10::StorageImpl* storage = range_.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  at::DataPtr bytes = storage->set_data_ptr(at::DataPtr(nullptr, range_.device()));
  storage->set_nbytes(0);
  if (range_.is_cpu()) SpareRange::Give(std::move(bytes), capacity_);
}

void ShardedUnitImpl::LayOutGradients(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor part = range_.narrow(0, offsets_[i], Numel(i));
    if (grads[i].defined()) {
      part.copy_(grads[i].reshape({-1}));
    } else {
      part.zero_();  // a parameter the block did not use this time
    }
  }
  range_.narrow(0, total_, range_.numel() - total_).zero_();  // the padding
}

Result<torch::Tensor> ShardedUnitImpl::ReduceToOwners() {
  torch::NoGradGuard no_grad;
  constexpr std::string_view kDoing = "reducing a sharded unit's gradients to their owners";
  const int world = group_.world_size();
  if (HostCollectives* host = Host()) {
    torch::Tensor mine = torch::empty({shard_len_}, range_.options());
    RAYD_RETURN_IF_ERROR(host->ReduceScatter(range_, mine, kDoing));
    return mine.div_(world);
  }
  RAYD_RETURN_IF_ERROR(EachRank(group_, kDoing, [&](int r) {
    std::vector<torch::Tensor> tensors = {range_.narrow(0, shard_len_ * r, shard_len_)};
    c10d::ReduceOptions reduce;
    reduce.rootRank = r;
    return group_.c10d().reduce(tensors, reduce);
  }));
  return range_.narrow(0, shard_len_ * group_.rank(), shard_len_).div(world);
}

Result<torch::Tensor> ShardedUnitImpl::GatherFull() {
  RAYD_RETURN_IF_ERROR(Gather());
  torch::Tensor out = range_.narrow(0, 0, total_).clone();
  Free();
  return out;
}

torch::Tensor ShardedUnitImpl::forward(torch::Tensor input) {
  return detail::UnitFunction::apply(input, shard_, this, torch::GradMode::is_enabled());
}

void ShardedUnitImpl::train(bool on) {
  torch::nn::Module::train(on);
  block_.ptr()->train(on);
}

torch::nn::Sequential ShardLinearLayers(
    const torch::nn::Sequential& model,
    const std::function<ShardedUnit(torch::nn::AnyModule)>& make, std::vector<ShardedUnit>& units) {
  torch::nn::Sequential sharded;
  for (const torch::nn::AnyModule& layer : *model) {
    if (layer.ptr()->as<torch::nn::Linear>() == nullptr) {
      sharded->push_back(layer);
      continue;
    }
    units.push_back(make(layer));
    sharded->push_back(units.back());
  }
  return sharded;
}

Result<double> ClipShardedGradNorm(const std::vector<ShardedUnit>& units,
                                   const std::vector<torch::Tensor>& replicated, double max_norm,
                                   ProcessGroup& group) {
  std::vector<torch::Tensor> shards, whole;
  for (const ShardedUnit& unit : units) {
    if (unit->shard().grad().defined()) shards.push_back(unit->shard().grad());
  }
  for (const torch::Tensor& param : replicated) {
    if (param.grad().defined()) whole.push_back(param.grad());
  }
  return ClipByGlobalNorm(shards, whole, max_norm, &group);
}

}  // namespace rayd::train
