// ZeRO stages 1 and 2: the optimizer state (and the gradients) sharded by parameter
// (rayd/train/zero.h).

#include <rayd/train/ddp.h>
#include <rayd/train/zero.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "c10d_error.h"

namespace rayd::train {
namespace {

constexpr char kCompleteFile[] = "optimizer.complete";

std::string ShardFile(const std::string& dir, int rank, int world) {
  return dir + "/optimizer_shard_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".pt";
}

// The named tensors of one parameter's state ("step" as a scalar tensor), or an error for an
// optimizer whose state this does not know: what checkpoints hold and state_bytes counts.
Result<std::vector<std::pair<std::string, torch::Tensor>>> StateTensors(
    const torch::optim::OptimizerParamState& state) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    out = {{"step", torch::tensor(s->step())},
           {"exp_avg", s->exp_avg()},
           {"exp_avg_sq", s->exp_avg_sq()},
           {"max_exp_avg_sq", s->max_exp_avg_sq()}};
  } else if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    out = {{"step", torch::tensor(s->step())},
           {"exp_avg", s->exp_avg()},
           {"exp_avg_sq", s->exp_avg_sq()},
           {"max_exp_avg_sq", s->max_exp_avg_sq()}};
  } else if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    out = {{"momentum_buffer", s->momentum_buffer()}};
  } else {
    return Status::Unimplemented("sharded checkpoints know SGD's, Adam's and AdamW's state only");
  }
  std::erase_if(out, [](const auto& entry) { return !entry.second.defined(); });
  return out;
}

// A parameter's state from its saved tensors, for `optimizer`'s kind.
Result<std::unique_ptr<torch::optim::OptimizerParamState>> MakeState(
    torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive,
    const std::string& prefix, const torch::Device& device) {
  auto read = [&](const std::string& name) {
    torch::Tensor t;
    if (!archive.try_read(prefix + name, t)) return torch::Tensor();
    return t.to(device);
  };
  if (dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr ||
      dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr) {
    torch::Tensor step = read("step"), exp_avg = read("exp_avg"), exp_avg_sq = read("exp_avg_sq");
    if (!step.defined() || !exp_avg.defined() || !exp_avg_sq.defined()) {
      return Status::InvalidArgument("the checkpoint's state is not Adam's");
    }
    auto fill = [&](auto state) -> std::unique_ptr<torch::optim::OptimizerParamState> {
      state->step(step.to(torch::kCPU).item<int64_t>());
      state->exp_avg(exp_avg);
      state->exp_avg_sq(exp_avg_sq);
      if (torch::Tensor max = read("max_exp_avg_sq"); max.defined()) state->max_exp_avg_sq(max);
      return state;
    };
    if (dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr) {
      return fill(std::make_unique<torch::optim::AdamParamState>());
    }
    return fill(std::make_unique<torch::optim::AdamWParamState>());
  }
  if (dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr) {
    auto state = std::make_unique<torch::optim::SGDParamState>();
    torch::Tensor momentum = read("momentum_buffer");
    if (!momentum.defined()) return Status::InvalidArgument("the checkpoint's state is not SGD's");
    state->momentum_buffer(momentum);
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

}  // namespace

Result<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(
    torch::optim::Optimizer& optimizer, ProcessGroup& group, ZeroOptions options,
    DistributedDataParallel* ddp) {
  if (options.zero_stage < 0 || options.zero_stage > 2) {
    return Status::InvalidArgument("zero_stage " + std::to_string(options.zero_stage) +
                                   ": stages 0, 1 and 2 are implemented (not stage 3)");
  }
  if (options.zero_stage == 2 && ddp == nullptr) {
    return Status::InvalidArgument(
        "zero_stage 2 shards the gradients, so it needs the model's DistributedDataParallel");
  }
  std::unique_ptr<ShardedOptimizer> zero(new ShardedOptimizer(optimizer, group, options));
  for (auto& param_group : optimizer.param_groups()) {
    for (const torch::Tensor& param : param_group.params()) zero->params_.push_back(param);
  }
  const int world = group.world_size(), rank = group.rank();
  const size_t n = zero->params_.size();
  if (options.zero_stage == 0 || world == 1) {
    // Every rank steps everything: it "owns" every parameter.
    zero->owners_.assign(n, rank);
    return zero;
  }
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
  // Largest first, each to the least loaded rank: the same deal on every rank.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return zero->params_[a].numel() > zero->params_[b].numel();
  });
  zero->owners_.assign(n, 0);
  std::vector<int64_t> load(world, 0);  // elements dealt to each rank
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    zero->owners_[i] = static_cast<int>(least - load.begin());
    *least += zero->params_[i].numel();
  }
  // The optimizer keeps this rank's shard only: its step and its state touch nothing else.
  size_t index = 0;
  for (auto& param_group : optimizer.param_groups()) {
    std::vector<torch::Tensor> kept;
    for (const torch::Tensor& param : param_group.params()) {
      if (zero->owners_[index++] == rank) {
        kept.push_back(param);
      } else {
        // LibTorch 1.13 keys a parameter's state by its TensorImpl's address, as text.
        optimizer.state().erase(c10::guts::to_string(param.unsafeGetTensorImpl()));
      }
    }
    param_group.params() = std::move(kept);
  }
  if (options.zero_stage == 2) {
    // Each gradient goes to its owner only: the model's buckets regroup by owner.
    std::unordered_map<const c10::TensorImpl*, int> owners;
    for (size_t i = 0; i < n; ++i) owners[zero->params_[i].unsafeGetTensorImpl()] = zero->owners_[i];
    std::unordered_set<const c10::TensorImpl*> in_model;
    for (const torch::Tensor& param : ddp->module().parameters()) {
      in_model.insert(param.unsafeGetTensorImpl());
    }
    for (const auto& [impl, owner] : owners) {
      if (!in_model.count(impl)) {
        return Status::InvalidArgument(
            "zero_stage 2: the optimizer has a parameter that the DistributedDataParallel's "
            "model does not");
      }
    }
    RAYD_RETURN_IF_ERROR(ddp->ReduceGradientsToOwners(owners));
  }
  return zero;
}

Status ShardedOptimizer::Step() {
  optimizer_.step();
  if (options_.zero_stage == 0 || group_.world_size() == 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  // Each parameter straight from its owner into every rank's copy: no flat buffers (which
  // would cost as much memory as the shards save). All broadcasts are launched before any is
  // waited for, in parameter order on every rank.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  const std::string doing = "ZeRO's broadcast of the updated parameters";
  try {
    for (size_t i = 0; i < params_.size(); ++i) {
      std::vector<torch::Tensor> tensors = {params_[i].detach()};
      c10d::BroadcastOptions broadcast;
      broadcast.rootRank = owners_[i];
      works.push_back(group_.c10d().broadcast(tensors, broadcast));
    }
    for (auto& work : works) RAYD_RETURN_IF_ERROR(WaitWork(*work, group_.timeout(), doing));
  } catch (...) {
    return StatusFromC10dException(std::current_exception(), doing);
  }
  return Status::Ok();
}

void ShardedOptimizer::ZeroGrad() {
  for (torch::Tensor& param : params_) {
    torch::Tensor grad = param.mutable_grad();
    if (grad.defined()) grad.zero_();  // in place: DistributedDataParallel's bucket views stay
  }
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t total = 0;
  for (const auto& [key, state] : optimizer_.state()) {
    Result<std::vector<std::pair<std::string, torch::Tensor>>> tensors = StateTensors(*state);
    if (!tensors.ok()) continue;
    for (const auto& [name, tensor] : *tensors) {
      if (name != "step") total += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    }
  }
  return total;
}

Result<OptimizerSnapshot> ShardedOptimizer::Snapshot() const {
  OptimizerSnapshot snapshot;
  // At stage 0 every rank holds everything: rank 0's copy is the checkpoint, in one shard.
  const bool sharded = options_.zero_stage > 0;
  snapshot.rank = group_.rank();  // at stage 0, only rank 0 writes (shard 0 of 1)
  snapshot.shards = sharded ? group_.world_size() : 1;
  snapshot.parameters = static_cast<int64_t>(params_.size());
  if (!sharded && group_.rank() != 0) return snapshot;  // writes nothing
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] != group_.rank()) continue;
    auto it = optimizer_.state().find(c10::guts::to_string(params_[i].unsafeGetTensorImpl()));
    if (it == optimizer_.state().end()) continue;  // not stepped yet: no state
    RAYD_ASSIGN_OR_RETURN(auto tensors, StateTensors(*it->second));
    for (auto& [name, tensor] : tensors) {
      // A copy: the live state changes at the next step, while the write may still run.
      snapshot.tensors.emplace_back("p" + std::to_string(i) + "/" + name,
                                    tensor.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
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
  archive.write("parameters", torch::tensor(snapshot.parameters));
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
  const int rank = group_.rank();
  const torch::Device device = params_.empty() ? torch::Device(torch::kCPU) : params_[0].device();
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> loaded(params_.size());
  for (int shard = 0; shard < shards; ++shard) {
    torch::serialize::InputArchive archive;
    const std::string file = ShardFile(dir, shard, shards);
    try {
      archive.load_from(file);
    } catch (const std::exception& e) {
      return Status::InvalidArgument("cannot read " + file + ": " + e.what());
    }
    torch::Tensor count;
    if (!archive.try_read("parameters", count) ||
        count.item<int64_t>() != static_cast<int64_t>(params_.size())) {
      return Status::InvalidArgument(file + " is the checkpoint of a model with other parameters");
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (owners_[i] != rank || loaded[i]) continue;
      torch::Tensor probe;
      const std::string prefix = "p" + std::to_string(i) + "/";
      if (!archive.try_read(prefix + "step", probe) &&
          !archive.try_read(prefix + "momentum_buffer", probe)) {
        continue;  // in another shard, or never stepped
      }
      RAYD_ASSIGN_OR_RETURN(loaded[i], MakeState(optimizer_, archive, prefix, device));
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!loaded[i]) continue;
    optimizer_.state()[c10::guts::to_string(params_[i].unsafeGetTensorImpl())] =
        std::move(loaded[i]);
  }
  return Status::Ok();
}

}  // namespace rayd::train
