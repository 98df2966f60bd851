#include "rayd/train/fsdp.h"

#include <ATen/autocast_mode.h>
#include <rayd/api/errors.h>
#include <rayd/train/zero.h>

#include <cmath>
#include <string>
#include <utility>

#include "c10d_error.h"

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

// The unit's autograd node: forward without history (the range freed after it), backward by
// recomputing the block's forward with history on a gathered range.
class UnitFunction : public torch::autograd::Function<UnitFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, torch::Tensor shard,
                               ShardedUnitImpl* unit) {
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    AutocastState::Now().Save(ctx);
    ctx->save_for_backward({input});
    torch::Tensor full;
    Status gathered = unit->Materialize(full);
    if (!gathered.ok()) throw RaydError("sharded unit forward: " + gathered.message());
    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      output = unit->block().forward(input);
    }
    unit->Release();
    (void)shard;  // an input only so that autograd hands its gradient back
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* unit = reinterpret_cast<ShardedUnitImpl*>(ctx->saved_data["unit"].toInt());
    torch::Tensor input = ctx->get_saved_variables()[0];
    torch::Tensor full;
    Status gathered = unit->Materialize(full);
    if (!gathered.ok()) throw RaydError("sharded unit backward: " + gathered.message());
    std::vector<torch::Tensor>& params = unit->block_parameters();
    torch::Tensor replay = input.detach().requires_grad_(input.requires_grad());
    variable_list inputs;
    if (replay.requires_grad()) inputs.push_back(replay);
    for (torch::Tensor& param : params) {
      param.requires_grad_(true);
      inputs.push_back(param);
    }
    variable_list grads;
    {
      torch::AutoGradMode enable(true);
      ReplayAutocast autocast(AutocastState::Saved(ctx));
      torch::Tensor output = unit->block().forward(replay);
      grads = torch::autograd::grad({output}, inputs, {grad_outputs[0]},
                                    /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    }
    // The parameters' gradients, flat in the range's layout (padding and unused ones zero).
    torch::Tensor flat_grad = torch::zeros_like(full);
    const size_t first = replay.requires_grad() ? 1 : 0;
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t n = unit->Numel(i);
      if (grads[first + i].defined())
        flat_grad.narrow(0, offset, n).copy_(grads[first + i].reshape({n}));
      offset += n;
    }
    torch::Tensor input_grad = first == 1 ? grads[0] : torch::Tensor();
    grads.clear();
    unit->Release();
    full = torch::Tensor();
    Result<torch::Tensor> shard_grad = unit->ReduceToOwners(std::move(flat_grad));
    if (!shard_grad.ok()) {
      throw RaydError("sharded unit backward: " + shard_grad.status().message());
    }
    return {input_grad, *shard_grad, torch::Tensor()};
  }
};

}  // namespace

ShardedUnitImpl::ShardedUnitImpl(torch::nn::AnyModule block, ProcessGroup& group)
    : block_(std::move(block)), group_(group) {
  torch::NoGradGuard no_grad;
  params_ = block_.ptr()->parameters();
  if (params_.empty()) throw RaydError("a sharded unit needs a block with parameters");
  const torch::TensorOptions options = params_[0].options();
  for (const torch::Tensor& param : params_) {
    if (param.dtype() != params_[0].dtype() || param.device() != params_[0].device()) {
      throw RaydError("a sharded unit's parameters must share one dtype and device");
    }
    offsets_.push_back(total_);
    shapes_.push_back(param.sizes().vec());
    total_ += param.numel();
    for (int64_t dim : param.sizes()) {
      signature_ = (signature_ * 1'000'003 + dim + 1) & 0x3fff'ffff'ffff'ffff;
    }
  }
  const int world = group_.world_size();
  shard_len_ = (total_ + world - 1) / world;
  torch::Tensor full = torch::zeros({shard_len_ * world}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    full.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].reshape({-1}));
  }
  // Rank 0's parameters everywhere, as PrepareModel makes them.
  const std::string doing = "broadcasting a sharded unit's parameters from rank 0";
  try {
    std::vector<torch::Tensor> tensors = {full};
    Status sent = WaitWork(*group_.c10d().broadcast(tensors), group_.timeout(), doing);
    if (!sent.ok()) throw RaydError(sent.message());
  } catch (const RaydError&) {
    throw;
  } catch (...) {
    throw RaydError(StatusFromC10dException(std::current_exception(), doing).message());
  }
  shard_ =
      register_parameter("shard", full.narrow(0, shard_len_ * group_.rank(), shard_len_).clone());
  Release();
}

int64_t ShardedUnitImpl::param_bytes() const {
  int64_t bytes = shard_.numel() * static_cast<int64_t>(shard_.element_size());
  for (const torch::Tensor& param : params_) {
    bytes += param.numel() * static_cast<int64_t>(param.element_size());
  }
  return bytes;
}

Status ShardedUnitImpl::CheckSameUnit() {
  torch::Tensor ends =
      torch::tensor({signature_, -signature_}, torch::TensorOptions().dtype(torch::kLong))
          .to(shard_.device());
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  RAYD_RETURN_IF_ERROR(EachRank(group_, "checking that every rank is at the same sharded unit",
                                [&](int r) -> c10::intrusive_ptr<c10d::Work> {
                                  if (r != 0) return {};
                                  std::vector<torch::Tensor> tensors = {ends};
                                  return group_.c10d().allreduce(tensors, max);
                                }));
  ends = ends.cpu();
  if (ends[0].item<int64_t>() != signature_ || -ends[1].item<int64_t>() != signature_) {
    return Status::InvalidArgument(
        "the ranks are at different sharded units (this rank's has " + std::to_string(total_) +
        " elements in " + std::to_string(params_.size()) +
        " parameters): every rank must run the same units in the same order");
  }
  return Status::Ok();
}

Status ShardedUnitImpl::Materialize(torch::Tensor& full) {
  torch::NoGradGuard no_grad;
  RAYD_RETURN_IF_ERROR(CheckSameUnit());
  const int world = group_.world_size();
  full = torch::empty({shard_len_ * world}, shard_.options());
  full.narrow(0, shard_len_ * group_.rank(), shard_len_).copy_(shard_.detach());
  // Each rank's part from its owner, in place.
  RAYD_RETURN_IF_ERROR(EachRank(group_, "gathering a sharded unit's parameters", [&](int r) {
    std::vector<torch::Tensor> tensors = {full.narrow(0, shard_len_ * r, shard_len_)};
    c10d::BroadcastOptions broadcast;
    broadcast.rootRank = r;
    return group_.c10d().broadcast(tensors, broadcast);
  }));
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].set_data(full.narrow(0, offsets_[i], Numel(i)).view(shapes_[i]));
  }
  return Status::Ok();
}

void ShardedUnitImpl::Release() {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& param : params_) {
    param.set_data(torch::empty({0}, param.options()));  // its shape is kept in shapes_
    param.mutable_grad() = torch::Tensor();
  }
}

Result<torch::Tensor> ShardedUnitImpl::ReduceToOwners(torch::Tensor flat_grad) {
  torch::NoGradGuard no_grad;
  const int world = group_.world_size();
  RAYD_RETURN_IF_ERROR(
      EachRank(group_, "reducing a sharded unit's gradients to their owners", [&](int r) {
        std::vector<torch::Tensor> tensors = {flat_grad.narrow(0, shard_len_ * r, shard_len_)};
        c10d::ReduceOptions reduce;
        reduce.rootRank = r;
        return group_.c10d().reduce(tensors, reduce);
      }));
  return flat_grad.narrow(0, shard_len_ * group_.rank(), shard_len_).div(world);
}

Result<torch::Tensor> ShardedUnitImpl::GatherFull() {
  torch::Tensor full;
  RAYD_RETURN_IF_ERROR(Materialize(full));
  torch::Tensor out = full.narrow(0, 0, total_).clone();
  Release();
  return out;
}

torch::Tensor ShardedUnitImpl::forward(torch::Tensor input) {
  return UnitFunction::apply(input, shard_, this);
}

void ShardedUnitImpl::train(bool on) {
  torch::nn::Module::train(on);
  block_.ptr()->train(on);
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
