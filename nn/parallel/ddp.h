// DistributedDataParallel, as PyTorch's: each process holds a replica of the module, computes the
// gradients of its share of the batch, and the replicas' gradients are averaged so that every
// replica takes the same optimizer step.
//
//   * At construction the parameters (and buffers) of rank 0 are broadcast to every rank.
//   * The trainable parameters are cut into buckets of about bucket_cap_mb, in reverse order of
//     registration (backward produces the last layers' gradients first). A post-accumulate hook
//     on each parameter marks its gradient ready; when a bucket's last gradient is ready, its
//     gradients are copied into the bucket's flat buffer and its all-reduce (average) starts,
//     while backward continues through the earlier layers.
//   * When the last bucket has started, backward's final hook waits for all of them and writes
//     the averaged gradients back into .grad(): after loss.backward() returns, every rank holds
//     the same gradients, and optimizer.step() needs nothing more.
//   * no_sync(): backward passes inside it only accumulate .grad() locally (gradient
//     accumulation); the first backward outside it averages the accumulated sum.
//   * Frozen parameters (requires_grad false when wrapped) are left out of the buckets. A
//     trainable parameter that gets no gradient in a backward (not used by the forward) keeps its
//     bucket waiting: call synchronize() to reduce what there is (a missing gradient counts as
//     zeros), or the next forward throws an Error naming it.
//
// With one process every call is cheap: no bucket is made and backward is untouched.
#pragma once
#include <memory>
#include <vector>

#include "backends/dist/process_group.h"
#include "nn/module.h"

namespace vitrine::nn {

/// Every parameter and buffer of `module` set to rank `root`'s (a collective).
void broadcast_state(Module& module, int root = 0, dist::ProcessGroup* group = nullptr);

struct DDPOptions {
  /// The size of a gradient bucket (PyTorch's bucket_cap_mb, 25 MiB); each is one all-reduce.
  double bucket_cap_mb = 25;
  /// Broadcast rank 0's buffers (batch-norm statistics) at every forward in training mode.
  bool broadcast_buffers = true;
};

/// Communication statistics since construction (or reset_stats()).
struct DDPStats {
  int64_t reductions = 0;   // backward passes whose gradients were averaged
  int64_t bytes = 0;        // gradient bytes all-reduced (per rank, before the ring's factor)
  double wait_seconds = 0;  // time blocked waiting for all-reduces to finish
};

class DistributedDataParallel : public Module {
 public:
  /// group: by default the world's group for the parameters' device (dist::group_for).
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options = {},
                                   dist::ProcessGroup* group = nullptr);
  ~DistributedDataParallel() override;

  /// The wrapped module's forward (prepares the gradient reduction when grad mode is on).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DistributedDataParallel"; }

  /// The wrapped module (what to save: its state_dict has no "module." prefix).
  Module& module() { return *module_; }
  const std::shared_ptr<Module>& module_ptr() const { return module_; }
  dist::ProcessGroup& group() { return *group_; }

  /// While the guard lives, backward does not average gradients (they accumulate locally).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool was_;
  };
  NoSync no_sync() { return NoSync(*this); }
  bool sync_enabled() const;

  /// Finishes this backward's averaging: starts the buckets not yet started (a parameter without
  /// a gradient counts as zeros) and waits for all of them. Backward calls it itself once every
  /// bucket has started; it does nothing when there is nothing to finish.
  void synchronize();
  /// Averages the parameters' gradients as they are now, across the ranks (every bucket, then
  /// waits): for gradients accumulated under no_sync and then combined by the caller (the
  /// trainer's batch-invariant accumulation).
  void all_reduce_gradients();

  /// Number of buckets and the parameters in each (indices into the trainable parameters, in the
  /// order of module->parameters()).
  std::vector<std::vector<size_t>> buckets() const;
  const DDPStats& stats() const;
  void reset_stats();

 private:
  struct Reducer;
  std::shared_ptr<Module> module_;
  dist::ProcessGroup* group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace vitrine::nn
