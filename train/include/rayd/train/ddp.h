#pragma once
// DistributedDataParallel for a LibTorch module: what Python's torch DDP does, which LibTorch's
// C++ API lacks. Every rank wraps the same model; after each backward, the ranks' gradients are
// averaged, so every rank takes the same optimizer step from the same parameters.
//
// How it works:
// - Construction broadcasts rank 0's parameters and buffers to every rank (per dtype: one flat
//   broadcast when small, else tensor by tensor in place), so all ranks start identical.
// - The trainable parameters are packed into buckets of at most `bucket_cap_bytes` (one dtype
//   per bucket; the first one smaller), in reverse registration order: backward produces the
//   last layers' gradients first, so the first bucket fills first. Each bucket is one flat
//   tensor.
// - A post-hook on each parameter's gradient accumulator (it runs once .grad holds this
//   backward's gradient) puts the gradient in its bucket (from the second step on it is
//   already there, see below). When a bucket's last gradient
//   arrives the bucket is divided by the world size and an asynchronous all-reduce (sum) is
//   launched for it, while backward goes on computing the earlier layers.
// - Buckets are launched strictly in index order (a ready bucket waits for the ones before it):
//   Gloo and NCCL pair collectives by issue order, so every rank must issue the same sequence.
// - FinishBackward() launches what is left (a parameter that got no gradient this step counts
//   as zero, on this rank) and waits for every bucket. Call it after loss.backward() and before
//   optimizer.step().
// - Gradients live in the buckets (torch DDP's gradient_as_bucket_view): after the first
//   FinishBackward each parameter's .grad is a view of its slice of a bucket, so the next
//   backward accumulates straight into the bucket and the all-reduce leaves the averaged
//   gradient in .grad, with no copies. Zero gradients in place (Optimizer::zero_grad(), or
//   Module::zero_grad() without set_to_none) to keep it so; a .grad replaced by another tensor
//   is copied into the bucket and replaced by the view again.
//
// - With broadcast_buffers (the default), each synced FinishBackward ends by copying rank 0's
//   buffers to every rank, as torch DDP does before each forward. NoSync() accumulates
//   gradients over several backward passes without communicating (torch DDP's no_sync).
//
// - ZeRO (UseFlatLayout, which ShardedOptimizer calls): the gradients are laid out in one flat
//   space, in the optimizer's parameter order, split among the ranks at element bounds (rank r
//   steps elements [bounds[r], bounds[r+1])). Buckets are ranges of that space, made from its
//   end down. At stage 1 every bucket is all-reduced and all of the space is one tensor (so
//   each rank's shard of the gradients is a slice of it: FlatGradients). At stage 2
//   (reduce_to_owners) no bucket crosses a bound, each is reduced (summed) to the rank owning
//   its range only, and a rank keeps only its own range between steps: another rank's bucket is
//   allocated when its first gradient arrives (from spare storage of earlier ones) and freed as
//   soon as its reduce completes (checked as later gradients arrive, and in FinishBackward;
//   backward waits for the oldest while more than reduce_in_flight_cap_bytes are in flight). A
//   parameter not wholly in this rank's range keeps no .grad between steps: its pieces are
//   copied into their buckets as it arrives, or, a large gradient with a bucket of its own,
//   reduced from autograd's tensor as it is.
//   Under NoSync every gradient still accumulates locally in .grad (no communication means no
//   owner to hand it to); the synced backward hands it over and frees it.
//
// Invariants, between FinishBackward calls: buckets [0, next_bucket_) have been launched;
// a bucket's `pending` counts its pieces (of parameters) whose gradient has not arrived; a
// transient bucket launched and not let go is in in_flight_; a parameter's
// gradient arrives at most once (a second backward before FinishBackward is an error, since
// its gradient would miss the bucket already sent).
//
// Because the all-reduce leaves the same bytes on every rank and every rank applies them to
// identical parameters, parameters stay bitwise identical across ranks after every step.
//
// Threading: the module, this object and the process group belong to the train loop's thread.
// The gradient hooks run on the thread that runs backward (for CPU tensors, the one calling
// backward(); for CUDA tensors, autograd's device thread); Gloo runs the all-reduces on its own
// threads, NCCL on its own CUDA stream, so on a GPU the buckets' all-reduces overlap the rest
// of backward as on the CPU. The buckets live on the parameters' device.

#include <rayd/base/status.h>
#include <rayd/train/process_group.h>
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace rayd::train {

struct DistributedDataParallelOptions {
  // Upper bound on a bucket's size (a parameter larger than this gets a bucket of its own).
  // Smaller buckets start communication earlier; larger ones pay less per-collective latency.
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  // The first bucket (the last layers' gradients, ready first) is kept smaller, as torch DDP
  // does, so the first all-reduce starts while most of backward is still to run.
  int64_t first_bucket_cap_bytes = 1024 * 1024;
  // torch DDP's broadcast_buffers: after each step's gradients are averaged, rank 0's buffers
  // (BatchNorm running statistics, ...) are copied to every rank, so every rank runs the next
  // forward with the same buffers. One broadcast per buffer dtype; nothing for a module
  // without buffers.
  bool broadcast_buffers = true;
  // ZeRO stage 2: other ranks' gradients waiting in flight for their reduce, in bytes, beyond
  // which backward waits for the oldest reduce to finish (and frees it) before going on. When
  // backward outruns the network, this bounds the gradient memory a rank holds at once.
  int64_t reduce_in_flight_cap_bytes = 32 * 1024 * 1024;
};

class DistributedDataParallel {
 public:
  // Broadcasts rank 0's parameters and buffers of `module` and installs the gradient hooks.
  // `module` and `group` must outlive the returned object. Fails if the broadcast fails (a
  // peer gone or timed out) or a parameter is not where the group's backend reduces (dense CPU
  // tensors for Gloo, dense tensors on one CUDA device for NCCL).
  static Result<std::unique_ptr<DistributedDataParallel>> Create(
      torch::nn::Module& module, ProcessGroup& group, DistributedDataParallelOptions options = {});
  // Removes the gradient hooks from the module. Not during a backward pass.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Completes this step's gradient averaging (see above). Returns DeadlineExceeded when a
  // peer did not take part within the group's timeout, Unavailable when a peer's connection
  // broke (it died); after any error the group is no longer usable and the caller should tear
  // it down.
  Status FinishBackward();

  // Gradient accumulation without communication (torch DDP's no_sync): while the returned guard
  // lives, backward passes only accumulate into .grad and FinishBackward communicates nothing
  // (and broadcasts no buffers); the first FinishBackward after it averages what accumulated.
  // Every rank must use it for the same steps.
  class [[nodiscard]] NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(&ddp) { ddp_->sync_ = false; }
    ~NoSyncGuard() {
      if (ddp_ != nullptr) ddp_->sync_ = true;
    }
    NoSyncGuard(NoSyncGuard&& other) noexcept : ddp_(std::exchange(other.ddp_, nullptr)) {}
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  NoSyncGuard NoSync() { return NoSyncGuard(*this); }

  // ZeRO's layout (see above): `order` holds every trainable parameter of the module once, of
  // one dtype, in the flat space's order; `bounds` (world size + 1 values, from 0 to the total
  // element count) split it among the ranks. Rebuilds the buckets and drops the gradients
  // (zero); between steps only (not during backward); the same arguments on every rank.
  // InvalidArgument otherwise.
  Status UseFlatLayout(const std::vector<torch::Tensor>& order, const std::vector<int64_t>& bounds,
                       bool reduce_to_owners);
  // After UseFlatLayout: the gradients of flat elements [begin, end), inside this rank's range
  // (everything at stage 1), as a tensor sharing their storage: after FinishBackward it holds
  // their average.
  torch::Tensor FlatGradients(int64_t begin, int64_t end) const;

  // Bytes of gradient storage this object keeps between steps: every gradient, or at ZeRO
  // stage 2 this rank's range of them.
  int64_t gradient_bytes() const;

  torch::nn::Module& module() { return module_; }
  size_t bucket_count() const { return buckets_.size(); }
  // How many buckets' all-reduces this step has launched so far: after backward and before
  // FinishBackward, the ones that overlapped with backward (for tests and metrics).
  size_t launched_bucket_count() const { return next_bucket_; }

 private:
  struct Bucket {
    torch::Tensor flat;                   // the bucket's gradients, back to back
    std::vector<size_t> params;           // indices into params_ with a piece here, in order
    size_t pending = 0;                   // pieces whose gradient has not arrived this step
    c10::intrusive_ptr<c10d::Work> work;  // the reduction in flight, once launched
    int owner = -1;                       // -1: all-reduced; else reduced to this rank only
    int64_t elements = 0;
    torch::Tensor storage;                // a transient bucket's own allocation (flat's base)
    // Another rank's (stage 2): allocated while this step's gradients pass through it.
    bool Transient(int rank) const { return owner >= 0 && owner != rank; }
  };
  // A run of a parameter's gradient elements that lives in one bucket.
  struct Piece {
    size_t bucket = 0;
    int64_t bucket_offset = 0;  // elements, within the bucket's flat tensor
    int64_t param_offset = 0;   // elements, within the flattened parameter
    int64_t length = 0;
  };
  struct Slot {
    std::vector<Piece> pieces;  // one, except for a parameter cut at an owner's bound
    // The gradient's home in persistent storage, shaped like the parameter (.grad between
    // steps); undefined when (a piece of) it is reduced to another rank.
    torch::Tensor view;
    bool ready = false;  // this step's gradient is in the buckets
  };

  DistributedDataParallel(torch::nn::Module& module, ProcessGroup& group);

  // Copies rank 0's values of `tensors` to every rank, grouped by dtype: a small group as one
  // flat broadcast, a large one tensor by tensor in place (no flat copy of a large model).
  Status BroadcastFromRankZero(const std::vector<torch::Tensor>& tensors, const std::string& what);
  // The default layout: buckets in reverse registration order, one open bucket per dtype.
  void BuildBuckets();
  int64_t Cap(size_t bucket) const {
    return bucket == 0 ? options_.first_bucket_cap_bytes : options_.bucket_cap_bytes;
  }
  // Points every .grad at its home (copying what it held), or drops it when it has none.
  void PointGradsHome();
  // A transient bucket's storage, from the first gradient that arrives; let go once its reduce
  // is done (waiting for the oldest while more than the cap is in flight).
  void EnsureStorage(size_t bucket);
  void ReleaseReducedBuckets();
  // Drops a transient bucket's memory (and its work), keeping its storage as a spare while the
  // spares stay under the in-flight cap plus a bucket, when `reusable` (its reduce succeeded).
  void LetGo(Bucket& bucket, bool reusable);
  void InstallHooks();
  // Hook body: parameter `param` has its gradient for this step.
  void OnGradientReady(size_t param);
  void MarkReady(size_t param, const torch::Tensor& grad);
  void LaunchReadyBuckets();
  void ResetStep();

  torch::nn::Module& module_;
  ProcessGroup& group_;
  std::vector<torch::Tensor> params_;  // the trainable parameters, in registration order
  std::vector<torch::Tensor> buffers_;  // broadcast after each synced step (broadcast_buffers)
  DistributedDataParallelOptions options_;
  bool sync_ = true;                    // false while a NoSyncGuard lives
  std::vector<Slot> slots_;            // per parameter
  std::vector<Bucket> buckets_;
  bool flat_layout_ = false;
  torch::Tensor region_;               // flat layout: this rank's persistent gradients
  int64_t region_begin_ = 0;           // the flat element region_ starts at
  std::deque<size_t> in_flight_;       // transient buckets launched, not yet let go, in order
  std::vector<torch::Tensor> spare_;   // transient buckets' storage, for the next ones
  // Keep the accumulators alive: the autograd graph only holds them weakly between
  // iterations, and a new one would not carry our hook.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;  // per accumulator, for removing the hooks
  size_t next_bucket_ = 0;            // the next bucket to launch this step
  Status error_;                      // the first failure inside a hook this step
};

}  // namespace rayd::train
