// SyncBatchNorm's forward (a BatchNorm2d with an all_gather over its group) and
// convert_sync_batchnorm's walk over the module tree (sync_batch_norm.h).
#include "nn/parallel/sync_batch_norm.h"

#include <map>
#include <vector>

#include <fmt/format.h>

#include "nn/parallel/collectives.h"

namespace vitrine::nn {

SyncBatchNorm::SyncBatchNorm(int64_t num_features, double eps, std::optional<double> momentum,
                             bool affine, bool track_running_stats, dist::ProcessGroup* group)
    : BatchNorm2d("SyncBatchNorm", num_features, eps, momentum, affine, track_running_stats),
      group(group) {}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  VT_CHECK(x.defined() && x.dim() >= 2, "SyncBatchNorm: expected x [B, C, ...], got shape {}",
           x.defined() ? x.shape().str() : std::string("undefined"));
  if (!is_training()) return normalize(x, {});  // the running statistics, as PyTorch's
  dist::ProcessGroup* g = group ? group : &dist::group_for(x.device());
  if (g->size() == 1) return normalize(x, {});
  // NCCL reduces CUDA buffers, MPI (and a world of one) CPU ones.
  const bool cuda_group = g->backend() == "nccl";
  VT_CHECK(cuda_group == x.device().is_cuda(),
           "SyncBatchNorm: x is on {} but its process group ({}, {} processes) reduces {} tensors: "
           "give it the group for x's device (dist::group_for) or leave its group null",
           x.device().str(), g->backend(), g->size(), cuda_group ? "CUDA" : "CPU");
  ops::BatchNormSync sync;
  sync.all_gather = [g](const Tensor& t) { return dist::all_gather(t.contiguous(), g); };
  return normalize(x, sync);
}

std::string SyncBatchNorm::extra_repr() const {
  return BatchNorm2d::extra_repr() +
         (group ? fmt::format(", group={} of {}", group->backend(), group->size()) : "");
}

namespace {
/// A SyncBatchNorm holding bn's tensors, hyperparameters and mode.
std::shared_ptr<BatchNorm2d> sync_copy(const BatchNorm2d& bn, dist::ProcessGroup* group) {
  // Made without tensors, then given bn's (registered in BatchNorm2d's order).
  auto s =
      std::make_shared<SyncBatchNorm>(bn.num_features, bn.eps, bn.momentum, false, false, group);
  s->affine = bn.affine;
  s->track_running_stats = bn.track_running_stats;
  if (bn.affine) {
    s->weight = s->register_parameter("weight", bn.weight, bn.weight.requires_grad());
    s->bias = s->register_parameter("bias", bn.bias, bn.bias.requires_grad());
  }
  if (bn.track_running_stats) {
    s->running_mean = s->register_buffer("running_mean", bn.running_mean);
    s->running_var = s->register_buffer("running_var", bn.running_var);
    s->num_batches_tracked = s->register_buffer("num_batches_tracked", bn.num_batches_tracked);
  }
  s->train(bn.is_training());
  return s;
}
}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               dist::ProcessGroup* group) {
  VT_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  // One replacement per BatchNorm2d, even when it appears under several parents.
  std::map<BatchNorm2d*, std::shared_ptr<BatchNorm2d>> made;
  auto replacement = [&](const std::shared_ptr<Module>& m) -> std::shared_ptr<BatchNorm2d> {
    auto* bn = dynamic_cast<BatchNorm2d*>(m.get());
    if (!bn || dynamic_cast<SyncBatchNorm*>(bn)) return nullptr;
    auto it = made.find(bn);
    if (it == made.end()) {
      it = made.emplace(bn, sync_copy(*bn, group)).first;
      bn->replaced_by_ = it->second;
    }
    return it->second;
  };
  if (auto root = replacement(module)) return root;
  std::vector<Module*> stack{module.get()};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    for (const auto& [name, child] : m->named_children()) {
      if (auto r = replacement(child))
        m->set_module(name, r);
      else
        stack.push_back(child.get());
    }
  }
  return module;
}

}  // namespace vitrine::nn
