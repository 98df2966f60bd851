// ZeRO stages 1 and 2: the optimizer state (and the gradients) sharded by element
// (rayd/train/zero.h).

#include <rayd/train/ddp.h>
#include <rayd/train/zero.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "c10d_error.h"
#include "tensor_alias.h"

namespace rayd::train {
namespace {

constexpr char kCompleteFile[] = "optimizer.complete";

std::string ShardFile(const std::string& dir, int rank, int world) {
  return dir + "/optimizer_shard_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".pt";
}

// LibTorch 1.13 keys a parameter's optimizer state by its TensorImpl's address, as text.
std::string StateKey(const torch::Tensor& param) {
  return c10::guts::to_string(param.unsafeGetTensorImpl());
}

// One parameter's (or shard's) optimizer state as named tensors: what checkpoints hold and
// state_bytes counts. Adam's and AdamW's step is returned apart; -1 for SGD.
struct NamedState {
  std::map<std::string, torch::Tensor> tensors;
  int64_t step = -1;
};

Result<NamedState> StateTensors(const torch::optim::OptimizerParamState& state) {
  NamedState out;
  auto adam = [&](const auto& s) {
    out.step = s.step();
    out.tensors = {{"exp_avg", s.exp_avg()},
                   {"exp_avg_sq", s.exp_avg_sq()},
                   {"max_exp_avg_sq", s.max_exp_avg_sq()}};
  };
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    adam(*s);
  } else if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    adam(*s);
  } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    out.tensors = {{"momentum_buffer", s->momentum_buffer()}};
  } else {
    return Status::Unimplemented("sharded checkpoints know SGD's, Adam's and AdamW's state only");
  }
  std::erase_if(out.tensors, [](const auto& entry) { return !entry.second.defined(); });
  return out;
}

// A parameter's state from its named tensors, for `optimizer`'s kind.
Result<std::unique_ptr<torch::optim::OptimizerParamState>> MakeState(
    torch::optim::Optimizer& optimizer, const NamedState& named) {
  auto get = [&](const std::string& name) {
    auto it = named.tensors.find(name);
    return it == named.tensors.end() ? torch::Tensor() : it->second;
  };
  const bool is_adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  if (is_adam || dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr) {
    if (!get("exp_avg").defined() || !get("exp_avg_sq").defined() || named.step < 0) {
      return Status::InvalidArgument("the checkpoint's state is not Adam's");
    }
    auto fill = [&](auto state) -> std::unique_ptr<torch::optim::OptimizerParamState> {
      state->step(named.step);
      state->exp_avg(get("exp_avg"));
      state->exp_avg_sq(get("exp_avg_sq"));
      if (torch::Tensor max = get("max_exp_avg_sq"); max.defined()) state->max_exp_avg_sq(max);
      return state;
    };
    if (is_adam) return fill(std::make_unique<torch::optim::AdamParamState>());
    return fill(std::make_unique<torch::optim::AdamWParamState>());
  }
  if (dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr) {
    if (!get("momentum_buffer").defined()) {
      return Status::InvalidArgument("the checkpoint's state is not SGD's");
    }
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(get("momentum_buffer"));
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
  }
  return Status::Unimplemented("sharded checkpoints know SGD's, Adam's and AdamW's state only");
}

// The marker that names how many shards the checkpoint in `dir` has, written whole.
Status WriteMarker(const std::string& dir, int shards) {
  const std::string complete = dir + "/" + kCompleteFile;
  std::ofstream(complete + ".partial") << shards << "\n";
  std::error_code ec;
  std::filesystem::rename(complete + ".partial", complete, ec);
  if (ec) return Status::Internal("cannot write " + complete + ": " + ec.message());
  return Status::Ok();
}

// A saved run of state: flat elements [begin, end) of the model.
struct SavedPiece {
  int64_t begin = 0, end = 0;
  NamedState state;
};

}  // namespace

Result<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(
    torch::optim::Optimizer& optimizer, ProcessGroup& group, ZeroOptions options,
    DistributedDataParallel* ddp) {
  if (options.zero_stage < 0 || options.zero_stage > 2) {
    return Status::InvalidArgument("zero_stage " + std::to_string(options.zero_stage) +
                                   ": stages 0, 1 and 2 are implemented (not stage 3)");
  }
  std::unique_ptr<ShardedOptimizer> zero(new ShardedOptimizer(optimizer, group, options));
  for (auto& param_group : optimizer.param_groups()) {
    for (const torch::Tensor& param : param_group.params()) {
      zero->offsets_.push_back(zero->total_);
      zero->params_.push_back(param);
      zero->total_ += param.numel();
    }
  }
  if (options.zero_stage > 0 && ddp == nullptr) {
    return Status::InvalidArgument(
        "zero_stage " + std::to_string(options.zero_stage) +
        " lays the gradients out by shard, so it needs the model's DistributedDataParallel");
  }
  const int world = group.world_size();
  if (options.zero_stage == 0 || world == 1) return zero;  // every rank steps everything
  const bool nccl = group.backend() == CollectiveBackend::kNccl;
  for (const torch::Tensor& param : zero->params_) {
    if (param.scalar_type() != zero->params_.front().scalar_type()) {
      return Status::InvalidArgument("ZeRO needs every parameter of one dtype; found " +
                                     std::string(c10::toString(param.scalar_type())) + " and " +
                                     c10::toString(zero->params_.front().scalar_type()));
    }
    if (nccl ? !param.is_cuda() : !param.is_cpu()) {
      return Status::InvalidArgument(std::string("ZeRO over ") + (nccl ? "NCCL" : "Gloo") +
                                     " needs every parameter on " + (nccl ? "a GPU" : "the CPU") +
                                     "; one is on " + param.device().str());
    }
  }
  for (int r = 0; r <= world; ++r) zero->bounds_.push_back(zero->total_ * r / world);
  RAYD_RETURN_IF_ERROR(ddp->UseFlatLayout(zero->params_, zero->bounds_, options.zero_stage == 2));
  zero->Flatten();
  // The optimizer steps this rank's slice of each parameter (most parameters lie wholly in one
  // rank's range): a 1-D tensor on the flat parameters' storage, with the gradients' slice as
  // its .grad. Per parameter rather than one slice per group, so that the optimizer's
  // temporaries (Adam's denominator) stay the size of a parameter, as without sharding.
  const int64_t lo = zero->bounds_[group.rank()], hi = zero->bounds_[group.rank() + 1];
  optimizer.state().clear();  // keyed by the parameters it no longer holds
  size_t i = 0;
  for (auto& param_group : optimizer.param_groups()) {
    std::vector<torch::Tensor> kept;
    for (const size_t group_end = i + param_group.params().size(); i < group_end; ++i) {
      const int64_t begin = std::max(lo, zero->offsets_[i]);
      const int64_t end = std::min(hi, zero->offsets_[i] + zero->params_[i].numel());
      if (begin >= end) continue;
      torch::Tensor slice = internal::AliasOf(zero->flat_params_, begin, {end - begin});
      slice.mutable_grad() = ddp->FlatGradients(begin, end);
      zero->shards_.push_back({begin, end, slice});
      kept.push_back(slice);
    }
    param_group.params() = std::move(kept);
  }
  return zero;
}

Result<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::CreateStage3(
    torch::optim::Optimizer& optimizer, ProcessGroup& group, std::vector<FlatPlacement> placements,
    int64_t elements) {
  RAYD_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> zero,
                        Create(optimizer, group, {.zero_stage = 0}));
  if (placements.size() != zero->params_.size()) {
    return Status::InvalidArgument("stage 3: " + std::to_string(placements.size()) +
                                   " placements for " + std::to_string(zero->params_.size()) +
                                   " parameters");
  }
  zero->options_.zero_stage = 3;
  zero->placements_ = std::move(placements);
  zero->total_ = elements;
  return zero;
}

void ShardedOptimizer::Flatten() {
  torch::NoGradGuard no_grad;
  flat_params_ = torch::empty({total_}, params_.front().options().requires_grad(false));
  // One parameter at a time, each old storage freed as its data moves: the resident memory
  // grows by the largest parameter, not by the model.
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor moved = internal::AliasOf(flat_params_, offsets_[i], params_[i].sizes());
    moved.copy_(params_[i]);
    params_[i].set_data(moved);
  }
}

Status ShardedOptimizer::Step() {
  optimizer_.step();
  if (!sharded()) return Status::Ok();
  torch::NoGradGuard no_grad;
  // Each rank's slice of the flat parameters from its owner into every rank's copy (an
  // all-gather, in place).
  return EachRank(group_, "ZeRO's all-gather of the updated parameters",
                  [&](int r) -> c10::intrusive_ptr<c10d::Work> {
                    if (bounds_[r + 1] == bounds_[r]) return {};
                    std::vector<torch::Tensor> tensors = {
                        flat_params_.narrow(0, bounds_[r], bounds_[r + 1] - bounds_[r])};
                    c10d::BroadcastOptions broadcast;
                    broadcast.rootRank = r;
                    return group_.c10d().broadcast(tensors, broadcast);
                  });
}

void ShardedOptimizer::ZeroGrad() {
  for (torch::Tensor& param : params_) {
    torch::Tensor grad = param.mutable_grad();
    if (grad.defined()) grad.zero_();  // in place: DistributedDataParallel's bucket views stay
  }
}

Result<double> ClipByGlobalNorm(const std::vector<torch::Tensor>& split,
                                const std::vector<torch::Tensor>& whole, double max_norm,
                                ProcessGroup* group) {
  torch::NoGradGuard no_grad;
  auto squares_of = [](const std::vector<torch::Tensor>& grads) {
    torch::Tensor squares = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble));
    for (const torch::Tensor& grad : grads) {
      squares += grad.norm(2).to(torch::kDouble).pow(2).cpu();
    }
    return squares;
  };
  torch::Tensor squares = squares_of(split);
  if (group != nullptr) {
    const torch::Device device = split.empty() ? torch::Device(torch::kCPU) : split[0].device();
    torch::Tensor summed = squares.to(device);
    RAYD_RETURN_IF_ERROR(AllReduce(*group, summed, "summing the gradients' norm over the ranks"));
    squares = summed.cpu();
  }
  const double norm = std::sqrt(squares.item<double>() + squares_of(whole).item<double>());
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1) {
    for (const auto* grads : {&split, &whole}) {
      for (const torch::Tensor& grad : *grads) grad.mul_(coefficient);
    }
  }
  return norm;
}

Result<double> ShardedOptimizer::ClipGradNorm(double max_norm) {
  // The gradients the optimizer steps: this rank's slices (summed over the ranks), every
  // parameter's at stage 0 (whole here), and at stage 3 the shards (summed) beside the
  // replicated parameters (whole on every rank: counted once).
  std::vector<torch::Tensor> split, whole;
  size_t i = 0;
  for (auto& param_group : optimizer_.param_groups()) {
    for (const torch::Tensor& param : param_group.params()) {
      const bool replicated = placements_.empty() ? !sharded() : placements_[i].replicated;
      ++i;
      if (param.grad().defined()) (replicated ? whole : split).push_back(param.grad());
    }
  }
  const bool summed = sharded() || !placements_.empty();
  return ClipByGlobalNorm(split, whole, max_norm, summed ? &group_ : nullptr);
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t total = 0;
  for (const auto& [key, state] : optimizer_.state()) {
    Result<NamedState> named = StateTensors(*state);
    if (!named.ok()) continue;
    for (const auto& [name, tensor] : named->tensors) {
      total += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    }
  }
  return total;
}

Result<OptimizerSnapshot> ShardedOptimizer::Snapshot() const {
  OptimizerSnapshot snapshot;
  snapshot.rank = group_.rank();  // at stage 0, only rank 0 writes (shard 0 of 1)
  const bool stage3 = !placements_.empty();
  snapshot.shards = sharded() || stage3 ? group_.world_size() : 1;
  snapshot.elements = total_;
  if (snapshot.shards == 1 && group_.rank() != 0) return snapshot;  // writes nothing
  // The state as runs of flat elements, one per slice this rank steps (per parameter when
  // unsharded): "r<k>/range" and the state's tensors, flattened. A copy, since the live state
  // changes at the next step while the write may still run.
  auto add = [&](int64_t begin, int64_t end, const torch::Tensor& param) -> Status {
    auto it = optimizer_.state().find(StateKey(param));
    if (it == optimizer_.state().end()) return Status::Ok();  // not stepped yet: no state
    RAYD_ASSIGN_OR_RETURN(NamedState named, StateTensors(*it->second));
    const std::string prefix = "r" + std::to_string(snapshot.runs++) + "/";
    snapshot.tensors.emplace_back(prefix + "range", torch::tensor({begin, end}));
    if (named.step >= 0) snapshot.tensors.emplace_back(prefix + "step", torch::tensor(named.step));
    for (const auto& [name, tensor] : named.tensors) {
      // A stage-3 shard's padding is no element of the model: left out.
      snapshot.tensors.emplace_back(
          prefix + name,
          tensor.reshape(-1).narrow(0, 0, end - begin).to(torch::kCPU, false, /*copy=*/true));
    }
    return Status::Ok();
  };
  if (stage3) {
    for (size_t i = 0; i < params_.size(); ++i) {
      const FlatPlacement& at = placements_[i];
      if (at.count == 0 || (at.replicated && group_.rank() != 0)) continue;
      RAYD_RETURN_IF_ERROR(add(at.begin, at.begin + at.count, params_[i]));
    }
  } else if (sharded()) {
    for (const Shard& shard : shards_) {
      RAYD_RETURN_IF_ERROR(add(shard.begin, shard.end, shard.param));
    }
  } else {
    for (size_t i = 0; i < params_.size(); ++i) {
      RAYD_RETURN_IF_ERROR(add(offsets_[i], offsets_[i] + params_[i].numel(), params_[i]));
    }
  }
  return snapshot;
}

Status ShardedOptimizer::WriteSnapshot(const OptimizerSnapshot& snapshot, const std::string& dir) {
  if (snapshot.shards == 1 && snapshot.rank != 0) return Status::Ok();  // stage 0: rank 0's
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  torch::serialize::OutputArchive archive;
  for (const auto& [key, tensor] : snapshot.tensors) archive.write(key, tensor);
  archive.write("elements", torch::tensor(snapshot.elements));
  const std::string shard = ShardFile(dir, snapshot.rank, snapshot.shards);
  try {
    archive.save_to(shard + ".partial");
  } catch (const std::exception& e) {
    return Status::Internal("cannot write " + shard + ": " + e.what());
  }
  std::filesystem::rename(shard + ".partial", shard, ec);
  if (ec) return Status::Internal("cannot write " + shard + ": " + ec.message());
  return snapshot.rank == 0 ? WriteMarker(dir, snapshot.shards) : Status::Ok();
}

Status ShardedOptimizer::SaveState(const std::string& dir) {
  RAYD_ASSIGN_OR_RETURN(OptimizerSnapshot snapshot, Snapshot());
  const bool rank0 = group_.rank() == 0;
  if (!rank0) RAYD_RETURN_IF_ERROR(WriteSnapshot(snapshot, dir));
  // Rank 0's shard and marker last, once every other shard is written: whole only then.
  if (group_.world_size() > 1) RAYD_RETURN_IF_ERROR(group_.Barrier());
  if (rank0) RAYD_RETURN_IF_ERROR(WriteSnapshot(snapshot, dir));
  return Status::Ok();
}

bool ShardedOptimizer::HasSavedState(const std::string& dir) {
  return std::filesystem::exists(dir + "/" + kCompleteFile);
}

Status ShardedOptimizer::LoadState(const std::string& dir) {
  int shards = 0;
  if (!(std::ifstream(dir + "/" + kCompleteFile) >> shards) || shards < 1) {
    return Status::NotFound("no complete optimizer checkpoint in " + dir + " (no " + kCompleteFile +
                            ")");
  }
  for (int shard = 0; shard < shards; ++shard) {
    if (!std::filesystem::exists(ShardFile(dir, shard, shards))) {
      return Status::NotFound("incomplete optimizer checkpoint in " + dir + ": shard " +
                              std::to_string(shard) + " of " + std::to_string(shards) +
                              " is missing");
    }
  }
  // Every saved run, from every shard.
  std::vector<SavedPiece> saved;
  for (int shard = 0; shard < shards; ++shard) {
    torch::serialize::InputArchive archive;
    const std::string file = ShardFile(dir, shard, shards);
    try {
      archive.load_from(file);
    } catch (const std::exception& e) {
      return Status::InvalidArgument("cannot read " + file + ": " + e.what());
    }
    torch::Tensor count;
    if (!archive.try_read("elements", count) || count.item<int64_t>() != total_) {
      return Status::InvalidArgument(file + " is the checkpoint of a model with other parameters");
    }
    for (int k = 0;; ++k) {
      const std::string prefix = "r" + std::to_string(k) + "/";
      torch::Tensor range;
      if (!archive.try_read(prefix + "range", range)) break;
      SavedPiece piece{range[0].item<int64_t>(), range[1].item<int64_t>(), {}};
      torch::Tensor step;
      if (archive.try_read(prefix + "step", step)) piece.state.step = step.item<int64_t>();
      for (const char* name : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"}) {
        torch::Tensor t;
        if (archive.try_read(prefix + name, t)) piece.state.tensors[name] = t;
      }
      saved.push_back(std::move(piece));
    }
  }
  // The state of flat elements [begin, end), shaped `sizes`, from the saved runs that overlap
  // it; none when no run does.
  const torch::Device device = params_.empty() ? torch::Device(torch::kCPU) : params_[0].device();
  // A stage-3 shard's tensor is longer than its elements (padding, left zero).
  auto assemble = [&](int64_t begin, int64_t end, at::IntArrayRef sizes,
                      const torch::Tensor& key) -> Status {
    NamedState state;
    for (const SavedPiece& piece : saved) {
      const int64_t from = std::max(begin, piece.begin), to = std::min(end, piece.end);
      if (from >= to) continue;
      state.step = std::max(state.step, piece.state.step);
      for (const auto& [name, tensor] : piece.state.tensors) {
        torch::Tensor& into = state.tensors[name];
        if (!into.defined()) into = torch::zeros({c10::multiply_integers(sizes)}, tensor.options());
        into.narrow(0, from - begin, to - from)
            .copy_(tensor.narrow(0, from - piece.begin, to - from));
      }
    }
    if (state.tensors.empty()) return Status::Ok();
    for (auto& [name, tensor] : state.tensors) tensor = tensor.view(sizes).to(device);
    RAYD_ASSIGN_OR_RETURN(auto made, MakeState(optimizer_, state));
    optimizer_.state()[StateKey(key)] = std::move(made);
    return Status::Ok();
  };
  if (!placements_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      const FlatPlacement& at = placements_[i];
      RAYD_RETURN_IF_ERROR(assemble(at.begin, at.begin + at.count, params_[i].sizes(), params_[i]));
    }
    return Status::Ok();
  }
  if (sharded()) {
    for (const Shard& shard : shards_) {
      RAYD_RETURN_IF_ERROR(
          assemble(shard.begin, shard.end, {shard.end - shard.begin}, shard.param));
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    RAYD_RETURN_IF_ERROR(assemble(offsets_[i], offsets_[i] + params_[i].numel(),
                                  params_[i].sizes(), params_[i]));
  }
  return Status::Ok();
}

}  // namespace rayd::train
