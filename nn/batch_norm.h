// BatchNorm2d and Embedding, as torch.nn names them, with PyTorch's parameter and buffer names
// (weight, bias, running_mean, running_var, num_batches_tracked), so its checkpoints load as they
// are.
#pragma once
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "nn/layers.h"
#include "ops/ops.h"

namespace vitrine::dist {
class ProcessGroup;
}

namespace vitrine::nn {

/// A normalisation layer's state over num_features channels, registered on m as PyTorch's
/// _NormBase does: weight (ones) and bias (zeros) when affine; running_mean (zeros), running_var
/// (ones) and num_batches_tracked (int64 0) when track_running_stats. Undefined otherwise.
/// In the order weight, bias, running_mean, running_var, num_batches_tracked (for std::tie).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> register_norm_state(Module& m,
                                                                       int64_t num_features,
                                                                       bool affine,
                                                                       bool track_running_stats);

/// Per-channel normalisation of x [B, C, H, W] (ops::batch_norm):
///   training: the batch's statistics, and running = (1 - momentum) running + momentum batch
///             (momentum nullopt: the cumulative average, momentum = 1 / num_batches_tracked)
///   eval:     the running statistics
///   y = (x - mean) / sqrt(var + eps) * weight + bias        (weight 1, bias 0 at start)
/// track_running_stats = false: always the batch's statistics, no buffers.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);
  Tensor forward(const Tensor& x) override;
  /// relu(forward(x) + residual) (residual may be undefined): one op, ops::batch_norm_relu, when
  /// fused_relu is on and nothing needs the batch norm's own output (no forward hook here, not
  /// a SyncBatchNorm or a module it replaced); else the composition, through forward.
  Tensor forward_relu(const Tensor& x, const Tensor& residual = Tensor());
  /// Whether forward_relu fuses (default true; the environment's VITRINE_FUSED_BN_RELU=0 turns it
  /// off at start, for an A/B run). It also switches foldable.
  static bool fused_relu;
  /// Whether a model may fold this module into the convolution before it (fuse_conv_bn_weights),
  /// as torch.jit.freeze and torch.ao's fuse_modules do for inference: eval mode with running
  /// statistics, no gradient recorded (GradMode off), fused_relu on, and nothing that needs this
  /// module's own call (a forward hook here; a SyncBatchNorm, or a module it replaced).
  bool foldable() const;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;                                    // [C], undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // [C], [C], int64 []
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;

 protected:
  /// As the public constructor; `type` names the class in its errors.
  BatchNorm2d(const char* type, int64_t num_features, double eps, std::optional<double> momentum,
              bool affine, bool track_running_stats);
  /// ops::batch_norm on x [B, C, ...] with this module's tensors and mode (the running statistics
  /// counted and updated in training); sync: the batch split across processes (SyncBatchNorm).
  /// relu: ops::batch_norm_relu with the residual instead (forward_relu).
  Tensor normalize(const Tensor& x, const ops::BatchNormSync& sync, bool relu = false,
                   const Tensor& residual = Tensor());

 private:
  friend std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                                        dist::ProcessGroup* group);
  /// Set by convert_sync_batchnorm: the SyncBatchNorm that took this module's place in the tree.
  /// forward calls it, so a model that calls this module through a handle of its own (a
  /// Sequential's list, a member such as ResNet's bn1) calls its replacement.
  std::shared_ptr<BatchNorm2d> replaced_by_;
};

/// torch.nn.utils.fusion.fuse_conv_bn_weights: the weight and bias of the convolution whose
/// output is bn(conv(x)) with bn in eval mode, r = bn_w / sqrt(bn_rv + bn_eps) per channel:
///   w' = conv_w r[:, None, None, None],   b' = (conv_b - bn_rm) r + bn_b
/// (an undefined conv_b, bn_w or bn_b counts as 0, 1 or 0). Not recorded for autograd.
std::pair<Tensor, Tensor> fuse_conv_bn_weights(const Tensor& conv_w, const Tensor& conv_b,
                                               const Tensor& bn_rm, const Tensor& bn_rv,
                                               double bn_eps, const Tensor& bn_w,
                                               const Tensor& bn_b);

/// A lookup table (ops::embedding): indices int64 [...] -> weight rows [..., dim]; weight
/// [num_embeddings, dim] ~ N(0, 1) as PyTorch's.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen = default_generator());
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor weight;
  int64_t num_embeddings, embedding_dim;
};

/// Weight tying (GPT-2's head and token embedding; PyTorch's `head.weight = emb.weight`): head's
/// weight [vocab, dim] becomes emb's, one tensor under both names. parameters() lists it once,
/// so an optimizer updates it once with the sum of both uses' gradients; state_dict() has it
/// under both names, and loading either name sets both. head must be Linear(dim, vocab).
void tie_weights(Linear& head, Embedding& emb);

}  // namespace vitrine::nn
