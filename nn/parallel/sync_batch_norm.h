// SyncBatchNorm and convert_sync_batchnorm, as torch.nn's: batch normalisation whose training
// statistics are those of the whole batch that the processes of a data-parallel job share, so
// that R processes with B/R images each train as one process with B images.
//
// In training each process computes its images' per-channel mean and variance, the processes
// all-gather them with their counts, and each combines them into the whole batch's (ops.h's
// BatchNormSync has the formulas); backward gathers the two per-channel sums that dx needs. The
// weight's and bias's gradients stay each process's share, which DistributedDataParallel (or
// ZeRO-1) averages as it does every gradient: with each process's loss the mean over its images,
// the result is one process's gradient of the mean over all of them. In eval, and in a group of
// one process, it is BatchNorm2d.
#pragma once
#include <memory>
#include <optional>

#include "backends/dist/process_group.h"
#include "nn/batch_norm.h"

namespace vitrine::nn {

/// BatchNorm2d over the batch split across the processes of `group` (null: the world's group for
/// the input's device, dist::group_for), PyTorch's SyncBatchNorm: x [B, C, ...] (any number of
/// dims from 2). Every process must call it in training, in the same order (each forward and each
/// backward through it is a collective). The parameters and buffers are BatchNorm2d's (weight,
/// bias, running_mean, running_var, num_batches_tracked), so checkpoints load into either.
class SyncBatchNorm : public BatchNorm2d {
 public:
  explicit SyncBatchNorm(int64_t num_features, double eps = 1e-5,
                         std::optional<double> momentum = 0.1, bool affine = true,
                         bool track_running_stats = true, dist::ProcessGroup* group = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SyncBatchNorm"; }
  std::string extra_repr() const override;
  dist::ProcessGroup* group;
};

/// PyTorch's SyncBatchNorm.convert_sync_batchnorm: every BatchNorm2d in module's tree (module
/// itself included) replaced by a SyncBatchNorm over `group` with its hyperparameters, training
/// mode and tensors (the same tensors, shared: an optimizer or a handle that holds them sees the
/// replacement's). Returns the module, or its replacement when it is a BatchNorm2d itself. Names
/// do not change, so the state dict is the same. A BatchNorm2d that a parent also calls through a
/// handle of its own (a Sequential's list, a member such as ResNet's bn1) forwards its calls to
/// its replacement. Convert before wrapping in DistributedDataParallel and making the optimizer.
std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               dist::ProcessGroup* group = nullptr);

}  // namespace vitrine::nn
