#include "nn/batch_norm.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "backends/env_switch.h"
#include "nn/init.h"
#include "ops/batch_invariant.h"
#include "ops/ops.h"

namespace vitrine::nn {

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> register_norm_state(Module& m,
                                                                       int64_t num_features,
                                                                       bool affine,
                                                                       bool track_running_stats) {
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  if (affine) {
    weight = m.register_parameter("weight", ops::ones({num_features}));
    bias = m.register_parameter("bias", ops::zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = m.register_buffer("running_mean", ops::zeros({num_features}));
    running_var = m.register_buffer("running_var", ops::ones({num_features}));
    num_batches_tracked = m.register_buffer("num_batches_tracked", ops::zeros({}, kInt64));
  }
  return {weight, bias, running_mean, running_var, num_batches_tracked};
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, std::optional<double> momentum,
                         bool affine, bool track_running_stats)
    : BatchNorm2d("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

BatchNorm2d::BatchNorm2d(const char* type, int64_t num_features, double eps,
                         std::optional<double> momentum, bool affine, bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  VT_CHECK(num_features > 0, "{}: num_features must be positive, got {}", type, num_features);
  VT_CHECK(eps > 0, "{}: eps must be positive, got {}", type, eps);
  VT_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1),
           "{}: momentum must be in [0, 1], got {}", type, momentum.value_or(0));
  std::tie(weight, bias, running_mean, running_var, num_batches_tracked) =
      register_norm_state(*this, num_features, affine, track_running_stats);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (replaced_by_) return (*replaced_by_)(x);
  VT_CHECK(x.dim() == 4, "BatchNorm2d: expected x [B, C, H, W], got shape {}", x.shape());
  return normalize(x, {});
}

Tensor BatchNorm2d::normalize(const Tensor& x, const ops::BatchNormSync& sync, bool relu,
                              const Tensor& residual) {
  VT_CHECK(x.dim() >= 2 && x.size(1) == num_features, "{}({}): x has {} channels (shape {})",
           type_name(), num_features, x.dim() >= 2 ? x.size(1) : 0, x.shape());
  // The batch's statistics in training, and always without running ones (whose buffers are then
  // undefined, so ops::batch_norm updates nothing).
  const bool batch_stats = is_training() || !track_running_stats;
  double m = momentum.value_or(0);
  if (is_training() && track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
    if (!momentum) m = 1.0 / num_batches_tracked.item<int64_t>();  // the cumulative average
  }
  if (relu)
    return ops::batch_norm_relu(x, running_mean, running_var, weight, bias, batch_stats, m, eps,
                                residual, sync);
  return ops::batch_norm(x, running_mean, running_var, weight, bias, batch_stats, m, eps, sync);
}

// Constant-initialised: nothing is read from the environment at start-up. VITRINE_FUSED_BN_RELU
// is read when a batch norm first asks (fuses_relu), and its 0 turns the fusion off whatever
// fused_relu says, so that an A/B run's setting holds for the whole process.
bool BatchNorm2d::fused_relu = true;

namespace {
/// fused_relu, unless the environment's VITRINE_FUSED_BN_RELU=0 turns the fusion off.
bool fuses_relu() {
  static const bool env = env_switch_on("VITRINE_FUSED_BN_RELU");
  return env && BatchNorm2d::fused_relu;
}
}  // namespace

bool BatchNorm2d::foldable() const {
  return fuses_relu() && !is_training() && !GradMode::is_enabled() && track_running_stats &&
         running_mean.defined() && !replaced_by_ && !has_forward_hooks() &&
         typeid(*this) == typeid(BatchNorm2d) && !is_batch_invariant();  // (as forward_relu)
}

std::pair<Tensor, Tensor> fuse_conv_bn_weights(const Tensor& conv_w, const Tensor& conv_b,
                                               const Tensor& bn_rm, const Tensor& bn_rv,
                                               double bn_eps, const Tensor& bn_w,
                                               const Tensor& bn_b) {
  VT_CHECK(conv_w.defined() && conv_w.dim() >= 2 && bn_rm.defined() && bn_rv.defined() &&
               bn_rm.dim() == 1 && bn_rm.size(0) == conv_w.size(0) &&
               bn_rv.shape() == bn_rm.shape(),
           "fuse_conv_bn_weights: expected a weight [Cout, ...] and running statistics [Cout], "
           "got {} and {}, {}",
           conv_w.defined() ? conv_w.shape().str() : std::string("undefined"),
           bn_rm.defined() ? bn_rm.shape().str() : std::string("undefined"),
           bn_rv.defined() ? bn_rv.shape().str() : std::string("undefined"));
  NoGradGuard no_grad;
  // In PyTorch's order of operations, so that the rounding is its.
  const Tensor rsqrt = ops::rsqrt(ops::add(bn_rv, bn_eps));
  Dims shape{conv_w.size(0)};  // [Cout, 1, 1, ...]
  while (shape.size() < conv_w.dim()) shape.push_back(1);
  const Tensor w =
      ops::mul(conv_w, ops::reshape(bn_w.defined() ? ops::mul(bn_w, rsqrt) : rsqrt, shape));
  Tensor b = ops::mul(conv_b.defined() ? ops::sub(conv_b, bn_rm) : ops::neg(bn_rm), rsqrt);
  if (bn_w.defined()) b = ops::mul(b, bn_w);
  if (bn_b.defined()) b = ops::add(b, bn_b);
  return {w, b};
}

Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual) {
  // A subclass (SyncBatchNorm) or a replaced module: through forward, which they override. The
  // fused op gives the composition's bits (the affine's rounding, then the residual's, then the
  // clamp; its gradient masks by y > 0, the same as relu's by its input), so batch-invariant mode
  // fuses too: one process then computes what SyncBatchNorm's ranks compute through forward.
  if (!fuses_relu() || replaced_by_ || has_forward_hooks() || typeid(*this) != typeid(BatchNorm2d))
    return ops::relu(residual.defined() ? (*this)(x) + residual : (*this)(x));
  VT_CHECK(x.dim() == 4, "BatchNorm2d: expected x [B, C, H, W], got shape {}", x.shape());
  return normalize(x, {}, true, residual);
}

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     eps, momentum ? fmt::format("{}", *momentum) : "None", affine,
                     track_running_stats);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& gen)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  VT_CHECK(num_embeddings > 0 && embedding_dim > 0,
           "Embedding: num_embeddings and embedding_dim must be positive, got {} and {}",
           num_embeddings, embedding_dim);
  weight = register_parameter("weight", ops::empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0, 1, gen);
}

Tensor Embedding::forward(const Tensor& indices) { return ops::embedding(weight, indices); }

std::string Embedding::extra_repr() const {
  return fmt::format("{}, {}", num_embeddings, embedding_dim);
}

void tie_weights(Linear& head, Embedding& emb) {
  VT_CHECK(head.weight.shape() == emb.weight.shape(),
           "tie_weights: the head's weight {} and the embedding's {} differ in shape (expected "
           "Linear(dim, vocab) and Embedding(vocab, dim))",
           head.weight.shape(), emb.weight.shape());
  head.weight = head.set_parameter("weight", emb.weight);
}

}  // namespace vitrine::nn
