// The torch half of a rank's session (rayd/train/session.h): the run's process group,
// PrepareModel, PrepareOptimizer, and the hooks rayd_train calls (rank_session.h), registered
// as this library is loaded.

#include <rayd/train/session.h>
#include <rayd/train/tensor_parallel.h>

#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compute_threads.h"
#include "cpu_allocator.h"
#include "cuda_support.h"
#include "rank_session.h"

namespace rayd::train {
namespace {

// What one run keeps on this side, in destruction order reversed: optimizers and models go
// before the group they talk through.
struct TorchRun : internal::TorchRunState {
  std::unique_ptr<ProcessGroup> group;
  // With a mesh: this rank's groups along each axis (formed after `group`, through its store).
  std::unique_ptr<ProcessGroup> data, pipeline, tensor;
  std::unique_ptr<ProcessGroup> alone;  // the pipeline or tensor group without a mesh
  std::vector<ShardedUnit> units;  // ShardUnit's, in the order they were made
  std::vector<std::unique_ptr<PreparedModel>> models;
  std::vector<std::unique_ptr<PreparedOptimizer>> optimizers;
};

class HostedStore : public internal::HostedRendezvous {
 public:
  explicit HostedStore(std::unique_ptr<Rendezvous> rendezvous)
      : rendezvous_(std::move(rendezvous)) {}
  std::string address() const override {
    return rendezvous_->host() + ":" + std::to_string(rendezvous_->port());
  }
  std::unique_ptr<Rendezvous> Take() { return std::move(rendezvous_); }

 private:
  std::unique_ptr<Rendezvous> rendezvous_;
};

TorchRun& State(internal::RankSession& session) {
  if (!session.torch) session.torch = std::make_unique<TorchRun>();
  return static_cast<TorchRun&>(*session.torch);
}

// The rendezvous this rank forms its group through: rank 0's hosted store, rank 0's address
// joined, or a store of its own for a group of one.
std::unique_ptr<Rendezvous> MeetPeers(internal::GroupSpec& spec) {
  if (spec.world_size == 1) return Rendezvous::Alone();
  if (spec.hosted) return static_cast<HostedStore&>(*spec.hosted).Take();
  const size_t colon = spec.join_address.rfind(':');
  if (colon == std::string::npos)
    throw RaydError("rank " + std::to_string(spec.rank) + " has no rendezvous address to join");
  Result<std::unique_ptr<Rendezvous>> joined = Rendezvous::Join(
      spec.join_address.substr(0, colon),
      static_cast<uint16_t>(std::stoi(spec.join_address.substr(colon + 1))), spec.timeout);
  if (!joined.ok()) throw RaydError("joining the rendezvous: " + joined.status().message());
  return std::move(joined).value();
}

// The data, pipeline and tensor groups of a mesh with pipeline or tensor above 1, each formed
// through the world's store. Every rank forms them in this order, and each axis' groups split
// the world, so every group's members are all forming it at once.
void FormMeshGroups(TorchRun& run, const internal::GroupSpec& spec) {
  const MeshShape& mesh = spec.mesh;
  if (mesh.pipeline * mesh.tensor <= 1) return;
  auto form = [&](MeshAxis axis, const char* name) {
    std::vector<int> ranks = MeshGroupRanks(mesh, spec.rank, axis);
    std::string key = name;
    for (int r : ranks) key += "-" + std::to_string(r);
    Result<std::unique_ptr<ProcessGroup>> formed = run.group->Subgroup(ranks, key);
    if (!formed.ok()) {
      throw RaydError(std::string("forming the mesh's ") + name +
                      " group: " + formed.status().message());
    }
    return std::move(formed).value();
  };
  run.data = form(MeshAxis::kData, "data");
  run.pipeline = form(MeshAxis::kPipeline, "pipeline");
  run.tensor = form(MeshAxis::kTensor, "tensor");
}

ProcessGroup& Group(internal::RankSession& session) {
  TorchRun& run = State(session);
  if (!run.group) {
    internal::GroupSpec& spec = session.group;
    ProcessGroupOptions options;
    options.backend = spec.nccl ? CollectiveBackend::kNccl : CollectiveBackend::kGloo;
    options.rank = spec.rank;
    options.world_size = spec.world_size;
    options.local_address = spec.local_address;
    options.timeout = spec.timeout;
    Result<std::unique_ptr<ProcessGroup>> formed = ProcessGroup::Connect(MeetPeers(spec), options);
    if (!formed.ok()) {
      throw RaydError("forming the process group: " + formed.status().message());
    }
    run.group = std::move(formed).value();
    FormMeshGroups(run, spec);
  }
  return *run.group;
}

// The data group: the world without a mesh.
ProcessGroup& DataGroup(internal::RankSession& session) {
  TorchRun& run = State(session);
  ProcessGroup& world = Group(session);
  return run.data ? *run.data : world;
}

std::unique_ptr<internal::HostedRendezvous> Host(const std::string& address,
                                                 std::chrono::milliseconds timeout) {
  Result<std::unique_ptr<Rendezvous>> hosted = Rendezvous::Host(address, 0, timeout);
  if (!hosted.ok()) {
    throw RaydError("rank 0 cannot host the rendezvous: " + hosted.status().message());
  }
  return std::make_unique<HostedStore>(std::move(hosted).value());
}

[[maybe_unused]] const bool registered = internal::RegisterTorchHooks({
    .host = &Host,
    .form_group = [](internal::RankSession& session) { Group(session); },
    .cuda_built = &cuda::Built,
    .begin_run =
        [] {
          internal::SetComputeThreads(1);  // ranks share the node's cores
          internal::UseCachingCpuAllocator();
        },
    .release_device_memory = &cuda::ReleaseCachedMemory,
});

}  // namespace

ProcessGroup& GetWorldGroup() { return Group(internal::RequireSession("GetWorldGroup")); }

ProcessGroup& GetGroup(MeshAxis axis) {
  internal::RankSession& session = internal::RequireSession("GetGroup");
  TorchRun& run = State(session);
  ProcessGroup& world = Group(session);
  std::unique_ptr<ProcessGroup>* group = axis == MeshAxis::kData       ? &run.data
                                         : axis == MeshAxis::kPipeline ? &run.pipeline
                                                                       : &run.tensor;
  if (*group) return **group;
  if (axis == MeshAxis::kData) return world;
  // No mesh: this rank is the whole pipeline and the whole tensor group.
  if (!run.alone) {
    Result<std::unique_ptr<ProcessGroup>> alone = ProcessGroup::Connect(
        Rendezvous::Alone(),
        {.local_address = session.group.local_address, .timeout = session.group.timeout});
    if (!alone.ok()) throw RaydError("GetGroup: " + alone.status().message());
    run.alone = std::move(alone).value();
  }
  return *run.alone;
}

double ClipGradNormOverMesh(torch::nn::Module& stage, double max_norm, int zero_stage) {
  if (zero_stage != 0) {
    throw RaydError("ClipGradNormOverMesh: at zero_stage " + std::to_string(zero_stage) +
                    " the gradients are sharded over the data group too; use stage 0");
  }
  ProcessGroup& tensor = GetGroup(MeshAxis::kTensor);
  ProcessGroup& pipeline = GetGroup(MeshAxis::kPipeline);
  // This rank's share of the squared norm: its tensor shards, and the whole parameters on
  // tensor rank 0 only.
  std::vector<torch::Tensor> grads;
  double local = 0;
  auto add = [&](const torch::Tensor& param, bool shard) {
    const torch::Tensor& grad = param.grad();
    if (!grad.defined()) return;
    grads.push_back(grad);
    if (shard || tensor.rank() == 0) local += grad.to(torch::kFloat64).pow(2).sum().item<double>();
  };
  for (const auto& module : stage.modules(/*include_self=*/true)) {
    if (auto* column = module->as<ColumnParallelLinearImpl>()) {
      add(column->weight, true);
      if (column->bias.defined()) add(column->bias, true);
    } else if (auto* row = module->as<RowParallelLinearImpl>()) {
      add(row->weight, true);
      if (row->bias.defined()) add(row->bias, false);
    } else {
      for (const auto& param : module->parameters(/*recurse=*/false)) add(param, false);
    }
  }
  torch::Tensor total = torch::tensor({local}, torch::kFloat64);
  for (ProcessGroup* group : {&tensor, &pipeline}) {
    if (Status status = AllReduce(*group, total, "ClipGradNormOverMesh"); !status.ok()) {
      throw RaydError(status.message());
    }
  }
  const double norm = std::sqrt(total.item<double>());
  const double coefficient = max_norm / (norm + 1e-6);  // torch's clip_grad_norm_
  if (coefficient < 1) {
    for (torch::Tensor& grad : grads) grad.mul_(coefficient);
  }
  return norm;
}

void PreparedModel::FinishBackward() {
  Status status = ddp_->FinishBackward();
  if (!status.ok()) throw RaydError("FinishBackward: " + status.message());
}

PreparedModel& PrepareModel(torch::nn::Module& module) {
  internal::RankSession& session = internal::RequireSession("PrepareModel");
  if (session.context.device != "cpu") module.to(torch::Device(session.context.device));
  Result<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Create(module, DataGroup(session));
  if (!ddp.ok()) throw RaydError("PrepareModel: " + ddp.status().message());
  TorchRun& run = State(session);
  run.models.push_back(std::make_unique<PreparedModel>(std::move(ddp).value()));
  return *run.models.back();
}

ShardedUnit ShardUnit(torch::nn::AnyModule block) {
  internal::RankSession& session = internal::RequireSession("ShardUnit");
  ProcessGroup& group = DataGroup(session);
  if (session.context.device != "cpu") block.ptr()->to(torch::Device(session.context.device));
  ShardedUnit unit(std::move(block), group);
  State(session).units.push_back(unit);
  return unit;
}

void PreparedOptimizer::SaveState(const std::string& dir) {
  Result<OptimizerSnapshot> snapshot = zero_->Snapshot();
  if (!snapshot.ok()) throw RaydError("SaveState: " + snapshot.status().message());
  writer_.Post([snapshot = std::make_shared<const OptimizerSnapshot>(std::move(snapshot).value()),
                dir] { return ShardedOptimizer::WriteSnapshot(*snapshot, dir); });
}

void PreparedOptimizer::LoadState(const std::string& dir) {
  Status loaded = zero_->LoadState(dir);
  if (!loaded.ok()) throw RaydError("LoadState: " + loaded.message());
}

void PreparedOptimizer::Step() {
  Status status = zero_->Step();
  if (!status.ok()) throw RaydError("optimizer step: " + status.message());
}

bool PreparedOptimizer::Unscale(LossScaler& scaler) {
  // Every rank learns whether any rank's shard had an inf, so all skip the same steps.
  return scaler.Unscale(zero_->optimizer(), stage() > 0 ? &group_ : nullptr);
}

double PreparedOptimizer::ClipGradNorm(double max_norm) {
  Result<double> norm = zero_->ClipGradNorm(max_norm);
  if (!norm.ok()) throw RaydError("ClipGradNorm: " + norm.status().message());
  return *norm;
}

bool PreparedOptimizer::Step(LossScaler& scaler) {
  if (!Unscale(scaler)) {
    scaler.Step(zero_->optimizer());  // counts the skipped step; does not step
    return false;
  }
  Step();
  return true;
}

PreparedOptimizer& PrepareOptimizer(torch::optim::Optimizer& optimizer, ZeroOptions options) {
  internal::RankSession& session = internal::RequireSession("PrepareOptimizer");
  ProcessGroup& group = DataGroup(session);
  TorchRun& run = State(session);
  if (options.zero_stage == 3) {
    // The units whose shards this optimizer steps; it steps them as a plain optimizer does
    // (each rank its own shard), and checkpoints them where they sit in the model.
    std::unordered_set<const c10::TensorImpl*> stepped;
    for (const auto& param_group : optimizer.param_groups()) {
      for (const torch::Tensor& param : param_group.params()) {
        stepped.insert(param.unsafeGetTensorImpl());
      }
    }
    std::unordered_map<const c10::TensorImpl*, const ShardedUnitImpl*> unit_of;
    for (const ShardedUnit& unit : run.units) {
      if (stepped.contains(unit->shard().unsafeGetTensorImpl())) {
        unit_of[unit->shard().unsafeGetTensorImpl()] = unit.get();
      }
    }
    if (unit_of.empty()) {
      throw RaydError(
          "PrepareOptimizer: zero_stage 3 needs the optimizer built over sharded "
          "units' parameters (ShardUnit)");
    }
    // The model's flat space, in the optimizer's order: a unit's whole range for its shard (of
    // which this rank holds its part), a replicated parameter's own elements: the space stages
    // 0 to 2 checkpoint in, so a checkpoint loads at any stage.
    std::vector<FlatPlacement> placements;
    int64_t elements = 0;
    const int64_t rank = group.rank();
    for (const auto& param_group : optimizer.param_groups()) {
      for (const torch::Tensor& param : param_group.params()) {
        auto unit = unit_of.find(param.unsafeGetTensorImpl());
        if (unit == unit_of.end()) {
          placements.push_back({.begin = elements, .count = param.numel(), .replicated = true});
          elements += param.numel();
          continue;
        }
        const int64_t length = unit->second->shard_numel();
        const int64_t first = std::min(rank * length, unit->second->numel());
        placements.push_back(
            {.begin = elements + first, .count = std::min(length, unit->second->numel() - first)});
        elements += unit->second->numel();
      }
    }
    Result<std::unique_ptr<ShardedOptimizer>> plain =
        ShardedOptimizer::CreateStage3(optimizer, group, std::move(placements), elements);
    if (!plain.ok()) throw RaydError("PrepareOptimizer: " + plain.status().message());
    run.optimizers.push_back(
        std::make_unique<PreparedOptimizer>(std::move(plain).value(), group, session.writer));
    return *run.optimizers.back();
  }
  // Stages 1 and 2 lay out the gradients of the prepared model that holds these parameters.
  DistributedDataParallel* ddp = nullptr;
  if (!optimizer.param_groups().empty() && !optimizer.param_groups()[0].params().empty()) {
    const c10::TensorImpl* first = optimizer.param_groups()[0].params()[0].unsafeGetTensorImpl();
    for (auto& model : run.models) {
      for (const torch::Tensor& param : model->ddp().module().parameters()) {
        if (param.unsafeGetTensorImpl() == first) ddp = &model->ddp();
      }
    }
  }
  if (options.zero_stage > 0 && ddp == nullptr) {
    throw RaydError("PrepareOptimizer: zero_stage " + std::to_string(options.zero_stage) +
                    " needs the optimizer's model prepared first (PrepareModel)");
  }
  Result<std::unique_ptr<ShardedOptimizer>> zero =
      ShardedOptimizer::Create(optimizer, group, options, ddp);
  if (!zero.ok()) throw RaydError("PrepareOptimizer: " + zero.status().message());
  run.optimizers.push_back(
      std::make_unique<PreparedOptimizer>(std::move(zero).value(), group, session.writer));
  return *run.optimizers.back();
}

}  // namespace rayd::train
