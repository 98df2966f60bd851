// Mixed precision: the autocast guard and the dynamic loss scaler (rayd/train/mixed_precision.h).

#include <ATen/autocast_mode.h>
#include <rayd/train/mixed_precision.h>

#include <cmath>
#include <stdexcept>

namespace rayd::train {

std::optional<Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return std::nullopt;
}

const char* ToString(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "fp32";
}

AutocastGuard::AutocastGuard(Precision precision, const torch::Device& device) {
  if (precision == Precision::kFp32) return;
  const at::ScalarType dtype = precision == Precision::kBf16 ? at::kBFloat16 : at::kHalf;
  cuda_ = device.is_cuda();
  if (!cuda_ && precision == Precision::kFp16) {
    throw std::invalid_argument("fp16 autocast needs a CUDA device; on the CPU use bf16");
  }
  if (cuda_) {
    was_enabled_ = at::autocast::is_enabled();
    was_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // The outermost guard drops the casts it cached (torch.autocast's __exit__ does the same).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(was_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
  }
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options_.init_scale > 0) || !(options_.growth_factor > 1) ||
      !(options_.backoff_factor > 0 && options_.backoff_factor < 1) ||
      options_.growth_interval < 1) {
    throw std::invalid_argument(
        "LossScaler: init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
        "growth_interval >= 1 are needed");
  }
}

torch::Tensor LossScaler::Scale(const torch::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * scale_;
}

bool LossScaler::Unscale(torch::optim::Optimizer& optimizer, ProcessGroup* group) {
  if (!options_.enabled) return true;
  if (unscaled_) return !found_inf_;
  unscaled_ = true;
  const double inverse = 1.0 / scale_;
  // The flag stays on the gradients' device until the end: a single host sync per step.
  torch::Tensor found;
  for (auto& param_group : optimizer.param_groups()) {
    for (auto& param : param_group.params()) {
      torch::Tensor grad = param.mutable_grad();
      if (!grad.defined()) continue;
      grad.mul_(inverse);
      torch::Tensor bad = torch::logical_not(torch::isfinite(grad)).any();
      found = found.defined() ? torch::logical_or(found, bad.to(found.device())) : bad;
    }
  }
  float flag = found.defined() && found.item<bool>() ? 1.0f : 0.0f;
  if (group != nullptr && group->world_size() > 1) {
    // A rank holding only a shard of the gradients learns whether another rank's had an inf.
    torch::Tensor any = torch::full(
        {1}, flag,
        torch::TensorOptions()
            .dtype(torch::kFloat)
            .device(group->backend() == CollectiveBackend::kNccl ? torch::Device(torch::kCUDA)
                                                                 : torch::Device(torch::kCPU)));
    if (Status waited = AllReduce(*group, any, "the loss scaler's inf check"); !waited.ok()) {
      throw std::runtime_error(waited.message());
    }
    flag = any.item<float>();
  }
  found_inf_ = flag > 0;
  return !found_inf_;
}

bool LossScaler::Step(torch::optim::Optimizer& optimizer, ProcessGroup* group) {
  if (!Unscale(optimizer, group)) {
    ++skipped_;
    return false;
  }
  optimizer.step();
  return true;
}

void LossScaler::Update() {
  if (!options_.enabled) return;
  if (unscaled_ && found_inf_) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

nlohmann::json LossScaler::State() const {
  return {{"scale", scale_}, {"good_steps", good_steps_}, {"skipped", skipped_}};
}

Status LossScaler::Restore(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("scale") || !state["scale"].is_number() ||
      !(state["scale"].get<double>() > 0)) {
    return Status::InvalidArgument("the loss scaler's state has no positive \"scale\"");
  }
  scale_ = state["scale"].get<double>();
  good_steps_ = state.value("good_steps", 0);
  skipped_ = state.value("skipped", int64_t{0});
  unscaled_ = found_inf_ = false;
  return Status::Ok();
}

}  // namespace rayd::train
